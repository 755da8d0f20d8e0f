//! The OpenAI-compatible summarizer against a local HTTP server that checks each request
//! against the OpenAI API reference ("Chat / Create chat completion").

use hostpipe_core::{Treatment, Turn};
use hostpipe_tests::{connect, demo};
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::{block, pipeline, prepare};

fn config(base_url: &str) -> String {
    format!(
        r#"
[summarizers.small]
kind = "openai"
base_url = "{base_url}/v1"
model = "gpt-4o-mini"
headers = {{ Authorization = "Bearer test-key" }}
timeout_ms = 10000

[pipelines.default.bind_mcp_servers]
servers = ["demo"]
[pipelines.default.resource_context_injection]
budget_tokens = 200
strategy = "summarize"
summarizer = "small"
attachments = [{{ server = "demo", uri = "demo://docs/handbook.md" }}]
"#
    )
}

#[tokio::test]
async fn a_model_summary_is_asked_once_and_cached() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer test-key"))
        .and(header("content-type", "application/json"))
        .and(body_partial_json(json!({"model": "gpt-4o-mini", "stream": false})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_764_000_000,
            "model": "gpt-4o-mini",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Refunds up to 100 EUR once a year; larger ones need a lead."},
                "finish_reason": "stop"
            }],
            "usage": {"prompt_tokens": 900, "completion_tokens": 15, "total_tokens": 915}
        })))
        .expect(1)
        .mount(&api)
        .await;
    let host = connect(vec![demo("demo")]).await;
    let p = pipeline(&host, &config(&api.uri()));
    for _ in 0..2 {
        let (request, _) = prepare(&p, Turn::new("default", "Who may grant a refund?")).await;
        let b = block(&request, "demo://docs/handbook.md");
        assert_eq!(b.treatment, Treatment::Summarized);
        assert_eq!(
            b.text(),
            Some(
                "[summary by gpt-4o-mini]\nRefunds up to 100 EUR once a year; larger ones need a lead."
            )
        );
        assert!(b.tokens_after <= 200);
    }
    let requests = api.received_requests().await.unwrap_or_default();
    assert_eq!(
        requests.len(),
        1,
        "the second turn is served from the summary cache"
    );
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["role"], "user");
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.starts_with(
            "Question: Who may grant a refund?\n\nDocument:\n# Acme Support Team Handbook"
        ),
        "{user}"
    );
    let max = body["max_completion_tokens"].as_u64().unwrap();
    assert!(max > 0 && max < 200, "{max}");
    host.shutdown().await;
}

#[tokio::test]
async fn a_failing_endpoint_falls_back_to_truncation_and_says_why() {
    let api = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({
            "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
        })))
        .mount(&api)
        .await;
    let host = connect(vec![demo("demo")]).await;
    let p = pipeline(&host, &config(&api.uri()));
    let (request, trace) = prepare(&p, Turn::new("default", "Who may grant a refund?")).await;
    let b = block(&request, "demo://docs/handbook.md");
    assert!(
        matches!(b.treatment, Treatment::Truncated { .. }),
        "{:?}",
        b.treatment
    );
    assert!(b.tokens_after <= 200);
    let warned = trace.records().iter().any(|r| {
        matches!(&r.event, hostpipe_core::TraceEvent::Warning { message }
            if message.contains("summarizer `small` failed") && message.contains("HTTP 429"))
    });
    assert!(warned, "{:?}", trace.records());
    host.shutdown().await;
}
