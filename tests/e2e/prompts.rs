//! MCP prompts as commands (`prompt_expansion`) against server-everything and the demo
//! server, and the example plugin's stage in a pipeline built from config.

use std::collections::BTreeMap;

use hostpipe_core::{CompletionRef, McpSource as _, Registry, StageDescriptor, StagePhase, Turn};
use hostpipe_engine::Prepared;
use hostpipe_tests::{connect, demo, everything};

use crate::{block, pipeline, prepare};

const EVERYTHING: &str = r#"
[pipelines.default]
stages = ["bind_mcp_servers", "prompt_expansion", "resource_context_injection"]
[pipelines.default.bind_mcp_servers]
servers = ["everything"]
[pipelines.default.resource_context_injection]
budget_tokens = 4000
"#;

async fn reply_of(p: &hostpipe_engine::Pipeline, text: &str) -> String {
    match p.prepare(Turn::new("default", text)).await {
        Prepared::Ended(outcome) => outcome.reply,
        Prepared::Request(r, _) => panic!("expected a reply, got a request: {:?}", r.message),
    }
}

#[tokio::test]
async fn a_quoted_two_word_argument_stays_whole_and_missing_ones_are_listed() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(&host, EVERYTHING);
    let (request, trace) = prepare(
        &p,
        Turn::new(
            "default",
            r#"/everything:args-prompt city="New York" state=NY"#,
        ),
    )
    .await;
    assert_eq!(request.message.text, "What's weather in New York, NY?");
    assert!(
        trace.records().iter().any(|r| matches!(&r.event,
            hostpipe_core::TraceEvent::Note { message } if message.contains("expanded `/everything:args-prompt`"))),
        "{trace:?}"
    );
    // Positional words fill the declared arguments in order.
    let (request, _) = prepare(
        &p,
        Turn::new("default", "/everything:args-prompt 'San Francisco'"),
    )
    .await;
    assert_eq!(request.message.text, "What's weather in San Francisco?");

    let reply = reply_of(&p, "/everything:args-prompt state=NY").await;
    assert!(
        reply.contains("needs an argument:\n- city: Name of the city"),
        "{reply}"
    );
    let reply = reply_of(&p, "/everything:args-prompt town=Paris").await;
    assert!(
        reply.contains("has no argument `town`; its arguments: city, state"),
        "{reply}"
    );
    let reply = reply_of(&p, "/everything:no-such-prompt").await;
    assert!(reply.contains("has no prompt `no-such-prompt`"), "{reply}");
    assert!(reply.contains("args-prompt"), "{reply}");
    // Not a bound server: plain text, untouched.
    let (request, _) = prepare(&p, Turn::new("default", "/other:thing x=1")).await;
    assert_eq!(request.message.text, "/other:thing x=1");

    // A pipeline whose users write Chinese gets the same replies in Chinese; what the
    // server wrote (the argument's description) stays as the server wrote it.
    let p = pipeline(
        &host,
        &EVERYTHING.replace(
            "[pipelines.default]",
            "[pipelines.default]\nlocale = \"zh\"",
        ),
    );
    assert_eq!(
        reply_of(&p, "/everything:args-prompt state=NY").await,
        "`/everything:args-prompt` 还缺一个参数：\n- city: Name of the city\n请这样写：/everything:args-prompt city=\"…\""
    );
    let reply = reply_of(&p, "/everything:no-such-prompt").await;
    assert!(
        reply.starts_with("`everything` 没有名为 `no-such-prompt` 的提示词。可用的提示词：")
            && reply.contains("、args-prompt、")
            && reply.ends_with('。'),
        "{reply}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn completion_narrows_by_the_arguments_already_chosen() {
    let host = connect(vec![everything("everything")]).await;
    let reference = CompletionRef::Prompt {
        name: "completable-prompt".into(),
    };
    let departments = host
        .complete("everything", &reference, "department", "", &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(
        departments.values,
        ["Engineering", "Sales", "Marketing", "Support"]
    );
    let s = host
        .complete(
            "everything",
            &reference,
            "department",
            "S",
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    assert_eq!(s.values, ["Sales", "Support"]);
    let context = BTreeMap::from([("department".to_owned(), "Sales".to_owned())]);
    let names = host
        .complete("everything", &reference, "name", "", &context)
        .await
        .unwrap();
    assert_eq!(names.values, ["David", "Eve", "Frank"]);
    // A resource template's variable, too.
    let template = CompletionRef::ResourceTemplate {
        uri_template: "demo://resource/dynamic/text/{resourceId}".into(),
    };
    let ids = host
        .complete("everything", &template, "resourceId", "7", &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(ids.values, ["7"]);
    let none = host
        .complete("everything", &template, "resourceId", "x", &BTreeMap::new())
        .await
        .unwrap();
    assert!(none.values.is_empty());

    // The reply for a missing argument offers the server's completions.
    let p = pipeline(&host, EVERYTHING);
    let reply = reply_of(&p, "/everything:completable-prompt department=Sales").await;
    assert!(
        reply.contains("- name: Choose a team member to lead the selected department. (for example: David, Eve, Frank)"),
        "{reply}"
    );
    let (request, _) = prepare(
        &p,
        Turn::new(
            "default",
            "/everything:completable-prompt department=Sales name=Eve",
        ),
    )
    .await;
    assert_eq!(
        request.message.text,
        "Please promote Eve to the head of the Sales team."
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_prompt_embedding_a_resource_puts_it_in_context_like_a_read() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(&host, EVERYTHING);
    let (request, _) = prepare(
        &p,
        Turn::new(
            "default",
            "/everything:resource-prompt resourceType=Text resourceId=3",
        ),
    )
    .await;
    assert_eq!(
        request.message.text,
        "This prompt includes the Text resource with id: 3. Please analyze the following resource:"
    );
    let b = block(&request, "demo://resource/dynamic/text/3");
    let text = b.text().unwrap_or_default();
    assert!(
        text.starts_with("Resource 3: This is a plaintext resource created at"),
        "{text}"
    );
    let read = request
        .reads
        .iter()
        .find(|r| r.uri == "demo://resource/dynamic/text/3")
        .unwrap();
    assert_eq!(read.scope, hostpipe_core::Scope::Message);
    assert_eq!(
        host.request_counts("everything")
            .unwrap()
            .get("resources/read"),
        None,
        "the prompt carried the contents: nothing was read"
    );
    host.shutdown().await;
}

fn plugin_pipeline(stages: &str) -> String {
    format!(
        r#"
[pipelines.default]
stages = [{stages}]
runner = "preview"
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
budget_tokens = 4000
attachments = [{{ server = "demo", uri = "demo://docs/handbook.md" }}]
[pipelines.default.redact_pii]
phone_replacement = "[phone number]"
"#
    )
}

#[tokio::test]
async fn the_example_plugin_masks_resource_text_when_it_runs_after_injection() {
    let host = connect(vec![demo("demo")]).await;
    let after = pipeline(
        &host,
        &plugin_pipeline(
            r#""bind_mcp_servers", "resource_context_injection", "redact_pii", "tool_assembly""#,
        ),
    );
    let outcome = after
        .run_turn(Turn::new("default", "Who handles billing?"))
        .await;
    let preview = outcome.reply;
    assert!(
        preview.contains("forward to finance (`[email]`)"),
        "{preview}"
    );
    assert!(
        preview.contains("call the on-call\n   phone, [phone number]."),
        "{preview}"
    );
    assert!(!preview.contains("billing@acme.example"));
    assert!(!preview.contains("555 010 0199"));

    // Before injection there is no resource text yet: nothing is masked.
    let before = pipeline(
        &host,
        &plugin_pipeline(
            r#""bind_mcp_servers", "redact_pii", "resource_context_injection", "tool_assembly""#,
        ),
    );
    let preview = before
        .run_turn(Turn::new("default", "Who handles billing?"))
        .await
        .reply;
    assert!(preview.contains("billing@acme.example"), "{preview}");
    host.shutdown().await;
}

#[tokio::test]
async fn the_demo_prompt_expands_through_the_cli_default_pipeline() {
    let host = connect(vec![demo("demo")]).await;
    let prompts = host.list_prompts("demo").await.unwrap();
    assert_eq!(prompts[0].name, "summarize_doc");
    let config =
        hostpipe_cli::config::parse(hostpipe_cli::config::EMBEDDED_TOML, "embedded").unwrap();
    let registry = hostpipe_cli::registry().unwrap();
    let mut pipelines = config
        .build_pipelines(&registry, host.clone(), None)
        .unwrap();
    let p = pipelines.remove("default").unwrap();
    let (request, _) = prepare(
        &p,
        Turn::new("default", "/demo:summarize_doc topic=deployment"),
    )
    .await;
    assert_eq!(
        request.message.text,
        "Summarize the document demo://docs/deployment.md in five bullet points."
    );
    assert!(
        block(&request, "demo://docs/deployment.md")
            .text()
            .is_some()
    );
    // A value the server refuses (-32602): its message says what to change.
    match p
        .prepare(Turn::new(
            "default",
            "/demo:summarize_doc topic=nosuchtopic",
        ))
        .await
    {
        Prepared::Ended(outcome) => assert_eq!(
            outcome.reply,
            "`demo` refused the arguments of prompt `summarize_doc`: unknown topic `nosuchtopic`"
        ),
        Prepared::Request(r, _) => panic!("expanded: {:?}", r.message),
    }
    host.shutdown().await;
}

static OTHER_REDACT: StageDescriptor = StageDescriptor {
    name: "redact_pii",
    phase: StagePhase::Context,
    priority: 0,
    description: "Another plugin's stage of the same name.",
    build: |_, _| Err(hostpipe_core::ConfigError::new("", "never built")),
    crate_name: "another-plugin",
};

#[test]
fn two_plugins_registering_one_stage_name_is_an_error_naming_both() {
    let registry = hostpipe_cli::registry().unwrap();
    let example = registry.stage("redact_pii").unwrap();
    let err = Registry::new([example, &OTHER_REDACT], [])
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "stage `redact_pii` is registered twice: by crate `hostpipe-plugin-example` and by crate `another-plugin`"
    );
    // And an unknown stage name in a pipeline lists the known ones.
    let unknown = registry.stage("redact").err().unwrap().to_string();
    assert!(
        unknown.contains("prompt_expansion") && unknown.contains("redact_pii"),
        "{unknown}"
    );
}

#[tokio::test]
async fn a_mention_of_a_bound_server_attaches_and_of_an_unbound_one_stays_text() {
    let host = connect(vec![demo("demo"), everything("everything")]).await;
    let toml = r#"
[pipelines.default]
stages = ["bind_mcp_servers", "resource_mentions", "resource_context_injection"]
[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
budget_tokens = 4000
"#;
    let p = pipeline(&host, toml);
    let (request, trace) = prepare(
        &p,
        Turn::new(
            "default",
            "Summarize @demo:demo://docs/deployment.md, and @everything:demo://resource/static/document/features.md too.",
        ),
    )
    .await;
    // The mention leaves the resource's name, so the sentence still reads.
    assert_eq!(
        request.message.text,
        "Summarize Deployment notes, and @everything:demo://resource/static/document/features.md too."
    );
    let b = block(&request, "demo://docs/deployment.md");
    assert_eq!(b.source.scope, hostpipe_core::Scope::Message);
    assert!(b.text().is_some_and(|t| t.contains("# ")));
    assert!(
        !request
            .context
            .iter()
            .any(|b| b.source.server == "everything")
    );
    assert!(trace.records().iter().any(|r| matches!(&r.event,
        hostpipe_core::TraceEvent::Note { message } if message.contains("server `everything`, which is not bound"))));

    // Chinese: the mention ends at the full-width comma, the question stays, and the
    // resource is read.
    let (request, _) = prepare(
        &p,
        Turn::new("default", "@demo:demo://config/app.json，配置里写了什么？"),
    )
    .await;
    assert_eq!(request.message.text, "Application config，配置里写了什么？");
    assert!(
        block(&request, "demo://config/app.json")
            .text()
            .is_some_and(|t| t.contains("\"service\""))
    );

    let (request, _) = prepare(
        &p,
        Turn::new("default", "what does @demo:demo://config/app.json say?"),
    )
    .await;
    assert_eq!(request.message.text, "what does Application config say?");

    // Kept in the text when the config says so.
    let kept = toml.replace(
        "[pipelines.default.resource_context_injection]",
        "[pipelines.default.resource_mentions]\nkeep_in_text = true\n[pipelines.default.resource_context_injection]",
    );
    let p = pipeline(&host, &kept);
    let (request, _) = prepare(
        &p,
        Turn::new("default", "Read @demo:demo://config/app.json please"),
    )
    .await;
    assert_eq!(
        request.message.text,
        "Read @demo:demo://config/app.json please"
    );
    assert!(
        request
            .context
            .iter()
            .any(|b| b.source.uri == "demo://config/app.json")
    );
    host.shutdown().await;
}
