//! Shared helpers for hostpipe's end-to-end tests: where the real peers live (installed
//! by `tests/run.sh`), and how to connect to them.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

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
