//! The OpenAI-compatible door of `hostpipe serve` (`POST /v1/chat/completions`,
//! `GET /v1/models`), driven by the official `openai` Python SDK as a platform's
//! "OpenAI-compatible provider" would (tests/clients/openai_client.py), against a
//! pipeline whose `local` runner calls a local stand-in of an upstream
//! OpenAI-compatible API that checks every forwarded request against the reference.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hostpipe_tests::openai_api::{ChatCompletions, answer, stream, tool_call};
use hostpipe_tests::{ADMIN_TOKEN, Service, TURN_TOKEN, root};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Pipeline `assistant`: the demo server bound, its `demo://config/app.json` attached,
/// the `local` runner on `upstream` (model `gpt-upstream`); pipeline `limited`: the
/// `local` runner on `limited` without retries; pipeline `tooled`: like `assistant`
/// with the demo server's tools, on `tooled` (not streamed).
fn write_config(dir: &Path, upstream: &str, limited: &str, tooled: &str) -> PathBuf {
    let text = format!(
        r#"
[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[pipelines.assistant]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "local"
system_prompt = "You are the Acme assistant."

[pipelines.assistant.bind_mcp_servers]
servers = ["demo"]

[pipelines.assistant.resource_context_injection]
budget_tokens = 2000
attachments = [{{ server = "demo", uri = "demo://config/app.json" }}]

[pipelines.assistant.local]
base_url = "{upstream}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"

[pipelines.limited]
stages = []
runner = "local"

[pipelines.limited.local]
base_url = "{limited}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"
max_retries = 0

[pipelines.limited-zh]
stages = []
runner = "local"
locale = "zh-CN"

[pipelines.limited-zh.local]
base_url = "{limited}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"
max_retries = 0

[pipelines.limited-own]
stages = []
runner = "local"
locale = "zh-Hans"

[pipelines.limited-own.messages]
runner_failed = "服务繁忙，请稍后再试。（编号：{{turn}}）"

[pipelines.limited-own.local]
base_url = "{limited}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"
max_retries = 0

[pipelines.tooled]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "local"

[pipelines.tooled.bind_mcp_servers]
servers = ["demo"]

[pipelines.tooled.resource_context_injection]
budget_tokens = 2000
attachments = [{{ server = "demo", uri = "demo://config/app.json" }}]

[pipelines.tooled.local]
base_url = "{tooled}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"
stream = false
"#,
        exe = hostpipe_tests::hostpipe_bin(),
    );
    let path = dir.join("hostpipe.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The text of a forwarded request's system message.
fn system_text(request: &Value) -> &str {
    request["messages"][0]["content"].as_str().unwrap_or("")
}

/// Whether `needle` is inside the fence `<resource-NONCE … uri="URI" …>` … `</resource-NONCE>`
/// of `uri` in `text`.
fn fenced(text: &str, uri: &str, needle: &str) -> bool {
    let Some(open) = text.find(&format!("uri=\"{uri}\"")) else {
        return false;
    };
    let Some(tag_start) = text[..open].rfind("<resource-") else {
        return false;
    };
    let name_end = tag_start + text[tag_start..].find(' ').unwrap_or(0);
    let element = &text[tag_start + 1..name_end];
    let body_start = open + text[open..].find('>').unwrap_or(0);
    let Some(close) = text[body_start..].find(&format!("</{element}>")) else {
        return false;
    };
    text[body_start..body_start + close].contains(needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_runs_a_pipeline_as_a_model() {
    let upstream = MockServer::start().await;
    let api = ChatCompletions::new(vec![stream(&[
        json!({"role": "assistant", "content": "Only "}),
        json!({"content": "ap-east "}),
        json!({"content": "is in beta."}),
    ])]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&upstream)
        .await;
    // Another upstream keeps answering 429, asking for 7 s.
    let limited = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "7")
                .set_body_json(json!({"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}})),
        )
        .mount(&limited)
        .await;
    // A third: the model calls the caller's `lookup`, answers once it has the result,
    // then calls it again (the streamed request).
    let tooled = MockServer::start().await;
    let tooled_api = ChatCompletions::new(vec![
        tool_call("call_7", "caller__lookup", r#"{"q":"beta"}"#),
        answer("Only ap-east is in beta."),
        tool_call("call_8", "caller__lookup", r#"{"q":"beta"}"#),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(tooled_api.clone())
        .mount(&tooled)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &upstream.uri(), &limited.uri(), &tooled.uri());
    let secret = "sk-upstream-secret-0123456789";
    let svc = Service::start_with_env(
        &config,
        "memory",
        &[],
        &[("HOSTPIPE_TEST_UPSTREAM_KEY", secret)],
    )
    .await;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(root().join("tests/.venv/bin/python"))
            .arg(root().join("tests/clients/openai_client.py"))
            .arg(&svc.base)
            .arg("assistant")
            .arg("limited")
            .arg("tooled")
            // A platform's key: a turn token.
            .env("HOSTPIPE_TOKEN", TURN_TOKEN)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(
        doc["models"],
        json!([
            "assistant",
            "limited",
            "limited-own",
            "limited-zh",
            "tooled"
        ])
    );
    assert_eq!(doc["created_stable"], true);
    // "Retrieve model", which some platforms call to check a model name.
    assert_eq!(
        doc["retrieved"],
        json!({"id": "assistant", "object": "model", "owned_by": "hostpipe"})
    );
    assert_eq!(doc["retrieved_unknown"], "model_not_found");
    // Not streamed: one `chat.completion` of the pipeline, usage from upstream.
    let c = &doc["completion"];
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["model"], "assistant");
    assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"), "{c}");
    assert_eq!(c["role"], "assistant");
    assert_eq!(c["content"], "Only ap-east is in beta.");
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(
        c["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "completion_tokens_details": null, "prompt_tokens_details": null})
    );
    // Streamed: the role first, the deltas as they came, `stop`, then the usage chunk.
    let s = &doc["stream"];
    assert_eq!(s["objects"], json!(["chat.completion.chunk"]));
    assert_eq!(s["roles"], json!(["assistant"]));
    assert_eq!(s["deltas"], json!(["Only ", "ap-east ", "is in beta."]));
    assert_eq!(s["finish_reasons"], json!(["stop"]));
    assert_eq!(s["usage"]["total_tokens"], 10);

    // OpenAI-shaped errors, raised by the SDK as its typed errors.
    assert_eq!(
        doc["unknown_model"],
        json!({"class": "NotFoundError", "status": 404, "code": "model_not_found", "type": "invalid_request_error", "param": "model"})
    );
    assert_eq!(
        doc["wrong_key"],
        json!({"class": "AuthenticationError", "status": 401, "code": "invalid_token", "type": "authentication_error", "param": null})
    );
    assert_eq!(doc["n_2"]["class"], "BadRequestError");
    assert_eq!(doc["n_2"]["param"], "n");
    assert_eq!(doc["not_a_function"]["class"], "BadRequestError");
    // The upstream's rate limit reaches the caller as one, with its `Retry-After`,
    // streamed or not (a stream's head waits for the first text).
    // The message says what kind of failure it was, not the runner's error, which names
    // the upstream endpoint the pipeline keeps from its callers.
    let limited = json!({"class": "RateLimitError", "status": 429, "code": "rate_limit_exceeded", "retry_after": "7", "message": "the pipeline's model is rate-limited; retry later"});
    assert_eq!(doc["rate_limited"], limited);
    assert_eq!(doc["rate_limited_stream"], limited);

    // Upstream got exactly the two turns (the refused requests never reached it), each
    // for the pipeline's upstream model, the attached resource inside its fence.
    let requests = api.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for r in &requests {
        assert_eq!(r["model"], "gpt-upstream");
        let system = system_text(r);
        assert!(
            system.starts_with("You are the Acme assistant."),
            "{system}"
        );
        assert!(
            fenced(system, "demo://config/app.json", "\"qwen2.5-72b\""),
            "{system}"
        );
        // The system prompt is outside the fence: the check can tell.
        assert!(!fenced(system, "demo://config/app.json", "Acme assistant"));
        // The pipeline's MCP tools are offered upstream.
        assert!(r["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    }
    // The first: the caller's system message after the pipeline's, the earlier exchange
    // as history, the last user message as the message.
    let first = &requests[0];
    assert!(system_text(first).contains("Answer in one sentence."));
    let roles: Vec<&str> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(first["messages"][1]["content"], "Hello");
    assert_eq!(first["messages"][2]["content"], "Hi! How can I help?");
    assert_eq!(
        first["messages"][3]["content"],
        "Which regions are in beta?"
    );
    assert!(!system_text(&requests[1]).contains("Answer in one sentence."));

    // The conversation ids: the header for the first, `user` for the streamed one.
    for conversation in ["conv-openai-1", "user-42"] {
        let res = reqwest::Client::new()
            .get(svc.url(&format!("/v1/history?conversation={conversation}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let page: Value = res.json().await.unwrap();
        let records = page["records"].as_array().unwrap();
        assert!(!records.is_empty(), "{conversation}: {page}");
        assert!(records.iter().all(|r| r["pipeline"] == "assistant"));
    }

    // Through /v1/turns the same failure is a reply for the user that says it failed,
    // never how: the upstream's address and its error stay in the trace.
    let res = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(TURN_TOKEN)
        .json(&json!({"pipeline": "limited", "message": "hello"}))
        .send()
        .await
        .unwrap();
    let turn: Value = res.json().await.unwrap();
    assert_eq!(turn["failed"], true, "{turn}");
    let reply = turn["reply"].as_str().unwrap();
    assert_eq!(
        reply,
        format!(
            "Sorry, I could not answer this message: the model behind this assistant failed (turn {}).",
            turn["turn_id"].as_str().unwrap()
        )
    );
    assert!(
        turn["trace"]
            .to_string()
            .contains("rate limited by the backend"),
        "the trace keeps why: {turn}"
    );
    // A pipeline whose users write Chinese says it in Chinese (`locale`), or in the
    // operator's own words (`[messages]`).
    for (pipeline, expected) in [
        (
            "limited-zh",
            "抱歉，无法回答这条消息：本助手背后的模型出错了（请求编号 {turn}）。",
        ),
        ("limited-own", "服务繁忙，请稍后再试。（编号：{turn}）"),
    ] {
        let res = reqwest::Client::new()
            .post(svc.url("/v1/turns"))
            .bearer_auth(TURN_TOKEN)
            .json(&json!({"pipeline": pipeline, "message": "你好"}))
            .send()
            .await
            .unwrap();
        let turn: Value = res.json().await.unwrap();
        assert_eq!(turn["failed"], true, "{turn}");
        assert_eq!(
            turn["reply"],
            expected.replace("{turn}", turn["turn_id"].as_str().unwrap()),
            "{pipeline}"
        );
    }

    // The caller's own tool: its call came back under the caller's name, the result
    // continued the turn, and the streamed call came whole before `tool_calls`.
    let t = &doc["caller_tools"];
    assert_eq!(t["first"]["finish_reason"], "tool_calls", "{t}");
    assert_eq!(t["first"]["content"], Value::Null);
    assert_eq!(
        t["first"]["calls"],
        json!([{"id": "call_7", "type": "function", "name": "lookup", "arguments": r#"{"q":"beta"}"#}])
    );
    assert_eq!(t["second"]["finish_reason"], "stop");
    assert_eq!(t["second"]["content"], "Only ap-east is in beta.");
    assert_eq!(
        t["streamed"],
        json!({"calls": [{"id": "call_8", "name": "lookup", "arguments": r#"{"q":"beta"}"#}], "finish_reasons": ["tool_calls"]})
    );
    let forwarded = tooled_api.requests();
    assert_eq!(forwarded.len(), 3, "{forwarded:#?}");
    // Upstream got the caller's tool, namespaced, beside the pipeline's MCP tools, and
    // the resource in its fence.
    let tools = forwarded[0]["tools"].as_array().unwrap();
    let lookup = tools
        .iter()
        .find(|t| t["function"]["name"] == "caller__lookup")
        .unwrap_or_else(|| panic!("{tools:#?}"));
    assert_eq!(lookup["function"]["description"], "Looks up a region");
    assert_eq!(
        lookup["function"]["parameters"],
        json!({"type": "object", "properties": {"q": {"type": "string"}}})
    );
    assert!(tools.iter().any(|t| {
        t["function"]["name"]
            .as_str()
            .unwrap()
            .starts_with("demo__")
    }));
    assert!(fenced(
        system_text(&forwarded[0]),
        "demo://config/app.json",
        "\"qwen2.5-72b\""
    ));
    // The continuation: the user's message, the call, the caller's result.
    let messages = forwarded[1]["messages"].as_array().unwrap();
    let tail = &messages[messages.len() - 3..];
    assert_eq!(tail[0]["role"], "user");
    assert_eq!(tail[0]["content"], "Which regions are in beta?");
    assert_eq!(tail[1]["role"], "assistant");
    assert_eq!(tail[1]["tool_calls"][0]["id"], "call_7");
    assert_eq!(
        tail[1]["tool_calls"][0]["function"]["name"],
        "caller__lookup"
    );
    assert_eq!(
        tail[2],
        json!({"role": "tool", "tool_call_id": "call_7", "content": "ap-east: beta"})
    );

    // The upstream key never reaches the caller or the log.
    let log = std::fs::read_to_string(&svc.log).unwrap();
    assert!(!log.contains(secret));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
}

/// Runs tests/clients/openai_image_client.py against a service whose `[model]` says
/// `vision`, and returns what it printed and what upstream got.
async fn image_turn(vision: bool) -> (Value, Vec<Value>) {
    let upstream = MockServer::start().await;
    let api = ChatCompletions::new(vec![answer("It is red.")]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&upstream)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[model]
vision = {vision}

[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[pipelines.eyes]
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "local"

[pipelines.eyes.bind_mcp_servers]
servers = ["demo"]

[pipelines.eyes.resource_context_injection]
budget_tokens = 2000
attachments = [{{ server = "demo", uri = "demo://config/app.json" }}]

[pipelines.eyes.local]
base_url = "{upstream}/v1"
model = "gpt-upstream"
api_key_env = "HOSTPIPE_TEST_UPSTREAM_KEY"
stream = false
"#,
            exe = hostpipe_tests::hostpipe_bin(),
            upstream = upstream.uri(),
        ),
    )
    .unwrap();
    let svc = Service::start_with_env(
        &config,
        "none",
        &[],
        &[("HOSTPIPE_TEST_UPSTREAM_KEY", "sk-upstream-0123456789")],
    )
    .await;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(root().join("tests/.venv/bin/python"))
            .arg(root().join("tests/clients/openai_image_client.py"))
            .arg(&svc.base)
            .arg("eyes")
            .env("HOSTPIPE_TOKEN", TURN_TOKEN)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", svc.log_text());
    (serde_json::from_slice(&out.stdout).unwrap(), api.requests())
}

/// The user's message as upstream got it: its content parts (a text-only message is
/// one text part).
fn user_parts(request: &Value) -> Vec<Value> {
    let last = request["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user", "{request}");
    match &last["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(parts) => parts.clone(),
        other => panic!("content: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_in_the_message_reaches_a_vision_model_and_is_a_note_for_another() {
    // A model with vision gets the image with the message, as a data URL of a PNG.
    let (doc, requests) = image_turn(true).await;
    assert_eq!(doc["content"], "It is red.");
    // An https URL is refused (hostpipe fetches nothing a caller names), naming the part.
    assert_eq!(
        doc["remote"],
        json!({"status": 400, "code": "invalid_request", "param": "messages[0].content[1].image_url.url"})
    );
    assert_eq!(requests.len(), 1, "the refused request never went upstream");
    let parts = user_parts(&requests[0]);
    let images: Vec<&str> = parts
        .iter()
        .filter(|p| p["type"] == "image_url")
        .map(|p| p["image_url"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(images.len(), 1, "{parts:?}");
    let png = images[0]
        .strip_prefix("data:image/png;base64,")
        .unwrap_or_else(|| panic!("{}", images[0]));
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png)
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: 8×8.
    assert_eq!(&bytes[16..24], &[0, 0, 0, 8, 0, 0, 0, 8]);
    assert!(
        parts.iter().any(|p| p["type"] == "text"
            && p["text"]
                .as_str()
                .unwrap()
                .contains("What colour is this picture?")),
        "{parts:?}"
    );
    // The attached resource is still in the context, fenced.
    assert!(fenced(
        system_text(&requests[0]),
        "demo://config/app.json",
        "\"qwen2.5-72b\""
    ));

    // A model without vision gets no image, and its context says why, in the fence.
    let (doc, requests) = image_turn(false).await;
    assert_eq!(doc["content"], "It is red.");
    let parts = user_parts(&requests[0]);
    assert!(parts.iter().all(|p| p["type"] == "text"), "{parts:?}");
    let system = system_text(&requests[0]);
    assert!(fenced(system, "message:image/1", "not shown"), "{system}");
}
