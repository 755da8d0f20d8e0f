//! The MCP host: one session per configured server, connected concurrently, with the
//! lists prefetched and every request under a timeout.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{
    ListCounts, McpSource, Prompt, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerInfo, ServerStatus, SourceError, Tool, ToolCallResult,
};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
};
use rmcp::service::{ClientCacheConfig, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use tokio::io::AsyncBufReadExt;

use crate::config::{ServerConfig, TransportConfig};
use crate::convert;

/// Host-wide limits. Every value is a default that a server's config may override where
/// it says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// Spawn (or HTTP connect) plus the `initialize` handshake. Default 30 s (an `npx`
    /// server may install itself on first start).
    pub connect_timeout: Duration,
    /// Each request (`*/list` page, `resources/read`, `tools/call`). Default 30 s.
    /// rmcp has no default request timeout; this is what keeps a lost answer (e.g. a
    /// stdio message over rmcp's 16 MiB line cap, which it drops silently) from hanging
    /// the turn.
    pub request_timeout: Duration,
    /// Pages followed per list before the list is cut with a warning. Default 100.
    pub max_list_pages: usize,
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version`.
    pub client_version: String,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_list_pages: 100,
            client_name: "hostpipe".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

type Session = RunningService<RoleClient, ClientConfig>;

#[derive(Default)]
struct State {
    status: Option<ServerStatus>,
    capabilities: ServerCapabilities,
    protocol_version: Option<String>,
    implementation: Option<(String, String)>,
    instructions: Option<String>,
    warnings: Vec<String>,
    resources: Option<Arc<[Resource]>>,
    templates: Option<Arc<[ResourceTemplate]>>,
    tools: Option<Arc<[Tool]>>,
    prompts: Option<Arc<[Prompt]>>,
    peer: Option<Peer<RoleClient>>,
}

const STDERR_TAIL_LINES: usize = 5;

struct Slot {
    config: ServerConfig,
    state: RwLock<State>,
    session: tokio::sync::Mutex<Option<Session>>,
    requests: Mutex<BTreeMap<&'static str, u64>>,
    stderr_tail: Mutex<VecDeque<String>>,
    /// The process group of a stdio server (its own, led by the child).
    process_group: Mutex<Option<u32>>,
}

impl Slot {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn status(&self) -> ServerStatus {
        let st = self.read();
        if let Some(peer) = &st.peer
            && peer.is_transport_closed()
        {
            return ServerStatus::Failed {
                reason: "the connection closed (the server exited or dropped the session)".into(),
            };
        }
        st.status.clone().unwrap_or(if self.config.disabled {
            ServerStatus::Disabled
        } else {
            ServerStatus::Connecting
        })
    }

    fn count(&self, method: &'static str) {
        *self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(method)
            .or_default() += 1;
    }

    /// Kills what is left of a stdio server's process group (`npx` and its children).
    fn kill_process_group(&self) {
        let group = self
            .process_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        #[cfg(unix)]
        if let Some(pgid) = group.and_then(|g| i32::try_from(g).ok()) {
            use nix::sys::signal::{Signal, killpg};
            // ESRCH (nothing left) is the usual, good outcome.
            let _ = killpg(nix::unistd::Pid::from_raw(pgid), Signal::SIGKILL);
        }
        #[cfg(not(unix))]
        let _ = group;
    }

    fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

/// The MCP host. Create it with [`McpHost::new`], then [`McpHost::connect_all`]; it
/// implements [`McpSource`] for the stages. Server names are unique; servers are kept
/// sorted by name.
pub struct McpHost {
    slots: BTreeMap<String, Arc<Slot>>,
    options: HostOptions,
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
            slot.kill_process_group();
        }
    }
}

impl McpHost {
    /// A host for `servers` (not yet connected). A later entry with the same name
    /// replaces an earlier one.
    pub fn new(servers: impl IntoIterator<Item = ServerConfig>, options: HostOptions) -> Self {
        let slots = servers
            .into_iter()
            .map(|config| {
                let slot = Slot {
                    config,
                    state: RwLock::default(),
                    session: tokio::sync::Mutex::new(None),
                    requests: Mutex::default(),
                    stderr_tail: Mutex::default(),
                    process_group: Mutex::default(),
                };
                (slot.config.name.clone(), Arc::new(slot))
            })
            .collect();
        Self { slots, options }
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
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            if slot.config.disabled {
                slot.write().status = Some(ServerStatus::Disabled);
                continue;
            }
            slot.write().status = Some(ServerStatus::Connecting);
            set.spawn(connect(Arc::clone(slot), self.options.clone()));
        }
        while let Some(joined) = set.join_next().await {
            if let Err(e) = joined {
                tracing::error!(error = %e, "an MCP connect task failed");
            }
        }
    }

    /// Closes every session, then kills whatever is left of each stdio server's
    /// process group. Each session gets up to 3 s to close (rmcp closes stdin, then sends
    /// SIGTERM); all close concurrently. Dropping the host also kills the process groups.
    pub async fn shutdown(&self) {
        let mut set = tokio::task::JoinSet::new();
        for slot in self.slots.values() {
            let session = slot.session.lock().await.take();
            slot.write().peer = None;
            if let Some(session) = session {
                set.spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(3), session.cancel()).await;
                });
            }
        }
        while set.join_next().await.is_some() {}
        for slot in self.slots.values() {
            slot.kill_process_group();
        }
    }

    /// How many requests of each MCP method were sent to `server` (e.g.
    /// `resources/list` → 1). For diagnostics and tests; `None` if not configured.
    pub fn request_counts(&self, server: &str) -> Option<BTreeMap<&'static str, u64>> {
        self.slots.get(server).map(|s| {
            s.requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
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

    fn cached<T: ?Sized>(
        &self,
        server: &str,
        pick: impl Fn(&State) -> Option<Arc<T>>,
        empty: impl Fn() -> Arc<T>,
    ) -> Result<Arc<T>, SourceError> {
        let slot = self.slot(server)?;
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

async fn timed<T>(
    slot: &Slot,
    method: &'static str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, SourceError> {
    slot.count(method);
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(convert::service_error(&slot.config.name, method, e)),
        // Dropping the request future made rmcp send `notifications/cancelled`.
        Err(_) => Err(SourceError::Timeout {
            server: slot.config.name.clone(),
            operation: method.into(),
            timeout,
        }),
    }
}

/// Follows `nextCursor` to the end (MCP spec 2025-11-25, "Utilities / Pagination"),
/// at most `max_pages` pages, stopping at a repeated cursor. Returns the items and, when
/// the list was cut, why.
async fn list_paged<T, F, Fut>(
    slot: &Slot,
    method: &'static str,
    options: &HostOptions,
    mut page: F,
) -> Result<(Vec<T>, Option<String>), SourceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let timeout = slot
        .config
        .request_timeout
        .unwrap_or(options.request_timeout);
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..options.max_list_pages.max(1) {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (mut batch, next) = match timed(slot, method, timeout, page(params)).await {
            Ok(page) => page,
            // A server that declares the capability but not this list method (e.g. a
            // low-level Python SDK server without templates) simply has none.
            Err(SourceError::Protocol { code: -32601, .. }) if cursor.is_none() => {
                tracing::debug!(server = %slot.config.name, method, "method not found; treating the list as empty");
                return Ok((Vec::new(), None));
            }
            Err(e) => return Err(e),
        };
        items.append(&mut batch);
        match next {
            None => return Ok((items, None)),
            Some(next) if !seen.insert(next.clone()) => {
                let why = format!(
                    "{method}: the server repeated cursor `{next}`; the list was cut at {} items",
                    items.len()
                );
                return Ok((items, Some(why)));
            }
            Some(next) => cursor = Some(next),
        }
    }
    let cut = format!(
        "{method}: more than {} pages; the list was cut at {} items",
        options.max_list_pages.max(1),
        items.len()
    );
    Ok((items, Some(cut)))
}

async fn connect(slot: Arc<Slot>, options: HostOptions) {
    let name = slot.config.name.clone();
    let connect_timeout = slot
        .config
        .connect_timeout
        .unwrap_or(options.connect_timeout);
    let result = match tokio::time::timeout(connect_timeout, establish(&slot, &options)).await {
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
            slot.write().status = Some(ServerStatus::Failed { reason });
            return;
        }
    };
    let peer = session.peer().clone();
    // rmcp's client response cache (SEP-2549) is on by default and may answer a read
    // from cache, or serve a stale copy when a refetch fails. Reads here must be
    // authoritative and hostpipe keeps its own cache, so it is switched off.
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
        if let Some(i) = &info {
            st.protocol_version = Some(i.protocol_version.to_string());
            st.implementation = i
                .server_info
                .as_ref()
                .map(|s| (s.name.clone(), s.version.clone()));
            st.instructions.clone_from(&i.instructions);
        }
    }
    *slot.session.lock().await = Some(session);

    let mut warnings = Vec::new();
    // One paged listing, converted; a failure or a cut becomes a warning.
    macro_rules! prefetch {
        ($method:literal, $call:ident, $field:ident, $conv:path) => {{
            let p = peer.clone();
            let listed = list_paged(&slot, $method, &options, move |params| {
                let p = p.clone();
                async move { p.$call(params).await.map(|r| (r.$field, r.next_cursor)) }
            })
            .await;
            note_listing(&mut warnings, listed)
                .map(|v| v.into_iter().map($conv).collect::<Arc<[_]>>())
        }};
    }
    let tools = if caps.tools {
        prefetch!("tools/list", list_tools, tools, convert::tool)
    } else {
        None
    };
    let (resources, templates) = if caps.resources {
        (
            prefetch!(
                "resources/list",
                list_resources,
                resources,
                convert::resource
            ),
            prefetch!(
                "resources/templates/list",
                list_resource_templates,
                resource_templates,
                convert::resource_template
            ),
        )
    } else {
        (None, None)
    };
    let prompts = if caps.prompts {
        prefetch!("prompts/list", list_prompts, prompts, convert::prompt)
    } else {
        None
    };
    for w in &warnings {
        tracing::warn!(server = %name, warning = %w, "MCP listing problem");
    }
    let mut st = slot.write();
    st.tools = tools;
    st.resources = resources;
    st.templates = templates;
    st.prompts = prompts;
    st.warnings = warnings;
    st.peer = Some(peer);
    st.status = Some(ServerStatus::Connected);
    tracing::info!(server = %name, "MCP server connected");
}

/// Keeps a listing's items, moving a cut or a failure into `warnings` (a server whose
/// list fails stays connected; the list is then empty).
fn note_listing<T>(
    warnings: &mut Vec<String>,
    r: Result<(Vec<T>, Option<String>), SourceError>,
) -> Option<Vec<T>> {
    match r {
        Ok((items, cut)) => {
            warnings.extend(cut);
            Some(items)
        }
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    }
}

async fn establish(slot: &Arc<Slot>, options: &HostOptions) -> Result<Session, String> {
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(options.client_name.clone(), options.client_version.clone()),
    )
    // rmcp 3.11 puts 2026-07-28 (no `initialize`) into `initialize` by default; pin the
    // newest version that has the handshake, which every current server speaks.
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    match &slot.config.transport {
        TransportConfig::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
            // Its own process group, so `npx`/`uvx` wrappers and their children go away
            // together on shutdown.
            wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
            let (transport, stderr) = TokioChildProcess::builder(wrap)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            *slot
                .process_group
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = transport.id();
            if let Some(stderr) = stderr {
                tokio::spawn(drain_stderr(Arc::clone(slot), stderr));
            }
            client
                .serve(transport)
                .await
                .map_err(|e| format!("`initialize` failed: {}", convert::describe_init(&e)))
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
            let transport = StreamableHttpClientTransport::from_config(config);
            client
                .serve(transport)
                .await
                .map_err(|e| format!("`initialize` failed: {}", convert::describe_init(&e)))
        }
    }
}

async fn drain_stderr(slot: Arc<Slot>, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "hostpipe_mcp::server_stderr", server = %slot.config.name, "{line}");
        let mut tail = slot
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
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
    }

    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError> {
        self.cached(server, |s| s.templates.clone(), || Arc::from([]))
    }

    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError> {
        self.cached(server, |s| s.tools.clone(), || Arc::from([]))
    }

    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError> {
        self.cached(server, |s| s.prompts.clone(), || Arc::from([]))
    }

    async fn read_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<Vec<ResourceContents>, SourceError> {
        let (slot, peer) = self.peer(server, Some("resources"))?;
        let timeout = slot
            .config
            .request_timeout
            .unwrap_or(self.options.request_timeout);
        let result = timed(
            &slot,
            "resources/read",
            timeout,
            peer.read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await?;
        result
            .contents
            .into_iter()
            .map(|c| convert::contents(server, c))
            .collect()
    }

    async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ToolCallResult, SourceError> {
        let (slot, peer) = self.peer(server, Some("tools"))?;
        let timeout = slot
            .config
            .request_timeout
            .unwrap_or(self.options.request_timeout);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let result = timed(&slot, "tools/call", timeout, peer.call_tool(params)).await?;
        convert::tool_result(server, result)
    }
}
