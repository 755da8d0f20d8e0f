//! The façade against an in-process rmcp server over `tokio::io::duplex`: no process,
//! no network. The server declares `resources` (with `subscribe`) and nothing else.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use hostpipe_core::{McpSource, ServerStatus, SourceError};
use rmcp::model::{
    Implementation, ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ServerCapabilities as WireCapabilities, ServerConfig as WireServerConfig,
    SubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::connect;
use super::{HostOptions, McpHost};
use crate::config::ServerConfig;

/// Three resources over two pages; counts reads and keeps subscriptions.
#[derive(Clone, Default)]
struct Docs {
    reads: Arc<AtomicU32>,
    subscribed: Arc<Mutex<Vec<String>>>,
}

impl ServerHandler for Docs {
    fn get_info(&self) -> WireServerConfig {
        WireServerConfig::new(
            WireCapabilities::builder()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("docs", "1.0"))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let doc = |n: u32| Resource::new(format!("docs://{n}"), format!("doc {n}"));
        Ok(match request.and_then(|r| r.cursor) {
            None => {
                let mut page = ListResourcesResult::with_all_items(vec![doc(1), doc(2)]);
                page.next_cursor = Some("2".into());
                page
            }
            Some(_) => ListResourcesResult::with_all_items(vec![doc(3)]),
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        let text = ResourceContents::text(format!("read {n}"), request.uri);
        Ok(ReadResourceResult::new(vec![text]).into())
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
/// would connect it, but over a duplex pipe).
async fn connected(server: Docs) -> McpHost {
    let host = McpHost::new(
        [ServerConfig::stdio("docs", "unused", Vec::<String>::new())],
        HostOptions::default(),
    );
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let slot = Arc::clone(host.slot("docs").unwrap_or_else(|e| unreachable!("{e}")));
    let (read, write) = tokio::io::split(client_io);
    let conn = slot.new_connection();
    let established = connect::serve(
        connect::client_config(&host.options),
        AsyncRwTransport::new_client(read, write),
        &slot,
        Arc::clone(&host.cache),
        conn,
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
