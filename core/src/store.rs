//! Host-owned attachments (pins) and the read history, behind [`AttachmentStore`].
//!
//! A *pin* attaches a resource to every turn of one pipeline or one conversation until it
//! is removed or expires; a [`Pipeline`](crate::Pipeline) given a store
//! ([`Pipeline::with_store`](crate::Pipeline::with_store)) loads the pins of the turn's
//! pipeline and conversation before its stages run, and writes one [`InjectionRecord`]
//! per resource read after them. Message-scope attachments are never stored: they live
//! in [`Turn::attachments`](crate::Turn::attachments) for one turn.
//!
//! `hostpipe-store` implements the trait on SQLite (the embedded default) and
//! PostgreSQL; [`MemoryStore`] keeps everything in memory (tests, one-shot tools).
//!
//! Times are Unix milliseconds (UTC), as `i64`.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::context::{Attachment, AttachmentTarget, Scope};
use crate::trace::ReadRecord;

/// Milliseconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Whom a pin belongs to: every turn of a pipeline, or of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "owner", rename_all = "snake_case")]
pub enum PinOwner {
    /// Every turn of the pipeline with this id.
    Pipeline(String),
    /// Every turn of the conversation with this id ([`TurnIds::conversation`](crate::TurnIds::conversation)).
    Conversation(String),
}

impl PinOwner {
    /// [`Scope::Pipeline`] or [`Scope::Conversation`].
    pub fn scope(&self) -> Scope {
        match self {
            Self::Pipeline(_) => Scope::Pipeline,
            Self::Conversation(_) => Scope::Conversation,
        }
    }

    /// The pipeline or conversation id.
    pub fn id(&self) -> &str {
        match self {
            Self::Pipeline(id) | Self::Conversation(id) => id,
        }
    }
}

impl std::fmt::Display for PinOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.scope().as_str(), self.id())
    }
}

/// A pin to create ([`AttachmentStore::pin`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPin {
    /// Whose turns carry it.
    #[serde(flatten)]
    pub owner: PinOwner,
    /// The MCP server (configured name).
    pub server: String,
    /// A URI, or a template with arguments (expanded on each turn, so `{ var = … }`
    /// arguments take that turn's variables). Embedded contents cannot be pinned.
    #[serde(flatten)]
    pub target: AttachmentTarget,
    /// When it stops applying (Unix ms); `None`: until removed.
    pub expires_at_ms: Option<i64>,
}

impl NewPin {
    /// Checks what a store needs: non-empty ids, a URI or template target.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), StoreError> {
        check_id(self.owner.scope().as_str(), Some(self.owner.id()))?;
        check_id("server", Some(&self.server))?;
        if self.owner.id().trim().is_empty() {
            return Err(StoreError::invalid(format!(
                "the {} id is empty",
                self.owner.scope().as_str()
            )));
        }
        if self.server.trim().is_empty() {
            return Err(StoreError::invalid("the server name is empty"));
        }
        match &self.target {
            AttachmentTarget::Uri { uri } if uri.trim().is_empty() => {
                Err(StoreError::invalid("the URI is empty"))
            }
            AttachmentTarget::Template { template, .. } if template.trim().is_empty() => {
                Err(StoreError::invalid("the URI template is empty"))
            }
            AttachmentTarget::Embedded { .. } => Err(StoreError::invalid(
                "embedded contents cannot be pinned: pin a URI or a template",
            )),
            _ => Ok(()),
        }
    }
}

/// The longest pipeline, conversation, message or server id a store keeps, in bytes
/// (stores index them; PostgreSQL's B-tree entries are limited to about 2.7 KB).
pub const MAX_ID_BYTES: usize = 1024;

fn check_id(what: &str, id: Option<&str>) -> Result<(), StoreError> {
    match id {
        Some(id) if id.len() > MAX_ID_BYTES => Err(StoreError::invalid(format!(
            "the {what} id is {} bytes, over the {MAX_ID_BYTES}-byte limit of the attachment store",
            id.len()
        ))),
        _ => Ok(()),
    }
}

/// A stored pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The store's id for it (a UUID v7).
    pub id: String,
    /// Whose turns carry it.
    #[serde(flatten)]
    pub owner: PinOwner,
    /// The MCP server.
    pub server: String,
    /// What to read.
    #[serde(flatten)]
    pub target: AttachmentTarget,
    /// When it was pinned (Unix ms).
    pub created_at_ms: i64,
    /// When it stops applying (Unix ms); `None`: until removed.
    pub expires_at_ms: Option<i64>,
}

impl Pin {
    /// The attachment a turn carries for it, at the owner's scope.
    pub fn attachment(&self) -> Attachment {
        Attachment {
            server: self.server.clone(),
            target: self.target.clone(),
            scope: self.owner.scope(),
        }
    }

    /// Whether it applies at `now_ms`.
    pub fn is_live(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|e| e > now_ms)
    }
}

/// One resource read of one turn, as the history keeps it: the turn's ids and the
/// [`ReadRecord`] of its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectionRecord {
    /// The turn ([`Trace::turn_id`](crate::Trace::turn_id)).
    pub turn_id: String,
    /// Position of the read in the turn, from 0.
    pub seq: u32,
    /// When the turn started (Unix ms).
    pub at_ms: i64,
    /// The pipeline.
    pub pipeline: String,
    /// The conversation, if any.
    pub conversation: Option<String>,
    /// The message id, if the platform gave one.
    pub message: Option<String>,
    /// The read.
    #[serde(flatten)]
    pub read: ReadRecord,
}

impl InjectionRecord {
    /// Checks what a store needs: ids within [`MAX_ID_BYTES`].
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming the id.
    pub fn validate(&self) -> Result<(), StoreError> {
        check_id("pipeline", Some(&self.pipeline))?;
        check_id("conversation", self.conversation.as_deref())?;
        check_id("message", self.message.as_deref())?;
        check_id("server", Some(&self.read.server))
    }
}

/// Which records [`AttachmentStore::history`] returns: every filter set must match.
/// Newest turn first; reads of one turn in their order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryQuery {
    /// Only this conversation.
    pub conversation: Option<String>,
    /// Only this pipeline.
    pub pipeline: Option<String>,
    /// Only this server.
    pub server: Option<String>,
    /// Only turns that started at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// Only turns that started before this time (Unix ms).
    pub until_ms: Option<i64>,
    /// Only reads that did not go through ([`ReadOutcome`](crate::ReadOutcome) other than
    /// `read`: withheld, not read, failed); for tool calls, those that failed, were
    /// withheld or that the tool reported as errors.
    pub errors_only: bool,
    /// At most this many records (default 100; a store may cap it at 10 000).
    pub limit: u32,
    /// Skip this many records first (pagination).
    pub offset: u32,
}

impl Default for HistoryQuery {
    fn default() -> Self {
        Self {
            conversation: None,
            pipeline: None,
            server: None,
            since_ms: None,
            until_ms: None,
            errors_only: false,
            limit: 100,
            offset: 0,
        }
    }
}

impl HistoryQuery {
    /// The largest `limit` a store returns.
    pub const MAX_LIMIT: u32 = 10_000;

    /// Whether `r` passes every filter (limit and offset aside).
    pub fn matches(&self, r: &InjectionRecord) -> bool {
        self.conversation
            .as_ref()
            .is_none_or(|c| r.conversation.as_ref() == Some(c))
            && self.pipeline.as_ref().is_none_or(|p| &r.pipeline == p)
            && self.server.as_ref().is_none_or(|s| &r.read.server == s)
            && self.since_ms.is_none_or(|t| r.at_ms >= t)
            && self.until_ms.is_none_or(|t| r.at_ms < t)
            && (!self.errors_only || !r.read.outcome.is_read())
    }

    /// Whether `c` passes the filters (`errors_only`: calls that failed, were withheld or
    /// that the tool reported as errors).
    pub fn matches_call(&self, c: &ToolCallEntry) -> bool {
        self.conversation
            .as_ref()
            .is_none_or(|x| c.conversation.as_ref() == Some(x))
            && self.pipeline.as_ref().is_none_or(|p| &c.pipeline == p)
            && self.server.as_ref().is_none_or(|s| &c.call.server == s)
            && self.since_ms.is_none_or(|t| c.at_ms >= t)
            && self.until_ms.is_none_or(|t| c.at_ms < t)
            && (!self.errors_only || c.call.is_error)
    }
}

/// The most history records one [`AttachmentStore::prune`] call deletes.
pub const PRUNE_BATCH: u64 = 10_000;

/// What [`AttachmentStore::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pruned {
    /// Expired pins.
    pub pins: u64,
    /// History records older than the cut-off.
    pub records: u64,
}

/// An error from an [`AttachmentStore`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The request was invalid (an empty id, an embedded target, …).
    #[error("{0}")]
    Invalid(String),
    /// The store could not be opened or migrated (a bad URL, a directory that cannot
    /// be created, a database newer than this hostpipe).
    #[error("cannot open the attachment store {store}: {message}")]
    Open {
        /// The store (its URL without credentials).
        store: String,
        /// What went wrong.
        message: String,
    },
    /// The database failed or did not answer in time.
    #[error("attachment store {store}: {operation} failed: {message}")]
    Database {
        /// The store (its URL without credentials).
        store: String,
        /// What was being done, e.g. `load pins`.
        operation: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A stored row could not be read back (written by another program, or corrupted).
    #[error("attachment store {store}: a stored {what} is invalid: {message}")]
    Corrupt {
        /// The store.
        store: String,
        /// `pin` or `record`.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

impl StoreError {
    /// An [`StoreError::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}

/// One tool call of a turn, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallEntry {
    /// The turn ([`Trace::turn_id`](crate::Trace::turn_id)).
    pub turn_id: String,
    /// The call's place among the turn's tool calls, from 0.
    pub seq: u32,
    /// When the turn started (Unix ms).
    pub at_ms: i64,
    /// The pipeline.
    pub pipeline: String,
    /// The conversation, if any.
    pub conversation: Option<String>,
    /// The message id, if any.
    pub message: Option<String>,
    /// The call (its fields inline in JSON, as [`InjectionRecord`]'s read).
    #[serde(flatten)]
    pub call: crate::trace::ToolCallRecord,
}

impl ToolCallEntry {
    /// Checks the ids' lengths.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for an id over [`MAX_ID_BYTES`].
    pub fn validate(&self) -> Result<(), StoreError> {
        for (what, id) in [
            ("pipeline", Some(&self.pipeline)),
            ("conversation", self.conversation.as_ref()),
            ("message", self.message.as_ref()),
            ("server", Some(&self.call.server)),
        ] {
            if id.is_some_and(|id| id.len() > MAX_ID_BYTES) {
                return Err(StoreError::invalid(format!(
                    "{what} id is over {MAX_ID_BYTES} bytes"
                )));
            }
        }
        Ok(())
    }
}

/// An "allow for this conversation" answer ([`ConsentAnswer::AllowConversation`](crate::ConsentAnswer::AllowConversation)):
/// the pipeline's consent gate does not ask again for the same server, URI and origin
/// in that conversation. Kept by the store, so that every worker sharing it honours the
/// answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConsentGrant {
    /// The pipeline whose policy asked.
    pub pipeline: String,
    /// The conversation.
    pub conversation: String,
    /// The MCP server.
    pub server: String,
    /// The resource URI; for a tool call, the tool's name as its server lists it.
    pub uri: String,
    /// Whose read: attached (host) or asked for by the model.
    pub origin: crate::consent::ReadOrigin,
    /// A read, or a tool call.
    #[serde(default)]
    pub kind: GrantKind,
}

/// What a [`ConsentGrant`] allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// Reading a resource.
    #[default]
    Read,
    /// Calling a tool.
    Call,
}

impl GrantKind {
    /// `read` or `call`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Call => "call",
        }
    }
}

impl ConsentGrant {
    /// Checks the ids' lengths.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a pipeline, conversation or server id over
    /// [`MAX_ID_BYTES`].
    pub fn validate(&self) -> Result<(), StoreError> {
        for (what, id) in [
            ("pipeline", &self.pipeline),
            ("conversation", &self.conversation),
            ("server", &self.server),
        ] {
            if id.len() > MAX_ID_BYTES {
                return Err(StoreError::invalid(format!(
                    "the {what} id is {} bytes; at most {MAX_ID_BYTES}",
                    id.len()
                )));
            }
        }
        Ok(())
    }
}

/// Where pins and the read history live. Implementations must be safe to share
/// between tasks and processes (several workers may use one PostgreSQL database).
///
/// Every method should finish within a few seconds or fail: the pipeline also bounds
/// each call ([`Pipeline::STORE_TIMEOUT`](crate::Pipeline::STORE_TIMEOUT)).
#[async_trait]
pub trait AttachmentStore: Send + Sync {
    /// What and where the store is, for messages (e.g. `sqlite:/var/lib/hostpipe/hostpipe.db`),
    /// without credentials.
    fn describe(&self) -> String;

    /// Pins a resource. Pinning the same server and target to the same owner again
    /// updates its expiry and keeps its id.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] (see [`NewPin::validate`]), or a database error.
    async fn pin(&self, pin: NewPin) -> Result<Pin, StoreError>;

    /// Removes the owner's pin of `server` + `target`; `false` when there was none.
    ///
    /// # Errors
    /// A database error.
    async fn unpin(
        &self,
        owner: &PinOwner,
        server: &str,
        target: &AttachmentTarget,
    ) -> Result<bool, StoreError>;

    /// Removes the owner's pin with id `id`; `false` when there was none.
    ///
    /// # Errors
    /// A database error.
    async fn unpin_id(&self, owner: &PinOwner, id: &str) -> Result<bool, StoreError>;

    /// The pins of `owners` that are live at `now_ms`, oldest first.
    ///
    /// # Errors
    /// A database error, or [`StoreError::Corrupt`] for a row that cannot be read.
    async fn pins(&self, owners: &[PinOwner], now_ms: i64) -> Result<Vec<Pin>, StoreError>;

    /// Appends history records (one transaction: all or none).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for an id over [`MAX_ID_BYTES`]
    /// ([`InjectionRecord::validate`]), or a database error.
    async fn record(&self, records: &[InjectionRecord]) -> Result<(), StoreError>;

    /// History records matching `query`.
    ///
    /// # Errors
    /// A database error, or [`StoreError::Corrupt`].
    async fn history(&self, query: &HistoryQuery) -> Result<Vec<InjectionRecord>, StoreError>;

    /// Deletes pins expired at `now_ms` and, when `records_before_ms` is set, history of
    /// turns that started before it: at most [`PRUNE_BATCH`] records a call, so that a
    /// large backlog never holds the store for long (call again while
    /// [`Pruned::records`] is `PRUNE_BATCH`).
    ///
    /// # Errors
    /// A database error.
    async fn prune(
        &self,
        now_ms: i64,
        records_before_ms: Option<i64>,
    ) -> Result<Pruned, StoreError>;

    /// Keeps a conversation grant (again: no change). The default keeps nothing: the
    /// consent gate then remembers grants in its own process only.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] ([`ConsentGrant::validate`]), or a database error.
    async fn grant(&self, grant: &ConsentGrant, now_ms: i64) -> Result<(), StoreError> {
        let _ = (grant, now_ms);
        Ok(())
    }

    /// Whether `grant` was kept by [`AttachmentStore::grant`]. The default: never.
    ///
    /// # Errors
    /// A database error.
    async fn is_granted(&self, grant: &ConsentGrant) -> Result<bool, StoreError> {
        let _ = grant;
        Ok(false)
    }

    /// Appends tool calls to the history. The default keeps nothing (a store written
    /// before tool calls were audited).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for ids over [`MAX_ID_BYTES`], or a database error.
    async fn record_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        let _ = calls;
        Ok(())
    }

    /// Tool calls matching `query`, newest turn first, in call order within a turn. The
    /// default: none.
    ///
    /// # Errors
    /// A database error.
    async fn call_history(&self, query: &HistoryQuery) -> Result<Vec<ToolCallEntry>, StoreError> {
        let _ = query;
        Ok(Vec::new())
    }
}

/// One page of `items` that `keep` accepts, in the history's order (newest turn first,
/// each turn's entries in order; `key` gives an entry's turn start in Unix ms, turn id
/// and position), cut by `query`'s offset and limit.
fn history_page<T: Clone>(
    items: &[T],
    query: &HistoryQuery,
    keep: impl Fn(&T) -> bool,
    key: impl Fn(&T) -> (i64, &str, u32),
) -> Vec<T> {
    let mut out: Vec<&T> = items.iter().filter(|t| keep(t)).collect();
    out.sort_by(|a, b| {
        let (a_at, a_turn, a_seq) = key(a);
        let (b_at, b_turn, b_seq) = key(b);
        b_at.cmp(&a_at)
            .then_with(|| b_turn.cmp(a_turn))
            .then_with(|| a_seq.cmp(&b_seq))
    });
    out.into_iter()
        .skip(query.offset as usize)
        .take(query.limit.min(HistoryQuery::MAX_LIMIT) as usize)
        .cloned()
        .collect()
}

/// An [`AttachmentStore`] in memory: nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    pins: Vec<Pin>,
    records: Vec<InjectionRecord>,
    calls: Vec<ToolCallEntry>,
    grants: std::collections::HashSet<ConsentGrant>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave the vectors half-updated (every
        // change is one push, retain or assignment), so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A new pin id: a UUID v7 (time-ordered), as text.
pub fn new_pin_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[async_trait]
impl AttachmentStore for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn grant(&self, grant: &ConsentGrant, _now_ms: i64) -> Result<(), StoreError> {
        grant.validate()?;
        self.lock().grants.insert(grant.clone());
        Ok(())
    }

    async fn is_granted(&self, grant: &ConsentGrant) -> Result<bool, StoreError> {
        Ok(self.lock().grants.contains(grant))
    }

    async fn pin(&self, pin: NewPin) -> Result<Pin, StoreError> {
        pin.validate()?;
        let mut inner = self.lock();
        if let Some(p) = inner
            .pins
            .iter_mut()
            .find(|p| p.owner == pin.owner && p.server == pin.server && p.target == pin.target)
        {
            p.expires_at_ms = pin.expires_at_ms;
            return Ok(p.clone());
        }
        let stored = Pin {
            id: new_pin_id(),
            owner: pin.owner,
            server: pin.server,
            target: pin.target,
            created_at_ms: unix_ms_now(),
            expires_at_ms: pin.expires_at_ms,
        };
        inner.pins.push(stored.clone());
        Ok(stored)
    }

    async fn unpin(
        &self,
        owner: &PinOwner,
        server: &str,
        target: &AttachmentTarget,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let before = inner.pins.len();
        inner
            .pins
            .retain(|p| !(&p.owner == owner && p.server == server && &p.target == target));
        Ok(inner.pins.len() < before)
    }

    async fn unpin_id(&self, owner: &PinOwner, id: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let before = inner.pins.len();
        inner.pins.retain(|p| !(&p.owner == owner && p.id == id));
        Ok(inner.pins.len() < before)
    }

    async fn pins(&self, owners: &[PinOwner], now_ms: i64) -> Result<Vec<Pin>, StoreError> {
        Ok(self
            .lock()
            .pins
            .iter()
            .filter(|p| owners.contains(&p.owner) && p.is_live(now_ms))
            .cloned()
            .collect())
    }

    async fn record(&self, records: &[InjectionRecord]) -> Result<(), StoreError> {
        records.iter().try_for_each(InjectionRecord::validate)?;
        self.lock().records.extend_from_slice(records);
        Ok(())
    }

    async fn history(&self, query: &HistoryQuery) -> Result<Vec<InjectionRecord>, StoreError> {
        let inner = self.lock();
        Ok(history_page(
            &inner.records,
            query,
            |r| query.matches(r),
            |r| (r.at_ms, r.turn_id.as_str(), r.seq),
        ))
    }

    async fn record_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        for c in calls {
            c.validate()?;
        }
        self.lock().calls.extend_from_slice(calls);
        Ok(())
    }

    async fn call_history(&self, query: &HistoryQuery) -> Result<Vec<ToolCallEntry>, StoreError> {
        let inner = self.lock();
        Ok(history_page(
            &inner.calls,
            query,
            |c| query.matches_call(c),
            |c| (c.at_ms, c.turn_id.as_str(), c.seq),
        ))
    }

    async fn prune(
        &self,
        now_ms: i64,
        records_before_ms: Option<i64>,
    ) -> Result<Pruned, StoreError> {
        let mut inner = self.lock();
        if let Some(cut) = records_before_ms {
            inner.calls.retain(|c| c.at_ms >= cut);
        }
        let (pins, records) = (inner.pins.len(), inner.records.len());
        inner.pins.retain(|p| p.is_live(now_ms));
        if let Some(cut) = records_before_ms {
            let mut budget = PRUNE_BATCH;
            inner.records.retain(|r| {
                if r.at_ms < cut && budget > 0 {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
        }
        Ok(Pruned {
            pins: (pins - inner.pins.len()) as u64,
            records: (records - inner.records.len()) as u64,
        })
    }
}

/// Checks that `store` behaves as [`AttachmentStore`] says, on an empty store: pins and
/// re-pins, expiry, removal by target and by id, history filters, order and
/// pagination, pruning. For implementers' tests:
/// `check_store(&my_store).await.unwrap()`.
///
/// # Errors
/// The first expectation that failed, or the store's own error.
pub async fn check_store(store: &dyn AttachmentStore) -> Result<(), String> {
    fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: got {got:?}, want {want:?}"))
        }
    }
    let e = |e: StoreError| e.to_string();
    let now = unix_ms_now();
    let conv = PinOwner::Conversation("c-1".into());
    let pipe = PinOwner::Pipeline("p-1".into());
    let uri = |u: &str| AttachmentTarget::Uri { uri: u.into() };
    let template = AttachmentTarget::Template {
        template: "kb://tickets/{id}".into(),
        arguments: [
            ("id".to_owned(), crate::ArgumentValue::Literal("7".into())),
            (
                "user".to_owned(),
                crate::ArgumentValue::Variable(crate::VariableRef {
                    var: "sender".into(),
                    default: None,
                }),
            ),
        ]
        .into_iter()
        .collect(),
    };
    let new = |owner: &PinOwner, target: &AttachmentTarget, expires: Option<i64>| NewPin {
        owner: owner.clone(),
        server: "kb".into(),
        target: target.clone(),
        expires_at_ms: expires,
    };

    // Pins: create, re-pin (same id, new expiry), template round trip, expiry, owners.
    let a = store
        .pin(new(&conv, &uri("kb://a"), None))
        .await
        .map_err(e)?;
    let again = store
        .pin(new(&conv, &uri("kb://a"), Some(now + 3_600_000)))
        .await
        .map_err(e)?;
    expect("re-pin keeps the id", &again.id, &a.id)?;
    expect(
        "re-pin sets the expiry",
        again.expires_at_ms,
        Some(now + 3_600_000),
    )?;
    let t = store.pin(new(&conv, &template, None)).await.map_err(e)?;
    expect("template round trip", &t.target, &template)?;
    store
        .pin(new(&conv, &uri("kb://expired"), Some(now - 1)))
        .await
        .map_err(e)?;
    store
        .pin(new(&pipe, &uri("kb://p"), None))
        .await
        .map_err(e)?;
    let live = store
        .pins(std::slice::from_ref(&conv), now)
        .await
        .map_err(e)?;
    let uris: Vec<AttachmentTarget> = live.iter().map(|p| p.target.clone()).collect();
    expect(
        "live conversation pins, oldest first",
        uris,
        vec![uri("kb://a"), template.clone()],
    )?;
    let both = store
        .pins(&[conv.clone(), pipe.clone()], now)
        .await
        .map_err(e)?;
    expect("pins of two owners", both.len(), 3)?;
    expect(
        "a pipeline pin's scope",
        both.iter()
            .find(|p| p.target == uri("kb://p"))
            .map(|p| p.attachment().scope),
        Some(Scope::Pipeline),
    )?;
    let other = store
        .pins(&[PinOwner::Conversation("c-2".into())], now)
        .await
        .map_err(e)?;
    expect("another conversation has none", other.len(), 0)?;
    match store
        .pin(NewPin {
            owner: conv.clone(),
            server: "kb".into(),
            target: AttachmentTarget::Uri { uri: " ".into() },
            expires_at_ms: None,
        })
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => return Err(format!("an empty URI: got {other:?}, want Invalid")),
    }

    match store
        .pin(NewPin {
            owner: PinOwner::Conversation("x".repeat(MAX_ID_BYTES + 1)),
            server: "kb".into(),
            target: uri("kb://a"),
            expires_at_ms: None,
        })
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => return Err(format!("an over-long id: got {other:?}, want Invalid")),
    }
    // A long URI is fine (it is not indexed).
    let long = uri(&format!("kb://{}", "u".repeat(20_000)));
    store.pin(new(&pipe, &long, None)).await.map_err(e)?;
    expect(
        "unpin a long URI",
        store.unpin(&pipe, "kb", &long).await.map_err(e)?,
        true,
    )?;

    // Removal.
    expect(
        "unpin by target",
        store.unpin(&conv, "kb", &uri("kb://a")).await.map_err(e)?,
        true,
    )?;
    expect(
        "unpin again",
        store.unpin(&conv, "kb", &uri("kb://a")).await.map_err(e)?,
        false,
    )?;
    expect(
        "unpin by id of another owner",
        store.unpin_id(&pipe, &t.id).await.map_err(e)?,
        false,
    )?;
    expect(
        "unpin by id",
        store.unpin_id(&conv, &t.id).await.map_err(e)?,
        true,
    )?;
    let pruned = store.prune(now, None).await.map_err(e)?;
    expect("prune removes the expired pin", pruned.pins, 1)?;

    // History.
    let read = |uri: &str, error: Option<&str>| ReadRecord {
        server: "kb".into(),
        uri: uri.into(),
        mime_type: Some("text/markdown".into()),
        scope: Scope::Conversation,
        bytes: 1234,
        tokens_before: 900,
        tokens_estimated: false,
        tokens_after: 300,
        treatment: crate::Treatment::Chunked { kept: 2, total: 5 },
        elapsed_ms: 12,
        cache_hit: true,
        outcome: if error.is_some() {
            crate::ReadOutcome::Withheld
        } else {
            crate::ReadOutcome::Read
        },
        error: error.map(str::to_owned),
        origin: if error.is_some() {
            crate::ReadOrigin::Model
        } else {
            crate::ReadOrigin::Host
        },
        consent: error.map(|_| "denied by rule 1 (uri kb://z)".to_owned()),
        passages: Vec::new(),
        reason: None,
    };
    let turn = |id: &str, at_ms: i64, conversation: &str, reads: Vec<ReadRecord>| {
        reads
            .into_iter()
            .enumerate()
            .map(|(seq, read)| InjectionRecord {
                turn_id: id.into(),
                seq: seq as u32,
                at_ms,
                pipeline: "p-1".into(),
                conversation: Some(conversation.into()),
                message: Some("m".into()),
                read,
            })
            .collect::<Vec<_>>()
    };
    let t1 = turn(
        "t1",
        1_000,
        "c-1",
        vec![read("kb://x", None), read("kb://y", None)],
    );
    let t2 = turn("t2", 2_000, "c-2", vec![read("kb://z", Some("boom"))]);
    store.record(&t1).await.map_err(e)?;
    store.record(&t2).await.map_err(e)?;
    let all = store.history(&HistoryQuery::default()).await.map_err(e)?;
    let order: Vec<(&str, u32)> = all.iter().map(|r| (r.turn_id.as_str(), r.seq)).collect();
    expect(
        "newest turn first, reads in order",
        order,
        vec![("t2", 0), ("t1", 0), ("t1", 1)],
    )?;
    expect("a record round trip", &all[1], &t1[0])?;
    expect("a withheld read's round trip", &all[0], &t2[0])?;
    let q = |f: fn(&mut HistoryQuery)| {
        let mut q = HistoryQuery::default();
        f(&mut q);
        q
    };
    let uris = |rs: Vec<InjectionRecord>| rs.into_iter().map(|r| r.read.uri).collect::<Vec<_>>();
    expect(
        "by conversation",
        uris(
            store
                .history(&q(|q| q.conversation = Some("c-1".into())))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned(), "kb://y".to_owned()],
    )?;
    expect(
        "errors only",
        uris(
            store
                .history(&q(|q| q.errors_only = true))
                .await
                .map_err(e)?,
        ),
        vec!["kb://z".to_owned()],
    )?;
    expect(
        "time range",
        uris(
            store
                .history(&q(|q| {
                    q.since_ms = Some(1_000);
                    q.until_ms = Some(2_000);
                }))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned(), "kb://y".to_owned()],
    )?;
    expect(
        "by server and pipeline",
        store
            .history(&q(|q| {
                q.server = Some("kb".into());
                q.pipeline = Some("p-1".into());
            }))
            .await
            .map_err(e)?
            .len(),
        3,
    )?;
    expect(
        "another server",
        store
            .history(&q(|q| q.server = Some("other".into())))
            .await
            .map_err(e)?
            .len(),
        0,
    )?;
    expect(
        "limit and offset",
        uris(
            store
                .history(&q(|q| {
                    q.limit = 1;
                    q.offset = 1;
                }))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned()],
    )?;
    let pruned = store.prune(now, Some(2_000)).await.map_err(e)?;
    expect("prune history before 2000", pruned.records, 2)?;
    expect(
        "what is left",
        uris(store.history(&HistoryQuery::default()).await.map_err(e)?),
        vec!["kb://z".to_owned()],
    )?;

    // Tool calls: kept with their arguments, filtered like reads, newest turn first.
    let call = |turn: &str, at_ms: i64, seq: u32, conversation: &str, error: bool| ToolCallEntry {
        turn_id: turn.into(),
        seq,
        at_ms,
        pipeline: "p-1".into(),
        conversation: Some(conversation.into()),
        message: None,
        call: crate::trace::ToolCallRecord {
            server: "fs".into(),
            tool: "write_file".into(),
            name: "fs__write_file".into(),
            arguments: serde_json::json!({"path": "/tmp/x", "content": "é"}),
            result_bytes: 12,
            result_tokens: 4,
            is_error: error,
            error: error.then(|| "withheld: denied by rules[0] (server fs, tool write_*)".into()),
            withheld: error,
            elapsed_ms: 3,
            consent: error.then(|| "denied by rules[0] (server fs, tool write_*)".into()),
            origin: crate::trace::CallOrigin::Model,
        },
    };
    store
        .record_calls(&[
            call("t-a", now - 20, 0, "c-1", false),
            call("t-a", now - 20, 1, "c-1", true),
            call("t-b", now - 10, 0, "c-2", false),
        ])
        .await
        .map_err(e)?;
    let calls = store
        .call_history(&HistoryQuery::default())
        .await
        .map_err(e)?;
    expect(
        "tool calls, newest turn first, in call order",
        calls
            .iter()
            .map(|c| (c.turn_id.as_str(), c.seq))
            .collect::<Vec<_>>(),
        vec![("t-b", 0), ("t-a", 0), ("t-a", 1)],
    )?;
    expect(
        "a call kept whole",
        calls[2].clone(),
        call("t-a", now - 20, 1, "c-1", true),
    )?;
    let failed = store
        .call_history(&HistoryQuery {
            conversation: Some("c-1".into()),
            errors_only: true,
            ..HistoryQuery::default()
        })
        .await
        .map_err(e)?;
    expect("failed calls of c-1", failed.len(), 1)?;

    // Conversation grants: kept once, for exactly that pipeline, conversation, server,
    // URI and origin.
    let grant = ConsentGrant {
        pipeline: "p-1".into(),
        conversation: "c-1".into(),
        server: "kb".into(),
        uri: format!("kb://secret/{}", "x".repeat(4000)),
        origin: crate::consent::ReadOrigin::Host,
        kind: GrantKind::Read,
    };
    expect(
        "not granted yet",
        store.is_granted(&grant).await.map_err(e)?,
        false,
    )?;
    store.grant(&grant, now).await.map_err(e)?;
    store.grant(&grant, now).await.map_err(e)?;
    expect("granted", store.is_granted(&grant).await.map_err(e)?, true)?;
    for other in [
        ConsentGrant {
            conversation: "c-2".into(),
            ..grant.clone()
        },
        ConsentGrant {
            pipeline: "p-2".into(),
            ..grant.clone()
        },
        ConsentGrant {
            origin: crate::consent::ReadOrigin::Model,
            ..grant.clone()
        },
        ConsentGrant {
            uri: "kb://secret/y".into(),
            ..grant.clone()
        },
        // Calling a tool named like the URI is another grant.
        ConsentGrant {
            kind: GrantKind::Call,
            ..grant.clone()
        },
    ] {
        expect(
            &format!("not granted: {other:?}"),
            store.is_granted(&other).await.map_err(e)?,
            false,
        )?;
    }
    let too_long = ConsentGrant {
        conversation: "c".repeat(MAX_ID_BYTES + 1),
        ..grant.clone()
    };
    expect(
        "an over-long conversation id is refused",
        matches!(
            store.grant(&too_long, now).await,
            Err(StoreError::Invalid(_))
        ),
        true,
    )?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_memory_store_passes_the_store_checks() {
        check_store(&MemoryStore::new()).await.unwrap();
    }
}
