//! Host-owned attachments (pins) and the read history, behind [`AttachmentStore`].
//!
//! A *pin* attaches a resource to every turn of one pipeline or one conversation until it
//! is removed or expires; a [`Pipeline`](crate::Pipeline) given a store
//! ([`Pipeline::with_store`](crate::Pipeline::with_store)) loads the pins of the turn's
//! pipeline and conversation before its stages run, and writes one [`InjectionRecord`]
//! per resource read after them. Message-scope attachments are never stored: they live
//! in [`Turn::attachments`](hostpipe_core::Turn::attachments) for one turn.
//!
//! `hostpipe-store` implements the trait on SQLite (the embedded default) and
//! PostgreSQL; [`MemoryStore`] keeps everything in memory (tests, one-shot tools).
//!
//! Times are Unix milliseconds (UTC), as `i64`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use hostpipe_core::{Attachment, AttachmentTarget, ReadRecord, Scope};

pub use crate::consent::{ConsentGrant, GrantKind, GrantStore};
pub use crate::error::{MAX_ID_BYTES, StoreError};
pub use hostpipe_core::unix_ms_now;

/// Whom a pin belongs to: every turn of a pipeline, or of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "owner", rename_all = "snake_case")]
pub enum PinOwner {
    /// Every turn of the pipeline with this id.
    Pipeline(String),
    /// Every turn of the conversation with this id ([`TurnIds::conversation`](hostpipe_core::TurnIds::conversation)).
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

/// Which pins [`AttachmentStore::list_pins`] returns: the live ones of every owner (or of
/// one scope), oldest first (creation time, then id), one page at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PinQuery {
    /// Only pins of this scope ([`Scope::Pipeline`] or [`Scope::Conversation`]; a
    /// [`Scope::Message`] matches none: message attachments are never stored).
    pub scope: Option<Scope>,
    /// At most this many pins (default 100; a store may cap it at
    /// [`HistoryQuery::MAX_LIMIT`]).
    pub limit: u32,
    /// Skip this many pins first (pagination).
    pub offset: u32,
}

impl Default for PinQuery {
    fn default() -> Self {
        Self {
            scope: None,
            limit: 100,
            offset: 0,
        }
    }
}

impl PinQuery {
    /// Whether `pin` passes the filters at `now_ms` (live, of the scope asked).
    pub fn matches(&self, pin: &Pin, now_ms: i64) -> bool {
        pin.is_live(now_ms) && self.scope.is_none_or(|s| pin.owner.scope() == s)
    }
}

/// One resource read of one turn, as the history keeps it: the turn's ids and the
/// [`ReadRecord`] of its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectionRecord {
    /// The turn ([`Trace::turn_id`](hostpipe_core::Trace::turn_id)).
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
    /// Only reads that did not go through ([`ReadOutcome`](hostpipe_core::ReadOutcome) other than
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

/// One tool call of a turn, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallEntry {
    /// The turn ([`Trace::turn_id`](hostpipe_core::Trace::turn_id)).
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
    pub call: hostpipe_core::trace::ToolCallRecord,
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

/// Where a [`Pipeline`](crate::Pipeline) gets the pins of a turn's pipeline and
/// conversation, before its stages run.
#[async_trait]
pub trait PinSource: Send + Sync {
    /// The pins of `owners` that are live at `now_ms`, oldest first.
    ///
    /// # Errors
    /// A database error, or [`StoreError::Corrupt`] for a row that cannot be read.
    async fn pins(&self, owners: &[PinOwner], now_ms: i64) -> Result<Vec<Pin>, StoreError>;
}

/// Where a [`Pipeline`](crate::Pipeline) writes each turn's reads and tool calls, after
/// its runner.
#[async_trait]
pub trait HistorySink: Send + Sync {
    /// Appends history records (one transaction: all or none).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for an id over [`MAX_ID_BYTES`]
    /// ([`InjectionRecord::validate`]), or a database error.
    async fn record(&self, records: &[InjectionRecord]) -> Result<(), StoreError>;
    /// Appends tool calls to the history. The default keeps nothing (a store written
    /// before tool calls were audited).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for ids over [`MAX_ID_BYTES`], or a database error.
    async fn record_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        let _ = calls;
        Ok(())
    }
}

/// Where pins, the read and tool call history and consent grants live: the seams a
/// pipeline and its consent gate use ([`PinSource`], [`HistorySink`], [`GrantStore`])
/// and what the command line and the HTTP API manage besides. Implementations must be
/// safe to share between tasks and processes (several workers may use one PostgreSQL
/// database).
///
/// Every method should finish within a few seconds or fail: the pipeline also bounds
/// each call ([`Pipeline::STORE_TIMEOUT`](crate::Pipeline::STORE_TIMEOUT)).
#[async_trait]
pub trait AttachmentStore: PinSource + HistorySink + GrantStore {
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

    /// The live pins of every pipeline and conversation that match `query` (an operator's
    /// overview; a turn loads its own with [`PinSource::pins`]), oldest first.
    ///
    /// # Errors
    /// A database error, or [`StoreError::Corrupt`] for a row that cannot be read.
    async fn list_pins(&self, query: &PinQuery, now_ms: i64) -> Result<Vec<Pin>, StoreError>;

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

/// A new pin id: a UUID v7 (time-ordered), as text.
pub fn new_pin_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// One page of `items` that `keep` accepts, in the history's order (newest turn first,
/// each turn's entries in order; `key` gives an entry's turn start in Unix ms, turn id
/// and position), cut by `query`'s offset and limit.
pub(crate) fn history_page<T: Clone>(
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

mod memory;

pub use memory::MemoryStore;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testkit::check_store;

    #[tokio::test]
    async fn the_memory_store_passes_the_store_checks() {
        check_store(&MemoryStore::new()).await.unwrap();
    }

    #[tokio::test]
    async fn the_memory_store_passes_the_credential_row_checks() {
        crate::testkit::check_sealed_rows(&MemoryStore::new())
            .await
            .unwrap();
    }
}
