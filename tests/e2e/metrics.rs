//! `GET /metrics` of `hostpipe serve`, scraped as Prometheus scrapes it and parsed by
//! the official Python client's parsers (`prometheus_client`: the text format 0.0.4 and
//! OpenMetrics 1.0, tests/clients/metrics_client.py), after turns through three doors
//! (`/v1/turns`, `/v1/chat/completions` and Dify's `/retrieval`), reads that hit the cache, go to the server,
//! are withheld by the consent policy and fail, passages ranked out of large manuals,
//! and a tool call, all against MCP servers on the official Python SDK. The counts are
//! checked against literal values and against the read history of the same turns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hostpipe_tests::{ADMIN_TOKEN, READ_TOKEN, Service, TURN_TOKEN, root};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn server(script: &str) -> String {
    root()
        .join("tests/servers")
        .join(script)
        .display()
        .to_string()
}

/// The handbook's text in tests/servers/kb_server.py.
const HANDBOOK: &str = "Support hours are 9 to 5, Monday to Friday. Refunds within 30 days.";

/// Pipeline `kb`: a secret the policy withholds, the handbook, and a URI the server does
/// not have (a server on the Python SDK, whose results say `ttlMs: 0`: never cached);
/// a 2026-07-28 server's counter (`ttlMs` a minute: cached); the tutorial server's tools. Pipeline
/// `manuals`: two large manuals in a 300-token budget (ranked in passages). `extra` is
/// appended.
fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let py = root().join("tests/.venv/bin/python").display().to_string();
    let text = format!(
        r#"
[mcp_servers.kb]
command = {py:?}
args = [{kb:?}]

[mcp_servers.modern]
command = {py:?}
args = [{modern:?}]

[mcp_servers.tutorial]
command = {py:?}
args = [{tutorial:?}]

[mcp_servers.manuals]
command = {py:?}
args = [{manuals:?}]

[pipelines.kb]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "preview"

[pipelines.kb.bind_mcp_servers]
servers = ["kb", "modern", "tutorial"]

[pipelines.kb.resource_context_injection]
budget_tokens = 2000
attachments = [
  {{ server = "kb", uri = "kb://secret/plan" }},
  {{ server = "kb", uri = "kb://public/handbook" }},
  {{ server = "kb", uri = "kb://public/missing" }},
  {{ server = "modern", uri = "modern://counter" }},
]

[pipelines.kb.consent]
rules = [{{ server = "kb", uri = "kb://secret/*", host = "deny", model = "deny" }}]

[pipelines.manuals]
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "preview"

[pipelines.manuals.bind_mcp_servers]
servers = ["manuals"]

[pipelines.manuals.resource_context_injection]
budget_tokens = 300
attachments = [
  {{ server = "manuals", uri = "manual://operations.md" }},
  {{ server = "manuals", uri = "manual://billing.md" }},
]
{extra}"#,
        kb = server("kb_server.py"),
        modern = server("modern_only_server.py"),
        tutorial = server("tutorial_server.py"),
        manuals = server("manuals_server.py"),
    );
    let path = dir.join("hostpipe.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn post(svc: &Service, path: &str, token: &str, body: Value) -> Value {
    let res = reqwest::Client::new()
        .post(svc.url(path))
        .bearer_auth(token)
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = res.status();
    let v: Value = res.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{path}: {v}");
    v
}

/// Waits (at most 90 s) until every configured server is connected: on a loaded
/// machine a Python server may miss its first connection attempt, and is then retried.
async fn all_connected(svc: &Service) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let v: Value = reqwest::Client::new()
            .get(svc.url("/v1/servers"))
            .bearer_auth(READ_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let servers = v["servers"].as_array().unwrap();
        if servers.iter().all(|s| s["status"]["state"] == "connected") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not all connected: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Scrapes `base/metrics` with tests/clients/metrics_client.py: both parsers' families.
async fn scrape(base: &str) -> Value {
    let out = tokio::process::Command::new(root().join("tests/.venv/bin/python"))
        .arg(root().join("tests/clients/metrics_client.py"))
        .arg(format!("{base}/metrics"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the parsers refused the exposition: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of sample `name` with exactly `labels` in format `format` (`text` or
/// `openmetrics`); `None` when there is no such sample.
fn find(doc: &Value, format: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let mut found = None;
    for family in doc[format]["families"].as_object().unwrap().values() {
        for s in family["samples"].as_array().unwrap() {
            let got: BTreeMap<&str, &str> = s[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap()))
                .collect();
            if s[0] == name && got == want {
                assert!(found.is_none(), "{name} {labels:?} twice");
                found = s[2].as_f64();
            }
        }
    }
    found
}

/// [`find`] in both formats, which must agree; panics when absent.
fn value(doc: &Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = find(doc, "text", name, labels)
        .unwrap_or_else(|| panic!("no {name} {labels:?} in the text format"));
    let om = find(doc, "openmetrics", name, labels)
        .unwrap_or_else(|| panic!("no {name} {labels:?} in OpenMetrics"));
    assert!(
        (text - om).abs() < 1e-9,
        "{name} {labels:?}: {text} vs {om}"
    );
    text
}

/// Every read of the history: (server, scope, outcome as the metric labels it) → count;
/// bytes by (server, source); passages by (server, kept | dropped).
#[derive(Default, Debug)]
struct FromHistory {
    reads: BTreeMap<(String, String, String), u64>,
    bytes: BTreeMap<(String, &'static str), u64>,
    passages: BTreeMap<(String, &'static str), u64>,
}

async fn history(svc: &Service) -> FromHistory {
    let res = reqwest::Client::new()
        .get(svc.url("/v1/history?limit=1000"))
        .bearer_auth(READ_TOKEN)
        .send()
        .await
        .unwrap();
    let v: Value = res.json().await.unwrap();
    let mut h = FromHistory::default();
    for r in v["records"].as_array().unwrap() {
        let server = r["server"].as_str().unwrap().to_owned();
        let hit = r["cache_hit"].as_bool().unwrap_or(false);
        let outcome = match r["outcome"].as_str().unwrap() {
            "read" if hit => "hit",
            o => o,
        };
        *h.reads
            .entry((
                server.clone(),
                r["scope"].as_str().unwrap().to_owned(),
                outcome.to_owned(),
            ))
            .or_default() += 1;
        if r["outcome"] == "read" {
            let source = if hit { "cache" } else { "server" };
            *h.bytes.entry((server.clone(), source)).or_default() += r["bytes"].as_u64().unwrap();
        }
        if r["treatment"]["kind"] == "chunked" {
            let kept = r["treatment"]["kept"].as_u64().unwrap();
            let total = r["treatment"]["total"].as_u64().unwrap();
            *h.passages.entry((server.clone(), "kept")).or_default() += kept;
            *h.passages.entry((server, "dropped")).or_default() += total - kept;
        }
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_every_doors_turns_reads_and_tool_calls() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let svc = Service::start(&config, "memory", &[]).await;
    all_connected(&svc).await;

    // Two turns through the plain API, one through the OpenAI-compatible door, one
    // through Dify's (stages only).
    let mut turns = Vec::new();
    for _ in 0..2 {
        turns.push(
            post(
                &svc,
                "/v1/turns",
                TURN_TOKEN,
                json!({"pipeline": "kb", "message": "When are refunds possible?"}),
            )
            .await,
        );
    }
    // One through the OpenAI-compatible door: the pipeline is the model.
    let completion = post(
        &svc,
        "/v1/chat/completions",
        TURN_TOKEN,
        json!({"model": "kb", "messages": [{"role": "user", "content": "When are refunds possible?"}]}),
    )
    .await;
    assert!(
        !completion["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty(),
        "{completion}"
    );
    let retrieved = post(
        &svc,
        "/retrieval",
        READ_TOKEN,
        json!({"knowledge_id": "kb", "query": "refunds",
               "retrieval_setting": {"top_k": 3, "score_threshold": 0.0}}),
    )
    .await;
    assert!(
        retrieved["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["content"].as_str().unwrap() == HANDBOOK),
        "{retrieved}"
    );
    let manuals = post(
        &svc,
        "/v1/turns",
        TURN_TOKEN,
        json!({"pipeline": "manuals", "message": "What is the gate code for visitors?"}),
    )
    .await;
    // A tool call through the API: not a turn, but a call.
    let call = post(
        &svc,
        "/v1/servers/tutorial/tools/add/call",
        ADMIN_TOKEN,
        json!({"pipeline": "kb", "arguments": {"a": 2, "b": 3}}),
    )
    .await;
    assert_eq!(call["call"]["is_error"], false, "{call}");
    // A tool the server does not list: the name is the caller's text, never a label.
    let unknown = reqwest::Client::new()
        .post(svc.url("/v1/servers/tutorial/tools/a%22b%20https%3A%2F%2Fuser%3Apass%40host/call"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "kb", "arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), reqwest::StatusCode::NOT_FOUND);

    let doc = scrape(&svc.base).await;
    assert!(
        !doc.to_string().contains("user:pass"),
        "a caller's text became a label"
    );
    assert_eq!(
        value(
            &doc,
            "hostpipe_tool_calls_total",
            &[
                ("server", "tutorial"),
                ("tool", "_unknown"),
                ("outcome", "failed")
            ]
        ),
        1.0
    );
    assert!(
        doc["text"]["content_type"]
            .as_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{}",
        doc["text"]["content_type"]
    );
    assert!(
        doc["openmetrics"]["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text; version=1.0.0"),
        "{}",
        doc["openmetrics"]["content_type"]
    );
    // Names after Prometheus's conventions: the project's prefix, counters in `_total`
    // (the parsers give a counter family's name without it), durations in seconds.
    for (name, family) in doc["text"]["families"].as_object().unwrap() {
        assert!(name.starts_with("hostpipe_"), "{name}");
        let kind = family["type"].as_str().unwrap();
        if kind == "histogram" {
            assert!(name.ends_with("_seconds"), "{name}");
        }
        if kind == "counter" {
            for s in family["samples"].as_array().unwrap() {
                assert!(s[0].as_str().unwrap().ends_with("_total"), "{s}");
            }
        }
    }
    assert_eq!(
        doc["openmetrics"]["families"]["hostpipe_turns"]["type"],
        "counter"
    );

    // Turns: every door, once each, by outcome; the tool call is not a turn.
    let kb_completed = [("pipeline", "kb"), ("outcome", "completed")];
    assert_eq!(value(&doc, "hostpipe_turns_total", &kb_completed), 3.0);
    assert_eq!(
        value(
            &doc,
            "hostpipe_turns_total",
            &[("pipeline", "kb"), ("outcome", "prepared")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &doc,
            "hostpipe_turns_total",
            &[("pipeline", "manuals"), ("outcome", "completed")]
        ),
        1.0
    );
    assert_eq!(
        value(&doc, "hostpipe_turn_duration_seconds_count", &kb_completed),
        3.0
    );
    assert_eq!(
        value(
            &doc,
            "hostpipe_turn_duration_seconds_bucket",
            &[("pipeline", "kb"), ("outcome", "completed"), ("le", "+Inf")]
        ),
        3.0
    );
    // The preview runner ran in those three turns; its own time and hostpipe's add up
    // to the turns' time.
    assert_eq!(
        value(
            &doc,
            "hostpipe_turn_model_duration_seconds_count",
            &[("pipeline", "kb")]
        ),
        3.0
    );
    let total = value(&doc, "hostpipe_turn_duration_seconds_sum", &kb_completed);
    let overhead = value(
        &doc,
        "hostpipe_turn_overhead_duration_seconds_sum",
        &kb_completed,
    );
    let model = value(
        &doc,
        "hostpipe_turn_model_duration_seconds_sum",
        &[("pipeline", "kb")],
    );
    assert!(
        overhead <= total && (overhead + model - total).abs() < 0.01,
        "{overhead} + {model} vs {total}"
    );

    // Reads: the history of the same turns, label for label.
    let h = history(&svc).await;
    for ((server, scope, outcome), n) in &h.reads {
        let labels = [
            ("server", server.as_str()),
            ("scope", scope.as_str()),
            ("outcome", outcome.as_str()),
        ];
        #[allow(clippy::cast_precision_loss)]
        let n = *n as f64;
        assert_eq!(
            value(&doc, "hostpipe_resource_reads_total", &labels),
            n,
            "{labels:?}"
        );
    }
    let reads = |server, outcome| {
        find(
            &doc,
            "text",
            "hostpipe_resource_reads_total",
            &[
                ("server", server),
                ("scope", "pipeline"),
                ("outcome", outcome),
            ],
        )
    };
    // Four turns: the secret never reached its server; the Python SDK's handbook was
    // read every time (its `ttlMs: 0`), the counter once and then came from the cache;
    // the missing URI failed every time.
    assert_eq!(reads("kb", "withheld"), Some(4.0));
    assert_eq!(reads("kb", "read"), Some(4.0));
    assert_eq!(reads("kb", "hit"), None);
    assert_eq!(reads("kb", "failed"), Some(4.0));
    assert_eq!(reads("modern", "read"), Some(1.0));
    assert_eq!(reads("modern", "hit"), Some(3.0));
    let bytes = |server, source| {
        find(
            &doc,
            "text",
            "hostpipe_resource_read_bytes_total",
            &[("server", server), ("source", source)],
        )
    };
    #[allow(clippy::cast_precision_loss)]
    let handbook = HANDBOOK.len() as f64;
    assert_eq!(bytes("kb", "server"), Some(4.0 * handbook));
    // "count 0".
    assert_eq!(bytes("modern", "server"), Some(7.0));
    assert_eq!(bytes("modern", "cache"), Some(21.0));
    assert!(find(&doc, "text", "hostpipe_resource_cache_bytes", &[]).is_some());

    // Passages: what the manuals' ranking kept and dropped, as the history says.
    for outcome in ["kept", "dropped"] {
        let n = h.passages[&("manuals".to_owned(), outcome)];
        assert!(n > 0, "{outcome}: {h:?}");
        #[allow(clippy::cast_precision_loss)]
        let n = n as f64;
        assert_eq!(
            value(
                &doc,
                "hostpipe_context_passages_total",
                &[("server", "manuals"), ("outcome", outcome)]
            ),
            n
        );
    }

    // Tokens injected against the budget: as the turns' requests say (everything fits
    // whole, so each of the three turns got the same).
    let used: Vec<u64> = turns
        .iter()
        .map(|t| t["request"]["budget"]["used_tokens"].as_u64().unwrap())
        .collect();
    assert!(used[0] > 0 && used[0] == used[1], "{used:?}");
    #[allow(clippy::cast_precision_loss)]
    let used = 3.0 * used[0] as f64;
    assert_eq!(
        value(
            &doc,
            "hostpipe_context_injected_tokens_total",
            &[("pipeline", "kb")]
        ),
        used
    );
    // Three turns of 2000; the retrieval has no budget.
    assert_eq!(
        value(
            &doc,
            "hostpipe_context_budget_tokens_total",
            &[("pipeline", "kb")]
        ),
        6000.0
    );
    assert_eq!(
        manuals["request"]["budget"]["budget_tokens"], 300,
        "{manuals}"
    );

    // The tool call, and the MCP requests behind everything.
    assert_eq!(
        value(
            &doc,
            "hostpipe_tool_calls_total",
            &[("server", "tutorial"), ("tool", "add"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &doc,
            "hostpipe_tool_call_duration_seconds_count",
            &[("server", "tutorial"), ("tool", "add")]
        ),
        1.0
    );
    let mcp = |server, method, outcome| {
        value(
            &doc,
            "hostpipe_mcp_requests_total",
            &[("server", server), ("method", method), ("outcome", outcome)],
        )
    };
    assert_eq!(mcp("tutorial", "tools/call", "ok"), 1.0);
    // The handbook four times, the missing URI four times; the counter once.
    assert_eq!(mcp("kb", "resources/read", "ok"), 4.0);
    assert_eq!(mcp("kb", "resources/read", "error"), 4.0);
    assert_eq!(mcp("modern", "resources/read", "ok"), 1.0);
    assert_eq!(
        value(
            &doc,
            "hostpipe_mcp_request_duration_seconds_count",
            &[("server", "kb"), ("method", "resources/read")]
        ),
        8.0
    );
    for s in ["kb", "modern", "tutorial", "manuals"] {
        assert_eq!(value(&doc, "hostpipe_mcp_server_up", &[("server", s)]), 1.0);
        assert_eq!(
            value(
                &doc,
                "hostpipe_mcp_server_status",
                &[("server", s), ("status", "connected")]
            ),
            1.0
        );
        assert_eq!(
            value(
                &doc,
                "hostpipe_mcp_server_status",
                &[("server", s), ("status", "failed")]
            ),
            0.0
        );
    }
    assert_eq!(value(&doc, "hostpipe_consent_questions_pending", &[]), 0.0);
    assert_eq!(
        value(&doc, "hostpipe_elicitation_questions_pending", &[]),
        0.0
    );

    // Nothing a user wrote, and no URI, is in a label.
    let raw = reqwest::get(svc.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for secret in ["refunds", "kb://", "manual://", "gate code"] {
        assert!(!raw.contains(secret), "{secret} in the exposition");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_a_listener_of_their_own_are_not_on_the_main_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "\n[serve]\nmetrics_listen = \"127.0.0.1:0\"\n");
    let svc = Service::start(&config, "memory", &[]).await;
    all_connected(&svc).await;
    let res = reqwest::get(svc.url("/metrics")).await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    // The port it picked is in the log.
    let log = svc.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("metrics listening"))
        .unwrap_or_else(|| panic!("{log}"));
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .unwrap_or_else(|| panic!("{line}"));
    let base = format!("http://{addr}");
    post(
        &svc,
        "/v1/turns",
        TURN_TOKEN,
        json!({"pipeline": "kb", "message": "When are refunds possible?"}),
    )
    .await;
    let doc = scrape(&base).await;
    assert_eq!(
        value(
            &doc,
            "hostpipe_turns_total",
            &[("pipeline", "kb"), ("outcome", "completed")]
        ),
        1.0
    );
    assert_eq!(
        value(&doc, "hostpipe_mcp_server_up", &[("server", "kb")]),
        1.0
    );
    // Only /metrics there.
    let res = reqwest::get(format!("{base}/v1/servers")).await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}
