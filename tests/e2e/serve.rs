//! `hostpipe serve`: every endpoint of the HTTP API through a real process, against the
//! demo server, `@modelcontextprotocol/server-everything` and Python SDK servers; auth
//! failures, bad bodies, consent asked and answered over HTTP, graceful shutdown, two
//! instances on one PostgreSQL store, a Python platform client, and the admin page in
//! headless Chromium.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hostpipe_tests::{ADMIN_TOKEN, Postgres, READ_TOKEN, Service, TURN_TOKEN, root};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn venv_python() -> PathBuf {
    root().join("tests/.venv/bin/python")
}

fn everything_js() -> PathBuf {
    root().join("tests/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// A config with the embedded `default` pipeline (demo server, preview runner) and a
/// `support` pipeline binding demo, server-everything, and the Python SDK's tutorial,
/// live and kb servers; `kb` reads are asked about (`ask`, 20 s).
fn write_config(dir: &Path, kb_log: &Path) -> PathBuf {
    write_config_with(dir, kb_log, "")
}

/// [`write_config`], with `extra` TOML appended.
fn write_config_with(dir: &Path, kb_log: &Path, extra: &str) -> PathBuf {
    let py = venv_python();
    let server = |script: &str| root().join("tests/servers").join(script);
    let text = format!(
        r#"{embedded}
[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[mcp_servers.everything]
command = "node"
args = [{everything:?}, "stdio"]

[mcp_servers.tutorial]
command = {py:?}
args = [{tutorial:?}]

[mcp_servers.live]
command = {py:?}
args = [{live:?}]

[mcp_servers.kb]
command = {py:?}
args = [{kb:?}]
env = {{ KB_READ_LOG = {kb_log:?} }}

[pipelines.support]
stages = ["bind_mcp_servers", "resource_mentions", "resource_context_injection", "tool_assembly"]
runner = "preview"

[pipelines.support.bind_mcp_servers]
servers = ["demo", "everything", "tutorial", "live", "kb"]

[pipelines.support.resource_context_injection]
budget_tokens = 6000

[pipelines.support.consent]
ask_timeout_ms = 20000
rules = [{{ server = "kb", host = "ask" }}, {{ server = "everything", tool = "echo", call = "deny" }}]
"#,
        embedded = hostpipe_cli::config::EMBEDDED_TOML,
        exe = hostpipe_tests::hostpipe_bin(),
        everything = everything_js(),
        tutorial = server("tutorial_server.py"),
        live = server("live_server.py"),
        kb = server("kb_server.py"),
    );
    let path = dir.join("hostpipe.toml");
    std::fs::write(&path, text + extra).unwrap();
    path
}

/// A request with `token` (none: no Authorization header) and an optional JSON body:
/// (status, JSON body or Null, headers).
async fn call(
    svc: &Service,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let client = reqwest::Client::new();
    let mut req = client
        .request(method, svc.url(path))
        .timeout(Duration::from_secs(60));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let text = res.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, value, headers)
}

async fn get(svc: &Service, path: &str) -> (StatusCode, Value) {
    let (s, v, _) = call(svc, reqwest::Method::GET, path, Some(ADMIN_TOKEN), None).await;
    (s, v)
}

async fn post(svc: &Service, path: &str, body: Value) -> (StatusCode, Value) {
    let (s, v, _) = call(
        svc,
        reqwest::Method::POST,
        path,
        Some(ADMIN_TOKEN),
        Some(body),
    )
    .await;
    (s, v)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

/// Fills an OpenAPI path template with values that route.
fn concrete(path: &str) -> String {
    path.replace("{server}", "demo")
        .replace("{pin_id}", "00000000-0000-0000-0000-000000000000")
        .replace("{id}", "default")
        .replace("{name}", "search_docs")
        .replace("{model}", "default")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_needs_the_right_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let svc = Service::start(&config, "memory", &[]).await;
    let doc: Value = serde_json::from_str(hostpipe_cli::serve::OPENAPI).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let m: reqwest::Method = method.to_uppercase().parse().unwrap();
            let url = concrete(path);
            if !path.starts_with("/v1/") {
                // The OAuth callback needs no token either; without a login waiting
                // for its `state` it answers 400 (tests/e2e/oauth.rs logs in through it).
                // Dify's door needs its key, and says so in Dify's shape
                // (tests/e2e/dify.rs checks the rest); the MCP door takes the same
                // tokens (tests/e2e/mcp_door.rs drives it).
                let (s, v, _) = call(&svc, m, &url, None, None).await;
                if path == "/retrieval" {
                    assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {v}");
                    assert_eq!(v["error_code"], 1001, "{v}");
                    continue;
                }
                let expected = if path == "/oauth/callback" {
                    StatusCode::BAD_REQUEST
                } else if path.starts_with("/mcp") {
                    StatusCode::UNAUTHORIZED
                } else {
                    StatusCode::OK
                };
                assert_eq!(s, expected, "{method} {path}");
                continue;
            }
            // No token: 401 and the RFC 6750 challenge; a documented route is never 404.
            let (s, v, h) = call(&svc, m.clone(), &url, None, None).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {v}");
            assert_eq!(code(&v), "missing_token");
            assert_eq!(h["www-authenticate"], "Bearer realm=\"hostpipe\"");
            // A wrong token, and a right token sent without `Bearer`.
            let (s, v, h) = call(
                &svc,
                m.clone(),
                &url,
                Some("not-the-token-0123456789"),
                None,
            )
            .await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}");
            assert_eq!(code(&v), "invalid_token");
            assert!(
                h["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .contains("invalid_token")
            );
            let raw = reqwest::Client::new()
                .request(m.clone(), svc.url(&url))
                .header("authorization", ADMIN_TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(raw.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
            // The read-only and turn tokens: each refused exactly where the document's
            // scope is above its own, with the scope named in the challenge.
            let rank = |scope: &str| match scope {
                "read" => 0,
                "turn" => 1,
                "admin" => 2,
                other => panic!("{method} {path}: x-hostpipe-scope `{other}`"),
            };
            let needed = op["x-hostpipe-scope"].as_str().unwrap_or_default();
            for (token, own) in [(READ_TOKEN, "read"), (TURN_TOKEN, "turn")] {
                let (s, v, h) = call(&svc, m.clone(), &url, Some(token), None).await;
                if rank(needed) > rank(own) {
                    assert_eq!(s, StatusCode::FORBIDDEN, "{method} {path} ({own}): {v}");
                    assert_eq!(code(&v), "insufficient_scope");
                    assert_eq!(
                        h["www-authenticate"].to_str().unwrap(),
                        format!(
                            "Bearer realm=\"hostpipe\", error=\"insufficient_scope\", scope=\"{needed}\""
                        )
                    );
                } else {
                    assert!(
                        s != StatusCode::FORBIDDEN && s != StatusCode::UNAUTHORIZED,
                        "{method} {path} with the {own} token: {s} {v}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 32, "every /v1 operation was checked");

    // The scheme is case-insensitive (RFC 9110 §11.1).
    let res = reqwest::Client::new()
        .get(svc.url("/v1/servers"))
        .header("authorization", format!("BEARER {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // A path that is not UTF-8: a JSON 400, like every other error.
    let (s, v) = get(&svc, "/v1/servers/%ff").await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));
    assert_eq!(
        message(&v),
        "the path: Invalid URL: Invalid UTF-8 in `server`"
    );

    // The MCP servers hostpipe started never see its tokens.
    let children: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = &stat[stat.rfind(')')? + 2..];
                    after.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(svc.pid())
        })
        .collect();
    assert_eq!(children.len(), 5, "one process per configured server");
    for pid in children {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        assert!(environ.contains("PATH="), "{pid}: {environ}");
        assert!(
            !environ.contains(ADMIN_TOKEN) && !environ.contains(READ_TOKEN),
            "{pid}"
        );
        assert!(!environ.contains("HOSTPIPE_"), "{pid}: {environ}");
    }

    // Off the map: JSON errors, not empty bodies.
    let (s, v) = get(&svc, "/v1/nothing-here").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (s, v, _) = call(
        &svc,
        reqwest::Method::PUT,
        "/v1/servers",
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );

    // The request id: the caller's is echoed, else one is made.
    let res = reqwest::Client::new()
        .get(svc.url("/healthz"))
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-request-id"], "req-42");
    let res = reqwest::get(svc.url("/")).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/html; charset=utf-8");
    assert!(
        res.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    assert_eq!(res.headers()["x-request-id"].to_str().unwrap().len(), 36);
    assert!(
        res.text()
            .await
            .unwrap()
            .contains("<title>hostpipe admin</title>")
    );

    // One structured access-log line per request.
    let log = svc.log_text();
    assert!(
        log.lines().any(|l| l.contains("hostpipe::access")
            && l.contains("method=GET")
            && l.contains("path=\"/v1/servers\"")
            && l.contains("status=200")
            && l.contains("scope=\"read\"")
            && l.contains("client=\"127.0.0.1:")),
        "{log}"
    );
    assert!(log.contains("status=401"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_resources_reads_and_completion() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let svc = Service::start(&config, "memory", &[]).await;

    let (s, v) = get(&svc, "/v1/servers").await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<&str> = v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo", "everything", "kb", "live", "tutorial"]);
    let (s, v) = get(&svc, "/v1/servers/everything").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"]["state"], "connected");
    assert_eq!(v["capabilities"]["resources"], true);
    assert_eq!(v["implementation"][0], "mcp-servers/everything");
    let (s, v) = get(&svc, "/v1/servers/nope").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_server"));
    assert_eq!(
        message(&v),
        "unknown MCP server `nope`; configured servers: demo, everything, kb, live, tutorial"
    );

    // Lists.
    let (s, v) = get(&svc, "/v1/servers/demo/resources").await;
    assert_eq!(s, StatusCode::OK);
    let handbook = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == "demo://docs/handbook.md")
        .unwrap();
    assert_eq!(handbook["title"], "Support team handbook");
    assert_eq!(handbook["mime_type"], "text/markdown");
    let (s, v) = get(&svc, "/v1/servers/demo/resource-templates").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["resource_templates"][0]["uri_template"],
        "demo://docs/{topic}"
    );
    let (s, v) = get(&svc, "/v1/servers/everything/prompts").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        v["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "simple-prompt"),
        "{v}"
    );
    let (s, v) = get(&svc, "/v1/servers/nope/resources").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_server"));
    let (s, v) = get(&svc, "/v1/servers/nope/resource-templates").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_server"));
    let (s, v) = get(&svc, "/v1/servers/nope/prompts").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_server"));

    // Reads, converted as the pipeline converts them.
    let read = |server: &str| format!("/v1/servers/{server}/resources/read");
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"uri": "demo://docs/handbook.md"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["contents"][0]["kind"], "text");
    assert_eq!(v["contents"][0]["mime_type"], "text/markdown");
    assert!(
        v["contents"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("# Acme Support Team Handbook\n")
    );
    assert_eq!(v["contents"][0]["bytes"], 3753);
    // An image for a vision model (the default gpt-4o), decoded and measured.
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"uri": "demo://images/logo.png"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["model"], json!({"name": "gpt-4o", "vision": true}));
    let image = &v["contents"][0]["image"];
    assert_eq!(v["contents"][0]["kind"], "image");
    assert_eq!(image["mime_type"], "image/png");
    assert!(image["width"].as_u64().unwrap() > 0 && image["height"].as_u64().unwrap() > 0);
    let png = base64_decode(image["data"].as_str().unwrap());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // A blob the server calls text/plain, valid UTF-8: text, as a turn has it (the read
    // result's MIME type wins over the template's; docs/configuration.md).
    let (s, v) = post(
        &svc,
        &read("everything"),
        json!({"template": "demo://resource/dynamic/blob/{resourceId}", "arguments": {"resourceId": "3"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["contents"][0]["kind"], "text", "{v}");
    assert_eq!(v["contents"][0]["mime_type"], "text/plain");
    assert!(
        v["contents"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Resource 3: This is a base64 blob created at "),
        "{v}"
    );
    // A template, expanded with its arguments.
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"template": "demo://docs/{topic}", "arguments": {"topic": "deployment.md"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["uri"], "demo://docs/deployment.md");
    assert!(v["contents"][0]["text"].as_str().unwrap().starts_with('#'));
    let (s, v) = post(
        &svc,
        &read("tutorial"),
        json!({"template": "greeting://{name}", "arguments": {"name": "a b/ç"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["uri"], "greeting://a%20b%2F%C3%A7");
    assert_eq!(v["contents"][0]["text"], "Hello, a b/ç!");
    // Mistakes, each named: the same checks as pins and turns, a 400 each, and a read's
    // hint asks for values only (a read has no turn variables).
    for (body, msg) in [
        (
            json!({"uri": "demo://docs/{topic}"}),
            "a `uri` with `{` is a template: give it as `template`, with `arguments`",
        ),
        (
            json!({"template": "demo://docs/handbook.md"}),
            "`demo://docs/handbook.md` is not a URI template (no {variable}); give it as `uri`",
        ),
        (
            json!({"template": "demo://docs/{topic}"}),
            "URI template `demo://docs/{topic}` needs `topic`: give `arguments.topic` a value",
        ),
    ] {
        let (s, v) = post(&svc, &read("demo"), body.clone()).await;
        assert_eq!(
            (s, code(&v), message(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request", msg),
            "{body}"
        );
    }
    let (s, v) = post(&svc, &read("demo"), json!({"uri": "demo://docs/nope.md"})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::NOT_FOUND, "resource_not_found"),
        "{v}"
    );
    let (s, v) = post(
        &svc,
        &read("nope"),
        json!({"uri": "demo://docs/handbook.md"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_server"));
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"template": "demo://docs/{topic}"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));
    assert!(
        message(&v).starts_with("URI template `demo://docs/{topic}` needs `topic`"),
        "{v}"
    );
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"uri": "demo://a", "template": "demo://{b}"}),
    )
    .await;
    assert_eq!(
        (s, message(&v)),
        (
            StatusCode::BAD_REQUEST,
            "give exactly one of `uri` and `template`"
        )
    );
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"url": "demo://docs/handbook.md"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "invalid_body"));
    assert!(message(&v).contains("unknown field `url`"), "{v}");
    let (s, v) = post(
        &svc,
        &read("demo"),
        json!({"uri": "demo://docs/handbook.md", "pipeline": "nope"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_pipeline"));
    // Not JSON, and too large.
    let res = reqwest::Client::new()
        .post(svc.url(&read("demo")))
        .bearer_auth(ADMIN_TOKEN)
        .body("uri=demo://docs/handbook.md")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(code(&res.json().await.unwrap()), "unsupported_media_type");
    let big = json!({"uri": "x".repeat(2 << 20)});
    let (s, v) = post(&svc, &read("demo"), big).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    assert_eq!(
        message(&v),
        "the body is over 1048576 bytes ([serve] max_body_bytes)"
    );
    let (s, v) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "default", "message": "y".repeat(3 << 20)}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );

    // Completion, in the MCP request shape.
    let (s, v) = post(
        &svc,
        "/v1/servers/demo/completion",
        json!({"ref": {"type": "ref/resource", "uri": "demo://docs/{topic}"}, "argument": {"name": "topic", "value": "dep"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["completion"]["values"], json!(["deployment"]));
    assert_eq!(v["completion"]["hasMore"], false);
    let (s, v) = post(
        &svc,
        "/v1/servers/demo/completion",
        json!({"ref": {"type": "ref/tool", "name": "x"}, "argument": {"name": "a"}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_body"),
        "{v}"
    );
    // The server refuses an unknown prompt: its -32602 is not a missing resource.
    let (s, v) = post(
        &svc,
        "/v1/servers/everything/completion",
        json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a"}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_params"),
        "{v}"
    );

    // Pipelines.
    let (s, v) = get(&svc, "/v1/pipelines").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["pipelines"][0]["id"], "default");
    assert_eq!(v["pipelines"][0]["runner"], "preview");
    assert_eq!(
        v["pipelines"][1]["bound_servers"],
        json!(["demo", "everything", "tutorial", "live", "kb"])
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    let out = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_turns_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let store = hostpipe_store::sqlite_url(&dir.path().join("store.db"));
    let svc = Service::start(&config, &store, &[]).await;

    // Pin a template at conversation scope, and a URI to the pipeline.
    let (s, pin) = post(
        &svc,
        "/v1/conversations/chat-7/attachments",
        json!({"server": "tutorial", "template": "greeting://{name}", "arguments": {"name": {"var": "who"}}}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{pin}");
    assert_eq!(pin["scope"], "conversation");
    assert_eq!(pin["owner"], "chat-7");
    assert_eq!(pin["template"], "greeting://{name}");
    assert_eq!(
        pin["arguments"],
        json!({"name": {"var": "who", "default": null}})
    );
    assert_eq!(pin["expires_at_ms"], Value::Null);
    let (s, ppin) = post(
        &svc,
        "/v1/pipelines/support/attachments",
        json!({"server": "everything", "uri": "demo://resource/static/document/features.md", "expires_in_ms": 3_600_000}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{ppin}");
    assert!(ppin["expires_at_ms"].as_i64().unwrap() > ppin["created_at_ms"].as_i64().unwrap());
    let (s, v) = get(&svc, "/v1/conversations/chat-7/attachments").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["pins"][0]["id"], pin["id"]);
    let (s, v) = get(&svc, "/v1/pipelines/default/attachments").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["pins"], json!([]));
    assert_eq!(
        v["configured"].as_array().unwrap().len(),
        4,
        "the config's attachments are listed"
    );

    // Every owner's pins, oldest first; by scope; in pages.
    let (s, v) = get(&svc, "/v1/pins").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ids = |v: &Value| -> Vec<Value> {
        v["pins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].clone())
            .collect()
    };
    assert_eq!(ids(&v), [pin["id"].clone(), ppin["id"].clone()]);
    assert_eq!(v["pins"][1]["scope"], "pipeline");
    assert_eq!(v["pins"][1]["owner"], "support");
    assert_eq!(v["next_offset"], Value::Null);
    let (_, v) = get(&svc, "/v1/pins?scope=pipeline").await;
    assert_eq!(ids(&v), [ppin["id"].clone()]);
    let (_, v) = get(&svc, "/v1/pins?limit=1").await;
    assert_eq!(
        (ids(&v), &v["next_offset"]),
        (vec![pin["id"].clone()], &json!(1))
    );
    let (_, v) = get(&svc, "/v1/pins?limit=1&offset=1").await;
    assert_eq!(
        (ids(&v), &v["next_offset"]),
        (vec![ppin["id"].clone()], &Value::Null)
    );
    let (s, v) = get(&svc, "/v1/pins?scope=message").await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{v}"
    );
    assert!(message(&v).contains("unknown variant `message`"), "{v}");
    let (s, v) = get(&svc, "/v1/pins?limit=0").await;
    assert_eq!(
        (s, message(&v)),
        (StatusCode::BAD_REQUEST, "`limit` is 0; give 1 to 1000")
    );

    // Pin mistakes.
    let pins = "/v1/conversations/chat-7/attachments";
    for (body, status, code_, msg) in [
        (
            json!({"server": "nope", "uri": "a://b"}),
            StatusCode::NOT_FOUND,
            "unknown_server",
            "unknown MCP server `nope`; configured servers: demo, everything, kb, live, tutorial",
        ),
        (
            json!({"server": "demo", "uri": "handbook.md"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "`handbook.md` is not a URI (no scheme, e.g. demo://docs/handbook.md)",
        ),
        (
            json!({"server": "demo", "template": "demo://docs/{topic}", "arguments": {"topc": "x"}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "URI template `demo://docs/{topic}` has no variable `topc`; its variables: topic",
        ),
        (
            json!({"server": "demo", "uri": "demo://docs/handbook.md", "expires_in_ms": 0}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "`expires_in_ms` is 0: a pin that expires at once never applies",
        ),
        (
            json!({"server": "demo", "uri": "demo://docs/{topic}", "arguments": {"topic": "x"}}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "a `uri` with `{` is a template: give it as `template`, with `arguments`",
        ),
        // What the server does not have is refused while the server can tell.
        (
            json!({"server": "demo", "uri": "demo://docs/nowhere.md"}),
            StatusCode::BAD_REQUEST,
            "unknown_resource",
            "server `demo` has no resource `demo://docs/nowhere.md` (it answered: not found)",
        ),
        (
            json!({"server": "demo", "template": "demo://notes/{topic}", "arguments": {"topic": "x"}}),
            StatusCode::BAD_REQUEST,
            "unknown_resource",
            "server `demo` lists no resource template `demo://notes/{topic}`; its templates: demo://docs/{topic}",
        ),
    ] {
        let (s, v) = post(&svc, pins, body.clone()).await;
        assert_eq!((s, code(&v), message(&v)), (status, code_, msg), "{body}");
    }
    // A URI no listing names but the server reads (a template's) is fine.
    let (s, v) = post(
        &svc,
        pins,
        json!({"server": "demo", "uri": "demo://docs/handbook.md", "expires_in_ms": 1000}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert!(v.get("warnings").is_none(), "{v}");
    let (s, v) = post(
        &svc,
        "/v1/pipelines/default/attachments",
        json!({"server": "kb", "uri": "kb://public/handbook"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::CONFLICT, "server_not_bound"));
    assert!(
        message(&v)
            .starts_with("pipeline `default` does not bind MCP server `kb` (it binds: demo)"),
        "{v}"
    );
    let (s, v) = post(
        &svc,
        "/v1/pipelines/nope/attachments",
        json!({"server": "demo", "uri": "demo://docs/handbook.md"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_pipeline"));
    let (s, v) = get(&svc, "/v1/pipelines/nope/attachments").await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_pipeline"));

    // A turn in chat-7 gets both pins and a message attachment; the preview shows them.
    let (s, turn) = post(
        &svc,
        "/v1/turns",
        json!({
            "pipeline": "support",
            "message": "hello",
            "conversation_id": "chat-7",
            "variables": {"who": "Ada"},
            "attachments": [{"server": "demo", "uri": "demo://docs/handbook.md"}],
        }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    assert_eq!(turn["failed"], false);
    assert_eq!(turn["runner"], "preview");
    let blocks: Vec<(&str, &str)> = turn["request"]["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["uri"].as_str().unwrap(), b["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(
        blocks,
        [
            ("demo://docs/handbook.md", "message"),
            ("greeting://Ada", "conversation"),
            ("demo://resource/static/document/features.md", "pipeline"),
        ]
    );
    assert!(
        turn["request"]["fenced_context"]
            .as_str()
            .unwrap()
            .contains("Hello, Ada!")
    );
    let turn_id = turn["turn_id"].as_str().unwrap();

    // The history: filters and pages.
    let (s, h) = get(&svc, "/v1/history?conversation=chat-7").await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let records = h["records"].as_array().unwrap();
    assert_eq!(records.len(), 3);
    assert!(
        records
            .iter()
            .all(|r| r["turn_id"] == turn_id && r["pipeline"] == "support")
    );
    assert_eq!(h["next_offset"], Value::Null);
    let (_, page) = get(&svc, "/v1/history?conversation=chat-7&limit=2").await;
    assert_eq!(page["records"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_offset"], 2);
    let (_, rest) = get(&svc, "/v1/history?conversation=chat-7&limit=2&offset=2").await;
    assert_eq!(rest["records"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_offset"], Value::Null);
    let (_, by_server) = get(&svc, "/v1/history?server=tutorial").await;
    assert_eq!(by_server["records"][0]["uri"], "greeting://Ada");
    assert_eq!(by_server["records"].as_array().unwrap().len(), 1);
    let (_, none) = get(&svc, "/v1/history?pipeline=default").await;
    assert_eq!(none["records"], json!([]));
    let (_, later) = get(&svc, "/v1/history?since=2999-01-01T00:00:00Z").await;
    assert_eq!(later["records"], json!([]));
    let (_, earlier) = get(&svc, "/v1/history?until=2000-01-01T00:00:00Z").await;
    assert_eq!(earlier["records"], json!([]));

    // A failed read is in the history, and `errors=true` shows exactly it.
    let (s, turn) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "support", "message": "x", "conversation_id": "chat-8",
               "attachments": [{"server": "demo", "uri": "demo://docs/missing.md"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    let (_, errors) = get(&svc, "/v1/history?errors=true").await;
    let errors = errors["records"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["uri"], "demo://docs/missing.md");
    assert_eq!(errors[0]["conversation"], "chat-8");
    // Not found: -32602 from a 2026-07-28 server such as the demo (-32002 before).
    assert!(
        errors[0]["error"].as_str().unwrap().contains("-32602"),
        "{errors:?}"
    );

    for (query, msg) in [
        ("limit=0", "`limit` is 0; give 1 to 1000"),
        ("limit=1001", "`limit` is 1001; give 1 to 1000"),
        (
            "since=yesterday",
            "`since`: `yesterday` is not an RFC 3339 time (2026-11-30T09:00:00Z): premature end of input",
        ),
        (
            "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "`since` is not before `until`: no turn can match",
        ),
    ] {
        let (s, v) = get(&svc, &format!("/v1/history?{query}")).await;
        assert_eq!((s, message(&v)), (StatusCode::BAD_REQUEST, msg), "{query}");
    }
    let (s, v) = get(&svc, "/v1/history?conversaton=chat-7").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("unknown field `conversaton`"), "{v}");

    // Detach by id; twice is a 404.
    let path = format!(
        "/v1/conversations/chat-7/attachments/{}",
        pin["id"].as_str().unwrap()
    );
    let (s, _, _) = call(
        &svc,
        reqwest::Method::DELETE,
        &path,
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v, _) = call(
        &svc,
        reqwest::Method::DELETE,
        &path,
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "pin_not_found"));
    // A pipeline pin is not removed through a conversation.
    let wrong = format!(
        "/v1/conversations/chat-7/attachments/{}",
        ppin["id"].as_str().unwrap()
    );
    let (s, _, _) = call(
        &svc,
        reqwest::Method::DELETE,
        &wrong,
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let right = format!(
        "/v1/pipelines/support/attachments/{}",
        ppin["id"].as_str().unwrap()
    );
    let (s, _, _) = call(
        &svc,
        reqwest::Method::DELETE,
        &right,
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    // Turn mistakes.
    for (body, status, code_, msg) in [
        (
            json!({"pipeline": "nope", "message": "x"}),
            StatusCode::NOT_FOUND,
            "unknown_pipeline",
            "no pipeline `nope`; pipelines: default, support",
        ),
        (
            json!({"pipeline": "default", "message": "  "}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "`message` is empty",
        ),
        (
            json!({"pipeline": "default", "message": "x", "runner": "dify"}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "pipeline `default` runs with runner `preview`; a turn may ask for that one or `preview`, not `dify` (set `runner` in [pipelines.default])",
        ),
        (
            json!({"pipeline": "default", "message": "x", "attachments": [{"server": "nope", "uri": "a://b"}]}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "attachments[0]: unknown MCP server `nope`; configured servers: demo, everything, kb, live, tutorial",
        ),
        (
            json!({"pipeline": "default", "message": "x", "conversation_id": ""}),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "`conversation_id` must be 1 to 1024 bytes, not blank",
        ),
        (
            json!({"pipeline": "default"}),
            StatusCode::BAD_REQUEST,
            "invalid_body",
            "",
        ),
    ] {
        let (s, v) = post(&svc, "/v1/turns", body.clone()).await;
        assert_eq!((s, code(&v)), (status, code_), "{body}: {v}");
        if !msg.is_empty() {
            assert_eq!(message(&v), msg);
        }
    }
}

/// Reads one server-sent event stream to its end: (event, data) pairs.
async fn sse(
    res: reqwest::Response,
    mut on_event: impl FnMut(&str, &Value),
) -> Vec<(String, Value)> {
    use futures_util::StreamExt as _;
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut stream = res.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = stream.next().await {
        buf.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if name.is_empty() {
                continue; // a keep-alive comment
            }
            let value: Value = serde_json::from_str(&data).unwrap();
            on_event(&name, &value);
            events.push((name, value));
        }
    }
    events
}

/// Runs one streamed turn on `svc` and reads its events to the end, answering each
/// `consent_request` with `answer` through `POST /v1/consent-requests/{id}` (`None`:
/// leaves them unanswered). The body streams with `"stream": true`; without that key the
/// request asks for `Accept: text/event-stream` instead.
async fn streamed_turn(svc: &Service, body: &Value, answer: Option<&str>) -> Vec<(String, Value)> {
    let mut req = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(body);
    if body.get("stream").is_none() {
        req = req.header("accept", "text/event-stream");
    }
    let res = req.send().await.unwrap();
    let (base, answer) = (svc.base.clone(), answer.map(str::to_owned));
    sse(res, move |name, data| {
        if let (Some(answer), "consent_request") = (&answer, name) {
            let url = format!(
                "{base}/v1/consent-requests/{}",
                data["id"].as_str().unwrap()
            );
            let answer = answer.clone();
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({ "answer": answer }))
                    .send()
                    .await
                    .unwrap();
            });
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_asks_for_consent_and_the_answer_comes_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let kb_log = dir.path().join("kb.log");
    let config = write_config(dir.path(), &kb_log);
    let svc = Service::start(&config, "memory", &[]).await;
    let client = reqwest::Client::new();
    let turn = |uri: &str| {
        json!({"pipeline": "support", "message": "hours?", "conversation_id": "c1", "stream": true,
               "attachments": [{"server": "kb", "uri": uri}]})
    };

    // Allowed once: the stream carries the question; the answer goes to its endpoint.
    let res = client
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&turn("kb://public/handbook"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let (answers_tx, mut answers_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let answering = tokio::spawn({
        let base = svc.base.clone();
        async move {
            let mut results = Vec::new();
            while let Some(id) = answers_rx.recv().await {
                // The question is also listed, with its turn.
                let listed: Value = reqwest::Client::new()
                    .get(format!("{base}/v1/consent-requests"))
                    .bearer_auth(READ_TOKEN)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                results.push(listed["consent_requests"][0]["id"] == id.as_str());
                let res = reqwest::Client::new()
                    .post(format!("{base}/v1/consent-requests/{id}"))
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({"answer": "allow_once"}))
                    .send()
                    .await
                    .unwrap();
                results.push(res.status() == StatusCode::NO_CONTENT);
            }
            results
        }
    });
    let events = sse(res, |name, data| {
        if name == "consent_request" {
            answers_tx
                .send(data["id"].as_str().unwrap().to_owned())
                .unwrap();
        }
    })
    .await;
    drop(answers_tx);
    assert_eq!(answering.await.unwrap(), [true, true]);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "turn",
            "consent_request",
            "message_completed",
            "run_completed",
            "done"
        ]
    );
    let (_, started) = &events[0];
    let (_, asked) = &events[1];
    let (_, done) = &events[4];
    assert_eq!(asked["turn_id"], started["turn_id"]);
    assert_eq!(asked["server"], "kb");
    assert_eq!(asked["uri"], "kb://public/handbook");
    assert_eq!(asked["origin"], "host");
    assert_eq!(asked["conversation"], "c1");
    assert_eq!(done["turn_id"], started["turn_id"]);
    assert!(
        done["request"]["fenced_context"]
            .as_str()
            .unwrap()
            .contains("Support hours are 9 to 5")
    );
    let read = &done["request"]["reads"][0];
    assert_eq!(
        read["consent"],
        "asked (rules[0] (server kb)): allowed once"
    );

    // Denied: nothing reaches the server; the model is told it was withheld.
    let events = streamed_turn(
        &svc,
        &json!({"pipeline": "support", "message": "plan?", "attachments": [{"server": "kb", "uri": "kb://secret/plan"}]}),
        Some("deny"),
    )
    .await;
    let (name, done) = events.last().unwrap();
    assert_eq!(name, "done");
    assert_eq!(
        done["request"]["reads"][0]["consent"],
        "asked (rules[0] (server kb)): denied"
    );
    assert!(
        done["request"]["fenced_context"]
            .as_str()
            .unwrap()
            .contains("withheld")
    );
    assert_eq!(
        std::fs::read_to_string(&kb_log).unwrap(),
        "kb://public/handbook\n",
        "the denied read never reached kb"
    );

    // Answer mistakes.
    let (s, v) = post(
        &svc,
        "/v1/consent-requests/00000000-0000-0000-0000-000000000000",
        json!({"answer": "allow_once"}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::NOT_FOUND, "consent_request_not_pending")
    );
    let (s, v) = post(&svc, "/v1/consent-requests/x", json!({"answer": "yes"})).await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "invalid_body"));
    assert!(
        message(&v).contains(
            "unknown variant `yes`, expected one of `allow_once`, `allow_conversation`, `deny`"
        ),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_running_turn_finish() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let mut svc = Service::start(&config, "memory", &[]).await;
    let client = reqwest::Client::new();

    // A caller that gives up does not stop the turn: its read reaches the history, and
    // the access log says the client left (499).
    let gave_up = client
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .timeout(Duration::from_millis(300))
        .json(
            &json!({"pipeline": "support", "message": "slow", "conversation_id": "left",
                      "attachments": [{"server": "live", "uri": "live://sleep/1000"}]}),
        )
        .send()
        .await;
    assert!(gave_up.unwrap_err().is_timeout());
    hostpipe_tests::eventually(
        "the abandoned turn's read in the history",
        Duration::from_secs(10),
        || svc.log_text().contains("turn finished"),
    )
    .await;
    let (_, history) = get(&svc, "/v1/history?conversation=left").await;
    assert_eq!(history["records"][0]["uri"], "live://sleep/1000");
    assert!(
        svc.log_text()
            .lines()
            .any(|l| l.contains("path=\"/v1/turns\"")
                && l.contains("status=499")
                && l.contains("scope=\"admin\""))
    );

    let request = client
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "support", "message": "slow", "attachments": [{"server": "live", "uri": "live://sleep/1500"}]}))
        .send();
    let turn = tokio::spawn(request);
    // The turn is running (its read takes 1.5 s) when the signal comes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    svc.terminate();
    let res = turn.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let doc: Value = res.json().await.unwrap();
    assert_eq!(doc["failed"], false);
    assert_eq!(doc["request"]["reads"][0]["uri"], "live://sleep/1500");
    assert_eq!(doc["request"]["reads"][0]["error"], Value::Null);
    assert_eq!(svc.wait(Duration::from_secs(30)).await, Some(0));
    let log = svc.log_text();
    assert!(
        log.contains("shutting down: no new connections; running turns finish"),
        "{log}"
    );
    assert!(log.contains("running_turns=1"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_and_turns_end_at_their_timeouts() {
    // A model that takes 30 s to answer (an OpenAI-compatible endpoint, wiremock).
    let model = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&model)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        r#"
[serve]
request_timeout_ms = 700
turn_timeout_ms = 900

[pipelines.slowmodel]
runner = "local"
[pipelines.slowmodel.local]
base_url = "{}/v1"
model = "m"
[pipelines.slowmodel.bind_mcp_servers]
servers = ["demo", "live"]
"#,
        model.uri()
    );
    let config = write_config_with(dir.path(), &dir.path().join("kb.log"), &extra);
    let svc = Service::start(&config, "memory", &[]).await;
    let started = std::time::Instant::now();
    let (s, v) = post(
        &svc,
        "/v1/servers/live/resources/read",
        json!({"uri": "live://sleep/5000"}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::GATEWAY_TIMEOUT, "request_timeout")
    );
    assert_eq!(
        message(&v),
        "no answer within 700 ms ([serve] request_timeout_ms)"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    // A body that trickles in is cut off at the same bound, for turns too.
    {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = svc.base.trim_start_matches("http://").to_owned();
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /v1/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"pipeline\""
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut answer))
            .await
            .expect("answered and closed within 5 s")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"body_timeout\""), "{answer}");
    }
    // A slow read in a turn is dropped at the turn's deadline; the turn goes on with a
    // note, and the history has the read.
    let (s, v) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "support", "message": "slow", "conversation_id": "slow-read",
               "attachments": [{"server": "live", "uri": "live://sleep/5000"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let read = &v["request"]["reads"][0];
    assert!(
        read["error"]
            .as_str()
            .unwrap()
            .starts_with("dropped: the turn's deadline passed after"),
        "{read}"
    );
    let (_, history) = get(&svc, "/v1/history?conversation=slow-read").await;
    assert_eq!(history["records"][0]["uri"], "live://sleep/5000");

    // A slow model is stopped at the deadline: 504, and the turn's reads are kept.
    let slow_turn = json!({"pipeline": "slowmodel", "message": "slow", "conversation_id": "slow-model",
                           "attachments": [{"server": "demo", "uri": "demo://docs/handbook.md"}]});
    let started = std::time::Instant::now();
    let (s, v) = post(&svc, "/v1/turns", slow_turn.clone()).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::GATEWAY_TIMEOUT, "turn_timeout"),
        "{v}"
    );
    assert!(
        message(&v).ends_with(
            "did not finish within 900 ms ([serve] turn_timeout_ms); its reads so far are in the history"
        ),
        "{v}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let (_, history) = get(&svc, "/v1/history?conversation=slow-model").await;
    assert_eq!(history["records"][0]["uri"], "demo://docs/handbook.md");
    assert_eq!(history["records"][0]["error"], Value::Null);
    // Streamed: the stream ends with an `error` event.
    let mut streamed = slow_turn;
    streamed["stream"] = json!(true);
    let events = streamed_turn(&svc, &streamed, None).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["turn", "error"]);
    assert_eq!(events[1].1["error"]["code"], "turn_timeout");

    // The same pipeline with the preview runner for one turn: the pipeline runs its
    // stages and ends in `preview` instead of the slow model, which gets no request.
    let asked = model.received_requests().await.unwrap().len();
    let (s, v) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "slowmodel", "message": "slow", "runner": "preview",
               "attachments": [{"server": "demo", "uri": "demo://docs/handbook.md"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["runner"].as_str(), v["status"].as_str()),
        (Some("preview"), Some("completed"))
    );
    assert_eq!(
        v["request"]["context"][0]["uri"], "demo://docs/handbook.md",
        "{v}"
    );
    assert_eq!(model.received_requests().await.unwrap().len(), asked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_the_shutdown_timeout_ends_with_shutting_down() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(
        dir.path(),
        &dir.path().join("kb.log"),
        "\n[serve]\nshutdown_timeout_ms = 500\n",
    );
    let mut svc = Service::start(&config, "memory", &[]).await;
    let request = reqwest::Client::new()
        .post(svc.url("/v1/turns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"pipeline": "support", "message": "slow",
                      "attachments": [{"server": "live", "uri": "live://sleep/8000"}]}))
        .send();
    let turn = tokio::spawn(request);
    tokio::time::sleep(Duration::from_millis(500)).await;
    svc.terminate();
    let res = turn.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = res.json().await.unwrap();
    assert_eq!(code(&v), "shutting_down");
    assert_eq!(svc.wait(Duration::from_secs(20)).await, Some(0));
    let log = svc.log_text();
    assert!(
        log.contains("turn stopped before it finished; its reads are not in the history"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_platform_lists_and_reads_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let svc = Service::start(&config, "memory", &[]).await;
    let out = tokio::process::Command::new(venv_python())
        .arg(root().join("tests/clients/platform_client.py"))
        .arg(&svc.base)
        .arg("tutorial")
        .env("HOSTPIPE_READ_TOKEN", READ_TOKEN)
        .env("HOSTPIPE_OPENAPI", root().join("docs/openapi.json"))
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["server"]["status"]["state"], "connected");
    assert_eq!(doc["server"]["implementation"][0], "tutorial");
    assert_eq!(doc["resources"], json!(["config://settings"]));
    assert_eq!(
        doc["resource_templates"],
        json!([
            "greeting://{name}",
            "user://{id}",
            "files://docs/{name}/meta",
            "files://raw/{+path}"
        ])
    );
    assert_eq!(doc["read"]["mime_type"], "application/json");
    assert_eq!(doc["read"]["kind"], "text");
    assert_eq!(
        doc["read"]["text"],
        r#"{"theme": "dark", "language": "en", "features": {"beta": false, "max_upload_mb": 25}}"#
    );
    assert_eq!(doc["greeting"], "Hello, Grace Hopper!");
    // A read-only token cannot run a turn.
    assert_eq!(doc["turn_status"], 403);
    assert_eq!(doc["turn_error"], "insufficient_scope");
    assert_eq!(doc["unknown_server"], "unknown_server");
    assert_eq!(doc["history_records"], 0);
    // Every answer matched the schema docs/openapi.json gives for it.
    assert_eq!(doc["openapi_checked"], 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_postgres_store() {
    let pg = Postgres::start();
    let url = pg.database("serve_shared");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &dir.path().join("kb.log"));
    let a = Service::start(&config, &url, &[]).await;
    let b = Service::start(&config, &url, &[]).await;
    // Pinned through A, read by a turn on B, seen in A's history.
    let (s, pin) = post(
        &a,
        "/v1/conversations/shared/attachments",
        json!({"server": "demo", "uri": "demo://docs/deployment.md"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{pin}");
    let (_, listed) = get(&b, "/v1/conversations/shared/attachments").await;
    assert_eq!(listed["pins"][0]["id"], pin["id"]);
    let (s, turn) = post(
        &b,
        "/v1/turns",
        json!({"pipeline": "support", "message": "deploy?", "conversation_id": "shared"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    assert_eq!(
        turn["request"]["context"][0]["uri"], "demo://docs/deployment.md",
        "{turn}"
    );
    let (_, history) = get(&a, "/v1/history?conversation=shared").await;
    assert_eq!(history["records"][0]["turn_id"], turn["turn_id"]);
    assert_eq!(history["records"][0]["uri"], "demo://docs/deployment.md");
    // Detached on B, gone for A.
    let path = format!(
        "/v1/conversations/shared/attachments/{}",
        pin["id"].as_str().unwrap()
    );
    let (s, _, _) = call(&b, reqwest::Method::DELETE, &path, Some(ADMIN_TOKEN), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, listed) = get(&a, "/v1/conversations/shared/attachments").await;
    assert_eq!(listed["pins"], json!([]));
    let (s, ready) = get(&a, "/readyz").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(ready["store"]["ok"], true);

    // "Allow for this conversation", answered on A, holds on B: grants are in the store.
    let turn = json!({"pipeline": "support", "message": "hours?", "conversation_id": "shared",
                      "stream": true, "attachments": [{"server": "kb", "uri": "kb://public/handbook"}]});
    let events = streamed_turn(&a, &turn, Some("allow_conversation")).await;
    let (_, done) = events.last().unwrap();
    assert_eq!(
        done["request"]["reads"][0]["consent"],
        "asked (rules[0] (server kb)): allowed for the conversation"
    );
    let mut on_b = turn;
    on_b["stream"] = json!(false);
    let (s, done) = post(&b, "/v1/turns", on_b).await;
    assert_eq!(s, StatusCode::OK, "{done}");
    assert_eq!(
        done["request"]["reads"][0]["consent"],
        "allowed: granted earlier for this conversation (rules[0] (server kb) asks)"
    );
}

/// The cells of one history row (conversation onwards) as strings.
fn cells(row: &Value) -> Vec<&str> {
    row.as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect()
}

/// The admin page in Chromium (tests/browser/admin.mjs says what it does): the values it
/// saw on the page, and what the API says afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_in_chromium() {
    use hostpipe_tests::openai_api::{ChatCompletions, answer, tool_call};
    // The model of pipeline `agent`: reads a resource, calls a tool, answers.
    let model = wiremock::MockServer::start().await;
    let script = ChatCompletions::new(vec![
        tool_call(
            "m1",
            "read_resource",
            r#"{"server": "demo", "uri": "demo://docs/handbook.md"}"#,
        ),
        tool_call("m2", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
        answer("done"),
    ]);
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(script.clone())
        .mount(&model)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let agent = format!(
        r#"
[pipelines.agent]
stages = ["bind_mcp_servers", "resource_context_injection", "tool_assembly"]
runner = "local"
[pipelines.agent.local]
base_url = "{}/v1"
model = "m"
stream = false
[pipelines.agent.bind_mcp_servers]
servers = ["demo", "everything"]
"#,
        model.uri()
    );
    let config = write_config_with(dir.path(), &dir.path().join("kb.log"), &agent);
    let store = hostpipe_store::sqlite_url(&dir.path().join("store.db"));
    let svc = Service::start(&config, &store, &[]).await;
    let shot = dir.path().join("admin.png");
    // A call the policy withholds (rules[1]), for the page's tool call table.
    let (s, v) = post(
        &svc,
        "/v1/servers/everything/tools/echo/call",
        json!({"pipeline": "support", "conversation_id": "browser-1", "arguments": {"message": "hi"}}),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(code(&v), "tool_call_withheld");
    let out = tokio::process::Command::new(hostpipe_tests::node22())
        .arg(root().join("tests/browser/admin.mjs"))
        .arg(&svc.base)
        .arg(&shot)
        .env("HOSTPIPE_TOKEN", ADMIN_TOKEN)
        .current_dir(root().join("tests"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        svc.log_text()
    );
    if let Ok(keep) = std::env::var("HOSTPIPE_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let doc: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(
        doc["preview"]
            .as_str()
            .unwrap()
            .starts_with("# Everything Server"),
        "{doc}"
    );
    assert!(
        doc["attached"]
            .as_str()
            .unwrap()
            .starts_with("attached to conversation browser-1 (pin ")
    );
    // Reads: time, conversation, pipeline, server, resource, scope, origin, tokens,
    // treatment, consent, error.
    assert_eq!(
        doc["history_row"][4],
        "demo://resource/static/document/features.md"
    );
    assert_eq!(doc["history_row"][1], "browser-1");
    assert_eq!(doc["history_row"][5], "conversation");
    assert_eq!(doc["history_row"][6], "host");
    assert_eq!(doc["error_row_class"], "error");
    // The tool calls beside the reads: time, conversation, pipeline, server, tool,
    // origin, arguments, tokens, consent, error.
    let row: Vec<&str> = cells(&doc["tool_row"]);
    assert_eq!(
        row[1..8],
        [
            "browser-1",
            "support",
            "everything",
            "get-sum",
            "api",
            r#"{"a":1,"b":2}"#,
            "12"
        ]
    );
    // "The sum of 1 and 2 is 3." is 12 tokens of o200k_base.
    assert_eq!(row[8], "allowed by the default for read-only tools");
    assert_eq!(doc["withheld_row_class"], "error");

    // server-everything's tools (the elicitation ones: hostpipe declared the capability)
    // and prompts, as listed on the page.
    let tools: Vec<&str> = cells(&doc["tools"]);
    for t in ["echo", "get-sum", "trigger-elicitation-request"] {
        assert!(tools.contains(&t), "{tools:?}");
    }
    assert_eq!(doc["get_sum_badges"], json!(["read-only"]));
    let prompts: Vec<&str> = cells(&doc["prompts"]);
    // Name, arguments (* required) and title.
    assert!(
        prompts.contains(&"simple-prompt() Simple Prompt"),
        "{prompts:?}"
    );
    assert!(
        prompts.contains(&"args-prompt(city*, state) Arguments Prompt"),
        "{prompts:?}"
    );

    // The consent question of the page's turn, answered on the page.
    assert_eq!(doc["consent_uri"], "kb://public/handbook");
    assert_eq!(
        doc["consent_buttons"],
        json!(["Allow once", "Allow in this conversation", "Deny"])
    );
    assert_eq!(
        doc["turn_status_while_asked"],
        "running… (answer any question above)"
    );
    assert!(
        doc["consent_reply"]
            .as_str()
            .unwrap()
            .contains("Support hours are 9 to 5"),
        "{doc}"
    );
    assert_eq!(doc["consent_cards_left"], 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("kb.log")).unwrap(),
        "kb://public/handbook\nkb://public/handbook\n",
        "read once by the preview, once by the allowed turn"
    );

    // The elicitation of the page's tool call: a form, a refused answer, an accepted one.
    assert_eq!(
        doc["question_message"],
        "Please provide inputs for the following fields:"
    );
    let fields: Vec<&str> = cells(&doc["question_fields"]);
    for f in ["name", "check", "integer", "titledMultipleSelectEnum"] {
        assert!(fields.contains(&f), "{fields:?}");
    }
    let invalid = doc["invalid_answer"].as_str().unwrap();
    assert!(invalid.contains("`name`: is required"), "{invalid}");
    assert!(invalid.ends_with("(invalid_content)"), "{invalid}");
    let said = doc["tool_result"].as_str().unwrap();
    assert!(said.contains("- Name: Ann"), "{said}");
    // The form's defaults went with it.
    assert!(said.contains("- Favorite Integer: 42"), "{said}");

    // The history of browser-2 (the page's turn and tool call) and browser-3 (the model's
    // read and call): the origin column says who chose each.
    let reads2 = &doc["browser2"]["reads"];
    assert_eq!(reads2.as_array().unwrap().len(), 1, "{reads2}");
    let read = cells(&reads2[0]);
    assert_eq!(
        read[..6],
        [
            "browser-2",
            "support",
            "kb",
            "kb://public/handbook",
            "conversation",
            "host"
        ]
    );
    assert_eq!(read[8], "asked (rules[0] (server kb)): allowed once");
    let calls2 = &doc["browser2"]["calls"];
    let call = cells(&calls2[0]);
    assert_eq!(
        call[..5],
        [
            "browser-2",
            "support",
            "everything",
            "trigger-elicitation-request",
            "api"
        ],
        "{calls2}"
    );
    let reads3 = &doc["browser3"]["reads"];
    let read = cells(&reads3[0]);
    assert_eq!(
        read[..6],
        [
            "browser-3",
            "agent",
            "demo",
            "demo://docs/handbook.md",
            "-",
            "model"
        ],
        "{reads3}"
    );
    let calls3: Vec<(String, String)> = doc["browser3"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[3].as_str().unwrap().to_owned(),
                r[4].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        calls3.contains(&("get-sum".into(), "model".into())),
        "{calls3:?}"
    );
    assert_eq!(
        script.requests().len(),
        3,
        "the model was asked three times"
    );

    // Pins of both scopes, listed, filtered and removed on the page.
    let mut pins: Vec<Vec<&str>> = doc["pins_listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(cells)
        .collect();
    pins.sort();
    assert_eq!(
        pins,
        [
            vec![
                "conversation",
                "browser-1",
                "everything",
                "demo://resource/static/document/features.md"
            ],
            vec!["conversation", "browser-2", "kb", "kb://public/handbook"],
            vec!["pipeline", "support", "kb", "kb://public/handbook"],
        ]
    );
    assert_eq!(
        doc["pipeline_pins"],
        json!([["pipeline", "support", "kb", "kb://public/handbook"]])
    );
    assert_eq!(doc["pins_none_shown"], true);
    let (s, v) = get(&svc, "/v1/pins").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"pins": [], "next_offset": null}));
    let (_, v) = get(&svc, "/v1/pipelines/support/attachments").await;
    assert_eq!(v["pins"], json!([]));
    // Narrow, only the tables scroll.
    assert_eq!(doc["narrow_overflow"], 0, "the page is wider than 380 px");

    // What the page did is in the store, seen through the API too.
    let (_, history) = get(&svc, "/v1/history?conversation=browser-1").await;
    let uris: Vec<(&str, &str)> = history["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["uri"].as_str().unwrap(), r["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(
        uris,
        [
            ("demo://docs/missing.md", "message"),
            (
                "demo://resource/static/document/features.md",
                "conversation"
            ),
            (
                "demo://resource/static/document/features.md",
                "conversation"
            ),
        ]
    );
}

#[test]
fn serve_refuses_to_start_without_a_good_token() {
    let run = |env: &[(&str, &str)]| {
        let mut cmd = hostpipe_tests::hostpipe_command();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--store", "none"])
            .env_remove("HOSTPIPE_TOKEN")
            .env_remove("HOSTPIPE_TURN_TOKEN")
            .env_remove("HOSTPIPE_READ_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    assert_eq!(
        run(&[]),
        (
            Some(2),
            "error: no API token: every /v1 route needs one. Set HOSTPIPE_TOKEN (admin) and optionally HOSTPIPE_TURN_TOKEN (turns, for bot platforms) and HOSTPIPE_READ_TOKEN (read-only), or [serve] admin_tokens / turn_tokens / read_tokens\n".into()
        )
    );
    assert_eq!(
        run(&[("HOSTPIPE_TURN_TOKEN", "short")]),
        (
            Some(2),
            "error: HOSTPIPE_TURN_TOKEN: the token is 5 bytes; use at least 16 (e.g. `openssl rand -hex 32`)\n".into()
        )
    );
    assert_eq!(
        run(&[("HOSTPIPE_TOKEN", "short")]),
        (
            Some(2),
            "error: HOSTPIPE_TOKEN: the token is 5 bytes; use at least 16 (e.g. `openssl rand -hex 32`)\n".into()
        )
    );
    assert_eq!(
        run(&[("HOSTPIPE_READ_TOKEN", " 0123456789abcdef0123")]),
        (
            Some(2),
            "error: HOSTPIPE_READ_TOKEN: the token has leading or trailing whitespace\n".into()
        )
    );
    // Guessable: too few distinct characters, or an example's placeholder left in
    // (docs/examples/kubernetes.yaml's Secret must not start).
    assert_eq!(
        run(&[("HOSTPIPE_TOKEN", "aaaaaaaaaaaaaaaa")]),
        (
            Some(2),
            "error: HOSTPIPE_TOKEN: the token has 1 distinct characters; use at least 8; use a random one (e.g. `openssl rand -hex 32`)\n".into()
        )
    );
    assert_eq!(
        run(&[("HOSTPIPE_TOKEN", "replace-with-openssl-rand-hex-32-admin")]),
        (
            Some(2),
            "error: HOSTPIPE_TOKEN: the token holds `replace`: it looks like an example's placeholder left in; use a random one (e.g. `openssl rand -hex 32`)\n".into()
        )
    );
}
