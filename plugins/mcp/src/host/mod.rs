//! The MCP host: one session per configured server, connected concurrently, with the
//! lists prefetched, every request under a timeout, a content cache, subscriptions, and
//! reconnection of lost servers ([`live`]).

mod lists;
mod live;
mod observed;
mod options;
mod slot;

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{
    Completion, CompletionRef, ListCounts, McpSource, Prompt, PromptResult, Resource, ResourceRead,
    ResourceTemplate, ServerInfo, ServerStatus, SourceError, Tool, ToolCallResult,
};
use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, ClientCapabilities, ClientConfig, CompleteRequestParams,
    CompletionContext, GetPromptRequestParams, Implementation, ProtocolVersion,
    ReadResourceRequestParams, Reference,
};
use rmcp::service::ClientCacheConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{Peer, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;

use crate::cache::{ContentCache, Fetched};
use crate::config::{ServerConfig, TransportConfig};
use crate::convert;
use crate::stdio::LineLimited;
use lists::{Which, refresh_lists};
use observed::Observed;
pub use options::HostOptions;
use slot::{Session, Signal, Signals, Slot, State, subscribe_once, timed};

/// The MCP host. Create it with [`McpHost::new`], then [`McpHost::connect_all`]; it
/// implements [`McpSource`] for the stages. Server names are unique; servers are kept
/// sorted by name.
///
/// Once connected, each server has an event loop (a tokio task) that applies its
/// notifications in arrival order: `resources/updated` drops the cached copy,
/// `*/list_changed` lists again (debounced), and a lost connection is reconnected with
/// backoff ([`HostOptions::reconnect_delay`]). Reads go through a content cache keyed
/// by (server, URI) ([`HostOptions::content_ttl`]); the first read of a URI subscribes
/// to it when the server declares `resources.subscribe`, and the subscription ends when
/// the cache lets the entry go.
pub struct McpHost {
    slots: BTreeMap<String, Arc<Slot>>,
    options: HostOptions,
    cache: Arc<ContentCache>,
    loops: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("servers", &self.slots.keys().collect::<Vec<_>>())
            .field("options", &self.options)
            .finish()
    }
}

impl Drop for McpHost {
    fn drop(&mut self) {
        for slot in self.slots.values() {
            slot.closing.store(true, Ordering::Relaxed);
            slot.kill_process_group();
            // The session's transport holds the slot; dropping the session (which
            // cancels it) breaks that cycle when `shutdown` was not called.
            slot.try_drop_session();
        }
        self.abort_loops();
    }
}

impl McpHost {
    /// A host for `servers` (not yet connected). A later entry with the same name
    /// replaces an earlier one.
    pub fn new(servers: impl IntoIterator<Item = ServerConfig>, options: HostOptions) -> Self {
        let slots: BTreeMap<String, Arc<Slot>> = servers
            .into_iter()
            .map(|config| (config.name.clone(), Arc::new(Slot::new(config))))
            .collect();
        let senders: HashMap<String, Signals> = slots
            .iter()
            .map(|(name, slot)| (name.clone(), slot.signals.clone()))
            .collect();
        // Only the senders: the cache must not hold the slots (they hold the cache).
        // An eviction concerns whichever connection is current: tagged 0, "any".
        let on_evict = Arc::new(move |server: &str, uri: &str| {
            if let Some(tx) = senders.get(server) {
                let _ = tx.send((0, Signal::Evicted(uri.into())));
            }
        });
        let cache = Arc::new(ContentCache::new(
            options.content_cache_bytes,
            options.content_ttl,
            on_evict,
        ));
        Self {
            slots,
            options,
            cache,
            loops: Mutex::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// Connects every enabled server concurrently, each under its connect timeout, and
    /// prefetches its tools, resources, resource templates and prompts (only the kinds
    /// it declares). Returns when every server is connected or failed. Never fails as a
    /// whole: a server's failure is its status.
    pub async fn connect_all(&self) {
        self.connect_only(None).await;
    }

    /// [`McpHost::connect_all`] for the servers named in `only` (`None`: all). The
    /// others stay unconnected (status `connecting`): a command that needs one server
    /// does not wait for the others. Unknown names are ignored.
    pub async fn connect_only(&self, only: Option<&[String]>) {
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            if only.is_some_and(|names| !names.contains(&slot.config.name)) {
                continue;
            }
            if slot.config.disabled {
                slot.write().status = Some(ServerStatus::Disabled);
                continue;
            }
            slot.write().status = Some(ServerStatus::Connecting);
            let (slot, options, cache) = (
                Arc::clone(slot),
                self.options.clone(),
                Arc::clone(&self.cache),
            );
            set.spawn(async move {
                connect(Arc::clone(&slot), options, cache).await;
                slot
            });
        }
        // Each server's event loop starts as soon as its connect succeeds, so one that
        // is lost while others still connect is reconnected (its `Closed` waits in the
        // queue). A server that never connected is not retried: its config is the
        // likelier problem, and its status says what it is.
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(slot) => self.start_loop(&slot),
                Err(e) => tracing::error!(error = %e, "an MCP connect task failed"),
            }
        }
    }

    fn start_loop(&self, slot: &Arc<Slot>) {
        // Only for a server whose first connect succeeded (it has a session).
        if slot.closing.load(Ordering::Relaxed) || slot.peer().is_none() {
            return;
        }
        if let Some(rx) = slot.take_signals() {
            self.loops
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(tokio::spawn(live::run(
                    Arc::clone(slot),
                    self.options.clone(),
                    Arc::clone(&self.cache),
                    rx,
                )));
        }
    }

    /// Stops every server's event loop (no reconnects from here on).
    fn abort_loops(&self) {
        for task in self
            .loops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }

    /// Closes every session and stops the stdio servers, all concurrently: each
    /// session gets up to 3 s to close, then each child up to 2 s to exit on its own,
    /// then SIGTERM to its process group and up to 1 s, then SIGKILL. Dropping the host
    /// kills the process groups at once.
    pub async fn shutdown(&self) {
        self.abort_loops();
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            slot.closing.store(true, Ordering::Relaxed);
            let slot = Arc::clone(slot);
            set.spawn(async move {
                let before = slot.read().status.clone();
                slot.drop_session().await;
                // A disabled server, or one that failed (e.g. never connected), keeps
                // the status that says why.
                if !matches!(
                    before,
                    Some(ServerStatus::Disabled | ServerStatus::Failed { .. })
                ) {
                    slot.set_status(ServerStatus::Failed {
                        reason: "the host shut down".into(),
                    });
                }
            });
        }
        while set.join_next().await.is_some() {}
    }

    /// How many `notifications/resources/updated` `server` has sent (diagnostics and
    /// tests); `None` if not configured.
    pub fn updates_received(&self, server: &str) -> Option<u64> {
        self.slots.get(server).map(|s| s.updates())
    }

    /// The URIs `server` is subscribed to on its current connection, sorted.
    pub fn subscriptions(&self, server: &str) -> Vec<String> {
        self.slots
            .get(server)
            .map_or_else(Vec::new, |s| s.subscriptions())
    }

    /// How many connection attempts `server` has had: 1 after the first connect, one
    /// more for each reconnect attempt. 0 if not configured or disabled.
    pub fn connections(&self, server: &str) -> u64 {
        self.slots
            .get(server)
            .map_or(0, |s| s.conn.load(Ordering::SeqCst))
    }

    /// How many requests of each MCP method were sent to `server` (e.g.
    /// `resources/list` → 1). For diagnostics and tests; `None` if not configured.
    pub fn request_counts(&self, server: &str) -> Option<BTreeMap<&'static str, u64>> {
        self.slots.get(server).map(|s| s.request_counts())
    }

    fn slot(&self, server: &str) -> Result<&Arc<Slot>, SourceError> {
        self.slots
            .get(server)
            .ok_or_else(|| SourceError::UnknownServer {
                server: server.to_owned(),
                known: self.slots.keys().cloned().collect(),
            })
    }

    /// The peer of a connected server, checking the capability the method needs.
    fn peer(
        &self,
        server: &str,
        capability: Option<&'static str>,
    ) -> Result<(Arc<Slot>, Peer<RoleClient>), SourceError> {
        let slot = self.slot(server)?;
        let status = slot.status();
        if !status.is_connected() {
            return Err(SourceError::Unavailable {
                server: server.to_owned(),
                reason: status.describe(),
            });
        }
        let st = slot.read();
        if let Some(cap) = capability {
            let declared = match cap {
                "resources" => st.capabilities.resources,
                "tools" => st.capabilities.tools,
                "prompts" => st.capabilities.prompts,
                "completions" => st.capabilities.completions,
                _ => true,
            };
            if !declared {
                return Err(SourceError::NotSupported {
                    server: server.to_owned(),
                    capability: cap,
                });
            }
        }
        let peer = st.peer.clone().ok_or_else(|| SourceError::Unavailable {
            server: server.to_owned(),
            reason: "no session".into(),
        })?;
        Ok((Arc::clone(slot), peer))
    }

    async fn cached<T: ?Sized>(
        &self,
        server: &str,
        pick: impl Fn(&State) -> Option<Arc<T>>,
        empty: impl Fn() -> Arc<T>,
    ) -> Result<Arc<T>, SourceError> {
        let slot = self.slot(server)?;
        // Not connected: answer now, not after waiting for a refresh that cannot come.
        if slot.status().is_connected() && slot.lists.is_stale() {
            live::wait_fresh(slot, slot.request_timeout(&self.options)).await;
        }
        let status = slot.status();
        if !status.is_connected() {
            return Err(SourceError::Unavailable {
                server: server.to_owned(),
                reason: status.describe(),
            });
        }
        Ok(pick(&slot.read()).unwrap_or_else(empty))
    }
}

/// Connects (or reconnects) one server under its connect timeout and lists what it
/// declares. The outcome is the slot's status.
async fn connect(slot: Arc<Slot>, options: HostOptions, cache: Arc<ContentCache>) {
    let name = slot.config.name.clone();
    let connect_timeout = slot
        .config
        .connect_timeout
        .unwrap_or(options.connect_timeout);
    let establishing = establish(&slot, &options, cache);
    let result = match tokio::time::timeout(connect_timeout, establishing).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer to `initialize` within {} ms",
            connect_timeout.as_millis()
        )),
    };
    let session = match result {
        Ok(session) => session,
        Err(reason) => {
            tracing::info!(server = %name, %reason, stderr = ?slot.stderr_tail(), "MCP server failed to connect");
            slot.stop_child().await;
            slot.write().status = Some(ServerStatus::Failed { reason });
            return;
        }
    };
    let peer = session.peer().clone();
    // rmcp's client response cache (SEP-2549) is on by default and may answer a read
    // from cache, or serve a stale copy when a refetch fails. Reads here must be
    // authoritative, and hostpipe's own content cache knows about `resources/updated`,
    // reconnects and per-turn provenance, so rmcp's is switched off.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let info = session.peer_info();
    let caps = info
        .as_ref()
        .map(|i| convert::capabilities(&i.capabilities))
        .unwrap_or_default();
    {
        let mut st = slot.write();
        st.capabilities = caps;
        st.peer = Some(peer);
        if let Some(i) = &info {
            st.protocol_version = Some(i.protocol_version.to_string());
            st.implementation = i
                .server_info
                .as_ref()
                .map(|s| (s.name.clone(), s.version.clone()));
            st.instructions.clone_from(&i.instructions);
        }
    }
    slot.set_session(session).await;
    // `shutdown` ran while this connect was in flight: it must not come back to life.
    if slot.closing.load(Ordering::Relaxed) {
        slot.drop_session().await;
        slot.set_status(ServerStatus::Failed {
            reason: "the host shut down".into(),
        });
        return;
    }
    let seen = slot.lists.seen.load(Ordering::SeqCst);
    refresh_lists(&slot, &options, Which::ALL).await;
    slot.lists.mark_refreshed(seen);
    slot.write().status = Some(ServerStatus::Connected);
    tracing::info!(server = %name, "MCP server connected");
}

async fn establish(
    slot: &Arc<Slot>,
    options: &HostOptions,
    cache: Arc<ContentCache>,
) -> Result<Session, String> {
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(options.client_name.clone(), options.client_version.clone()),
    )
    // rmcp 3.11 puts 2026-07-28 (no `initialize`) into `initialize` by default; pin the
    // newest version that has the handshake, which every current server speaks.
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let conn = slot.conn.fetch_add(1, Ordering::SeqCst) + 1;
    let handshake = |e: rmcp::service::ClientInitializeError| {
        format!("`initialize` failed: {}", convert::describe_init(&e))
    };
    match &slot.config.transport {
        TransportConfig::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            // hostpipe's environment holds secrets (model API keys, its API tokens, the
            // store URL with its password): a server gets the few variables the official
            // SDKs pass, those its config names, and its own `env`; nothing else.
            cmd.env_clear();
            for name in crate::config::INHERITED_ENV
                .iter()
                .copied()
                .chain(inherit_env.iter().map(String::as_str))
            {
                if let Some(value) = std::env::var_os(name) {
                    cmd.env(name, value);
                }
            }
            cmd.args(args)
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            // Its own process group, so `npx`/`uvx` wrappers and their children go away
            // together on shutdown.
            #[cfg(unix)]
            cmd.process_group(0);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            slot.set_process_group(child.id());
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(drain_stderr(Arc::clone(slot), stderr));
            }
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err(format!("`{command}`: no stdio pipes"));
            };
            slot.set_child(child);
            let limit = options.max_message_bytes;
            let reader = LineLimited::new(stdout, limit, &slot.config.name);
            // `LineLimited` enforces the limit (and fails the request); rmcp's own cap
            // would drop the line silently, so it is set out of the way.
            let transport =
                AsyncRwTransport::new_client(reader, stdin).with_max_line_length(usize::MAX);
            client
                .serve(Observed {
                    inner: transport,
                    slot: Arc::clone(slot),
                    cache,
                    conn,
                })
                .await
                .map_err(handshake)
        }
        TransportConfig::StreamableHttp { url, headers } => {
            let mut map = HashMap::new();
            for (k, v) in headers {
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| format!("header `{k}`: {e}"))?;
                let value =
                    http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
                map.insert(name, value);
            }
            let mut backoff = ExponentialBackoff::default();
            // rmcp's default retries the SSE stream forever with unbounded delays.
            backoff.max_times = Some(5);
            backoff.max_delay = Some(Duration::from_secs(10));
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
            config.retry_config = Arc::new(backoff);
            config.max_json_response_size = options.max_message_bytes;
            config.max_sse_event_size = options.max_message_bytes;
            // rmcp would re-initialize a session the server no longer knows without
            // telling its handler, and the server-side subscriptions would be lost
            // silently. hostpipe reconnects itself instead (`live::reconnect`), which
            // drops the cache and subscribes again.
            config.reinit_on_expired_session = false;
            let transport = StreamableHttpClientTransport::from_config(config);
            client
                .serve(Observed {
                    inner: transport,
                    slot: Arc::clone(slot),
                    cache,
                    conn,
                })
                .await
                .map_err(handshake)
        }
    }
}

async fn drain_stderr(slot: Arc<Slot>, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "hostpipe_mcp::server_stderr", server = %slot.config.name, "{line}");
        slot.push_stderr(line);
    }
}

#[async_trait]
impl McpSource for McpHost {
    fn servers(&self) -> Vec<ServerInfo> {
        self.slots
            .values()
            .map(|slot| {
                let status = slot.status();
                let st = slot.read();
                ServerInfo {
                    name: slot.config.name.clone(),
                    status,
                    capabilities: st.capabilities,
                    protocol_version: st.protocol_version.clone(),
                    implementation: st.implementation.clone(),
                    instructions: st.instructions.clone(),
                    counts: ListCounts {
                        tools: st.tools.as_ref().map_or(0, |l| l.len()),
                        resources: st.resources.as_ref().map_or(0, |l| l.len()),
                        resource_templates: st.templates.as_ref().map_or(0, |l| l.len()),
                        prompts: st.prompts.as_ref().map_or(0, |l| l.len()),
                    },
                    warnings: st.warnings.clone(),
                    stderr_tail: slot.stderr_tail(),
                }
            })
            .collect()
    }

    async fn list_resources(&self, server: &str) -> Result<Arc<[Resource]>, SourceError> {
        self.cached(server, |s| s.resources.clone(), || Arc::from([]))
            .await
    }

    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError> {
        self.cached(server, |s| s.templates.clone(), || Arc::from([]))
            .await
    }

    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError> {
        self.cached(server, |s| s.tools.clone(), || Arc::from([]))
            .await
    }

    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError> {
        self.cached(server, |s| s.prompts.clone(), || Arc::from([]))
            .await
    }

    async fn read_resource(&self, server: &str, uri: &str) -> Result<ResourceRead, SourceError> {
        let (slot, peer) = self.peer(server, Some("resources"))?;
        let _reading = slot.begin_read(uri);
        let timeout = slot.request_timeout(&self.options);
        // A subscription only serves to drop a cached copy: none without a cache.
        let subscribe = slot.read().capabilities.resources_subscribe && self.cache.is_enabled();
        self.cache
            .get_or_fetch(server, uri, || async {
                // Subscribe before reading, so a change after the read is announced.
                if subscribe {
                    subscribe_once(&slot, &peer, uri, timeout).await;
                }
                let result = timed(
                    &slot,
                    "resources/read",
                    timeout,
                    peer.read_resource(ReadResourceRequestParams::new(uri)),
                )
                .await?;
                let contents = result
                    .contents
                    .into_iter()
                    .map(|c| convert::contents(server, c))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Fetched {
                    contents,
                    ttl_ms: result.ttl_ms,
                })
            })
            .await
    }

    async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &BTreeMap<String, String>,
    ) -> Result<PromptResult, SourceError> {
        let (slot, peer) = self.peer(server, Some("prompts"))?;
        let timeout = slot.request_timeout(&self.options);
        let args: serde_json::Map<String, serde_json::Value> = arguments
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let params = GetPromptRequestParams::new(name).with_arguments(args);
        let result = timed(&slot, "prompts/get", timeout, peer.get_prompt(params)).await?;
        convert::prompt_result(server, result)
    }

    async fn complete(
        &self,
        server: &str,
        reference: &CompletionRef,
        argument: &str,
        value: &str,
        context: &BTreeMap<String, String>,
    ) -> Result<Completion, SourceError> {
        let (slot, peer) = self.peer(server, Some("completions"))?;
        let timeout = slot.request_timeout(&self.options);
        let reference = match reference {
            CompletionRef::Prompt { name } => Reference::for_prompt(name.clone()),
            CompletionRef::ResourceTemplate { uri_template } => {
                Reference::for_resource(uri_template.clone())
            }
        };
        let mut params = CompleteRequestParams::new(reference, ArgumentInfo::new(argument, value));
        if !context.is_empty() {
            params = params.with_context(CompletionContext::with_arguments(
                context
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ));
        }
        let result = timed(&slot, "completion/complete", timeout, peer.complete(params)).await?;
        Ok(Completion {
            values: result.completion.values,
            total: result.completion.total,
            has_more: result.completion.has_more.unwrap_or(false),
        })
    }

    async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ToolCallResult, SourceError> {
        let (slot, peer) = self.peer(server, Some("tools"))?;
        let timeout = slot.request_timeout(&self.options);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let result = timed(&slot, "tools/call", timeout, peer.call_tool(params)).await?;
        convert::tool_result(server, result)
    }
}
