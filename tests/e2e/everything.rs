//! Against `@modelcontextprotocol/server-everything` 2026.8.31.

use hostpipe_core::{
    BlockBody, Encoding, McpSource as _, Tokenizer, Treatment, TruncationSide, Turn,
};
use hostpipe_tests::{connect, everything};

use crate::{block, pipeline, prepare, read_text};

const FEATURES: &str = "demo://resource/static/document/features.md";

#[tokio::test]
async fn lists_all_static_resources_and_both_templates() {
    let host = connect(vec![everything("everything")]).await;
    let resources = host.list_resources("everything").await.unwrap();
    let mut uris: Vec<_> = resources.iter().map(|r| r.uri.as_str()).collect();
    uris.sort_unstable();
    assert_eq!(
        uris,
        [
            "demo://resource/static/document/architecture.md",
            "demo://resource/static/document/extension.md",
            "demo://resource/static/document/features.md",
            "demo://resource/static/document/how-it-works.md",
            "demo://resource/static/document/instructions.md",
            "demo://resource/static/document/startup.md",
            "demo://resource/static/document/structure.md",
        ]
    );
    let templates = host.list_resource_templates("everything").await.unwrap();
    let mut t: Vec<_> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    t.sort_unstable();
    assert_eq!(
        t,
        [
            "demo://resource/dynamic/blob/{resourceId}",
            "demo://resource/dynamic/text/{resourceId}"
        ]
    );
    host.shutdown().await;
}

const PIPELINE: &str = r#"
[pipelines.default]
[pipelines.default.bind_mcp_servers]
servers = ["everything"]
[pipelines.default.resource_context_injection]
budget_tokens = 20000
attachments = [
  { server = "everything", uri = "demo://resource/static/document/features.md" },
  { server = "everything", template = "demo://resource/dynamic/text/{resourceId}", arguments = { resourceId = { var = "rid" } } },
  { server = "everything", template = "demo://resource/dynamic/blob/{resourceId}", arguments = { resourceId = "5" } },
]
"#;

#[tokio::test]
async fn static_and_template_attachments_become_the_text_the_server_returns() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(&host, PIPELINE);
    let mut turn = Turn::new("default", "What can the server do?");
    turn.variables.insert("rid", "7");
    let (request, trace) = prepare(&p, turn).await;

    let features = block(&request, FEATURES);
    assert_eq!(features.treatment, Treatment::Whole);
    assert_eq!(
        features.text(),
        Some(read_text(&host, "everything", FEATURES).await.as_str())
    );

    let uri = "demo://resource/dynamic/text/7";
    let dynamic = block(&request, uri);
    assert_eq!(
        dynamic
            .source
            .template
            .as_ref()
            .map(|t| t.arguments["resourceId"].as_str()),
        Some("7")
    );
    // The server stamps the time of each read into the text; everything before it must match.
    let direct = read_text(&host, "everything", uri).await;
    let prefix = "Resource 7: This is a plaintext resource created at ";
    assert!(direct.starts_with(prefix), "{direct}");
    assert!(
        dynamic.text().unwrap().starts_with(prefix),
        "{:?}",
        dynamic.text()
    );
    assert!(matches!(dynamic.body, BlockBody::Text { .. }));

    // Every read is traced.
    let reads: Vec<_> = trace.reads().map(|r| r.uri.as_str()).collect();
    assert_eq!(reads, [FEATURES, uri, "demo://resource/dynamic/blob/5"]);
    host.shutdown().await;
}

#[tokio::test]
async fn a_blob_that_says_it_is_text_is_decoded_and_no_base64_leaks() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(&host, PIPELINE);
    let mut turn = Turn::new("default", "hi");
    turn.variables.insert("rid", "1");
    let (request, _) = prepare(&p, turn).await;
    // The template declares application/octet-stream; the read result says the blob is
    // text/plain, and the read result wins: its bytes are decoded as text.
    let blob = block(&request, "demo://resource/dynamic/blob/5");
    let BlockBody::Text { text } = &blob.body else {
        panic!("expected text, got {:?}", blob.body)
    };
    assert!(
        text.starts_with("Resource 5: This is a base64 blob"),
        "{text}"
    );
    // The server's base64 starts with the encoding of "Resource 5: "; none of it may leak.
    for b in &request.context {
        assert!(!b.text().unwrap_or("").contains("UmVzb3VyY2Ug"));
    }
    host.shutdown().await;
}

#[tokio::test]
async fn a_200_token_budget_truncates_features_with_an_exact_marker() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(
        &host,
        r#"
[pipelines.default.bind_mcp_servers]
servers = ["everything"]
[pipelines.default.resource_context_injection]
budget_tokens = 200
strategy = "truncate"
attachments = [{ server = "everything", uri = "demo://resource/static/document/features.md" }]
"#,
    );
    let (request, trace) = prepare(&p, Turn::new("default", "features?")).await;
    let tk = Tokenizer::new(Encoding::O200kBase).unwrap();
    let original = read_text(&host, "everything", FEATURES).await;
    let b = block(&request, FEATURES);
    let text = b.text().unwrap();
    assert!(
        tk.count(&original) > 200,
        "the document must be larger than the budget"
    );
    assert!(
        b.tokens_after <= 200 && tk.count(text) == b.tokens_after,
        "{} tokens",
        b.tokens_after
    );
    let Treatment::Truncated {
        side: TruncationSide::Head,
        omitted_tokens,
    } = b.treatment
    else {
        panic!("expected a head truncation, got {:?}", b.treatment)
    };
    let marker = format!("[… {omitted_tokens} tokens omitted …]");
    let kept = text
        .strip_suffix(&marker)
        .and_then(|t| t.strip_suffix('\n'))
        .expect("text ends with the marker");
    assert!(original.starts_with(kept));
    assert_eq!(omitted_tokens, tk.count(&original[kept.len()..]));
    assert_eq!(request.context_tokens(), b.tokens_after);
    let read = trace.reads().next().unwrap();
    assert_eq!(
        (read.tokens_before, read.tokens_after),
        (tk.count(&original), b.tokens_after)
    );
    host.shutdown().await;
}

#[tokio::test]
async fn streamable_http_lists_reads_and_calls_tools() {
    let server = hostpipe_tests::HttpEverything::start().await;
    let host = connect(vec![hostpipe_mcp::ServerConfig::http(
        "everything",
        &server.url,
    )])
    .await;
    let info = host.server("everything").unwrap();
    assert!(info.status.is_connected(), "{:?}", info.status);
    assert_eq!(info.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(host.list_resources("everything").await.unwrap().len(), 7);
    let text = read_text(&host, "everything", FEATURES).await;
    assert!(text.starts_with('#'), "{text}");
    let echo = host
        .call_tool(
            "everything",
            "echo",
            serde_json::json!({"message": "over http"})
                .as_object()
                .cloned(),
        )
        .await
        .unwrap();
    assert!(!echo.is_error);
    assert!(
        matches!(&echo.content[0], hostpipe_core::ToolContent::Text { text } if text.contains("over http")),
        "{:?}",
        echo.content
    );
    host.shutdown().await;
    server.stop().await;
}
