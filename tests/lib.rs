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
    built_bin("hostpipe", "cargo build --bin hostpipe")
}

/// The `conformance-client` binary of this build (`tests/conformance_client.rs`), the
/// client the official MCP conformance suite runs.
pub fn conformance_client_bin() -> PathBuf {
    built_bin(
        "conformance-client",
        "cargo build -p hostpipe-tests --bin conformance-client",
    )
}

/// A binary of this build, next to the test executable; `build` says how to make it.
fn built_bin(name: &str, build: &str) -> PathBuf {
    // target/<profile>/deps/e2e-HASH → target/<profile>/NAME
    let exe = std::env::current_exe().expect("current test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    require(dir.join(name), &format!("the {name} binary ({build})"))
}

/// A command running [`hostpipe_bin`] with its data directory (and so its default
/// SQLite store) in the system's temporary directory, never the user's own; without
/// `HOSTPIPE_LOG` and `HOSTPIPE_STORE_URL` from the environment.
pub fn hostpipe_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(hostpipe_bin());
    cmd.env(
        "HOSTPIPE_DATA_DIR",
        std::env::temp_dir().join("hostpipe-e2e-data"),
    )
    .env_remove("HOSTPIPE_STORE_URL")
    .env_remove("HOSTPIPE_LOG")
    // Tables fit COLUMNS when it is set; the tests read whole rows.
    .env_remove("COLUMNS");
    cmd
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

/// Node.js 22 from the npm package `node` (pinned in tests/package-lock.json): the
/// conformance suite needs it (`fs.globSync`); the system's `node` may be older.
pub fn node22() -> PathBuf {
    require(
        root().join("tests/node_modules/node/bin/node"),
        "Node.js 22 (npm package `node`)",
    )
}

/// The official MCP conformance suite's command line
/// (`@modelcontextprotocol/conformance`, pinned in tests/package-lock.json); run it
/// with [`node22`].
pub fn conformance_suite() -> PathBuf {
    node_package("conformance")
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

/// Polls the async `check` every 50 ms until it holds; panics after `within`.
pub async fn eventually_async<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
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
        // Strict OpenAI-compatible backends refuse schema-document keywords in function
        // parameters (`$schema` above all: zod-to-json-schema puts it in every tool).
        fn has_document_keyword(v: &Value) -> bool {
            match v {
                Value::Object(m) => m
                    .iter()
                    .any(|(k, v)| k == "$schema" || k == "$id" || has_document_keyword(v)),
                Value::Array(a) => a.iter().any(has_document_keyword),
                _ => false,
            }
        }
        for (i, t) in obj
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if t.pointer("/function/parameters")
                .is_some_and(has_document_keyword)
            {
                return Err(format!(
                    "tools[{i}].function.parameters has `$schema` or `$id`, which strict backends reject"
                ));
            }
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

/// A private PostgreSQL server for one test: `initdb` into a temporary directory, then
/// `pg_ctl start` on a free loopback port (trust authentication, Unix socket in the
/// same directory). Stopped (`pg_ctl stop -m immediate`) and deleted when dropped.
///
/// `HOSTPIPE_TEST_POSTGRES_URL` (a database the tests may create databases in) is used
/// instead when set. Otherwise the server binaries come from Debian's `postgresql`
/// package, which `tests/run.sh` installs; as root, the server runs as user `postgres`
/// (PostgreSQL refuses to run as root).
pub struct Postgres {
    dir: Option<tempfile::TempDir>,
    bin: PathBuf,
    as_postgres: bool,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
}

impl Postgres {
    /// Starts the server (at most 60 s) and returns when it accepts connections.
    pub fn start() -> Self {
        if let Ok(url) = std::env::var("HOSTPIPE_TEST_POSTGRES_URL") {
            return Self {
                dir: None,
                bin: PathBuf::new(),
                as_postgres: false,
                url,
            };
        }
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                versions
                    .filter_map(Result::ok)
                    .map(|v| v.path().join("bin"))
                    .filter(|b| b.join("initdb").exists())
                    .max()
            })
            .unwrap_or_else(|| {
                panic!(
                    "PostgreSQL's initdb not found under /usr/lib/postgresql/*/bin: run `bash tests/run.sh` (it installs Debian's postgresql package), or set HOSTPIPE_TEST_POSTGRES_URL"
                )
            });
        let as_postgres = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let dir = tempfile::Builder::new()
            .prefix("hostpipe-pg-")
            .tempdir()
            .expect("a temporary directory");
        if as_postgres {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(status.success(), "chown postgres {}", dir.path().display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let pg = Self {
            dir: Some(dir),
            bin,
            as_postgres,
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        };
        let data = pg.data_dir();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            pg.socket_dir()
        );
        pg.run(
            "pg_ctl",
            &[
                "-D",
                &data,
                "-o",
                &options,
                "-l",
                &format!("{}/log", pg.socket_dir()),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        pg
    }

    fn socket_dir(&self) -> String {
        self.dir
            .as_ref()
            .map(|d| d.path().display().to_string())
            .unwrap_or_default()
    }

    fn data_dir(&self) -> String {
        format!("{}/data", self.socket_dir())
    }

    fn run(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        let out = cmd.args(args).output().expect("the PostgreSQL tool runs");
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The URL of a new, empty database `name` on the server (created with `psql`
    /// against the server's `postgres` database).
    pub fn database(&self, name: &str) -> String {
        let out = std::process::Command::new("psql")
            .arg(&self.url)
            .args(["-v", "ON_ERROR_STOP=1", "-c"])
            .arg(format!("CREATE DATABASE \"{name}\""))
            .output()
            .expect("psql runs (Debian's postgresql-client)");
        assert!(
            out.status.success(),
            "CREATE DATABASE {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        match self.url.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("no database in {}", self.url),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if self.dir.is_some() {
            let data = self.data_dir();
            let exe = self.bin.join("pg_ctl");
            let mut cmd = if self.as_postgres {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(&exe);
                c
            } else {
                std::process::Command::new(&exe)
            };
            let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
        }
    }
}

/// The admin token the [`Service`] helper starts `hostpipe serve` with.
pub const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789abcdef";
/// The turn token the [`Service`] helper starts `hostpipe serve` with.
pub const TURN_TOKEN: &str = "e2e-turn-token-0123456789abcdef";
/// The read-only token the [`Service`] helper starts `hostpipe serve` with.
pub const READ_TOKEN: &str = "e2e-read-token-0123456789abcdef";

/// A running `hostpipe serve` on a free loopback port, with [`ADMIN_TOKEN`],
/// [`TURN_TOKEN`] and [`READ_TOKEN`]; stopped with SIGTERM (and killed, if need be) when dropped.
pub struct Service {
    child: tokio::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Where its stderr (the access log among it) goes.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Service {
    /// Starts `hostpipe serve --config CONFIG --store STORE` (`extra` appended) and
    /// waits until `/readyz` says ready (at most 60 s).
    pub async fn start(config: &Path, store: &str, extra: &[&str]) -> Self {
        Self::start_with_env(config, store, extra, &[]).await
    }

    /// [`Service::start`] with `env` added to the process's environment.
    pub async fn start_with_env(
        config: &Path,
        store: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        use tokio::io::AsyncBufReadExt as _;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("serve.log");
        let mut cmd = tokio::process::Command::from(hostpipe_command());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--config")
            .arg(config)
            .arg("--store")
            .arg(store)
            .args(extra)
            .env("HOSTPIPE_TOKEN", ADMIN_TOKEN)
            .env("HOSTPIPE_TURN_TOKEN", TURN_TOKEN)
            .env("HOSTPIPE_READ_TOKEN", READ_TOKEN)
            .env("HOSTPIPE_DATA_DIR", dir.path())
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn hostpipe serve");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "hostpipe serve did not say where it listens; stderr: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "hostpipe serve exited; stderr: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let base = line
            .strip_prefix("hostpipe: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        let service = Self {
            child,
            base,
            log,
            _dir: dir,
        };
        let client = reqwest::Client::new();
        let url = service.url("/readyz");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = client.get(&url).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not ready within 60 s: {}",
                service.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        service
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Its stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM (a graceful shutdown).
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }

    /// Waits for the process to exit (at most `within`) and returns its exit code.
    pub async fn wait(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("hostpipe serve did not exit in time")
            .unwrap()
            .code()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.terminate();
    }
}
