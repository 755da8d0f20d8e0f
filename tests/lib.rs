//! Shared helpers for hostpipe's end-to-end tests: where the real peers live (installed
//! by `tests/run.sh`), and how to connect to them.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hostpipe_mcp::{HostOptions, McpHost, ServerConfig};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} not found at {}: run `bash tests/run.sh` (it installs the pinned npm and Python peers)",
        path.display()
    );
    path
}

/// The `hostpipe` binary of this build (`HOSTPIPE_BIN` overrides).
pub fn hostpipe_bin() -> PathBuf {
    if let Ok(p) = std::env::var("HOSTPIPE_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/e2e-HASH → target/<profile>/hostpipe
    let exe = std::env::current_exe().expect("current test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    require(
        dir.join("hostpipe"),
        "the hostpipe binary (cargo build --bin hostpipe)",
    )
}

fn node_package(package: &str) -> PathBuf {
    require(
        root()
            .join("tests/node_modules/@modelcontextprotocol")
            .join(package)
            .join("dist/index.js"),
        &format!("@modelcontextprotocol/{package}"),
    )
}

/// `@modelcontextprotocol/server-everything` (pinned in tests/package-lock.json), stdio.
pub fn everything(name: &str) -> ServerConfig {
    ServerConfig::stdio(
        name,
        "node",
        [
            node_package("server-everything").display().to_string(),
            "stdio".into(),
        ],
    )
}

/// `@modelcontextprotocol/server-filesystem` serving `dir`, stdio.
pub fn filesystem(name: &str, dir: &Path) -> ServerConfig {
    ServerConfig::stdio(
        name,
        "node",
        [
            node_package("server-filesystem").display().to_string(),
            dir.display().to_string(),
        ],
    )
}

/// A server from `tests/servers/` run with the pinned Python SDK (`mcp`), stdio.
pub fn python(name: &str, script: &str) -> ServerConfig {
    let python = require(
        root().join("tests/.venv/bin/python"),
        "the Python peers' venv",
    );
    let script = require(root().join("tests/servers").join(script), script);
    ServerConfig::stdio(
        name,
        python.display().to_string(),
        [script.display().to_string()],
    )
}

/// hostpipe's own demo server, spawned from the built binary.
pub fn demo(name: &str) -> ServerConfig {
    ServerConfig::stdio(name, hostpipe_bin().display().to_string(), ["demo-server"])
}

/// A host for `servers`, connected. Timeouts are generous for a loaded CI machine but
/// bounded, so a broken peer fails the test instead of hanging it.
pub async fn connect(servers: Vec<ServerConfig>) -> Arc<McpHost> {
    connect_with(servers, test_options()).await
}

/// The host options of [`connect`], to adjust.
pub fn test_options() -> HostOptions {
    HostOptions {
        connect_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(30),
        ..HostOptions::default()
    }
}

/// A host for `servers` with `options`, connected.
pub async fn connect_with(servers: Vec<ServerConfig>, options: HostOptions) -> Arc<McpHost> {
    let host = Arc::new(McpHost::new(servers, options));
    host.connect_all().await;
    host
}

/// Polls `check` every 20 ms until it holds; panics after `within`.
pub async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server-everything process serving streamable HTTP on a free loopback port; killed
/// when dropped.
pub struct HttpEverything {
    child: tokio::process::Child,
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// The port.
    pub port: u16,
}

impl HttpEverything {
    /// Starts it on a free port and waits (at most 30 s) until it accepts connections.
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        Self::start_on(port).await
    }

    /// Starts it on `port` (e.g. again, after [`HttpEverything::stop`]).
    pub async fn start_on(port: u16) -> Self {
        let child = tokio::process::Command::new("node")
            .arg(node_package("server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "server-everything did not listen on {port} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
        }
    }

    /// Stops the server.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = self.child.wait().await;
    }
}

/// A local stand-in for an OpenAI-compatible `POST /v1/chat/completions`, for the
/// `local` runner's tests. Every request body is checked against the OpenAI API
/// reference ("Chat Completions": required `model` and `messages`, message roles and
/// their fields, content as a string or an array of `text` / `image_url` parts, tool
/// messages with `tool_call_id` and string content, `tools` of `type: "function"`); a
/// request that breaks a rule gets HTTP 400 naming the rule, so the runner's test
/// fails with it. Valid requests get the scripted replies in order (the last one
/// repeats).
pub mod openai_api {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use wiremock::{Request, Respond, ResponseTemplate};

    /// The checks, in the API reference's terms; `Err` names the broken rule.
    pub fn check_request(body: &Value) -> Result<(), String> {
        let obj = body.as_object().ok_or("the body must be a JSON object")?;
        const KNOWN: &[&str] = &[
            "model",
            "messages",
            "tools",
            "tool_choice",
            "stream",
            "stream_options",
            "temperature",
            "max_tokens",
            "max_completion_tokens",
            "top_p",
            "n",
            "stop",
            "user",
            "response_format",
            "seed",
            "parallel_tool_calls",
        ];
        if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(format!("unknown request field `{k}`"));
        }
        obj.get("model")
            .and_then(Value::as_str)
            .ok_or("`model` (string) is required")?;
        let messages = obj
            .get("messages")
            .and_then(Value::as_array)
            .ok_or("`messages` (array) is required")?;
        if messages.is_empty() {
            return Err("`messages` must not be empty".into());
        }
        let mut call_ids: Vec<String> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or(format!("messages[{i}].role is required"))?;
            let content = m.get("content");
            match role {
                "system" | "user" => match content {
                    Some(Value::String(_)) => {}
                    Some(Value::Array(parts)) if role == "user" => {
                        for (j, p) in parts.iter().enumerate() {
                            match p.get("type").and_then(Value::as_str) {
                                Some("text") if p.get("text").is_some_and(Value::is_string) => {}
                                Some("image_url")
                                    if p.pointer("/image_url/url")
                                        .is_some_and(Value::is_string) => {}
                                _ => {
                                    return Err(format!(
                                        "messages[{i}].content[{j}] must be a text or image_url part"
                                    ));
                                }
                            }
                        }
                    }
                    _ => return Err(format!("messages[{i}] ({role}) needs string content")),
                },
                "assistant" => {
                    let calls = m.get("tool_calls").and_then(Value::as_array);
                    match (content, calls) {
                        (Some(Value::String(_)), _) | (Some(Value::Null) | None, Some(_)) => {}
                        _ => {
                            return Err(format!(
                                "messages[{i}] (assistant) needs content or tool_calls"
                            ));
                        }
                    }
                    for (j, c) in calls.into_iter().flatten().enumerate() {
                        let id = c
                            .get("id")
                            .and_then(Value::as_str)
                            .ok_or(format!("messages[{i}].tool_calls[{j}].id is required"))?;
                        if c.get("type").and_then(Value::as_str) != Some("function")
                            || !c.pointer("/function/name").is_some_and(Value::is_string)
                            || !c
                                .pointer("/function/arguments")
                                .is_some_and(Value::is_string)
                        {
                            return Err(format!(
                                "messages[{i}].tool_calls[{j}] must be a function call with string arguments"
                            ));
                        }
                        call_ids.push(id.to_owned());
                    }
                }
                "tool" => {
                    let id = m
                        .get("tool_call_id")
                        .and_then(Value::as_str)
                        .ok_or(format!("messages[{i}].tool_call_id is required"))?;
                    if !call_ids.iter().any(|c| c == id) {
                        return Err(format!(
                            "messages[{i}].tool_call_id `{id}` answers no earlier tool call"
                        ));
                    }
                    if !content.is_some_and(Value::is_string) {
                        return Err(format!("messages[{i}] (tool) content must be a string"));
                    }
                }
                other => return Err(format!("messages[{i}].role `{other}` is not a role")),
            }
        }
        for (i, t) in obj
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if t.get("type").and_then(Value::as_str) != Some("function")
                || !t.pointer("/function/name").is_some_and(Value::is_string)
                || !t
                    .pointer("/function/parameters")
                    .is_none_or(Value::is_object)
            {
                return Err(format!(
                    "tools[{i}] must be {{type: function, function: {{name, parameters: object}}}}"
                ));
            }
        }
        if let Some(s) = obj.get("stream")
            && !s.is_boolean()
        {
            return Err("`stream` must be a boolean".into());
        }
        Ok(())
    }

    /// A scripted endpoint that checks every request.
    #[derive(Clone, Default)]
    pub struct ChatCompletions {
        replies: Arc<Mutex<Vec<ResponseTemplate>>>,
        /// Every request body received, in order.
        pub bodies: Arc<Mutex<Vec<Value>>>,
    }

    impl ChatCompletions {
        /// Replies given in order; the last one repeats.
        pub fn new(replies: Vec<ResponseTemplate>) -> Self {
            Self {
                replies: Arc::new(Mutex::new(replies)),
                bodies: Arc::default(),
            }
        }

        /// The request bodies so far.
        pub fn requests(&self) -> Vec<Value> {
            self.bodies.lock().unwrap().clone()
        }
    }

    impl Respond for ChatCompletions {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            let body: Value = match serde_json::from_slice(&request.body) {
                Ok(v) => v,
                Err(e) => {
                    return ResponseTemplate::new(400).set_body_json(
                        serde_json::json!({"error": {"message": format!("invalid JSON: {e}")}}),
                    );
                }
            };
            self.bodies.lock().unwrap().push(body.clone());
            if let Err(rule) = check_request(&body) {
                return ResponseTemplate::new(400).set_body_json(serde_json::json!({"error": {"message": format!("request breaks the API reference: {rule}"), "type": "invalid_request_error"}}));
            }
            let mut replies = self.replies.lock().unwrap();
            if replies.len() > 1 {
                replies.remove(0)
            } else {
                replies[0].clone()
            }
        }
    }

    /// A non-streaming completion with `text`.
    pub fn answer(text: &str) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        }))
    }

    /// A non-streaming completion that calls `name` with `arguments`.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "chatcmpl-0", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}
        }))
    }

    /// A streamed reply: each chunk's `delta` as given, then usage and `[DONE]`.
    pub fn stream(deltas: &[Value]) -> ResponseTemplate {
        let mut body = String::new();
        for d in deltas {
            let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": d, "finish_reason": null}]});
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        let usage = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}});
        body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_raw(body, "text/event-stream")
    }
}
