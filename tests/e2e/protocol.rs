//! Protocol eras (MCP 2026-07-28 beside 2025-11-25): `auto` speaks 2026-07-28 to a
//! server that does (hostpipe's rmcp demo, servers on the Python SDK 2.x) and falls back
//! to `initialize` for one that does not (server-everything); `protocol` pins an era;
//! a server that exits on the probe is told how to pin it; a server that speaks only
//! 2026-07-28 (`tests/servers/modern_only_server.py`, on the Python SDK 2.x) is used
//! fully over stdio and streamable HTTP: lists, reads, templates, prompts, tools, and
//! updates through `subscriptions/listen`.

use std::time::Duration;

use hostpipe_core::{McpSource as _, ServerStatus};
use hostpipe_mcp::ProtocolMode;
use hostpipe_tests::{connect, demo, eventually, everything, python};

fn pinned(
    mut config: hostpipe_mcp::ServerConfig,
    protocol: ProtocolMode,
) -> hostpipe_mcp::ServerConfig {
    config.protocol = protocol;
    config
}

fn version(host: &hostpipe_mcp::McpHost, server: &str) -> Option<String> {
    host.servers()
        .into_iter()
        .find(|s| s.name == server)
        .and_then(|s| s.protocol_version)
}

#[tokio::test]
async fn auto_speaks_each_servers_newest_era_and_a_pin_holds() {
    let host = connect(vec![
        demo("modern"),
        python("python", "live_server.py"),
        everything("legacy"),
        pinned(demo("pinned"), ProtocolMode::Legacy),
    ])
    .await;
    assert_eq!(version(&host, "modern").as_deref(), Some("2026-07-28"));
    assert_eq!(version(&host, "python").as_deref(), Some("2026-07-28"));
    assert_eq!(version(&host, "legacy").as_deref(), Some("2025-11-25"));
    assert_eq!(version(&host, "pinned").as_deref(), Some("2025-11-25"));
    // The same reads either way.
    for server in ["modern", "pinned"] {
        let read = host
            .read_resource(server, "demo://docs/handbook.md")
            .await
            .unwrap();
        assert_eq!(read.contents.len(), 1, "{server}");
    }
    // Not found: -32602 from a 2026-07-28 server, -32002 from a 2025-11-25 one; both
    // are "not found".
    for server in ["modern", "pinned"] {
        let e = host
            .read_resource(server, "demo://docs/missing.md")
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{server}: {e}");
    }
    // A 2026-07-28 connection never subscribes the legacy way; the demo declares no
    // notifications, so nothing is listened for either (the Python server's listen is
    // checked in the restart test below).
    let counts = host.request_counts("modern").unwrap();
    assert_eq!(counts.get("resources/subscribe"), None, "{counts:?}");
    assert_eq!(counts.get("subscriptions/listen"), None, "{counts:?}");
    host.shutdown().await;
}

#[tokio::test]
async fn a_server_that_exits_on_the_probe_is_told_to_pin_and_works_pinned() {
    let strict = || python("strict", "initialize_first_server.py");
    let host = connect(vec![strict()]).await;
    let status = host.servers()[0].status.clone();
    let ServerStatus::Failed { reason } = status else {
        panic!("the probe should fail this server: {status:?}");
    };
    assert!(
        reason.contains("`protocol = \"2025-11-25\"`"),
        "the error says how to pin it: {reason}"
    );
    host.shutdown().await;

    let host = connect(vec![pinned(strict(), ProtocolMode::Legacy)]).await;
    assert_eq!(version(&host, "strict").as_deref(), Some("2025-11-25"));
    let read = host.read_resource("strict", "old://readme").await.unwrap();
    assert_eq!(read.contents.len(), 1);
    host.shutdown().await;
}

#[tokio::test]
async fn a_2026_07_28_server_restarted_is_reconnected_and_listened_to_again() {
    let options = hostpipe_mcp::HostOptions {
        reconnect_delay: Duration::from_millis(200),
        ..hostpipe_tests::test_options()
    };
    let host = hostpipe_tests::connect_with(vec![python("live", "live_server.py")], options).await;
    assert_eq!(version(&host, "live").as_deref(), Some("2026-07-28"));
    let listens = || {
        host.request_counts("live")
            .unwrap()
            .get("subscriptions/listen")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(listens(), 1, "listened at connect");
    // The tool ends the process; the host reconnects and listens again.
    assert!(host.call_tool("live", "crash", None).await.is_err());
    eventually("a reconnect", Duration::from_secs(20), || {
        host.connections("live") >= 2 && matches!(host.servers()[0].status, ServerStatus::Connected)
    })
    .await;
    assert_eq!(version(&host, "live").as_deref(), Some("2026-07-28"));
    eventually("a second listen", Duration::from_secs(10), || {
        listens() >= 2
    })
    .await;
    // And list changes reach it on the new connection.
    let mut args = serde_json::Map::new();
    args.insert("name".into(), "after".into());
    host.call_tool("live", "add_note", Some(args))
        .await
        .unwrap();
    eventually("the new note", Duration::from_secs(10), || {
        host.request_counts("live").unwrap()["resources/list"] >= 3
    })
    .await;
    let notes = host.list_resources("live").await.unwrap();
    assert!(notes.iter().any(|r| r.uri == "live://note/after"));
    host.shutdown().await;
}

/// `tests/servers/modern_only_server.py` over streamable HTTP on a free loopback port;
/// killed when dropped.
struct ModernOnlyHttp {
    _child: tokio::process::Child,
    url: String,
}

impl ModernOnlyHttp {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let root = hostpipe_tests::root();
        let child = tokio::process::Command::new(root.join("tests/.venv/bin/python"))
            .arg(root.join("tests/servers/modern_only_server.py"))
            .args(["--http", &port.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        eventually("the server to listen", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// Everything hostpipe does with a server, against one that speaks only 2026-07-28:
/// lists, a read, a template, a prompt, a tool, and an update that reaches the cached
/// copy through `subscriptions/listen`.
async fn works_with_a_modern_only_server(config: hostpipe_mcp::ServerConfig) {
    let host = connect(vec![config]).await;
    let info = host.servers().remove(0);
    assert!(info.status.is_connected(), "{:?}", info.status);
    assert_eq!(info.protocol_version.as_deref(), Some("2026-07-28"));
    let text = |read: hostpipe_core::ResourceRead| match &read.contents[0] {
        hostpipe_core::ResourceContents::Text { text, .. } => text.clone(),
        other => panic!("expected text, got {other:?}"),
    };
    let resources = host.list_resources("modern").await.unwrap();
    assert!(resources.iter().any(|r| r.uri == "modern://counter"));
    let templates = host.list_resource_templates("modern").await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "modern://echo/{word}"),
        "{templates:?}"
    );
    let echo = host
        .read_resource("modern", "modern://echo/hi")
        .await
        .unwrap();
    assert_eq!(text(echo), "echo hi");
    let prompts = host.list_prompts("modern").await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "greet"));
    let mut args = std::collections::BTreeMap::new();
    args.insert("name".to_owned(), "Ada".to_owned());
    let greeting = host.get_prompt("modern", "greet", &args).await.unwrap();
    assert_eq!(greeting.messages.len(), 1);

    // The counter is read, kept (ttlMs one minute), bumped: the update comes on the
    // listen stream, drops the copy, and the next read is fresh.
    assert_eq!(
        text(
            host.read_resource("modern", "modern://counter")
                .await
                .unwrap()
        ),
        "count 0"
    );
    let again = host
        .read_resource("modern", "modern://counter")
        .await
        .unwrap();
    assert!(again.cache_hit, "a minute's ttlMs keeps the read");
    let tools = host.list_tools("modern").await.unwrap();
    assert!(tools.iter().any(|t| t.name == "bump"));
    host.call_tool("modern", "bump", None).await.unwrap();
    let mut last = String::new();
    for _ in 0..50 {
        last = text(
            host.read_resource("modern", "modern://counter")
                .await
                .unwrap(),
        );
        if last == "count 1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, "count 1", "the update invalidated the cached copy");
    let counts = host.request_counts("modern").unwrap();
    assert!(counts.contains_key("subscriptions/listen"), "{counts:?}");
    assert_eq!(counts.get("resources/subscribe"), None, "{counts:?}");
    host.shutdown().await;
}

#[tokio::test]
async fn a_2026_07_28_only_server_works_over_stdio() {
    works_with_a_modern_only_server(python("modern", "modern_only_server.py")).await;
    // Pinned to 2025-11-25, it cannot be reached, and the error says what it answered.
    let host = connect(vec![pinned(
        python("modern", "modern_only_server.py"),
        ProtocolMode::Legacy,
    )])
    .await;
    let status = host.servers()[0].status.clone();
    assert!(matches!(status, ServerStatus::Failed { .. }), "{status:?}");
    host.shutdown().await;
}

/// A server slow to start (a cold `npx` install, a loaded machine) answers the
/// `server/discover` probe after rmcp gave up on it (10 s) and sent `initialize`. rmcp
/// takes that late answer for the answer to `initialize` and fails; hostpipe reads the
/// era from it and connects again at once without a probe.
#[tokio::test]
async fn a_late_answer_to_the_probe_connects_again_without_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("started");
    let python = hostpipe_tests::python("late", "late_probe_server.py");
    let hostpipe_mcp::TransportConfig::Stdio { command, args, .. } = &python.transport else {
        unreachable!("a stdio server")
    };
    let config = hostpipe_mcp::ServerConfig::stdio(
        "late",
        command.clone(),
        [args[0].clone(), mark.display().to_string()],
    );
    let host = connect(vec![config]).await;
    assert!(mark.exists(), "the slow first start ran");
    let server = &host.servers()[0];
    assert!(server.status.is_connected(), "{:?}", server.status);
    assert_eq!(server.protocol_version.as_deref(), Some("2025-11-25"));
    assert!(server.counts.resources > 0, "{:?}", server.counts);
    host.shutdown().await;
}

#[tokio::test]
async fn a_2026_07_28_only_server_works_over_streamable_http() {
    let server = ModernOnlyHttp::start().await;
    works_with_a_modern_only_server(hostpipe_mcp::ServerConfig::http("modern", &server.url)).await;
    let host = connect(vec![pinned(
        hostpipe_mcp::ServerConfig::http("modern", &server.url),
        ProtocolMode::Legacy,
    )])
    .await;
    let status = host.servers()[0].status.clone();
    let ServerStatus::Failed { reason } = &status else {
        panic!("a 2025-11-25 pin cannot reach it: {status:?}");
    };
    eprintln!("pinned 2025-11-25: {reason}");
    host.shutdown().await;
}

#[tokio::test]
async fn an_rmcp_server_that_speaks_only_2026_07_28_is_reached_in_auto_and_refuses_a_pin() {
    let modern_only = || {
        let mut config = demo("modern");
        config.transport = match config.transport {
            hostpipe_mcp::TransportConfig::Stdio {
                command,
                mut args,
                env,
                inherit_env,
                cwd,
            } => {
                args.extend(["--protocol".to_owned(), "2026-07-28".to_owned()]);
                hostpipe_mcp::TransportConfig::Stdio {
                    command,
                    args,
                    env,
                    inherit_env,
                    cwd,
                }
            }
            other => other,
        };
        config
    };
    let host = connect(vec![modern_only()]).await;
    assert_eq!(version(&host, "modern").as_deref(), Some("2026-07-28"));
    let read = host
        .read_resource("modern", "demo://docs/handbook.md")
        .await
        .unwrap();
    assert_eq!(read.contents.len(), 1);
    let tools = host.list_tools("modern").await.unwrap();
    assert!(!tools.is_empty());
    let prompts = host.list_prompts("modern").await.unwrap();
    assert!(!prompts.is_empty());
    host.shutdown().await;

    let host = connect(vec![pinned(modern_only(), ProtocolMode::Legacy)]).await;
    let status = host.servers()[0].status.clone();
    let ServerStatus::Failed { reason } = &status else {
        panic!("`initialize` is refused: {status:?}");
    };
    assert!(reason.contains("`initialize`"), "{reason}");
    host.shutdown().await;
}
