//! OpenTelemetry traces: `hostpipe serve` exports its spans over OTLP/HTTP to a real
//! receiver built on the official OTLP protobuf definitions
//! (`tests/servers/otlp_receiver.py`, PyPI `opentelemetry-proto`), and one turn's span
//! tree is checked: the caller's `traceparent` parents it, the stages and the run are
//! the turn's children, the injection stage's `resources/read` carries the URI as
//! `mcp.resource.uri` (never in a name), the model call is `chat {model}` and the tool
//! the model calls is `execute_tool {tool}` over the MCP `tools/call`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use hostpipe_tests::openai_api::{ChatCompletions, answer, tool_call};
use hostpipe_tests::{ADMIN_TOKEN, Service, root};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// The receiver, killed when dropped, and the file it writes the spans to.
struct Receiver {
    _child: tokio::process::Child,
    port: u16,
}

async fn start_receiver(spans: &Path) -> Receiver {
    let mut child = tokio::process::Command::new(root().join("tests/.venv/bin/python"))
        .arg(root().join("tests/servers/otlp_receiver.py"))
        .arg(spans)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the OTLP receiver");
    let stdout = child.stdout.take().unwrap();
    let line = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::BufReader::new(stdout).lines().next_line(),
    )
    .await
    .expect("the receiver did not say where it listens")
    .unwrap()
    .expect("the receiver exited");
    let port = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .parse()
        .unwrap();
    Receiver {
        _child: child,
        port,
    }
}

fn read_spans(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";
const URI: &str = "demo://config/app.json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_exports_its_span_tree_under_the_callers_traceparent() {
    let dir = tempfile::tempdir().unwrap();
    let spans_file = dir.path().join("spans.jsonl");
    let receiver = start_receiver(&spans_file).await;
    // The model searches the docs once, then answers.
    let upstream = MockServer::start().await;
    let api = ChatCompletions::new(vec![
        tool_call("call_1", "demo__search_docs", r#"{"query":"deploy"}"#),
        answer("Deploy with the runbook."),
    ]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&upstream)
        .await;
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[model]
name = "gpt-test"

[pipelines.traced]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "local"

[pipelines.traced.bind_mcp_servers]
servers = ["demo"]

[pipelines.traced.local]
base_url = "{base}/v1"
model = "gpt-test"
api_key_env = "HOSTPIPE_TEST_UNSET_KEY"
stream = false
"#,
            exe = hostpipe_tests::hostpipe_bin(),
            base = upstream.uri(),
        ),
    )
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let svc = Service::start_with_env(
        &config,
        "memory",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "hostpipe-e2e"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;

    let res = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .header("tracestate", "e2e=1")
        .json(&json!({
            "pipeline": "traced",
            "message": "How do I deploy?",
            "conversation_id": "chat-otel",
            "attachments": [{"server": "demo", "uri": URI}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let turn: Value = res.json().await.unwrap();
    assert_eq!(turn["reply"], "Deploy with the runbook.", "{turn}");
    let turn_id = turn["turn_id"].as_str().unwrap().to_owned();

    // The batch processor sends within 100 ms; the receiver writes what it decoded.
    let mut spans = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        spans = read_spans(&spans_file);
        let has = |name: &str| spans.iter().any(|s| s["name"] == name);
        if has("POST /v1/turns") && has("turn traced") && has("execute_tool demo__search_docs") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let by_id: BTreeMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), s))
        .collect();
    let one = |name: &str| -> &Value {
        let found: Vec<&Value> = spans
            .iter()
            .filter(|s| s["name"] == name && s["trace_id"] == TRACE_ID)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one span `{name}` in the caller's trace; spans: {}",
            serde_json::to_string_pretty(&spans).unwrap()
        );
        found[0]
    };
    let parent_of = |span: &Value| -> String {
        let parent = span["parent_span_id"].as_str().unwrap();
        by_id.get(parent).map_or_else(
            || format!("<{parent}>"),
            |p| p["name"].as_str().unwrap().to_owned(),
        )
    };

    // The HTTP server span continues the caller's trace.
    let http = one("POST /v1/turns");
    assert_eq!(http["kind"], "SPAN_KIND_SERVER");
    assert_eq!(http["parent_span_id"], CALLER_SPAN_ID);
    assert_eq!(http["attributes"]["http.route"], "/v1/turns");
    assert_eq!(http["attributes"]["http.request.method"], "POST");
    assert_eq!(http["attributes"]["http.response.status_code"], 200);
    assert_eq!(http["service_name"], "hostpipe-e2e");

    let turn_span = one("turn traced");
    assert_eq!(turn_span["parent_span_id"], http["span_id"]);
    assert_eq!(
        turn_span["attributes"]["hostpipe.turn.id"],
        turn_id.as_str()
    );
    assert_eq!(turn_span["attributes"]["hostpipe.pipeline.id"], "traced");
    assert_eq!(
        turn_span["attributes"]["gen_ai.conversation.id"],
        "chat-otel"
    );
    assert_eq!(turn_span["attributes"]["hostpipe.turn.status"], "completed");
    assert_eq!(turn_span["status"], "STATUS_CODE_UNSET");

    // The stages, in order, then the run: children of the turn.
    for stage in [
        "bind_mcp_servers",
        "resource_context_injection",
        "tool_assembly",
    ] {
        let s = one(&format!("stage {stage}"));
        assert_eq!(parent_of(s), "turn traced", "{s}");
        assert_eq!(s["attributes"]["hostpipe.stage.outcome"], "continue");
    }
    let run = one("run local");
    assert_eq!(parent_of(run), "turn traced");

    // The injection's read: an MCP client span under its stage, the URI an attribute.
    let read = one("resources/read");
    assert_eq!(parent_of(read), "stage resource_context_injection");
    assert_eq!(read["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(read["attributes"]["mcp.method.name"], "resources/read");
    assert_eq!(read["attributes"]["mcp.resource.uri"], URI);
    assert_eq!(read["attributes"]["network.transport"], "pipe");
    assert_eq!(read["attributes"]["hostpipe.mcp.server"], "demo");
    for s in &spans {
        let name = s["name"].as_str().unwrap();
        assert!(!name.contains("demo://"), "a URI in the span name `{name}`");
    }

    // The model calls (two rounds) and the tool call between them.
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "chat gpt-test")
        .collect();
    assert_eq!(chats.len(), 2, "{chats:?}");
    for chat in &chats {
        assert_eq!(parent_of(chat), "run local");
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(chat["attributes"]["gen_ai.operation.name"], "chat");
        assert_eq!(chat["attributes"]["gen_ai.provider.name"], "openai");
        assert_eq!(chat["attributes"]["gen_ai.request.model"], "gpt-test");
    }
    // The fake upstream's usage: 50 + 5 for the tool call's round, 100 + 10 after.
    let mut usage: Vec<(i64, i64)> = chats
        .iter()
        .map(|c| {
            (
                c["attributes"]["gen_ai.usage.input_tokens"]
                    .as_i64()
                    .unwrap(),
                c["attributes"]["gen_ai.usage.output_tokens"]
                    .as_i64()
                    .unwrap(),
            )
        })
        .collect();
    usage.sort_unstable();
    assert_eq!(usage, vec![(50, 5), (100, 10)]);

    let tool = one("execute_tool demo__search_docs");
    assert_eq!(parent_of(tool), "run local");
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "demo__search_docs");
    assert_eq!(tool["attributes"]["gen_ai.tool.call.id"], "call_1");
    assert_eq!(tool["status"], "STATUS_CODE_UNSET");
    let call = one("tools/call search_docs");
    assert_eq!(parent_of(call), "execute_tool demo__search_docs");
    assert_eq!(call["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(call["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(call["attributes"]["gen_ai.tool.name"], "search_docs");

    // Every span of the turn is in the caller's trace.
    for s in [turn_span, run, read, tool, call] {
        assert_eq!(s["trace_id"], TRACE_ID);
    }
    // Nothing in the spans' names or attributes is the bearer token.
    let text = std::fs::read_to_string(&spans_file).unwrap();
    assert!(!text.contains(ADMIN_TOKEN));
    drop(svc);
}

/// The spans still queued at shutdown go out before the process exits: with a batch
/// delay of ten minutes, the turn's spans are at the receiver once `hostpipe serve`
/// has exited on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spans_still_queued_are_sent_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let spans_file = dir.path().join("spans.jsonl");
    let receiver = start_receiver(&spans_file).await;
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[pipelines.previewed]
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "preview"

[pipelines.previewed.bind_mcp_servers]
servers = ["demo"]
"#,
            exe = hostpipe_tests::hostpipe_bin(),
        ),
    )
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", receiver.port);
    let mut svc = Service::start_with_env(
        &config,
        "memory",
        &[],
        &[
            // The signal's own variable: used as it is, no `/v1/traces` appended.
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await;
    let res = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({
            "pipeline": "previewed",
            "message": "What does the config say?",
            "attachments": [{"server": "demo", "uri": URI}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    svc.terminate();
    assert_eq!(svc.wait(Duration::from_secs(30)).await, Some(0));

    let spans = read_spans(&spans_file);
    let turn = spans
        .iter()
        .find(|s| s["name"] == "turn previewed")
        .unwrap_or_else(|| panic!("no turn span; spans: {spans:?}"));
    // No traceparent: the HTTP span starts the trace, the turn is its child.
    let http = spans
        .iter()
        .find(|s| s["name"] == "POST /v1/turns")
        .unwrap();
    assert_eq!(http["parent_span_id"], "");
    assert_eq!(turn["parent_span_id"], http["span_id"]);
    assert_eq!(turn["trace_id"], http["trace_id"]);
    // Without OTEL_SERVICE_NAME, the service is hostpipe.
    assert_eq!(turn["service_name"], "hostpipe");
    let read = spans
        .iter()
        .find(|s| s["name"] == "resources/read")
        .unwrap();
    assert_eq!(read["trace_id"], turn["trace_id"]);
    assert_eq!(read["attributes"]["mcp.resource.uri"], URI);
}

/// A collector that is down costs the turn nothing, and the log says the spans were lost
/// (the exporter's own warnings: `opentelemetry-otlp`'s `internal-logs`).
#[test]
fn a_collector_that_is_down_is_a_warning_not_a_failed_turn() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = hostpipe_tests::hostpipe_command()
        .args(["run", "--store", "none", "hello"])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer otel-secret-123",
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("BatchSpanProcessor.ExportError"),
        "the lost spans are not logged: {stderr}"
    );
    assert!(!stderr.contains("otel-secret-123"), "{stderr}");
}
