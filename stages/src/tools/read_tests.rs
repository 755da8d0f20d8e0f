//! The model's `read_resource` on a fake MCP source (`hostpipe_engine::testkit`): the same
//! policy and consent as injection, and what the model is told.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::Arc;

use hostpipe_core::{
    Annotations, BoundServer, McpSource, ReadOrigin, ReadOutcome, ReadRecord, ResourceContents,
    Role, ServerStatus, Stage, ToolCallResult, ToolContent, ToolError, Turn,
};
use hostpipe_engine::{Consent, ConsentConfig, ConsentPolicy, ConsentRule, Decision};
use serde_json::json;

use super::{READ_RESOURCE, ToolAssembly, ToolAssemblyConfig};
use hostpipe_engine::testkit::FakeSource;

fn source() -> Arc<FakeSource> {
    let text = |uri: &str, text: &str| ResourceContents::Text {
        uri: uri.into(),
        mime_type: Some("text/plain".into()),
        text: text.into(),
    };
    Arc::new(
        FakeSource::new()
            .with_text(
                "kb",
                "kb://notes.md",
                "text/markdown",
                "# Notes\n\nVersion 2.\n",
            )
            .with_text("kb", "kb://mine.md", "text/markdown", "# Mine\n")
            .with_annotations(
                "kb",
                "kb://mine.md",
                Annotations {
                    audience: Some(vec![Role::User]),
                    ..Annotations::default()
                },
            )
            .with_failing("kb", "kb://broken.md", -32603, "disk on fire")
            .with_contents(
                "kb",
                "kb://bundle",
                vec![
                    text("kb://bundle", "The public part."),
                    text("kb://private/salaries", "The salaries."),
                ],
            ),
    )
}

/// The result of the model reading `uri` from `kb` under `rule` (if any), and the
/// read's record.
async fn read(
    mcp: Arc<FakeSource>,
    uri: &str,
    rule: Option<ConsentRule>,
) -> (Result<ToolCallResult, ToolError>, ReadRecord) {
    let mut turn = Turn::new("p", "hello");
    turn.bound_servers = vec![BoundServer {
        name: "kb".into(),
        required: false,
        status: ServerStatus::Connected,
    }];
    turn.consent = rule.map(|rule| {
        let policy = ConsentPolicy::new(ConsentConfig {
            rules: vec![rule],
            ..ConsentConfig::default()
        })
        .unwrap();
        Arc::new(Consent::new(policy, None)) as Arc<dyn hostpipe_core::ConsentGate>
    });
    let stage =
        ToolAssembly::new(ToolAssemblyConfig::default(), mcp as Arc<dyn McpSource>).unwrap();
    stage.process(&mut turn).await.unwrap();
    let tools = turn.tool_executor.clone().unwrap();
    let result = tools
        .call(READ_RESOURCE, json!({"server": "kb", "uri": uri}))
        .await;
    turn.trace.collect_reported();
    let reads: Vec<ReadRecord> = turn.trace.reads().cloned().collect();
    assert_eq!(reads.len(), 1, "{reads:?}");
    (result, reads.into_iter().next().unwrap())
}

fn texts(result: &ToolCallResult) -> Vec<&str> {
    result
        .content
        .iter()
        .map(|c| match c {
            ToolContent::Text { text }
            | ToolContent::Resource {
                contents: ResourceContents::Text { text, .. },
            } => text.as_str(),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn deny_model(server: Option<&str>, uri: Option<&str>) -> ConsentRule {
    ConsentRule {
        server: server.map(Into::into),
        uri: uri.map(Into::into),
        host: None,
        model: Some(Decision::Deny),
        tool: None,
        call: None,
    }
}

#[tokio::test]
async fn the_model_reads_a_resource() {
    let (result, r) = read(source(), "kb://notes.md", None).await;
    let result = result.unwrap();
    assert!(!result.is_error);
    assert_eq!(texts(&result), ["# Notes\n\nVersion 2.\n"]);
    assert_eq!((r.origin, r.error, r.bytes), (ReadOrigin::Model, None, 20));
    assert_eq!(r.outcome, ReadOutcome::Read);
}

#[tokio::test]
async fn a_read_the_policy_denies_the_model_is_withheld() {
    let (result, r) = read(
        source(),
        "kb://notes.md",
        Some(deny_model(Some("kb"), None)),
    )
    .await;
    let result = result.unwrap();
    assert!(result.is_error);
    assert_eq!(
        texts(&result),
        ["[resource kb://notes.md from `kb` withheld: reading it was not allowed]"]
    );
    assert_eq!(
        r.error.as_deref(),
        Some("withheld: denied by rules[0] (server kb)")
    );
    assert_eq!(r.consent.as_deref(), Some("denied by rules[0] (server kb)"));
    assert_eq!(r.outcome, ReadOutcome::Withheld);
}

#[tokio::test]
async fn a_resource_for_the_user_only_is_not_read_by_the_model() {
    let mcp = source();
    let (result, r) = read(Arc::clone(&mcp), "kb://mine.md", None).await;
    assert_eq!(
        texts(&result.unwrap()),
        ["[resource kb://mine.md from `kb` not read: it is meant for the user, not the model]"]
    );
    assert_eq!(
        r.error.as_deref(),
        Some("not read: its audience is the user only")
    );
    assert_eq!(r.outcome, ReadOutcome::NotRead);
    assert!(mcp.reads().is_empty());
}

#[tokio::test]
async fn a_failed_read_is_the_tool_call_s_error() {
    let (result, r) = read(source(), "kb://broken.md", None).await;
    let e = result.unwrap_err().to_string();
    assert_eq!(
        e,
        "MCP server `kb`: resources/read failed with JSON-RPC error -32603: disk on fire"
    );
    assert_eq!(r.error.as_deref(), Some(e.as_str()));
    assert_eq!(r.outcome, ReadOutcome::Failed);
}

#[tokio::test]
async fn an_item_under_a_denied_uri_is_withheld_from_the_model() {
    let (result, r) = read(
        source(),
        "kb://bundle",
        Some(deny_model(None, Some("kb://private/*"))),
    )
    .await;
    assert_eq!(
        texts(&result.unwrap()),
        [
            "The public part.",
            "[resource kb://private/salaries from `kb` withheld: reading it was not allowed]"
        ]
    );
    assert_eq!(
        r.error.as_deref(),
        Some("withheld (kb://private/salaries): denied by rules[0] (uri kb://private/*)")
    );
    assert_eq!(r.outcome, ReadOutcome::Withheld);
}

/// What a caller outside the turn (the MCP gateway) gets reading `uri` of `server`
/// under `rule`, with `max_read_tokens` 2 (the model's reads are cut there), and the
/// reads recorded.
async fn caller_read(
    server: &str,
    uri: &str,
    rule: Option<ConsentRule>,
) -> (
    Result<hostpipe_core::CallerRead, ToolError>,
    Vec<ReadRecord>,
) {
    let mut turn = Turn::new("p", "");
    turn.bound_servers = vec![BoundServer {
        name: "kb".into(),
        required: false,
        status: ServerStatus::Connected,
    }];
    turn.consent = rule.map(|rule| {
        let policy = ConsentPolicy::new(ConsentConfig {
            rules: vec![rule],
            ..ConsentConfig::default()
        })
        .unwrap();
        Arc::new(Consent::new(policy, None)) as Arc<dyn hostpipe_core::ConsentGate>
    });
    let config = ToolAssemblyConfig {
        max_read_tokens: 2,
        ..ToolAssemblyConfig::default()
    };
    let stage = ToolAssembly::new(config, source() as Arc<dyn McpSource>).unwrap();
    stage.process(&mut turn).await.unwrap();
    let tools = turn.tool_executor.clone().unwrap();
    let result = tools
        .read_for_caller(server, uri, hostpipe_core::CallOrigin::Api)
        .await;
    turn.trace.collect_reported();
    let calls: Vec<_> = turn.trace.tool_calls().cloned().collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].origin, hostpipe_core::CallOrigin::Api);
    assert_eq!(calls[0].tool, READ_RESOURCE);
    (result, turn.trace.reads().cloned().collect())
}

#[tokio::test]
async fn a_caller_gets_the_servers_items_under_the_models_policy() {
    use hostpipe_core::CallerRead;
    // Whole, as the server sent it (the model's read is cut at max_read_tokens).
    let (result, reads) = caller_read("kb", "kb://notes.md", None).await;
    let CallerRead::Contents { contents, withheld } = result.unwrap() else {
        panic!("withheld");
    };
    assert_eq!(
        contents,
        [ResourceContents::Text {
            uri: "kb://notes.md".into(),
            mime_type: Some("text/markdown".into()),
            text: "# Notes\n\nVersion 2.\n".into(),
        }]
    );
    assert!(withheld.is_empty());
    assert_eq!(reads.len(), 1);
    assert_eq!(
        (reads[0].origin, reads[0].outcome),
        (ReadOrigin::Model, ReadOutcome::Read)
    );

    // An item under a URI the policy denies is left out, and said to be.
    let rule = deny_model(Some("kb"), Some("kb://private/*"));
    let (result, reads) = caller_read("kb", "kb://bundle", Some(rule)).await;
    let CallerRead::Contents { contents, withheld } = result.unwrap() else {
        panic!("withheld");
    };
    assert_eq!(contents.len(), 1);
    assert_eq!(contents[0].uri(), "kb://bundle");
    assert_eq!(withheld.len(), 1);
    assert!(
        withheld[0].contains("kb://private/salaries"),
        "{withheld:?}"
    );
    assert!(!withheld[0].contains("The salaries."));
    assert_eq!(reads[0].outcome, ReadOutcome::Withheld);

    // Denied, for the user only, or of a server not bound: refused.
    let rule = deny_model(Some("kb"), Some("kb://notes.md"));
    let (result, reads) = caller_read("kb", "kb://notes.md", Some(rule)).await;
    let CallerRead::Withheld { note } = result.unwrap() else {
        panic!("read");
    };
    assert!(note.contains("withheld"), "{note}");
    assert_eq!(reads[0].outcome, ReadOutcome::Withheld);
    let (result, reads) = caller_read("kb", "kb://mine.md", None).await;
    assert!(matches!(result.unwrap(), CallerRead::Withheld { .. }));
    assert_eq!(reads[0].outcome, ReadOutcome::NotRead);
    let (result, reads) = caller_read("other", "kb://notes.md", None).await;
    assert!(result.unwrap_err().is_server_not_bound());
    assert!(reads.is_empty());
}
