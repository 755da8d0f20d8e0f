//! The contract of hostpipe: what a turn is, what stages and runners are, and the seams
//! where they meet MCP servers, the model, the consent policy and the trace. The engine
//! that runs them (`hostpipe-engine`: the pipeline, consent policies, attachment stores,
//! runner layers) builds on this crate; stages and runners need only this one.
//!
//! A [`Turn`] is one incoming bot message. A pipeline runs an ordered list of
//! [`Stage`]s over it; each stage either continues or ends the turn with a reply
//! ([`StageOutcome`]). Stages read MCP servers through the [`McpSource`] trait (the MCP
//! crate implements it; core never names an MCP SDK type), put the resources they read
//! into [`ContextBlock`]s and the tools they gather into [`ToolSpec`]s. The turn then
//! becomes one [`RunRequest`], the uniform context interface that every [`Runner`]
//! renders into its own wire format, reporting [`RunEvent`]s. Every read and every
//! decision lands in the turn's [`Trace`].
//!
//! Stages and runners are found through a [`Registry`] of [`StageDescriptor`]s and
//! [`RunnerDescriptor`]s that crates submit with [`inventory`]
//! ([`submit_stage!`], [`submit_runner!`]).
//!
//! Core reads no environment variables and no files: configuration arrives as typed
//! values or as a `serde_json::Value` section that each stage deserializes.

pub mod consent;
pub mod context;
pub mod credentials;
pub mod elicit;
pub mod error;
pub mod extensions;
pub mod fence;
pub mod messages;
pub mod model;
pub mod registry;
pub mod retrieval;
pub mod run;
pub mod source;
pub mod stage;
pub mod summarize;
pub mod tokens;
pub mod tool;
pub mod trace;
pub mod turn;

pub use consent::{ConsentGate, ConsentRequest, ToolCallRequest, Verdict, cap_json};
pub use context::{
    ArgumentValue, Attachment, AttachmentTarget, BlockBody, BlockSource, ContextBlock,
    FallbackReason, Scope, TemplateRef, Treatment, TruncationSide, VariableRef,
};
pub use credentials::{CredentialVault, MemoryVault, StoredSecret, VaultError};
pub use elicit::{
    ElicitScope, ElicitationAnswer, ElicitationMode, ElicitationRecord, ElicitationRequest,
    ElicitationSettings, Elicitor,
};
pub use error::{ConfigError, RunError, SourceError, StageError};
pub use extensions::Extensions;
pub use fence::Fence;
pub use messages::{Locale, MessageError, MessageKey, Messages};
pub use model::{ModelProfile, ModelProfileError};
pub use registry::{
    BuildContext, Registry, RegistryError, RunnerDescriptor, StageDescriptor, StagePhase,
    parse_section,
};
pub use retrieval::{Embedder, PassageRequest, Reranker, RetrievalError, RetrievedPassage};
pub use run::{
    EventSink, RunEvent, RunReply, RunRequest, Runner, TokenUsage, collect_reply,
    collect_reply_tapped,
};
pub use source::{
    Annotations, Completion, CompletionRef, ListCounts, McpSource, Prompt, PromptArgument,
    PromptMessage, PromptResult, Resource, ResourceContents, ResourceRead, ResourceTemplate, Role,
    ServerCapabilities, ServerInfo, ServerStatus, Tool, ToolCallResult, ToolContent, ToolHints,
};
pub use stage::{Stage, StageOutcome};
pub use summarize::{SummarizeError, Summarizer};
pub use tokens::{Encoding, Tokenizer, Truncation};
pub use tool::{
    BudgetOverride, CallerRead, ToolError, ToolExecutor, ToolFilter, ToolOrigin, ToolSpec,
    ToolsOnly,
};
pub use trace::{
    CallOrigin, PassageRecord, ReadOrigin, ReadOutcome, ReadRecord, ReadSink, StageOutcomeKind,
    ToolCallRecord, Trace, TraceEvent, TraceRecord, unix_ms_now,
};
pub use turn::{
    BoundServer, CallerRound, CallerToolCall, CallerToolResult, HistoryMessage, MessageImage, Turn,
    TurnIds, UserMessage, Variables,
};

#[doc(hidden)]
pub use inventory as __inventory;

/// docs/elicitation.md, its examples compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/elicitation.md")]
pub struct ElicitationGuide;
