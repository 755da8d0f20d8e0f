//! The MCP host: one session per configured server, connected concurrently, with the
//! lists prefetched, every request under a timeout, a content cache, subscriptions, and
//! reconnection of lost servers.
//!
//! This module is the façade: [`McpHost`] and its [`McpSource`] implementation. Its
//! parts each do one job, and none of them uses the façade:
//! - [`options`]: [`HostOptions`], the host-wide limits;
//! - [`slot`]: one server's state (status, lists, session, stdio child and its process
//!   group, subscriptions), and [`slot::timed`], which every request goes through;
//! - [`capability`]: the capabilities a request needs, checked before it is sent;
//! - [`lists`]: paging through and refreshing a server's lists;
//! - [`observed`]: the transport wrapper that sees notifications in arrival order;
//! - [`connect`](mod@connect): the stdio or streamable HTTP transport, `initialize`,
//!   and adopting the session;
//! - [`live`]: each server's event loop (list refreshes, unsubscribes, reconnects);
//! - [`changes`]: servers that come and go while the host runs (added, removed, a
//!   reload's difference applied).

mod capability;
mod changes;
mod connect;
mod elicit;
mod lists;
mod live;
mod oauth;
mod observed;
mod options;
mod slot;
mod span;
mod stats;
mod subscribe;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_apply;
#[cfg(test)]
mod tests_elicit;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use hostpipe_core::{
    Completion, CompletionRef, ListCounts, McpSource, Prompt, PromptResult, Resource, ResourceRead,
    ResourceTemplate, ServerInfo, ServerStatus, SourceError, Tool, ToolCallResult,
};
use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, CompleteRequestParams, CompletionContext,
    GetPromptRequestParams, ReadResourceRequestParams, ReadResourceResponse, Reference,
};
use rmcp::{Peer, RoleClient};

use crate::auth_config::AuthConfig;
use crate::cache::{ContentCache, Fetched};
use crate::config::{ServerConfig, TransportConfig};
use crate::convert;
use capability::Capability;
pub use changes::{AddServerError, Applied};
use connect::connect;
use lists::refresh_lists;
pub use oauth::{LoginError, PendingLogin, redirect_error, redirect_state};
pub use options::{Elicitation, HostOptions};
use slot::{Signal, Signals, Slot, State, Which, timed, timed_call};
use span::Call;
pub use stats::{MethodStats, REQUEST_SECONDS_BUCKETS, RequestOutcome};
use subscribe::subscribe_once;

/// Most `input_required` rounds a read, a prompt or a tool call may take (MCP
/// 2026-07-28 multi-round-trip requests, SEP-2322): the session answers each with what
/// hostpipe declares (elicitation, when [`HostOptions::elicitation`] declares it, put
/// to the turn's user; no sampling or roots), then retries with the server's
/// `requestState`; a server that keeps asking fails the request.
const MRTR_MAX_ROUNDS: usize = 10;

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
    /// The servers by name. Held only briefly, never across an `await`: every user
    /// takes its slot's `Arc` and lets go.
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Each server's event-loop channel, for the cache's evictions (the cache must not
    /// hold the slots: they hold the cache).
    senders: Arc<RwLock<HashMap<String, Signals>>>,
    options: HostOptions,
    cache: Arc<ContentCache>,
    /// The vault every server's OAuth credentials go to, servers added later included.
    vault: Mutex<Arc<dyn hostpipe_core::CredentialVault>>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost")
            .field("servers", &self.server_names())
            .field("options", &self.options)
            .finish()
    }
}

impl Drop for McpHost {
    fn drop(&mut self) {
        let slots = self.slots.get_mut().unwrap_or_else(PoisonError::into_inner);
        for slot in slots.values() {
            slot.closing.store(true, Ordering::Relaxed);
            slot.kill_process_group();
            // The session's transport holds the slot; dropping the session (which
            // cancels it) breaks that cycle when `shutdown` was not called.
            slot.try_drop_session();
            slot.abort_tasks();
        }
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
        let senders: Arc<RwLock<HashMap<String, Signals>>> = Arc::new(RwLock::new(
            slots
                .iter()
                .map(|(name, slot)| (name.clone(), slot.signals.clone()))
                .collect(),
        ));
        // Only the senders: the cache must not hold the slots (they hold the cache).
        // An eviction concerns whichever connection is current: tagged 0, "any".
        let on_evict = {
            let senders = Arc::clone(&senders);
            Arc::new(move |server: &str, uri: &str| {
                let senders = senders.read().unwrap_or_else(PoisonError::into_inner);
                if let Some(tx) = senders.get(server) {
                    let _ = tx.send((0, Signal::Evicted(uri.into())));
                }
            })
        };
        let cache = Arc::new(ContentCache::new(
            options.content_cache_bytes,
            options.content_ttl,
            on_evict,
        ));
        Self {
            slots: RwLock::new(slots),
            senders,
            options,
            cache,
            vault: Mutex::new(Arc::new(hostpipe_core::MemoryVault::new())),
        }
    }

    /// The servers, sorted by name (a snapshot: servers may come and go meanwhile).
    fn all_slots(&self) -> Vec<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The server names, sorted.
    pub fn server_names(&self) -> Vec<String> {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// The options.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// The entry `server` was configured with; `None` if there is no such server.
    pub fn server_config(&self, server: &str) -> Option<ServerConfig> {
        self.slot(server).ok().map(|s| s.config.clone())
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
        for slot in &self.all_slots() {
            if only.is_some_and(|names| !names.contains(&slot.config.name))
                || slot.added.load(Ordering::Relaxed)
            {
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

    /// Keeps trying the servers whose connect failed (status `failed`), with the backoff
    /// of a server lost later (`reconnect_delay` doubling up to `reconnect_max_delay`,
    /// with jitter; `max_reconnect_attempts`): for a long-running service whose MCP
    /// servers start in any order (compose, Kubernetes). Their status is `reconnecting`
    /// meanwhile, then `connected`. A server that needs a login or is disabled is left
    /// alone; so is every server in a one-shot command, which never calls this. Call
    /// after [`McpHost::connect_all`].
    pub fn keep_retrying_unreachable(&self) {
        for slot in &self.all_slots() {
            let ServerStatus::Failed { reason } = slot.status() else {
                continue;
            };
            if slot.peer().is_some() || slot.added.load(Ordering::Relaxed) {
                continue;
            }
            tracing::info!(server = %slot.config.name, %reason, "MCP server unreachable at start; retrying with backoff");
            // The loop's answer to a suspect without a session is a reconnect.
            let _ = slot
                .signals
                .send((slot.conn.load(Ordering::SeqCst), Signal::Suspect(reason)));
            self.spawn_loop(slot);
        }
    }

    fn start_loop(&self, slot: &Arc<Slot>) {
        // Only for a server whose first connect succeeded (it has a session).
        if slot.peer().is_none() {
            return;
        }
        self.spawn_loop(slot);
    }

    /// The server's event loop ([`live::run`]), once.
    fn spawn_loop(&self, slot: &Arc<Slot>) {
        if slot.closing.load(Ordering::Relaxed) {
            return;
        }
        if let Some(rx) = slot.take_signals() {
            slot.push_task(tokio::spawn(live::run(
                Arc::clone(slot),
                self.options.clone(),
                Arc::clone(&self.cache),
                rx,
            )));
        }
    }

    /// Stops every server's event loop (no reconnects from here on).
    fn abort_loops(&self) {
        for slot in self.all_slots() {
            slot.abort_tasks();
        }
    }

    /// Closes every session and stops the stdio servers, all concurrently: each
    /// session gets up to 3 s to close, then each child up to 2 s to exit on its own,
    /// then SIGTERM to its process group and up to 1 s, then SIGKILL. Dropping the host
    /// kills the process groups at once.
    pub async fn shutdown(&self) {
        self.abort_loops();
        let mut set = tokio::task::JoinSet::new();
        for slot in self.all_slots() {
            slot.closing.store(true, Ordering::Relaxed);
            set.spawn(async move {
                let before = slot.read().status.clone();
                slot.drop_session().await;
                // A disabled server, or one that failed (e.g. never connected), keeps
                // the status that says why.
                if !matches!(
                    before,
                    Some(
                        ServerStatus::Disabled
                            | ServerStatus::Failed { .. }
                            | ServerStatus::NeedsLogin { .. }
                    )
                ) {
                    slot.set_status(ServerStatus::Failed {
                        reason: "the host shut down".into(),
                    });
                }
            });
        }
        while set.join_next().await.is_some() {}
    }

    /// Keeps every server's OAuth credentials in `vault` from the next connect on (call
    /// it before [`McpHost::connect_all`]; the host starts with a
    /// [`MemoryVault`](hostpipe_core::MemoryVault)). stdio servers never see it.
    pub fn set_credential_vault(&self, vault: Arc<dyn hostpipe_core::CredentialVault>) {
        for slot in self.all_slots() {
            slot.set_vault(Arc::clone(&vault));
        }
        *self.vault.lock().unwrap_or_else(PoisonError::into_inner) = vault;
    }

    /// The vault servers added from now on use.
    fn vault(&self) -> Arc<dyn hostpipe_core::CredentialVault> {
        Arc::clone(&self.vault.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Starts an OAuth login to `server` (the authorization code flow with PKCE,
    /// RFC 6749 §4.1 and RFC 7636, as the MCP authorization spec asks), redirecting to
    /// `redirect_uri` unless the server's config names its own `redirect_uri`.
    ///
    /// # Errors
    /// [`LoginError::UnknownServer`], [`LoginError::NotOAuth`] for a stdio server, one
    /// with static headers or client credentials, and [`LoginError::Failed`] when
    /// discovery or client registration fails.
    pub async fn start_login(
        &self,
        server: &str,
        redirect_uri: &str,
    ) -> Result<PendingLogin, LoginError> {
        let slot = self
            .slot(server)
            .map_err(|_| LoginError::UnknownServer(server.to_owned()))?;
        let not_oauth = |why| LoginError::NotOAuth {
            server: server.to_owned(),
            why,
        };
        let (url, client) = match &slot.config.transport {
            TransportConfig::Stdio { .. } => {
                return Err(not_oauth("a stdio server takes credentials from its `env`"));
            }
            TransportConfig::StreamableHttp { url, auth, .. } => match auth {
                AuthConfig::OAuth(client) => (url, client),
                AuthConfig::None => {
                    return Err(not_oauth(
                        "its config sets an `Authorization` header or `\"auth\": {\"type\": \"none\"}`",
                    ));
                }
                AuthConfig::ClientCredentials(_) => {
                    return Err(not_oauth(
                        "it uses the client credentials grant, which needs no login",
                    ));
                }
            },
        };
        let redirect = client.redirect_uri.as_deref().unwrap_or(redirect_uri);
        let challenge = slot
            .challenge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        oauth::start_login(server, url, client, redirect, challenge, slot.vault()).await
    }

    /// Connects `server` again (after a login), and starts its event loop if it has
    /// none. Returns its status.
    ///
    /// # Errors
    /// [`SourceError::UnknownServer`].
    pub async fn reconnect(&self, server: &str) -> Result<ServerStatus, SourceError> {
        let slot = self.slot(server)?;
        if slot.config.disabled {
            return Ok(ServerStatus::Disabled);
        }
        slot.drop_session().await;
        slot.set_status(ServerStatus::Connecting);
        connect(
            Arc::clone(&slot),
            self.options.clone(),
            Arc::clone(&self.cache),
        )
        .await;
        self.start_loop(&slot);
        Ok(slot.status())
    }

    /// How many `notifications/resources/updated` `server` has sent (diagnostics and
    /// tests); `None` if not configured.
    pub fn updates_received(&self, server: &str) -> Option<u64> {
        self.slot(server).ok().map(|s| s.updates())
    }

    /// The URIs `server` is subscribed to on its current connection, sorted.
    pub fn subscriptions(&self, server: &str) -> Vec<String> {
        self.slot(server)
            .map_or_else(|_| Vec::new(), |s| s.subscriptions())
    }

    /// How many connection attempts `server` has had: 1 after the first connect, one
    /// more for each reconnect attempt. 0 if not configured or disabled.
    pub fn connections(&self, server: &str) -> u64 {
        self.slot(server)
            .map_or(0, |s| s.conn.load(Ordering::SeqCst))
    }

    /// How many requests of each MCP method were sent to `server` (e.g.
    /// `resources/list` → 1). For diagnostics and tests; `None` if not configured.
    pub fn request_counts(&self, server: &str) -> Option<BTreeMap<&'static str, u64>> {
        self.slot(server).ok().map(|s| s.request_counts())
    }

    /// What the requests to every configured server came to, per MCP method (by server
    /// name, sorted): sent, ended by [`RequestOutcome`], latency buckets. `hostpipe
    /// serve` exposes them as `hostpipe_mcp_requests_total` and
    /// `hostpipe_mcp_request_duration_seconds`. A server's counts start at zero when its
    /// entry is added or changed.
    pub fn request_stats(&self) -> BTreeMap<String, BTreeMap<&'static str, MethodStats>> {
        let slots: Vec<Arc<Slot>> = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        slots
            .iter()
            .map(|s| (s.config.name.clone(), s.request_stats()))
            .collect()
    }

    /// The content cache's size, in bytes as it weighs its entries (the decoded
    /// content, plus 128 bytes an item), as its last maintenance counted it (moka's
    /// maintenance runs along reads and writes, and on a sweep every 10 s); 0 when the
    /// cache is off.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.weighted_bytes()
    }

    /// Whether `server` is configured (enabled or not).
    pub fn has_server(&self, server: &str) -> bool {
        self.slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(server)
    }

    /// Whether `server`'s last `tools/list` (as cached, no request made) names `tool`.
    /// `false` before the list is in.
    pub fn has_tool(&self, server: &str, tool: &str) -> bool {
        self.slot(server).is_ok_and(|slot| {
            slot.read()
                .tools
                .as_ref()
                .is_some_and(|tools| tools.iter().any(|t| t.name == tool))
        })
    }

    fn slot(&self, server: &str) -> Result<Arc<Slot>, SourceError> {
        let slots = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        slots
            .get(server)
            .cloned()
            .ok_or_else(|| SourceError::UnknownServer {
                server: server.to_owned(),
                known: slots.keys().cloned().collect(),
            })
    }

    /// The peer of a connected server that declares the capability the method needs.
    fn peer(
        &self,
        server: &str,
        capability: Capability,
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
        if !capability.is_declared_in(&st.capabilities) {
            return Err(SourceError::NotSupported {
                server: server.to_owned(),
                capability: capability.name(),
            });
        }
        let peer = st.peer.clone().ok_or_else(|| SourceError::Unavailable {
            server: server.to_owned(),
            reason: "no session".into(),
        })?;
        drop(st);
        Ok((slot, peer))
    }

    async fn cached<T: ?Sized>(
        &self,
        server: &str,
        kind: Which,
        pick: impl Fn(&State) -> Option<Arc<T>>,
        empty: impl Fn() -> Arc<T>,
    ) -> Result<Arc<T>, SourceError> {
        let slot = self.slot(server)?;
        // Not connected: answer now, not after waiting for a refresh that cannot come.
        if slot.status().is_connected() && slot.lists.is_stale() {
            live::wait_fresh(&slot, slot.request_timeout(&self.options)).await;
        }
        if slot.status().is_connected() {
            self.relist_expired(&slot, kind).await;
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

    /// Lists `kind` again if its `ttlMs` has run out (2026-07-28 connections, kinds the
    /// server does not notify changes of). One listing at a time per server, and the
    /// calls that waited for it take its result, even with a TTL of 0: it is as fresh
    /// as a listing of their own. A failed listing keeps the list it had (spec
    /// 2026-07-28, "Caching": stale data may be served on a fetch error).
    async fn relist_expired(&self, slot: &Slot, kind: Which) {
        let expired = || lists::expired(&slot.read().expiry, kind, Instant::now());
        if expired().is_empty() {
            return;
        }
        let before = slot.relisted.load(Ordering::SeqCst);
        let mut last = slot.relisting.lock().await;
        if slot.relisted.load(Ordering::SeqCst) != before && last.covers(kind) {
            return;
        }
        let which = expired();
        if !which.is_empty() {
            refresh_lists(slot, &self.options, which).await;
            *last = which;
            slot.relisted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl McpSource for McpHost {
    fn servers(&self) -> Vec<ServerInfo> {
        self.all_slots()
            .iter()
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
        self.cached(
            server,
            Which::RESOURCES,
            |s| s.resources.clone(),
            || Arc::from([]),
        )
        .await
    }

    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError> {
        self.cached(
            server,
            Which::RESOURCES,
            |s| s.templates.clone(),
            || Arc::from([]),
        )
        .await
    }

    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError> {
        self.cached(server, Which::TOOLS, |s| s.tools.clone(), || Arc::from([]))
            .await
    }

    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError> {
        self.cached(
            server,
            Which::PROMPTS,
            |s| s.prompts.clone(),
            || Arc::from([]),
        )
        .await
    }

    async fn read_resource(&self, server: &str, uri: &str) -> Result<ResourceRead, SourceError> {
        let (slot, peer) = self.peer(server, Capability::Resources)?;
        let _reading = slot.begin_read(uri);
        let _asking = slot.askers.enter();
        let timeout = slot.request_timeout(&self.options);
        // A subscription only serves to drop a cached copy: none without a cache.
        let subscribe = slot.read().capabilities.resources_subscribe && self.cache.is_enabled();
        self.cache
            .get_or_fetch(server, uri, || async {
                // Subscribe before reading, so a change after the read is announced.
                if subscribe {
                    subscribe_once(&slot, &peer, uri, timeout).await;
                }
                // One plain round first: a complete answer is cached by its `ttlMs`; one
                // that took `input_required` rounds never is (spec 2026-07-28,
                // "Caching"). Such a read starts again, driven by the session.
                let params = ReadResourceRequestParams::new(uri);
                let once = peer.read_resource_once(params.clone());
                let call = Call::new(&slot, "resources/read").uri(uri);
                let (result, driven) = match timed_call(&slot, &call, timeout, once).await? {
                    ReadResourceResponse::Complete(result) => (result, false),
                    // `input_required` (or a kind this rmcp does not name).
                    _ => {
                        let Some(session) = slot.session().await else {
                            return Err(SourceError::Transport {
                                server: server.to_owned(),
                                operation: "resources/read".into(),
                                message: "the connection closed (the server exited or dropped the session)".into(),
                                source: Arc::new(std::io::Error::other("no session")),
                            });
                        };
                        let read = session.read_resource_with_mrtr_max_rounds(params, MRTR_MAX_ROUNDS);
                        let call = Call::new(&slot, "resources/read").uri(uri);
                        (timed_call(&slot, &call, timeout, read).await?, true)
                    }
                };
                let contents = result
                    .contents
                    .into_iter()
                    .map(|c| convert::contents(server, c))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Fetched {
                    contents,
                    ttl_ms: if driven { Some(0) } else { result.ttl_ms },
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
        let (slot, peer) = self.peer(server, Capability::Prompts)?;
        let _asking = slot.askers.enter();
        let timeout = slot.request_timeout(&self.options);
        let args: serde_json::Map<String, serde_json::Value> = arguments
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let params = GetPromptRequestParams::new(name).with_arguments(args);
        let call = Call::new(&slot, "prompts/get").prompt(name);
        let result = match slot.session().await {
            Some(session) => {
                let get = session.get_prompt_with_mrtr_max_rounds(params, MRTR_MAX_ROUNDS);
                timed_call(&slot, &call, timeout, get).await?
            }
            None => timed_call(&slot, &call, timeout, peer.get_prompt(params)).await?,
        };
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
        let (slot, peer) = self.peer(server, Capability::Completions)?;
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
        let (slot, peer) = self.peer(server, Capability::Tools)?;
        let _asking = slot.askers.enter();
        let timeout = slot.request_timeout(&self.options);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let call = Call::new(&slot, "tools/call").tool(tool);
        let result = match slot.session().await {
            Some(session) => {
                let run = session.call_tool_with_mrtr_max_rounds(params, MRTR_MAX_ROUNDS);
                timed_call(&slot, &call, timeout, run).await?
            }
            None => timed_call(&slot, &call, timeout, peer.call_tool(params)).await?,
        };
        if result.is_error == Some(true) {
            // The tool ran and failed: the conventions' `tool_error`.
            call.failed_with("tool_error");
        }
        convert::tool_result(server, result)
    }
}
