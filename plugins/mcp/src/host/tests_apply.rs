//! Servers that come and go while the host runs: [`McpHost::add_server`],
//! [`McpHost::remove_server`] and [`McpHost::apply`] (a reload).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hostpipe_core::{McpSource as _, ServerStatus, SourceError};

use super::{AddServerError, Applied, HostOptions, McpHost};
use crate::config::ServerConfig;

/// A stdio entry that never starts (no such program); `disabled` keeps it unconnected.
fn entry(name: &str, arg: &str, disabled: bool) -> ServerConfig {
    let mut c = ServerConfig::stdio(name, "/nonexistent/hostpipe-test-server", [arg]);
    c.disabled = disabled;
    c
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn apply_keeps_an_unchanged_server_and_replaces_the_rest() {
    let host = McpHost::new(
        [
            entry("a", "1", true),
            entry("b", "1", true),
            entry("c", "1", true),
        ],
        HostOptions::default(),
    );
    let a = host.slot("a").unwrap();
    let b = host.slot("b").unwrap();
    let c = host.slot("c").unwrap();
    let applied = host
        .apply([
            entry("a", "1", true),
            entry("b", "2", true),
            entry("d", "1", true),
        ])
        .await;
    assert_eq!(
        applied,
        Applied {
            kept: names(&["a"]),
            added: names(&["d"]),
            changed: names(&["b"]),
            removed: names(&["c"]),
        }
    );
    // The kept server is the very same slot (session, lists, counters untouched); the
    // changed one is new, and the old one closed.
    assert!(Arc::ptr_eq(&a, &host.slot("a").unwrap()));
    assert!(!Arc::ptr_eq(&b, &host.slot("b").unwrap()));
    assert!(b.closing.load(Ordering::Relaxed) && c.closing.load(Ordering::Relaxed));
    assert_eq!(
        host.server_config("b").unwrap().transport,
        entry("b", "2", true).transport
    );
    assert_eq!(host.server_names(), names(&["a", "b", "d"]));
    assert!(matches!(
        host.read_resource("c", "x://y").await,
        Err(SourceError::UnknownServer { server, known }) if server == "c" && known == names(&["a", "b", "d"])
    ));
    assert_eq!(host.servers().len(), 3);
}

#[tokio::test]
async fn an_added_server_that_does_not_start_is_retried_until_removed() {
    let options = HostOptions {
        reconnect_delay: Duration::from_millis(10),
        reconnect_max_delay: Duration::from_millis(20),
        connect_timeout: Duration::from_secs(5),
        ..HostOptions::default()
    };
    let host = McpHost::new([entry("a", "1", true)], options);
    assert_eq!(
        host.add_server(entry("a", "2", false)),
        Err(AddServerError::Exists("a".into()))
    );
    host.add_server(entry("x", "1", false)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while host.connections("x") < 3 {
        assert!(tokio::time::Instant::now() < deadline, "not retried");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = host
        .servers()
        .into_iter()
        .find(|s| s.name == "x")
        .unwrap()
        .status;
    assert!(
        matches!(
            status,
            ServerStatus::Reconnecting { .. }
                | ServerStatus::Connecting
                | ServerStatus::Failed { .. }
        ),
        "{status:?}"
    );
    let slot = host.slot("x").unwrap();
    assert!(host.remove_server("x").await);
    assert!(!host.remove_server("x").await);
    // Its loop is gone: no more attempts.
    let attempts = slot.conn.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(slot.conn.load(Ordering::SeqCst), attempts);
    assert_eq!(host.server_names(), names(&["a"]));
    // The name is free again.
    host.add_server(entry("x", "1", true)).unwrap();
    assert!(matches!(
        host.servers()
            .into_iter()
            .find(|s| s.name == "x")
            .unwrap()
            .status,
        ServerStatus::Disabled
    ));
}
