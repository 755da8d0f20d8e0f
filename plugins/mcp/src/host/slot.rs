//! One configured server's state: its status and what it declared and listed
//! ([`State`]), its session and stdio child (with the child's process group and the
//! last lines of its stderr), its subscriptions and reads in progress, the freshness of
//! its lists ([`ListVersions`]), and the channel to its event loop ([`Signal`]).
//! Every request to the server goes through [`timed`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use hostpipe_core::{
    Prompt, Resource, ResourceTemplate, ServerCapabilities, ServerStatus, SourceError, Tool,
};
use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::{mpsc, watch};

use tracing::Instrument as _;

use super::options::HostOptions;
use super::span::Call;
use super::stats::RequestOutcome;
use crate::config::{ServerConfig, TransportConfig};
use crate::convert;

pub(super) type Session = RunningService<RoleClient, super::elicit::Handler>;

/// What a server's event loop is told, in order.
#[derive(Debug)]
pub(super) enum Signal {
    /// `notifications/resources/updated`, already applied to the cache; `was_cached`
    /// says whether a copy was dropped.
    Updated { uri: String, was_cached: bool },
    /// `notifications/resources/list_changed` (covers templates too).
    ResourcesChanged,
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// The transport ended (stdio EOF, HTTP worker gone).
    Closed,
    /// A request failed at the transport: check the connection.
    Suspect(String),
    /// The content cache let go of a URI (expired or evicted).
    Evicted(String),
}

pub(super) type Signals = mpsc::UnboundedSender<(u64, Signal)>;

/// What the host knows of a server: set by the connect and the list refreshes.
#[derive(Default)]
pub(super) struct State {
    pub(super) status: Option<ServerStatus>,
    pub(super) capabilities: ServerCapabilities,
    /// What the server may notify about: `subscriptions/listen` asks for nothing else
    /// (spec 2026-07-28, "Subscriptions").
    pub(super) notifies: Notifies,
    pub(super) protocol_version: Option<String>,
    pub(super) implementation: Option<(String, String)>,
    pub(super) instructions: Option<String>,
    pub(super) warnings: Vec<String>,
    pub(super) resources: Option<Arc<[Resource]>>,
    pub(super) templates: Option<Arc<[ResourceTemplate]>>,
    pub(super) tools: Option<Arc<[Tool]>>,
    pub(super) prompts: Option<Arc<[Prompt]>>,
    /// Until when each list is fresh.
    pub(super) expiry: ListExpiry,
    pub(super) peer: Option<Peer<RoleClient>>,
}

/// Which lists to fetch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Which {
    pub(super) tools: bool,
    /// Resources and resource templates (one `list_changed` covers both).
    pub(super) resources: bool,
    pub(super) prompts: bool,
}

impl Which {
    /// Every list.
    pub(super) const ALL: Self = Self {
        tools: true,
        resources: true,
        prompts: true,
    };
    /// The tools.
    pub(super) const TOOLS: Self = Self {
        tools: true,
        resources: false,
        prompts: false,
    };
    /// The resources and resource templates.
    pub(super) const RESOURCES: Self = Self {
        tools: false,
        resources: true,
        prompts: false,
    };
    /// The prompts.
    pub(super) const PROMPTS: Self = Self {
        tools: false,
        resources: false,
        prompts: true,
    };
}

/// Until when each list is fresh: `None`, until a `list_changed` notification says
/// otherwise (the only rule before 2026-07-28, and the rule for a kind the server
/// notifies about); `Some(t)`, until `t`, from the list result's `ttlMs` (spec
/// 2026-07-28, "Caching": missing means 0, and the TTL is checked when the list is
/// needed, not used as a polling timer). `cacheScope` changes nothing here: every list
/// is kept for this host's own connection to the server, never shared with another
/// principal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ListExpiry {
    pub(super) tools: Option<Instant>,
    /// Resources and resource templates.
    pub(super) resources: Option<Instant>,
    pub(super) prompts: Option<Instant>,
}

/// The notifications a server declared it sends (`listChanged`, `subscribe`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Notifies {
    pub(super) tools_list_changed: bool,
    pub(super) prompts_list_changed: bool,
    pub(super) resources_list_changed: bool,
    pub(super) resources_updated: bool,
}

impl Notifies {
    /// From what the server declared.
    pub(super) fn from_wire(c: &rmcp::model::ServerCapabilities) -> Self {
        let changed = |v: Option<bool>| v.unwrap_or(false);
        Self {
            tools_list_changed: c.tools.as_ref().is_some_and(|t| changed(t.list_changed)),
            prompts_list_changed: c.prompts.as_ref().is_some_and(|p| changed(p.list_changed)),
            resources_list_changed: c
                .resources
                .as_ref()
                .is_some_and(|r| changed(r.list_changed)),
            resources_updated: c.resources.as_ref().is_some_and(|r| changed(r.subscribe)),
        }
    }
}

const STDERR_TAIL_LINES: usize = 5;

/// Subscriptions on the current connection, and reads in progress per URI.
#[derive(Default)]
struct Subs {
    subscribed: HashSet<String>,
    readers: HashMap<String, u32>,
}

/// A read of one URI in progress ([`Slot::begin_read`]).
pub(super) struct ReadGuard<'a> {
    slot: &'a Slot,
    uri: String,
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let mut subs = self.slot.subs();
        if let Some(n) = subs.readers.get_mut(&self.uri) {
            *n -= 1;
            if *n == 0 {
                subs.readers.remove(&self.uri);
            }
        }
    }
}

/// List freshness as two counters: `list_changed` notifications seen (bumped by the
/// transport wrapper the moment one arrives) and the count the last refresh covered. A
/// list call waits while `refreshed < seen`; a notification that arrives during a
/// refresh is not covered by it.
#[derive(Default)]
pub(super) struct ListVersions {
    pub(super) seen: AtomicU64,
    pub(super) refreshed: watch::Sender<u64>,
}

impl ListVersions {
    /// Records that the lists are fresh up to notification `upto`.
    pub(super) fn mark_refreshed(&self, upto: u64) {
        self.refreshed.send_if_modified(|r| {
            let newer = upto > *r;
            if newer {
                *r = upto;
            }
            newer
        });
    }

    /// Forgets pending refreshes (the connection they were for is gone).
    pub(super) fn forgive(&self) {
        self.mark_refreshed(self.seen.load(Ordering::SeqCst));
    }

    /// Whether a `list_changed` came after the last refresh.
    pub(super) fn is_stale(&self) -> bool {
        self.seen.load(Ordering::SeqCst) > *self.refreshed.borrow()
    }
}

/// One configured server, shared by the host, its event loop and its transport.
pub(super) struct Slot {
    pub(super) config: ServerConfig,
    state: RwLock<State>,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    requests: super::stats::RequestStats,
    stderr_tail: Mutex<VecDeque<String>>,
    /// The process group of a stdio server (its own, led by the child).
    process_group: Mutex<Option<u32>>,
    /// The stdio child, to learn how it exited.
    child: Mutex<Option<tokio::process::Child>>,
    /// Connection number: bumped by every connect; signals of older ones are ignored.
    pub(super) conn: AtomicU64,
    pub(super) signals: Signals,
    signals_rx: Mutex<Option<mpsc::UnboundedReceiver<(u64, Signal)>>>,
    subs: Mutex<Subs>,
    /// `list_changed` notifications seen and lists refreshed since.
    pub(super) lists: ListVersions,
    /// The host is shutting down: no reconnects.
    pub(super) closing: AtomicBool,
    updates: AtomicU64,
    /// What the first connection found: whether the server speaks 2026-07-28
    /// (`server/discover`) or only `initialize`. Later connections (reconnects, a new
    /// process of the same command) use it instead of probing again.
    era: Mutex<Option<Era>>,
    /// The `subscriptions/listen` of a 2026-07-28 connection, and what it asked for.
    pub(super) listener: Mutex<Option<Listener>>,
    /// One `subscriptions/listen` at a time, so that the last one holds every URI
    /// marked before it started.
    pub(super) relistening: tokio::sync::Mutex<()>,
    /// One refresh of expired lists at a time, with the kinds the last one listed, and
    /// how many there were: the calls that need a list at once share the one listing.
    pub(super) relisting: tokio::sync::Mutex<Which>,
    pub(super) relisted: AtomicU64,
    /// The elicitation scopes of the requests in flight, for a legacy
    /// `elicitation/create` ([`super::elicit`]).
    pub(super) askers: super::elicit::Askers,
    /// Where the server's OAuth credentials live (the host's vault).
    vault: Mutex<Arc<dyn hostpipe_core::CredentialVault>>,
    /// The `WWW-Authenticate` challenge of the last 401, which starts a login's
    /// discovery (RFC 9728 `resource_metadata`, `scope`).
    pub(super) challenge: Mutex<Option<String>>,
    /// The server's own tasks (its event loop; the background connect of a server
    /// added while the host runs), aborted when it is removed or the host shuts down.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Added while the host runs ([`super::McpHost::add_server`]): its own task connects
    /// and retries it, so `connect_all` and `keep_retrying_unreachable` leave it alone.
    pub(super) added: AtomicBool,
}

/// The protocol version of the 2026-07-28 era.
pub(super) const MODERN: &str = "2026-07-28";

/// The `subscriptions/listen` of a 2026-07-28 connection: what the server acknowledged,
/// and the task that drains it (aborted on drop, which drops the subscription and so
/// sends `notifications/cancelled`).
pub(super) struct Listener {
    /// The resource URIs the server acknowledged.
    pub(super) acknowledged: Vec<String>,
    /// Drains the subscription's notifications (hostpipe acts on them in [`super::observed`]).
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A server's protocol era, as its first connection found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// 2025-11-25 or older: `initialize`, `resources/subscribe`.
    Legacy,
    /// 2026-07-28: `server/discover`, `subscriptions/listen`.
    Modern,
}

impl Slot {
    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn new(config: ServerConfig) -> Self {
        let (signals, rx) = mpsc::unbounded_channel();
        Self {
            config,
            state: RwLock::default(),
            session: tokio::sync::Mutex::new(None),
            requests: super::stats::RequestStats::default(),
            stderr_tail: Mutex::default(),
            process_group: Mutex::default(),
            child: Mutex::default(),
            conn: AtomicU64::new(0),
            signals,
            signals_rx: Mutex::new(Some(rx)),
            subs: Mutex::default(),
            lists: ListVersions::default(),
            closing: AtomicBool::new(false),
            updates: AtomicU64::new(0),
            era: Mutex::new(None),
            listener: Mutex::new(None),
            relistening: tokio::sync::Mutex::new(()),
            relisting: tokio::sync::Mutex::new(Which::default()),
            relisted: AtomicU64::new(0),
            askers: super::elicit::Askers::default(),
            vault: Mutex::new(Arc::new(hostpipe_core::MemoryVault::new())),
            challenge: Mutex::new(None),
            tasks: Mutex::default(),
            added: AtomicBool::new(false),
        }
    }

    /// Keeps `task` to abort with the server's others; aborts it at once if the server
    /// is already closing.
    pub(super) fn push_task(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.retain(|t| !t.is_finished());
        if self.closing.load(Ordering::Relaxed) {
            task.abort();
        } else {
            tasks.push(task);
        }
    }

    /// Aborts the server's tasks (its event loop: no reconnects from here on).
    pub(super) fn abort_tasks(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }

    /// The credential vault.
    pub(super) fn vault(&self) -> Arc<dyn hostpipe_core::CredentialVault> {
        Arc::clone(&self.vault.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Uses `vault` from the next connect on.
    pub(super) fn set_vault(&self, vault: Arc<dyn hostpipe_core::CredentialVault>) {
        *self.vault.lock().unwrap_or_else(PoisonError::into_inner) = vault;
    }

    /// The era an earlier connection found, if any.
    pub(super) fn era(&self) -> Option<Era> {
        *self.era.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers the era a connection found.
    pub(super) fn remember_era(&self, era: Era) {
        *self.era.lock().unwrap_or_else(PoisonError::into_inner) = Some(era);
    }

    /// Whether the current connection speaks 2026-07-28.
    pub(super) fn is_modern(&self) -> bool {
        self.read().protocol_version.as_deref() == Some(MODERN)
    }

    /// Marks `uri` subscribed on this connection; `false` when it already was.
    pub(super) fn mark_subscribed(&self, uri: &str) -> bool {
        self.subs().subscribed.insert(uri.to_owned())
    }

    /// Forgets a subscription that did not take.
    pub(super) fn unmark_subscribed(&self, uri: &str) {
        self.subs().subscribed.remove(uri);
    }

    pub(super) fn status(&self) -> ServerStatus {
        let st = self.read();
        if let Some(peer) = &st.peer
            && peer.is_transport_closed()
            && matches!(st.status, Some(ServerStatus::Connected))
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

    /// Starts a new connection: its number (the first is 1).
    pub(super) fn new_connection(&self) -> u64 {
        self.conn.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(super) fn set_status(&self, status: ServerStatus) {
        self.write().status = Some(status);
    }

    pub(super) fn is_http(&self) -> bool {
        matches!(
            self.config.transport,
            TransportConfig::StreamableHttp { .. }
        )
    }

    pub(super) fn request_timeout(&self, options: &HostOptions) -> Duration {
        self.config
            .request_timeout
            .unwrap_or(options.request_timeout)
    }

    pub(super) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.read().peer.clone()
    }

    /// Tells the event loop, tagged with the current connection.
    fn signal(&self, signal: Signal) {
        let _ = self
            .signals
            .send((self.conn.load(Ordering::SeqCst), signal));
    }

    pub(super) fn note_update(&self) {
        self.updates.fetch_add(1, Ordering::Relaxed);
    }

    fn subs(&self) -> std::sync::MutexGuard<'_, Subs> {
        self.subs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a read of `uri` in progress until the guard drops (after the result is in
    /// the cache), so that an unsubscribe decided meanwhile does not drop the
    /// subscription the new entry relies on.
    pub(super) fn begin_read(&self, uri: &str) -> ReadGuard<'_> {
        *self.subs().readers.entry(uri.to_owned()).or_default() += 1;
        ReadGuard {
            slot: self,
            uri: uri.to_owned(),
        }
    }

    /// Whether the current connection is subscribed to `uri`.
    pub(super) fn is_subscribed(&self, uri: &str) -> bool {
        self.subs().subscribed.contains(uri)
    }

    /// Removes `uri` from the subscriptions when nothing needs it: no fresh cached copy
    /// (`cached` says) and no read in progress. Whether it was removed (and the caller
    /// should send `resources/unsubscribe`).
    pub(super) fn release_subscription(&self, uri: &str, cached: impl Fn() -> bool) -> bool {
        let mut subs = self.subs();
        if subs.readers.get(uri).is_some_and(|&n| n > 0) || cached() {
            return false;
        }
        subs.subscribed.remove(uri)
    }

    /// Why the connection ended, from the child's exit status when there is one.
    pub(super) fn exit_reason(&self) -> String {
        let status = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        match status {
            Some(s) => format!("the server process exited ({s})"),
            None => "the connection closed".into(),
        }
    }

    /// `ping` under the request timeout; whether the server answered.
    pub(super) async fn ping(&self, options: &HostOptions) -> bool {
        let Some(peer) = self.peer() else {
            return false;
        };
        let ending = self.request("ping");
        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
        let answered = tokio::time::timeout(self.request_timeout(options), ping).await;
        ending.end_bounded(&answered);
        matches!(answered, Ok(Ok(_)))
    }

    /// Closes the session (if any) and kills what is left of the process group.
    pub(super) async fn drop_session(&self) {
        let session = self.session.lock().await.take();
        {
            let mut st = self.write();
            st.peer = None;
        }
        self.subs().subscribed.clear();
        // Dropping the listener's task drops its subscription.
        self.listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(session) = session {
            match Arc::try_unwrap(session) {
                Ok(session) => {
                    let _ = tokio::time::timeout(Duration::from_secs(3), session.cancel()).await;
                }
                // A request still holds it: stop the service; the request fails.
                Err(shared) => shared.cancellation_token().cancel(),
            }
        }
        self.stop_child().await;
    }

    /// Stops a stdio child whose stdin is closed: up to 2 s for it to exit on its own,
    /// then SIGTERM to its whole process group (a wrapper such as `npx` may have exited
    /// and left its children) and up to 1 s for the group to empty, then SIGKILL to
    /// whatever is left.
    pub(super) async fn stop_child(&self) {
        let child = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut child) = child {
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
        if self.process_group_alive() {
            self.signal_process_group(false);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
            while self.process_group_alive() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        self.kill_process_group();
    }

    /// Whether any process of the stdio server's group is left (signal 0).
    fn process_group_alive(&self) -> bool {
        let group = *self
            .process_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        #[cfg(unix)]
        if let Some(pgid) = group.and_then(|g| i32::try_from(g).ok()) {
            return nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok();
        }
        let _ = group;
        false
    }

    /// SIGTERM (or SIGKILL) to the stdio server's process group, if it has one.
    fn signal_process_group(&self, kill: bool) {
        let group = *self
            .process_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        #[cfg(unix)]
        if let Some(pgid) = group.and_then(|g| i32::try_from(g).ok()) {
            use nix::sys::signal::{Signal, killpg};
            let signal = if kill {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            // ESRCH (nothing left) is the usual, good outcome.
            let _ = killpg(nix::unistd::Pid::from_raw(pgid), signal);
        }
        #[cfg(not(unix))]
        let _ = (group, kill);
    }

    /// Kills what is left of a stdio server's process group (`npx` and its children).
    pub(super) fn kill_process_group(&self) {
        self.signal_process_group(true);
        *self
            .process_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The last lines the stdio server wrote to stderr, oldest first.
    pub(super) fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Keeps `line` as the newest of the last [`STDERR_TAIL_LINES`] stderr lines.
    pub(super) fn push_stderr(&self, line: String) {
        let mut tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }

    /// Records the process group of a just-spawned stdio child (`None`: it has no id,
    /// i.e. it already exited).
    pub(super) fn set_process_group(&self, group: Option<u32>) {
        *self
            .process_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = group;
    }

    /// Keeps the stdio child, to learn how it exited and to wait for it on shutdown.
    pub(super) fn set_child(&self, child: tokio::process::Child) {
        *self.child.lock().unwrap_or_else(PoisonError::into_inner) = Some(child);
    }

    /// Keeps the session of a new connection.
    pub(super) async fn set_session(&self, session: Session) {
        *self.session.lock().await = Some(Arc::new(session));
    }

    /// The current session, for the requests whose multi-round-trip rounds
    /// (`input_required`, MCP 2026-07-28) rmcp drives through the session's handler.
    pub(super) async fn session(&self) -> Option<Arc<Session>> {
        self.session.lock().await.clone()
    }

    /// Drops the session without waiting, unless a connect or shutdown holds it now.
    pub(super) fn try_drop_session(&self) {
        if let Ok(mut session) = self.session.try_lock() {
            session.take();
        }
    }

    /// The receiving end of the event loop's channel; `None` once taken.
    pub(super) fn take_signals(&self) -> Option<mpsc::UnboundedReceiver<(u64, Signal)>> {
        self.signals_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Requests sent per MCP method.
    pub(super) fn request_counts(&self) -> BTreeMap<&'static str, u64> {
        self.requests
            .snapshot()
            .into_iter()
            .map(|(method, s)| (method, s.sent))
            .collect()
    }

    /// Counts a request of `method` sent, now; its [`Ending`](super::stats::Ending)
    /// records how it ended.
    pub(super) fn request(&self, method: &'static str) -> super::stats::Ending<'_> {
        super::stats::Ending::start(&self.requests, method)
    }

    /// What the requests came to, per MCP method.
    pub(super) fn request_stats(&self) -> BTreeMap<&'static str, super::stats::MethodStats> {
        self.requests.snapshot()
    }

    /// `notifications/resources/updated` received.
    pub(super) fn updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }

    /// The URIs subscribed to on the current connection, sorted.
    pub(super) fn subscriptions(&self) -> Vec<String> {
        let mut uris: Vec<String> = self.subs().subscribed.iter().cloned().collect();
        uris.sort();
        uris
    }
}

/// Sends one request (`fut`) to the server under `timeout`, counting it. A transport
/// failure also tells the event loop to check the connection. Time the turn spends
/// waiting for its user (an elicitation) does not count against `timeout`
/// ([`super::elicit::Budget`]).
pub(super) async fn timed<T>(
    slot: &Slot,
    method: &'static str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, SourceError> {
    timed_call(slot, &Call::new(slot, method), timeout, fut).await
}

/// [`timed`], for a request described by `call` ([`Call`]): it runs in the call's
/// span, which records a failure.
pub(super) async fn timed_call<T>(
    slot: &Slot,
    call: &Call,
    timeout: Duration,
    fut: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, SourceError> {
    let result = timed_in(slot, call.method, timeout, fut)
        .instrument(call.span().clone())
        .await;
    if let Err(e) = &result {
        call.failed(e);
    }
    result
}

async fn timed_in<T>(
    slot: &Slot,
    method: &'static str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, SourceError> {
    let ending = slot.request(method);
    let budget = super::elicit::Budget::start(timeout);
    let mut fut = std::pin::pin!(fut);
    let outcome = loop {
        let Some(left) = budget.left() else {
            break None;
        };
        if let Ok(done) = tokio::time::timeout(left, &mut fut).await {
            break Some(done);
        }
    };
    ending.end(match &outcome {
        Some(Ok(_)) => RequestOutcome::Ok,
        Some(Err(_)) => RequestOutcome::Error,
        None => RequestOutcome::Timeout,
    });
    match outcome {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => {
            if let Some(challenge) = e.auth_challenge() {
                // Kept for the next login: its discovery and scopes start from it
                // (RFC 9728 `resource_metadata`; a 403's `scope` is a step-up).
                *slot
                    .challenge
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(challenge.to_owned());
            }
            if e.is_authorization_required() {
                // rmcp already tried a refresh: the credentials are gone or refused.
                let reason = format!(
                    "the server answered `{method}` with HTTP 401: its OAuth credentials were refused or have expired"
                );
                tracing::warn!(server = %slot.config.name, %reason, "MCP server needs an OAuth login");
                slot.set_status(ServerStatus::NeedsLogin { reason });
            }
            let e = convert::service_error(&slot.config.name, method, e);
            if let SourceError::Transport { message, .. } = &e {
                // The event loop pings the server and reconnects it if it is gone
                // (an HTTP server that restarted lost this session).
                slot.signal(Signal::Suspect(message.clone()));
            }
            Err(e)
        }
        // Dropping the request future made rmcp send `notifications/cancelled`.
        None => Err(SourceError::Timeout {
            server: slot.config.name.clone(),
            operation: method.into(),
            timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> Slot {
        Slot::new(ServerConfig::stdio("s", "unused", Vec::<String>::new()))
    }

    #[test]
    fn lists_are_stale_from_a_notification_until_a_refresh_covers_it() {
        let lists = ListVersions::default();
        assert!(!lists.is_stale());
        lists.seen.fetch_add(1, Ordering::SeqCst);
        assert!(lists.is_stale());
        // A refresh that started before a second notification covers only the first.
        let covered = lists.seen.load(Ordering::SeqCst);
        lists.seen.fetch_add(1, Ordering::SeqCst);
        lists.mark_refreshed(covered);
        assert!(lists.is_stale());
        lists.mark_refreshed(lists.seen.load(Ordering::SeqCst));
        assert!(!lists.is_stale());
        // Never backwards.
        lists.mark_refreshed(0);
        assert_eq!(*lists.refreshed.borrow(), 2);
    }

    #[test]
    fn forgiving_covers_every_notification_seen() {
        let lists = ListVersions::default();
        lists.seen.fetch_add(3, Ordering::SeqCst);
        assert!(lists.is_stale());
        lists.forgive();
        assert!(!lists.is_stale());
    }

    #[test]
    fn a_subscription_stays_while_a_read_or_a_cached_copy_needs_it() {
        let slot = slot();
        slot.subs().subscribed.insert("u".into());
        {
            let _reading = slot.begin_read("u");
            let _again = slot.begin_read("u");
            assert!(!slot.release_subscription("u", || false));
        }
        assert!(slot.subs().readers.is_empty());
        assert!(!slot.release_subscription("u", || true));
        assert!(slot.is_subscribed("u"));
        assert!(slot.release_subscription("u", || false));
        assert!(!slot.is_subscribed("u"));
        // Not subscribed: nothing to send.
        assert!(!slot.release_subscription("u", || false));
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_lines() {
        let slot = slot();
        for i in 0..STDERR_TAIL_LINES + 2 {
            slot.push_stderr(format!("line {i}"));
        }
        let tail = slot.stderr_tail();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(tail.first().map(String::as_str), Some("line 2"));
        assert_eq!(
            tail.last().cloned(),
            Some(format!("line {}", STDERR_TAIL_LINES + 1))
        );
    }

    #[test]
    fn status_before_any_connect_follows_the_config() {
        assert!(matches!(slot().status(), ServerStatus::Connecting));
        let mut config = ServerConfig::stdio("s", "unused", Vec::<String>::new());
        config.disabled = true;
        assert!(matches!(Slot::new(config).status(), ServerStatus::Disabled));
    }

    #[test]
    fn connections_are_numbered_from_one() {
        let slot = slot();
        assert_eq!(slot.new_connection(), 1);
        assert_eq!(slot.new_connection(), 2);
        assert_eq!(slot.conn.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_request_timeout_is_the_servers_own_if_set() {
        let options = HostOptions::default();
        assert_eq!(slot().request_timeout(&options), options.request_timeout);
        let mut config = ServerConfig::stdio("s", "unused", Vec::<String>::new());
        config.request_timeout = Some(Duration::from_millis(7));
        assert_eq!(
            Slot::new(config).request_timeout(&options),
            Duration::from_millis(7)
        );
    }
}
