//! One incoming bot message and everything stages add to it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::context::{Attachment, ContextBlock};
use crate::extensions::Extensions;
use crate::model::ModelProfile;
use crate::source::{Role, ServerStatus};
use crate::tool::{ToolExecutor, ToolSpec};
use crate::trace::Trace;

/// The ids that place a turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnIds {
    /// The bot, if the platform runs several.
    pub bot: Option<String>,
    /// The pipeline the turn runs through.
    pub pipeline: String,
    /// The conversation (chat, group, thread), if any.
    pub conversation: Option<String>,
    /// This message.
    pub message: String,
}

/// The user's message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub text: String,
    /// Images the user sent with it (the OpenAI-compatible door's `image_url` parts).
    /// The resource context injection stage fits them like attached images, as musts
    /// at message scope: a model with vision gets them with the message, another a
    /// note. They travel as context blocks, never in this field, so it is not
    /// serialized.
    #[serde(skip)]
    pub images: Vec<MessageImage>,
}

/// An image of the user's message: its MIME type (`image/png`, `image/jpeg`,
/// `image/gif`, `image/webp`) and its bytes, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageImage {
    /// The MIME type.
    pub mime_type: String,
    /// The encoded image.
    pub data: Vec<u8>,
}

/// One earlier message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryMessage {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub text: String,
}

/// One round of the caller's own tools after the user's message (the OpenAI-compatible
/// door): the model's calls, as the caller got them, and the caller's results. The
/// runner sends the rounds after the user's message and goes on from there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerRound {
    /// What the model said along with its calls, if anything.
    pub text: Option<String>,
    /// The calls, in order.
    pub calls: Vec<CallerToolCall>,
    /// The caller's results, in order.
    pub results: Vec<CallerToolResult>,
}

/// A call of one of the caller's tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerToolCall {
    /// The call's id.
    pub id: String,
    /// The tool's name as offered to the model.
    pub name: String,
    /// The arguments, JSON text as the model wrote them.
    pub arguments: String,
}

/// The caller's result of one of its tools' calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerToolResult {
    /// The id of the call it answers.
    pub call_id: String,
    /// The result, text.
    pub text: String,
}

/// User-visible string values of a turn (sender id, group id, values a user set), used
/// for template arguments and, later, Dify `inputs`. Internal state never goes here:
/// use [`Extensions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Variables(BTreeMap<String, String>);

impl Variables {
    /// No variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, returning the old value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        self.0.insert(key.into(), value.into())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// All variables, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Variables {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// A server the pipeline may use in this turn, as decided by `BindMcpServers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundServer {
    /// Server name.
    pub name: String,
    /// Whether the turn must end when it is down.
    pub required: bool,
    /// Its status when bound.
    pub status: ServerStatus,
}

/// One incoming bot message on its way through a pipeline.
#[derive(Debug, Default)]
pub struct Turn {
    /// Ids.
    pub ids: TurnIds,
    /// Who sent it (platform user id), if known.
    pub sender: Option<String>,
    /// The message.
    pub message: UserMessage,
    /// Earlier messages, oldest first.
    pub history: Vec<HistoryMessage>,
    /// User-visible variables.
    pub variables: Variables,
    /// Plugin-private data.
    pub extensions: Extensions,
    /// System prompt; the pipeline sets it from its configuration, stages may add to it.
    pub system_prompt: Option<String>,
    /// The model the turn is prepared for; the pipeline sets it.
    pub model: Arc<ModelProfile>,
    /// Attachments made for this turn by the platform or the user (message scope, and
    /// conversation scope when the platform resolves pins).
    pub attachments: Vec<Attachment>,
    /// Servers bound for this turn.
    pub bound_servers: Vec<BoundServer>,
    /// Context collected for the model.
    pub context: Vec<ContextBlock>,
    /// The token budget the context was fitted into, when a stage set one.
    pub context_budget: Option<usize>,
    /// Tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The caller's own tools ([`crate::ToolOrigin::Caller`]): offered after the
    /// stages' tools, run by the caller.
    pub caller_tools: Vec<ToolSpec>,
    /// The rounds of the caller's tools since the user's message.
    pub caller_rounds: Vec<CallerRound>,
    /// Executes the model's tool calls; set by the tool-assembly stage.
    pub tool_executor: Option<Arc<dyn ToolExecutor>>,
    /// What happened.
    pub trace: Trace,
    /// When the turn must be ready for the runner. Stages that wait on servers stop
    /// waiting here (in-flight MCP requests are cancelled) and go on with what they
    /// have. Set by `hostpipe_engine::Pipeline::prepare` from the pipeline's turn timeout when
    /// the platform has not set it.
    pub deadline: Option<std::time::Instant>,
    /// The pipeline's consent gate, when it has a policy; stages ask it before every
    /// read ([`Turn::consent_for`]). Set by `hostpipe_engine::Pipeline::prepare`.
    pub consent: Option<Arc<dyn crate::consent::ConsentGate>>,
    /// The fence around resource text in what the model sees, with a nonce fresh for
    /// this turn ([`crate::fence`]).
    pub fence: crate::fence::Fence,
    /// What hostpipe says to the end user, in the pipeline's language
    /// ([`crate::messages`]). Set by `hostpipe_engine::Pipeline::prepare`; English
    /// otherwise.
    pub messages: Arc<crate::messages::Messages>,
}

impl Turn {
    /// A turn carrying `text` for pipeline `pipeline`, with a fresh trace.
    pub fn new(pipeline: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            ids: TurnIds {
                pipeline: pipeline.into(),
                ..TurnIds::default()
            },
            message: UserMessage {
                text: text.into(),
                images: Vec::new(),
            },
            ..Self::default()
        }
    }

    /// Names of the bound servers that are connected, in binding order.
    pub fn connected_servers(&self) -> impl Iterator<Item = &str> {
        self.bound_servers
            .iter()
            .filter(|b| b.status.is_connected())
            .map(|b| b.name.as_str())
    }

    /// Time left until [`Turn::deadline`]; `None` when the turn has no deadline, zero
    /// when it has passed.
    pub fn time_left(&self) -> Option<std::time::Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(std::time::Instant::now()))
    }

    /// Decides whether this turn may read `uri` from `server` ([`crate::consent`]),
    /// asking the approver when the policy says so, never past [`Turn::deadline`].
    /// `None` when the pipeline has no consent policy (every read is allowed).
    pub async fn consent_for(
        &self,
        server: &str,
        uri: &str,
        origin: crate::consent::ReadOrigin,
        reason: impl Into<String>,
    ) -> Option<crate::consent::Verdict> {
        let gate = self.consent.as_ref()?;
        let request = self.consent_request(server, uri, origin, reason);
        Some(crate::consent::check_until(gate.as_ref(), &request, self.deadline).await)
    }

    /// The [`ConsentRequest`](crate::ConsentRequest) for a read by this turn.
    pub fn consent_request(
        &self,
        server: &str,
        uri: &str,
        origin: crate::consent::ReadOrigin,
        reason: impl Into<String>,
    ) -> crate::consent::ConsentRequest {
        crate::consent::ConsentRequest {
            turn_id: self.trace.turn_id().to_owned(),
            pipeline: self.ids.pipeline.clone(),
            conversation: self.ids.conversation.clone(),
            sender: self.sender.clone(),
            server: server.to_owned(),
            uri: uri.to_owned(),
            origin,
            reason: reason.into(),
            tool: None,
        }
    }

    /// Whether `server` is bound for this turn (whatever its status).
    pub fn is_bound(&self, server: &str) -> bool {
        self.bound_servers.iter().any(|b| b.name == server)
    }
}
