//! The façade against an in-process rmcp server over `tokio::io::duplex`: no process,
//! no network. The server declares `resources` (with `subscribe`) and nothing else.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use hostpipe_core::{McpSource, ServerStatus, SourceError};
use rmcp::model::InputRequiredResult;
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities as WireCapabilities, ServerConfig as WireServerConfig,
    SubscribeRequestParams, SubscriptionFilter,
};
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::connect;
use super::{HostOptions, McpHost};
use crate::config::{ProtocolMode, ServerConfig};

/// Three resources over two pages; counts reads and keeps subscriptions.
#[derive(Clone, Default)]
struct Docs {
    reads: Arc<AtomicU32>,
    subscribed: Arc<Mutex<Vec<String>>>,
    /// The resource URIs of every `subscriptions/listen` (2026-07-28), in order.
    listened: Arc<Mutex<Vec<Vec<String>>>>,
    /// `ttlMs` on reads (2026-07-28; none: 0, do not cache).
    ttl_ms: Option<u64>,
    /// `ttlMs` on `resources/list` pages.
    list_ttl_ms: Option<u64>,
    /// Whether it declares `resources.listChanged`.
    list_changed: bool,
}

impl ServerHandler for Docs {
    fn get_info(&self) -> WireServerConfig {
        let mut capabilities = WireCapabilities::builder()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        if self.list_changed
            && let Some(resources) = capabilities.resources.as_mut()
        {
            resources.list_changed = Some(true);
        }
        WireServerConfig::new(capabilities).with_server_info(Implementation::new("docs", "1.0"))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let doc = |n: u32| Resource::new(format!("docs://{n}"), format!("doc {n}"));
        let mut page = match request.and_then(|r| r.cursor) {
            None => {
                let mut page = ListResourcesResult::with_all_items(vec![doc(1), doc(2)]);
                page.next_cursor = Some("2".into());
                page
            }
            Some(_) => ListResourcesResult::with_all_items(vec![doc(3)]),
        };
        page.ttl_ms = self.list_ttl_ms;
        Ok(page)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut page = ListResourceTemplatesResult::with_all_items(Vec::new());
        page.ttl_ms = self.list_ttl_ms;
        Ok(page)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        // `docs://state` answers `input_required` with a request state until a retry
        // echoes it, a state-only round (MCP 2026-07-28, SEP-2322); `docs://forever`
        // never stops asking.
        let asks = match request.uri.as_str() {
            "docs://state" => request.request_state.as_deref() != Some("round-1"),
            "docs://forever" => true,
            _ => false,
        };
        if asks {
            return Ok(ReadResourceResponse::InputRequired(
                InputRequiredResult::from_request_state("round-1"),
            ));
        }
        let text = ResourceContents::text(format!("read {n}"), request.uri);
        let mut result = ReadResourceResult::new(vec![text]);
        if let Some(ms) = self.ttl_ms {
            result.ttl_ms = Some(ms);
        }
        Ok(result.into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.listened
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(requested.resource_subscriptions.clone().unwrap_or_default());
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    #[allow(deprecated)] // legacy-only in rmcp 3.11, as on the client side
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(request.uri);
        Ok(())
    }
}

/// A host with one server, `docs`, connected to `server` in process (as `connect_all`
/// would connect it, but over a duplex pipe), pinned to protocol 2025-11-25.
async fn connected(server: Docs) -> McpHost {
    connected_with(server, ProtocolMode::Legacy).await
}

/// [`connected`], speaking `protocol` (rmcp's servers speak both eras).
async fn connected_with(server: Docs, protocol: ProtocolMode) -> McpHost {
    connected_to(server, protocol, HostOptions::default()).await
}

/// A host with `options` and one server, `docs`: `server` in process, speaking
/// `protocol`.
pub(super) async fn connected_to<S: ServerHandler>(
    server: S,
    protocol: ProtocolMode,
    options: HostOptions,
) -> McpHost {
    let mut config = ServerConfig::stdio("docs", "unused", Vec::<String>::new());
    config.protocol = protocol;
    let host = McpHost::new([config], options);
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let slot = host.slot("docs").unwrap_or_else(|e| unreachable!("{e}"));
    let (read, write) = tokio::io::split(client_io);
    let conn = slot.new_connection();
    let established = connect::serve(
        connect::handler(&host.options, &slot),
        AsyncRwTransport::new_client(read, write),
        &slot,
        Arc::clone(&host.cache),
        conn,
        connect::lifecycle(&slot),
    );
    let established = connect::within(host.options.connect_timeout, established).await;
    connect::finish(&slot, &host.options, established).await;
    host.start_loop(&slot);
    host
}

#[tokio::test]
async fn connects_lists_every_page_and_reports_the_server() {
    let host = connected(Docs::default()).await;
    let servers = host.servers();
    assert_eq!(servers.len(), 1);
    let docs = &servers[0];
    assert!(
        matches!(docs.status, ServerStatus::Connected),
        "{:?}",
        docs.status
    );
    assert!(docs.capabilities.resources && docs.capabilities.resources_subscribe);
    assert!(!docs.capabilities.tools && !docs.capabilities.prompts);
    assert_eq!(docs.implementation, Some(("docs".into(), "1.0".into())));
    assert_eq!(docs.counts.resources, 3);
    assert!(docs.warnings.is_empty(), "{:?}", docs.warnings);
    let uris: Vec<String> = host
        .list_resources("docs")
        .await
        .unwrap_or_else(|e| unreachable!("{e}"))
        .iter()
        .map(|r| r.uri.clone())
        .collect();
    assert_eq!(uris, ["docs://1", "docs://2", "docs://3"]);
    let counts = host.request_counts("docs").unwrap_or_default();
    assert_eq!(counts.get("resources/list"), Some(&2));
    // Not declared: never asked.
    assert_eq!(counts.get("tools/list"), None);
    assert_eq!(host.connections("docs"), 1);
    host.shutdown().await;
    assert!(matches!(
        &host.servers()[0].status,
        ServerStatus::Failed { reason } if reason == "the host shut down"
    ));
}

#[tokio::test]
async fn a_read_subscribes_once_and_is_cached() {
    let server = Docs::default();
    let host = connected(server.clone()).await;
    for _ in 0..2 {
        let read = host
            .read_resource("docs", "docs://1")
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(read.contents.len(), 1);
    }
    assert_eq!(server.reads.load(Ordering::SeqCst), 1);
    assert_eq!(host.subscriptions("docs"), ["docs://1"]);
    assert_eq!(
        *server
            .subscribed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        ["docs://1"]
    );
    host.shutdown().await;
}

#[tokio::test]
async fn an_undeclared_capability_is_refused_before_any_request() {
    let host = connected(Docs::default()).await;
    let prompt = host
        .get_prompt("docs", "p", &std::collections::BTreeMap::new())
        .await;
    assert!(matches!(
        prompt,
        Err(SourceError::NotSupported {
            capability: "prompts",
            ..
        })
    ));
    let tool = host.call_tool("docs", "t", None).await;
    assert!(matches!(
        tool,
        Err(SourceError::NotSupported {
            capability: "tools",
            ..
        })
    ));
    let counts = host.request_counts("docs").unwrap_or_default();
    assert_eq!(counts.get("prompts/get"), None);
    assert_eq!(counts.get("tools/call"), None);
    let unknown = host.list_tools("nope").await;
    assert!(matches!(unknown, Err(SourceError::UnknownServer { .. })));
    host.shutdown().await;
}

#[tokio::test]
async fn auto_mode_speaks_2026_07_28_to_a_server_that_does_and_listens_instead_of_subscribing() {
    let server = Docs {
        ttl_ms: Some(60_000),
        ..Docs::default()
    };
    let host = connected_with(server.clone(), ProtocolMode::Auto).await;
    let docs = &host.servers()[0];
    assert_eq!(docs.protocol_version.as_deref(), Some("2026-07-28"));
    // The server declares no list changes: nothing is listened for before a read.
    let listened = || {
        server
            .listened
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    };
    assert!(listened().is_empty());
    for _ in 0..2 {
        let read = host
            .read_resource("docs", "docs://1")
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(read.contents.len(), 1);
    }
    // The read listened again with its URI (no `resources/subscribe`), and the server's
    // ttlMs let the second read come from the cache.
    assert_eq!(listened(), [vec!["docs://1".to_owned()]]);
    assert_eq!(host.subscriptions("docs"), ["docs://1"]);
    assert!(
        server
            .subscribed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    );
    assert_eq!(server.reads.load(Ordering::SeqCst), 1);
    host.shutdown().await;
}

#[tokio::test]
async fn a_2026_07_28_read_without_ttl_is_not_cached() {
    let server = Docs::default();
    let host = connected_with(server.clone(), ProtocolMode::Modern).await;
    for _ in 0..2 {
        host.read_resource("docs", "docs://1")
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
    }
    // ttlMs missing means 0: the server said not to keep it (spec 2026-07-28, "Caching").
    assert_eq!(server.reads.load(Ordering::SeqCst), 2);
    host.shutdown().await;
}

#[tokio::test]
async fn concurrent_first_reads_end_with_one_listen_holding_every_uri() {
    let server = Docs {
        ttl_ms: Some(60_000),
        ..Docs::default()
    };
    let host = Arc::new(connected_with(server.clone(), ProtocolMode::Modern).await);
    let reads: Vec<_> = ["docs://1", "docs://2", "docs://3"]
        .into_iter()
        .map(|uri| {
            let host = Arc::clone(&host);
            tokio::spawn(async move { host.read_resource("docs", uri).await.is_ok() })
        })
        .collect();
    for r in reads {
        assert!(r.await.unwrap_or(false));
    }
    let listened = server
        .listened
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut last = listened.last().cloned().unwrap_or_default();
    last.sort();
    assert_eq!(last, ["docs://1", "docs://2", "docs://3"], "{listened:?}");
    assert_eq!(
        host.subscriptions("docs"),
        ["docs://1", "docs://2", "docs://3"]
    );
    host.shutdown().await;
}

#[tokio::test]
async fn an_input_required_read_is_retried_with_the_state_and_a_server_that_keeps_asking_fails() {
    // The server would let a complete answer be cached for a minute.
    let server = Docs {
        ttl_ms: Some(60_000),
        ..Docs::default()
    };
    let host = connected_with(server.clone(), ProtocolMode::Modern).await;
    for round in 1..=2 {
        let read = host
            .read_resource("docs", "docs://state")
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(read.contents.len(), 1);
        // A plain round that asked, then the driven read: its first round asked too,
        // its retry with the state got the resource. Never cached: the second read
        // goes to the server again.
        assert_eq!(server.reads.load(Ordering::SeqCst), 3 * round);
    }
    let Err(e) = host.read_resource("docs", "docs://forever").await else {
        unreachable!("a server that keeps asking fails the read")
    };
    assert_eq!(
        e.to_string(),
        "MCP server `docs`: resources/read: invalid response: the server still asked for input (`input_required`) after 10 rounds"
    );
    assert_eq!(server.reads.load(Ordering::SeqCst), 6 + 1 + 10);
    host.shutdown().await;
}

/// How many `resources/list` requests (two pages each) the host sent after `calls`
/// concurrent `list_resources`, to a connection to `server` in `protocol`, keeping lists
/// at least `min_list_ttl_ms`.
async fn lists_after(
    server: Docs,
    protocol: ProtocolMode,
    calls: usize,
    min_list_ttl_ms: u64,
) -> u64 {
    let options = HostOptions {
        min_list_ttl: std::time::Duration::from_millis(min_list_ttl_ms),
        ..HostOptions::default()
    };
    let host = Arc::new(connected_to(server, protocol, options).await);
    let listing: Vec<_> = (0..calls)
        .map(|_| {
            let host = Arc::clone(&host);
            tokio::spawn(async move { host.list_resources("docs").await.map(|l| l.len()) })
        })
        .collect();
    for l in listing {
        assert_eq!(l.await.ok().and_then(Result::ok), Some(3));
    }
    let counts = host.request_counts("docs").unwrap_or_default();
    host.shutdown().await;
    counts.get("resources/list").copied().unwrap_or(0)
}

#[tokio::test]
async fn a_2026_07_28_list_is_kept_for_its_ttl_or_until_notified() {
    use ProtocolMode::{Legacy, Modern};
    // ttlMs missing means 0 (spec 2026-07-28, "Caching"): with no floor, listed again
    // when needed, after the two pages of the connect; concurrent needs share one
    // listing.
    assert_eq!(lists_after(Docs::default(), Modern, 1, 0).await, 4);
    let many = lists_after(Docs::default(), Modern, 8, 0).await;
    assert!(
        (4..=6).contains(&many),
        "8 concurrent needs sent {many} resources/list"
    );
    // The default floor of a second: the connect's listing serves.
    assert_eq!(lists_after(Docs::default(), Modern, 3, 1000).await, 2);
    // A TTL of a minute, no floor: the connect's listing serves too.
    let minute = Docs {
        list_ttl_ms: Some(60_000),
        ..Docs::default()
    };
    assert_eq!(lists_after(minute, Modern, 3, 0).await, 2);
    // A server that notifies list changes: kept until it does, whatever the TTL.
    let notifies = Docs {
        list_changed: true,
        ..Docs::default()
    };
    assert_eq!(lists_after(notifies, Modern, 3, 0).await, 2);
    // Before 2026-07-28 there is no ttlMs: kept until a `list_changed`.
    assert_eq!(lists_after(Docs::default(), Legacy, 3, 0).await, 2);
}
