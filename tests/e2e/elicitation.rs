//! MCP elicitation as a chat turn (issue 18): a server's question goes to the user of the
//! turn that made the request, and the answer goes back to the server, checked first.
//!
//! Against `@modelcontextprotocol/server-everything` (legacy `elicitation/create`, form
//! and URL mode; its `trigger-*elicitation*` tools exist only when the client declares
//! the capability) through the library and through `hostpipe serve`, and a Python SDK
//! 2.x server (`tests/servers/elicit_server.py`) that asks through a 2026-07-28
//! `input_required` round or a 2025-11-25 request, as the connection speaks. The rmcp
//! side of the 2026-07-28 path is also tested in process in `hostpipe-mcp`
//! (`host::tests_elicit`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hostpipe_core::{
    ElicitScope, ElicitationAnswer, ElicitationRequest, ElicitationSettings, Elicitor,
    McpSource as _, ToolContent, Turn,
};
use hostpipe_mcp::{Elicitation, HostOptions};
use hostpipe_tests::{ADMIN_TOKEN, Service, connect_with, everything, root, test_options};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn options(elicitation: Elicitation) -> HostOptions {
    HostOptions {
        elicitation,
        ..test_options()
    }
}

async fn tool_names(elicitation: Elicitation) -> Vec<String> {
    let host = connect_with(vec![everything("e")], options(elicitation)).await;
    let names = host
        .list_tools("e")
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    host.shutdown().await;
    names
}

/// server-everything registers its elicitation tools only for a client that declared
/// the capability (form; URL mode separately): what hostpipe declares is what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capability_is_declared_only_when_an_elicitor_is_configured() {
    let off = tool_names(Elicitation::Off).await;
    assert!(off.iter().any(|t| t == "echo"), "{off:?}");
    assert!(!off.iter().any(|t| t.contains("elicitation")), "{off:?}");
    let form = tool_names(Elicitation::Form).await;
    assert!(
        form.iter().any(|t| t == "trigger-elicitation-request"),
        "{form:?}"
    );
    assert!(
        !form.iter().any(|t| t == "trigger-url-elicitation"),
        "{form:?}"
    );
    let both = tool_names(Elicitation::FormAndUrl).await;
    assert!(
        both.iter().any(|t| t == "trigger-url-elicitation"),
        "{both:?}"
    );
}

/// Counts questions and answers `name` = "Ann".
#[derive(Default)]
struct Counting(Mutex<Vec<String>>);

#[async_trait]
impl Elicitor for Counting {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        self.0.lock().unwrap().push(request.turn_id.clone());
        let mut content = serde_json::Map::new();
        content.insert("name".into(), json!("Ann"));
        ElicitationAnswer::Accept { content }
    }
}

fn text(result: &hostpipe_core::ToolCallResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ToolContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn scope(elicitor: &Arc<Counting>, conversation: &str) -> ElicitScope {
    let mut turn = Turn::new("p", "hi");
    turn.ids.conversation = Some(conversation.into());
    ElicitScope::new(
        Arc::clone(elicitor) as Arc<dyn Elicitor>,
        &turn,
        ElicitationSettings::default(),
    )
}

/// A legacy `elicitation/create` says nothing of whose request it is: with one user's
/// request in flight that user is asked; with another user's request in flight too,
/// nobody is asked and the server is told `decline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_question_goes_to_the_one_user_in_flight_and_never_to_a_guess() {
    let host = connect_with(vec![everything("e")], options(Elicitation::Form)).await;
    let elicitor = Arc::new(Counting::default());
    let alone = scope(&elicitor, "c1")
        .run(host.call_tool("e", "trigger-elicitation-request", None))
        .await
        .unwrap();
    assert!(text(&alone).contains("- Name: Ann"), "{}", text(&alone));
    assert_eq!(elicitor.0.lock().unwrap().len(), 1);

    // Another conversation's long call is in flight while c1's asks.
    let slow = {
        let host = Arc::clone(&host);
        let other = scope(&elicitor, "c2");
        tokio::spawn(async move {
            let mut args = serde_json::Map::new();
            args.insert("duration".into(), json!(3));
            args.insert("steps".into(), json!(1));
            other
                .run(host.call_tool("e", "trigger-long-running-operation", Some(args)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ambiguous = scope(&elicitor, "c1")
        .run(host.call_tool("e", "trigger-elicitation-request", None))
        .await
        .unwrap();
    assert!(
        text(&ambiguous).contains("User declined"),
        "{}",
        text(&ambiguous)
    );
    assert_eq!(elicitor.0.lock().unwrap().len(), 1, "nobody else was asked");
    slow.await.unwrap().unwrap();
    host.shutdown().await;
}

fn everything_js() -> PathBuf {
    root().join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Pipelines `ask` (elicitation on, 60 s) and `quick` (1.5 s, URL mode off), both
/// binding server-everything with its tools.
fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let text = format!(
        r#"
[mcp_servers.everything]
command = "node"
args = [{everything:?}, "stdio"]

[pipelines.ask]
stages = ["bind_mcp_servers", "tool_assembly"]
[pipelines.ask.bind_mcp_servers]
servers = ["everything"]
[pipelines.ask.elicitation]
timeout_ms = 60000

[pipelines.quick]
stages = ["bind_mcp_servers", "tool_assembly"]
[pipelines.quick.bind_mcp_servers]
servers = ["everything"]
[pipelines.quick.elicitation]
timeout_ms = 1500
url_mode = false
{extra}"#,
        everything = everything_js(),
    );
    let path = dir.join("hostpipe.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn send(
    svc: &Service,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new()
        .request(method, svc.url(path))
        .timeout(Duration::from_secs(90))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Starts a tool call of `tool` through `pipeline` (it waits for the answer).
fn call(
    svc: &Service,
    pipeline: &str,
    tool: &str,
    arguments: Value,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let (url, body) = (
        svc.url(&format!("/v1/servers/everything/tools/{tool}/call")),
        json!({"pipeline": pipeline, "conversation_id": "chat-1", "arguments": arguments}),
    );
    tokio::spawn(async move {
        let res = reqwest::Client::new()
            .post(url)
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .timeout(Duration::from_secs(90))
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap())
    })
}

/// The one pending question, once it is there.
async fn pending(svc: &Service) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, v) = send(svc, reqwest::Method::GET, "/v1/elicitation-requests", None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        if let Some(first) = v["elicitation_requests"].as_array().and_then(|a| a.first()) {
            return first.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no elicitation request: {}",
            svc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn result_text(v: &Value) -> String {
    v["result"]["content"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_puts_the_question_to_the_caller_and_takes_a_checked_answer() {
    let dir = tempfile::tempdir().unwrap();
    let svc = Service::start(&write_config(dir.path(), ""), "memory", &[]).await;
    let post = reqwest::Method::POST;

    // Form mode, answered.
    let running = call(&svc, "ask", "trigger-elicitation-request", json!({}));
    let q = pending(&svc).await;
    assert_eq!(
        (q["server"].as_str(), q["mode"].as_str()),
        (Some("everything"), Some("form"))
    );
    assert_eq!(
        (q["pipeline"].as_str(), q["conversation"].as_str()),
        (Some("ask"), Some("chat-1"))
    );
    assert_eq!(
        q["message"],
        "Please provide inputs for the following fields:"
    );
    assert_eq!(q["requested_schema"]["required"], json!(["name"]));
    let id = q["id"].as_str().unwrap().to_owned();
    let answer = format!("/v1/elicitation-requests/{id}");
    // Content that does not fit the form: 400 naming the field; still pending.
    let (s, v) = send(
        &svc,
        post.clone(),
        &answer,
        Some(json!({"action": "accept", "content": {"name": "Ann", "integer": 500}})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "invalid_content");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`integer`: must be at most 100"),
        "{v}"
    );
    let (s, v) = send(
        &svc,
        post.clone(),
        &answer,
        Some(json!({"action": "accept", "content": {"check": true}})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`name`: is required"),
        "{v}"
    );
    let (s, v) = send(&svc, post.clone(), &answer, Some(json!({"action": "accept", "content": {"name": "Ann", "check": true, "integer": 7, "untitledMultipleSelectEnum": ["Piano"]}}))).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, v) = running.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    let said = result_text(&v);
    assert!(
        said.contains("User provided the requested information"),
        "{said}"
    );
    assert!(
        said.contains("- Name: Ann") && said.contains("- Favorite Integer: 7"),
        "{said}"
    );
    // Answered: no longer pending.
    let (s, v) = send(
        &svc,
        post.clone(),
        &answer,
        Some(json!({"action": "decline"})),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["error"]["code"], "elicitation_request_not_pending");

    // No answer: declined after the pipeline's timeout.
    let started = Instant::now();
    let running = call(&svc, "quick", "trigger-elicitation-request", json!({}));
    let q = pending(&svc).await;
    assert_eq!(q["pipeline"], "quick");
    let (s, v) = running.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(result_text(&v).contains("User declined"), "{v}");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let (_, v) = send(&svc, reqwest::Method::GET, "/v1/elicitation-requests", None).await;
    assert_eq!(v["elicitation_requests"], json!([]));

    // URL mode: the domain is shown; cancel and accept are passed on.
    let url = "https://Login.Example.com:8443/authorize?state=x";
    let args = json!({"url": url, "message": "Sign in to continue"});
    let running = call(&svc, "ask", "trigger-url-elicitation", args.clone());
    let q = pending(&svc).await;
    assert_eq!(
        (q["mode"].as_str(), q["domain"].as_str()),
        (Some("url"), Some("login.example.com"))
    );
    assert_eq!(q["url"], url);
    assert!(q.get("requested_schema").is_none(), "{q}");
    let (s, _) = send(
        &svc,
        post.clone(),
        &format!("/v1/elicitation-requests/{}", q["id"].as_str().unwrap()),
        Some(json!({"action": "cancel"})),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, v) = running.await.unwrap();
    assert!(
        result_text(&v).contains("User cancelled the URL elicitation"),
        "{v}"
    );
    let running = call(&svc, "ask", "trigger-url-elicitation", args.clone());
    let q = pending(&svc).await;
    let (s, _) = send(
        &svc,
        post.clone(),
        &format!("/v1/elicitation-requests/{}", q["id"].as_str().unwrap()),
        Some(json!({"action": "accept"})),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, v) = running.await.unwrap();
    assert!(
        result_text(&v).contains("User completed the URL elicitation flow"),
        "{v}"
    );
    // A pipeline with URL mode off declines without asking.
    let (_, v) = call(&svc, "quick", "trigger-url-elicitation", args)
        .await
        .unwrap();
    assert!(
        result_text(&v).contains("User declined to open the URL"),
        "{v}"
    );
    // Answer mistakes: an unknown id, an unknown action, an unknown key.
    let none = "/v1/elicitation-requests/00000000-0000-0000-0000-000000000000";
    let (s, v) = send(&svc, post.clone(), none, Some(json!({"action": "decline"}))).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = send(&svc, post.clone(), none, Some(json!({"action": "maybe"}))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "invalid_body");
    let (s, v) = send(
        &svc,
        post.clone(),
        none,
        Some(json!({"action": "accept", "answer": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    // Every question is in the log, never the values.
    let log = svc.log_text();
    assert!(log.contains("elicitation request pending"), "{log}");
    assert!(!log.contains("Ann"), "an answer's value was logged");
}

/// With elicitation off in every pipeline, hostpipe serve declares no capability, and
/// server-everything offers no elicitation tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_declares_nothing_when_every_pipeline_turns_elicitation_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "").to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("timeout_ms = 60000", "enabled = false")
        .replace("timeout_ms = 1500\nurl_mode = false", "enabled = false");
    std::fs::write(&config, text).unwrap();
    let svc = Service::start(Path::new(&config), "memory", &[]).await;
    let (s, v) = send(
        &svc,
        reqwest::Method::GET,
        "/v1/servers/everything/tools",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("elicitation")),
        "{names:?}"
    );
}

/// Reads a server-sent event stream to its end, calling `on_event` for each event.
async fn read_sse(
    res: reqwest::Response,
    mut on_event: impl FnMut(&str, &Value),
) -> Vec<(String, Value)> {
    use futures_util::StreamExt as _;
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut stream = res.bytes_stream();
    let (mut buf, mut events) = (String::new(), Vec::new());
    while let Some(chunk) = stream.next().await {
        buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut name, mut data) = (String::new(), String::new());
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if name.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data).unwrap();
            on_event(&name, &value);
            events.push((name, value));
        }
    }
    events
}

/// A whole chat turn: the model calls server-everything's elicitation tool, the
/// question reaches the caller as an `elicitation_request` event on the turn's stream,
/// the caller answers by POST, and the model gets the tool's result with the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_carries_the_question_and_the_answer_reaches_the_model() {
    use hostpipe_tests::openai_api::{ChatCompletions, answer, tool_call};
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer};

    let mock = MockServer::start().await;
    let api = ChatCompletions::new(vec![
        tool_call("call_1", "everything__trigger-elicitation-request", "{}"),
        answer("Thanks, Bob."),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&mock)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
[pipelines.chat]
stages = ["bind_mcp_servers", "tool_assembly"]
runner = "local"
[pipelines.chat.bind_mcp_servers]
servers = ["everything"]
[pipelines.chat.local]
base_url = "{}/v1"
model = "gpt-test"
api_key_env = "HOSTPIPE_TEST_UNSET_KEY"
"#,
        mock.uri()
    );
    let svc = Service::start(&write_config(dir.path(), &extra), "memory", &[]).await;
    let res = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "chat", "message": "sign me up", "conversation_id": "chat-7", "stream": true}))
        .timeout(Duration::from_secs(90))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let base = svc.base.clone();
    let mut answering = Vec::new();
    let events = read_sse(res, |name, v| {
        if name == "elicitation_request" {
            let url = format!(
                "{base}/v1/elicitation-requests/{}",
                v["id"].as_str().unwrap()
            );
            answering.push(tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({"action": "accept", "content": {"name": "Bob", "check": false}}))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
        }
    })
    .await;
    for a in answering {
        assert_eq!(a.await.unwrap(), StatusCode::NO_CONTENT);
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let asked = events
        .iter()
        .find(|(n, _)| n == "elicitation_request")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no elicitation_request event: {names:?}"));
    assert_eq!(asked["conversation"], "chat-7");
    assert_eq!(asked["turn_id"], events[0].1["turn_id"]);
    let done = &events.last().unwrap().1;
    assert_eq!(events.last().unwrap().0, "done", "{names:?}");
    assert_eq!(done["reply"], "Thanks, Bob.");
    // The tool's result, with the user's answer, went to the model.
    let second = api.requests()[1].to_string();
    assert!(second.contains("- Name: Bob"), "{second}");
    // The trace records the question: server, mode, action, field names, no values.
    let record = done["trace"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "elicitation")
        .unwrap_or_else(|| panic!("no elicitation in the trace: {done}"));
    assert_eq!(record["server"], "everything");
    assert_eq!(
        (record["mode"].as_str(), record["action"].as_str()),
        (Some("form"), Some("accept"))
    );
    // The user answered `check` and `name`; the form's other fields went with their
    // defaults (SEP-1034), and the record names every field sent.
    assert_eq!(
        record["fields"],
        json!([
            "check",
            "firstLine",
            "integer",
            "legacyTitledEnum",
            "name",
            "number",
            "titledMultipleSelectEnum",
            "titledSingleSelectEnum",
            "untitledMultipleSelectEnum",
            "untitledSingleSelectEnum"
        ])
    );
    assert!(!record.to_string().contains("Bob"));
}

/// Gives the answers in order, keeping each question.
struct Scripted {
    answers: Mutex<Vec<ElicitationAnswer>>,
    asked: Mutex<Vec<ElicitationRequest>>,
}

#[async_trait]
impl Elicitor for Scripted {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        self.asked.lock().unwrap().push(request.clone());
        self.answers.lock().unwrap().remove(0)
    }
}

/// The Python SDK 2.x asks through the era it speaks: an `input_required` round on
/// 2026-07-28, a standalone `elicitation/create` on 2025-11-25. Both reach the turn's
/// user, and the server gets the answer (or a decline for one that does not fit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_asks_the_user_in_both_eras() {
    use hostpipe_core::ElicitationMode;
    use hostpipe_mcp::ProtocolMode;

    for (protocol, version) in [
        (ProtocolMode::Auto, "2026-07-28"),
        (ProtocolMode::Legacy, "2025-11-25"),
    ] {
        let mut config = hostpipe_tests::python("b", "elicit_server.py");
        config.protocol = protocol;
        let host = connect_with(vec![config], options(Elicitation::Form)).await;
        let server = &host.servers()[0];
        assert_eq!(
            server.protocol_version.as_deref(),
            Some(version),
            "{server:?}"
        );
        let content = |v: Value| v.as_object().cloned().unwrap();
        let elicitor = Arc::new(Scripted {
            answers: Mutex::new(vec![
                ElicitationAnswer::Accept {
                    content: content(json!({"name": "Ann", "guests": 4})),
                },
                ElicitationAnswer::Decline,
                // Over the schema's maximum: never sent, declined.
                ElicitationAnswer::Accept {
                    content: content(json!({"name": "Ann", "guests": 40})),
                },
            ]),
            asked: Mutex::default(),
        });
        let mut said = Vec::new();
        for _ in 0..3 {
            let mut turn = Turn::new("p", "book a table");
            turn.ids.conversation = Some("c1".into());
            let scope = ElicitScope::new(
                Arc::clone(&elicitor) as Arc<dyn Elicitor>,
                &turn,
                ElicitationSettings::default(),
            );
            let result = scope
                .run(host.call_tool("b", "book_table", None))
                .await
                .unwrap();
            said.push(text(&result));
        }
        assert_eq!(
            said,
            [
                "booked for Ann, 4 guests",
                "not booked: decline",
                "not booked: decline"
            ],
            "{version}"
        );
        {
            let asked = elicitor.asked.lock().unwrap();
            assert_eq!(asked.len(), 3, "{version}");
            assert_eq!(
                asked[0].message,
                "Who is the table for, and how many are you?"
            );
            let ElicitationMode::Form { requested_schema } = &asked[0].mode else {
                panic!("not a form: {:?}", asked[0].mode);
            };
            assert_eq!(
                requested_schema["properties"]["guests"]["maximum"], 12,
                "{requested_schema}"
            );
        }
        host.shutdown().await;
    }
}
