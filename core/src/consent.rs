//! The consent gate as stages and tool executors see it: [`ConsentGate`] decides each
//! read and each tool call before it reaches a server. [`ConsentRequest`] is what it
//! decides on, [`Verdict`] its answer, with how it was decided for the trace and the
//! history.
//!
//! The policy behind a gate (rules, defaults by origin and by tool annotations, asking
//! a person, remembering "allow for this conversation") is the engine's:
//! `hostpipe_engine::consent::Consent` (docs/consent.md).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::trace::ReadOrigin;

/// A read or a tool call the policy says to ask about, as an approver (`hostpipe_engine::Approver`) gets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsentRequest {
    /// The turn asking ([`Trace::turn_id`](crate::Trace::turn_id)): lets a service route
    /// the question to the caller of that turn.
    #[serde(default)]
    pub turn_id: String,
    /// The pipeline.
    pub pipeline: String,
    /// The conversation, if any ("allow for this conversation" needs one).
    pub conversation: Option<String>,
    /// Who sent the message (platform user id), if known.
    pub sender: Option<String>,
    /// The MCP server.
    pub server: String,
    /// The resource URI.
    pub uri: String,
    /// Who chose the read.
    pub origin: ReadOrigin,
    /// Why it is being read, for the user: e.g. "attached to this conversation",
    /// "the model called read_resource".
    pub reason: String,
    /// For a tool call (then `uri` is empty): the tool and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCallRequest>,
}

/// The tool call a [`ConsentRequest`] asks about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The tool's name as its server lists it.
    pub name: String,
    /// Its arguments (a JSON object); an object over [`ToolCallRequest::MAX_ARGUMENT_BYTES`]
    /// of JSON is replaced by a string: its first bytes and how many were left out.
    pub arguments: serde_json::Value,
    /// Who makes the call: the model, an HTTP API caller or a remote agent.
    #[serde(default)]
    pub caller: crate::trace::CallOrigin,
}

impl ToolCallRequest {
    /// Most bytes of arguments shown to the approver (and kept in the history), as JSON.
    pub const MAX_ARGUMENT_BYTES: usize = 4096;

    /// The request of `caller` for calling `name` with `arguments`, capped.
    pub fn new(
        name: impl Into<String>,
        arguments: &serde_json::Value,
        caller: crate::trace::CallOrigin,
    ) -> Self {
        Self {
            name: name.into(),
            arguments: cap_json(arguments, Self::MAX_ARGUMENT_BYTES),
            caller,
        }
    }
}

/// `value` as is when its JSON is at most `max` bytes, else a string with its first
/// bytes (on a character boundary) and how many were left out.
pub fn cap_json(value: &serde_json::Value, max: usize) -> serde_json::Value {
    let text = value.to_string();
    if text.len() <= max {
        return value.clone();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::Value::String(format!(
        "{}… [{} more bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// The decision on one read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the read may go to the server.
    pub allowed: bool,
    /// How it was decided, for the trace and the history: e.g. "allowed by the default
    /// for host reads", "denied by rule 1 (uri kb://secret/*)", "asked (rule 2): allowed
    /// for the conversation", "asked (rule 2): no answer within 60000 ms, denied".
    pub how: String,
}

/// Where a pipeline's consent policy meets the stages and the tool executor: a denied
/// read or call never reaches the server.
#[async_trait]
pub trait ConsentGate: Send + Sync {
    /// The verdict on the read `request` describes (asking a person when the policy
    /// says so). Cancel-safe.
    async fn check(&self, request: &ConsentRequest) -> Verdict;

    /// The verdict on the tool call `request` describes (its `tool` set), for a tool
    /// whose annotations are `hints`. Cancel-safe.
    async fn check_call(
        &self,
        request: &ConsentRequest,
        hints: crate::source::ToolHints,
    ) -> Verdict;

    /// Whether the policy denies reading `uri` from `server` by `origin` outright,
    /// without asking anyone: what is denied is not even listed to the model.
    fn denies(&self, server: &str, uri: &str, origin: ReadOrigin) -> bool;
}

impl std::fmt::Debug for dyn ConsentGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConsentGate")
    }
}

/// [`ConsentGate::check`], but a denial when `deadline` passes first (the turn cannot
/// wait longer for an answer).
pub async fn check_until(
    gate: &dyn ConsentGate,
    request: &ConsentRequest,
    deadline: Option<std::time::Instant>,
) -> Verdict {
    match deadline {
        None => gate.check(request).await,
        Some(d) => tokio::time::timeout_at(d.into(), gate.check(request))
            .await
            .unwrap_or_else(|_| Verdict {
                allowed: false,
                how: "denied: the turn's deadline passed before the approver answered".into(),
            }),
    }
}
