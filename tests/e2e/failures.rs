//! Servers that fail, and what the turn does about it.

use hostpipe_core::{McpSource as _, ServerStatus, ToolError, TraceEvent, Turn};
use hostpipe_mcp::ServerConfig;
use hostpipe_tests::{connect, everything, python};

use crate::{pipeline, prepare};

#[tokio::test]
async fn a_missing_command_fails_that_server_and_the_turn_goes_on() {
    let host = connect(vec![
        ServerConfig::stdio(
            "ghost",
            "/nonexistent/hostpipe-test-server",
            Vec::<String>::new(),
        ),
        python("tutorial", "tutorial_server.py"),
    ])
    .await;
    let ServerStatus::Failed { reason } = host.server("ghost").unwrap().status else {
        panic!("ghost should have failed")
    };
    assert!(
        reason.contains("No such file or directory (os error 2)"),
        "{reason}"
    );

    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["ghost", "tutorial"]
[pipelines.default.resource_context_injection]
attachments = [{ server = "tutorial", uri = "config://settings" }, { server = "ghost", uri = "x://y" }]
"#,
    );
    let outcome = p.run_turn(Turn::new("default", "hi")).await;
    assert!(
        outcome.status == hostpipe_engine::TurnStatus::Completed && outcome.ended_by.is_none(),
        "{}",
        outcome.reply
    );
    let unavailable: Vec<_> = outcome
        .trace
        .records()
        .iter()
        .filter_map(|r| match &r.event {
            TraceEvent::ServerUnavailable {
                server,
                reason,
                required,
            } => Some((server.as_str(), reason.as_str(), *required)),
            _ => None,
        })
        .collect();
    assert_eq!(unavailable.len(), 1);
    assert_eq!(unavailable[0].0, "ghost");
    assert!(unavailable[0].1.contains("os error 2") && !unavailable[0].2);
    let request = outcome.request.unwrap();
    assert!(request.context.iter().any(
        |b| b.source.uri == "config://settings" && b.text().is_some_and(|t| t.contains("dark"))
    ));
    let ghost_read = outcome.trace.reads().find(|r| r.server == "ghost").unwrap();
    assert!(
        ghost_read.error.as_deref().unwrap().contains("unavailable"),
        "{ghost_read:?}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_required_server_that_is_down_ends_the_turn_with_a_reply() {
    let host = connect(vec![ServerConfig::stdio(
        "ghost",
        "/nonexistent/hostpipe-test-server",
        Vec::<String>::new(),
    )])
    .await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = [{ name = "ghost", required = true }]
"#,
    );
    let outcome = p.run_turn(Turn::new("default", "hi")).await;
    assert_eq!(outcome.ended_by.as_deref(), Some("bind_mcp_servers"));
    assert!(outcome.request.is_none());
    // The user hears which server is down, never the OS error or the command's path:
    // those are in the trace.
    assert_eq!(
        outcome.reply,
        "Sorry, I can't answer right now: the MCP server `ghost` that this pipeline requires is unavailable."
    );
    assert!(outcome.trace.records().iter().any(|r| matches!(&r.event,
        hostpipe_core::TraceEvent::ServerUnavailable { reason, .. } if reason.contains("os error 2"))));
    // In the pipeline's language.
    let p = pipeline(
        &host,
        r#"
[pipelines.default]
locale = "zh-Hans"
[pipelines.default.bind_mcp_servers]
servers = [{ name = "ghost", required = true }]
"#,
    );
    let outcome = p.run_turn(Turn::new("default", "你好")).await;
    assert_eq!(
        outcome.reply,
        "抱歉，现在无法回答：本助手所需的 MCP 服务器 `ghost` 暂时不可用。"
    );
}

#[tokio::test]
async fn exploration_tools_refuse_servers_not_bound_for_the_turn() {
    let host = connect(vec![
        everything("everything"),
        python("tutorial", "tutorial_server.py"),
    ])
    .await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["everything"]
"#,
    );
    let (request, _) = prepare(&p, Turn::new("default", "hi")).await;
    let names: Vec<_> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"list_resources") && names.contains(&"read_resource"),
        "{names:?}"
    );
    // The schema only offers bound servers.
    let read = request
        .tools
        .iter()
        .find(|t| t.name == "read_resource")
        .unwrap();
    assert_eq!(
        read.input_schema["properties"]["server"]["enum"],
        serde_json::json!(["everything"])
    );

    let exec = request.tool_executor.clone().unwrap();
    let err = exec
        .call(
            "read_resource",
            serde_json::json!({"server": "tutorial", "uri": "config://settings"}),
        )
        .await
        .unwrap_err();
    assert!(err.is_server_not_bound());
    assert_eq!(
        err.to_string(),
        "server `tutorial` is not bound for this turn; bound servers: everything"
    );
    assert!(matches!(
        exec.call("list_resources", serde_json::json!({"server": "tutorial"}))
            .await,
        Err(ToolError::ServerNotBound { .. })
    ));
    // The bound server works through the same tools.
    let listed = exec
        .call(
            "list_resources",
            serde_json::json!({"server": "everything"}),
        )
        .await
        .unwrap();
    let hostpipe_core::ToolContent::Text { text } = &listed.content[0] else {
        panic!("text expected")
    };
    assert!(
        text.contains("demo://resource/static/document/features.md"),
        "{text}"
    );
    let read = exec
        .call("read_resource", serde_json::json!({"server": "everything", "uri": "demo://resource/static/document/features.md"}))
        .await
        .unwrap();
    assert!(!read.is_error && !read.content.is_empty());
    host.shutdown().await;
}

#[tokio::test]
async fn injection_before_binding_reads_nothing_and_says_why() {
    let host = connect(vec![hostpipe_tests::demo("demo")]).await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default]
stages = ["resource_context_injection", "bind_mcp_servers", "tool_assembly"]
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
attachments = [{ server = "demo", uri = "demo://config/app.json" }]
"#,
    );
    let (request, trace) = prepare(&p, Turn::new("default", "hi")).await;
    assert_eq!(request.context.len(), 1);
    assert_eq!(
        request.context[0].text(),
        Some(
            "[resource demo://config/app.json from `demo` not included: the server is not bound for this turn]"
        )
    );
    assert_eq!(
        host.request_counts("demo").unwrap().get("resources/read"),
        None
    );
    let errors: Vec<_> = trace.reads().map(|r| r.error.as_deref()).collect();
    assert_eq!(
        errors,
        [Some(
            "server `demo` is not bound for this turn (bound: none)"
        )]
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_budget_larger_than_the_model_is_lowered_and_duplicates_are_read_once() {
    let host = connect(vec![hostpipe_tests::demo("demo")]).await;
    let p = pipeline(
        &host,
        r#"
[model]
context_window = 1500
max_output_tokens = 500
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
budget_tokens = 4000
attachments = [
  { server = "demo", uri = "demo://docs/handbook.md" },
  { server = "demo", uri = "demo://docs/handbook.md" },
  { server = "demo", template = "demo://docs/{topic}", arguments = { topic = "handbook" } },
]
"#,
    );
    let mut turn = Turn::new("default", "hi");
    turn.attachments
        .push(hostpipe_core::Attachment::message_uri(
            "demo",
            "demo://docs/handbook.md",
        ));
    let (request, trace) = prepare(&p, turn).await;
    let budget = request.context_budget.unwrap();
    assert!(budget < 1000, "{budget}");
    assert_eq!(
        request.context.len(),
        1,
        "one document under three attachments"
    );
    assert!(request.context_tokens() <= budget);
    assert_eq!(
        host.request_counts("demo").unwrap().get("resources/read"),
        Some(&2)
    );
    let warnings: Vec<_> = trace.warnings().collect();
    assert!(
        warnings[0].starts_with("budget_tokens = 4000 is more than the"),
        "{warnings:?}"
    );
    assert_eq!(
        warnings[1],
        "demo://docs/handbook.md from `demo` is attached more than once at pipeline scope; read once"
    );
    // The message attachment of the same resource was kept (the narrowest scope wins);
    // the pipeline's copies only got a note.
    assert_eq!(
        request.context[0].source.scope,
        hostpipe_core::Scope::Message
    );
    assert!(trace.records().iter().any(|r| matches!(&r.event, TraceEvent::Note { message }
        if message == "demo://docs/handbook.md from `demo` is attached at message and pipeline scope; read once, at message scope")));
    assert_eq!(
        warnings[2],
        "demo://docs/handbook from `demo` has the same text as demo://docs/handbook.md; injected once"
    );
    host.shutdown().await;
}
