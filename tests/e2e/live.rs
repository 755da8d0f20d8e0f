//! Live resources: the content cache, change notifications, subscriptions, reconnects
//! and timeouts, against server-everything (stdio and streamable HTTP) and a server on
//! the official Python SDK (`tests/servers/live_server.py`).

use std::time::{Duration, Instant};

use hostpipe_core::{
    Attachment, AttachmentTarget, McpSource as _, ReadRecord, RunRequest, Scope, ServerStatus, Turn,
};
use hostpipe_mcp::{HostOptions, ServerConfig};
use hostpipe_tests::{
    HttpEverything, connect, connect_with, eventually, everything, python, test_options,
};

use crate::{pipeline, prepare};

fn live() -> ServerConfig {
    python("live", "live_server.py")
}

fn read_of<'a>(request: &'a RunRequest, uri: &str) -> &'a ReadRecord {
    request
        .reads
        .iter()
        .find(|r| r.uri == uri)
        .unwrap_or_else(|| panic!("no read of {uri}: {:?}", request.reads))
}

fn reads(host: &hostpipe_mcp::McpHost, server: &str) -> u64 {
    host.request_counts(server)
        .and_then(|c| c.get("resources/read").copied())
        .unwrap_or(0)
}

/// A turn that attaches `uri` of `server` at message scope.
fn turn_with(server: &str, uri: &str) -> Turn {
    let mut turn = Turn::new("default", "what changed?");
    turn.attachments.push(Attachment {
        server: server.into(),
        target: AttachmentTarget::Uri { uri: uri.into() },
        scope: Scope::Message,
    });
    turn
}

fn bound(server: &str) -> String {
    format!(
        r#"
[pipelines.default]
stages = ["bind_mcp_servers", "resource_context_injection"]
[pipelines.default.bind_mcp_servers]
servers = ["{server}"]
[pipelines.default.resource_context_injection]
budget_tokens = 4000
"#
    )
}

#[tokio::test]
async fn an_update_notification_invalidates_the_cached_copy_and_the_next_turn_reads_afresh() {
    let host = connect(vec![everything("everything")]).await;
    let p = pipeline(&host, &bound("everything"));
    let uri = "demo://resource/dynamic/text/1";

    let (first, _) = prepare(&p, turn_with("everything", uri)).await;
    assert!(!read_of(&first, uri).cache_hit);
    assert_eq!(reads(&host, "everything"), 1);
    // The first read subscribed (server-everything declares `resources.subscribe`).
    assert_eq!(host.subscriptions("everything"), [uri]);

    let (second, _) = prepare(&p, turn_with("everything", uri)).await;
    assert!(read_of(&second, uri).cache_hit);
    assert_eq!(reads(&host, "everything"), 1, "served from the cache");

    // server-everything sends `resources/updated` for every subscribed URI at once,
    // then every 5 s, while its simulated updates are on.
    host.call_tool("everything", "toggle-subscriber-updates", None)
        .await
        .unwrap();
    eventually("an update notification", Duration::from_secs(15), || {
        host.updates_received("everything").unwrap_or(0) >= 1
    })
    .await;
    // The transport wrapper drops the cached copy before it counts the update.
    let (third, _) = prepare(&p, turn_with("everything", uri)).await;
    assert!(
        !read_of(&third, uri).cache_hit,
        "read afresh after the update"
    );
    assert!(reads(&host, "everything") >= 2);
    host.call_tool("everything", "toggle-subscriber-updates", None)
        .await
        .unwrap();
    host.shutdown().await;
}

#[tokio::test]
async fn list_changed_makes_the_next_turn_see_the_new_resource() {
    let host = connect(vec![live()]).await;
    let before = host.list_resources("live").await.unwrap();
    assert!(!before.iter().any(|r| r.uri == "live://note/fresh"));

    let mut args = serde_json::Map::new();
    args.insert("name".into(), "fresh".into());
    host.call_tool("live", "add_note", Some(args))
        .await
        .unwrap();
    // On 2025-11-25 the notification comes before the tool's result and the list call
    // waits for the refresh it started; on 2026-07-28 (this server speaks it) it comes
    // on the `subscriptions/listen` stream, in its own time.
    eventually(
        "the list_changed notification",
        Duration::from_secs(10),
        || host.request_counts("live").unwrap()["resources/list"] >= 2,
    )
    .await;
    let after = host.list_resources("live").await.unwrap();
    let note = after.iter().find(|r| r.uri == "live://note/fresh");
    assert_eq!(note.map(|r| r.name.as_str()), Some("note-fresh"));
    assert_eq!(
        host.request_counts("live").unwrap()["resources/list"],
        2,
        "listed once at connect and once after the notification"
    );

    let p = pipeline(&host, &bound("live"));
    let (request, _) = prepare(&p, turn_with("live", "live://note/fresh")).await;
    assert_eq!(
        request.context[0].text(),
        Some("Note fresh."),
        "the next turn reads it"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_stdio_server_killed_mid_turn_fails_that_read_fast_and_is_restarted() {
    let options = HostOptions {
        reconnect_delay: Duration::from_millis(200),
        ..test_options()
    };
    let host = connect_with(vec![live()], options).await;
    let p = pipeline(&host, &bound("live"));

    let started = Instant::now();
    let turn = tokio::spawn({
        let host = host.clone();
        async move {
            let p = pipeline(&host, &bound("live"));
            prepare(&p, turn_with("live", "live://sleep/5000")).await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The tool ends the process; its own call fails with the closed connection.
    let crash = host.call_tool("live", "crash", None).await;
    assert!(crash.is_err());
    let (request, _) = turn.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the pending read failed fast, not at its 5 s answer: {:?}",
        started.elapsed()
    );
    let record = read_of(&request, "live://sleep/5000");
    let error = record.error.as_deref().unwrap_or_default();
    assert!(error.contains("connection closed"), "{error}");

    let mut saw_reconnecting = false;
    eventually("the restart", Duration::from_secs(30), || {
        let status = host.server("live").unwrap().status;
        saw_reconnecting |= matches!(status, ServerStatus::Reconnecting { .. });
        status.is_connected() && host.connections("live") >= 2
    })
    .await;
    assert!(saw_reconnecting, "the status showed the reconnect");

    let (request, trace) = prepare(&p, turn_with("live", "live://static/0")).await;
    assert_eq!(
        request.context[0].text(),
        Some("Static resource 0: the meeting room code is 1000."),
        "{trace:?}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn an_http_server_restarted_on_the_same_port_is_reconnected_and_resubscribed() {
    let server = HttpEverything::start().await;
    let port = server.port;
    let options = HostOptions {
        reconnect_delay: Duration::from_millis(200),
        reconnect_max_delay: Duration::from_secs(1),
        ..test_options()
    };
    let host = connect_with(vec![ServerConfig::http("web", &server.url)], options).await;
    let p = pipeline(&host, &bound("web"));
    let doc = "demo://resource/static/document/features.md";
    let (first, _) = prepare(&p, turn_with("web", doc)).await;
    assert!(first.reads[0].error.is_none(), "{:?}", first.reads);
    assert_eq!(host.subscriptions("web"), [doc]);

    server.stop().await;
    let started = Instant::now();
    let (down, _) = prepare(&p, turn_with("web", "demo://resource/dynamic/text/9")).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(down.reads[0].error.is_some(), "{:?}", down.reads);

    let server = HttpEverything::start_on(port).await;
    eventually("the reconnect", Duration::from_secs(30), || {
        host.server("web").unwrap().status.is_connected() && host.connections("web") >= 2
    })
    .await;
    let (after, _) = prepare(&p, turn_with("web", doc)).await;
    let record = read_of(&after, doc);
    assert!(record.error.is_none(), "{record:?}");
    assert!(
        !record.cache_hit,
        "a restarted server's resources are read afresh"
    );
    assert_eq!(host.subscriptions("web"), [doc], "subscribed again");
    host.shutdown().await;
    server.stop().await;
}

#[tokio::test]
async fn a_read_past_the_request_timeout_or_the_turn_deadline_is_dropped_and_the_turn_goes_on() {
    let options = HostOptions {
        request_timeout: Duration::from_secs(1),
        ..test_options()
    };
    let host = connect_with(vec![live()], options).await;
    let p = pipeline(&host, &bound("live"));
    let mut turn = turn_with("live", "live://sleep/20000");
    turn.attachments.push(Attachment {
        server: "live".into(),
        target: AttachmentTarget::Uri {
            uri: "live://static/1".into(),
        },
        scope: Scope::Message,
    });
    let started = Instant::now();
    let (request, _) = prepare(&p, turn).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let error = read_of(&request, "live://sleep/20000").error.clone();
    assert!(
        error
            .as_deref()
            .unwrap_or_default()
            .contains("timed out after 1000 ms"),
        "{error:?}"
    );
    assert!(read_of(&request, "live://static/1").error.is_none());
    host.shutdown().await;

    // The turn's own deadline, shorter than the request timeout.
    let host = connect(vec![live()]).await;
    let toml = bound("live").replace(
        "[pipelines.default.bind_mcp_servers]",
        "turn_timeout_ms = 800\n[pipelines.default.bind_mcp_servers]",
    );
    let p = pipeline(&host, &toml);
    let started = Instant::now();
    let (request, _) = prepare(&p, turn_with("live", "live://sleep/20000")).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let error = read_of(&request, "live://sleep/20000").error.clone();
    assert!(
        error
            .as_deref()
            .unwrap_or_default()
            .contains("deadline passed"),
        "{error:?}"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn a_message_over_the_size_limit_fails_its_read_at_once_and_the_session_lives_on() {
    let options = HostOptions {
        max_message_bytes: 1024 * 1024,
        ..test_options()
    };
    let host = connect_with(vec![live()], options).await;
    let started = Instant::now();
    let err = host
        .read_resource("live", "live://big/2000000")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed fast, not at the 30 s request timeout: {:?}",
        started.elapsed()
    );
    assert!(err.contains("over the 1048576-byte message limit"), "{err}");
    let ok = host.read_resource("live", "live://big/1000").await.unwrap();
    assert_eq!(ok.contents[0].byte_len(), 1000);
    host.shutdown().await;
}

#[tokio::test]
async fn two_hundred_concurrent_turns_over_one_session_read_each_uri_once() {
    let host = connect(vec![live()]).await;
    let attachments: Vec<String> = (0..5)
        .map(|i| format!(r#"{{ server = "live", uri = "live://static/{i}" }}"#))
        .collect();
    let toml = format!(
        "{}attachments = [{}]\n",
        bound("live"),
        attachments.join(", ")
    );
    let p = std::sync::Arc::new(pipeline(&host, &toml));
    let turns = (0..200).map(|i| {
        let p = p.clone();
        tokio::spawn(
            async move { prepare(&p, Turn::new("default", format!("room code {i}?"))).await },
        )
    });
    let done = futures_util::future::join_all(turns).await;
    assert_eq!(done.len(), 200);
    for joined in done {
        let (request, _) = joined.unwrap();
        assert_eq!(request.context.len(), 5);
        assert!(request.reads.iter().all(|r| r.error.is_none()));
    }
    assert_eq!(reads(&host, "live"), 5, "one resources/read per URI");
    host.shutdown().await;
}

/// `hostpipe serve` started before its MCP server (compose and Kubernetes start
/// services in any order): it is ready at once, says the server is down, keeps
/// retrying with the reconnect backoff, and connects once the server is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_retries_a_server_that_is_down_at_start_until_it_comes_up() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            "[host]\nconnect_timeout_ms = 5000\nreconnect_delay_ms = 200\nreconnect_max_delay_ms = 1000\n\n\
             [mcp_servers.later]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    )
    .unwrap();
    let svc = hostpipe_tests::Service::start(&config, "memory", &[]).await;
    let client = reqwest::Client::new();
    let status = || async {
        let v: serde_json::Value = client
            .get(svc.url("/v1/servers"))
            .bearer_auth(hostpipe_tests::ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v.to_string()
    };
    // Ready (Service::start waited for /readyz 200) while the server is down.
    let down = status().await;
    assert!(
        down.contains("\"state\":\"reconnecting\"") || down.contains("\"state\":\"failed\""),
        "{down}"
    );
    let server = HttpEverything::start_on(port).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = status().await;
        if now.contains("\"state\":\"connected\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not connected 30 s after the server came up: {now}\n{}",
            svc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop().await;
}
