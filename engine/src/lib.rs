//! hostpipe's engine: what a bot platform embeds to run turns.
//!
//! - [`Pipeline`] runs a pipeline's stages in order over a [`Turn`](hostpipe_core::Turn),
//!   then a runner, under the [`layer`]s (timeout, failure report, panic catching); it
//!   loads pins before the stages and writes the read and tool call history after them.
//! - [`consent`]: the policy that decides every read and every tool call before it
//!   reaches a server ([`Consent`], a [`ConsentGate`](hostpipe_core::ConsentGate)),
//!   asking a person through an [`Approver`].
//! - [`store`]: pins, history and consent grants ([`AttachmentStore`], made of the seams
//!   the pipeline and the gate use: [`PinSource`], [`HistorySink`], [`GrantStore`]), and
//!   [`MemoryStore`]. `hostpipe-store` keeps them in SQLite or PostgreSQL.
//! - `testkit` (a feature): a fake MCP source, a scripted runner, the runner conformance
//!   checks and the store checks, for third-party runners, stores and stages.
//!
//! Stages and runners depend on `hostpipe-core` only; this crate is where they meet.

pub mod consent;
pub mod credentials;
pub mod error;
pub mod layer;
pub mod pipeline;
pub mod servers;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use consent::{
    Approver, Consent, ConsentAnswer, ConsentConfig, ConsentGrant, ConsentPolicy, ConsentRule,
    Decision, GrantKind,
};
pub use credentials::{CredentialKey, EncryptedVault, SealedRow, SealedRows};
pub use layer::{CatchPanic, ReportFailure, Timeout};
pub use pipeline::{
    Pipeline, PipelineObserver, Prepared, RunnerFailure, ToolCallOutcome, TurnEnd, TurnOutcome,
    TurnReport, TurnStatus,
};
pub use servers::{MemoryServerEntries, ServerEntries, StoredServer};
pub use store::{
    AttachmentStore, GrantStore, HistoryQuery, HistorySink, InjectionRecord, MemoryStore, NewPin,
    Pin, PinOwner, PinQuery, PinSource, Pruned, StoreError, ToolCallEntry,
};

/// docs/consent.md, its examples compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/consent.md")]
pub struct ConsentGuide;
