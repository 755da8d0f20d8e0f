//! The wire types of the OpenAI-compatible door, after the OpenAI API reference:
//! "Chat Completions" (the request, the `chat.completion` object, the
//! `chat.completion.chunk` object of a stream), "Models" (the `list` of `model`
//! objects) and "Error codes" (`{"error": {"message", "type", "param", "code"}}`).
//!
//! Requests are read leniently, as OpenAI-compatible servers do: a field this door does
//! not use is ignored (and logged at debug), a field whose meaning it cannot keep (`n`
//! above 1, images) is refused with 400 naming it.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hostpipe_core::TokenUsage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::ApiError;

// ---- request ------------------------------------------------------------------------

/// `POST /v1/chat/completions` (API reference: "Create chat completion").
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    /// The pipeline id.
    pub(crate) model: String,
    /// The conversation so far; the last one is the user's message.
    pub(crate) messages: Vec<InMessage>,
    /// Stream `chat.completion.chunk` objects as server-sent events.
    #[serde(default)]
    pub(crate) stream: bool,
    /// `include_usage`: a last chunk with `usage` and no choices.
    pub(crate) stream_options: Option<StreamOptions>,
    /// The end user; a conversation id when nothing more specific is given.
    pub(crate) user: Option<String>,
    /// Up to 16 string pairs; `conversation_id` names the conversation.
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    /// How many choices: only 1.
    pub(crate) n: Option<u32>,
    /// The caller's own tools: offered to the model beside the pipeline's; a call to
    /// one comes back to the caller.
    #[serde(default)]
    pub(crate) tools: Vec<InTool>,
    /// Every other field (`temperature`, `max_tokens`, …): the pipeline's `local`
    /// section decides those, so they are ignored.
    #[serde(flatten)]
    pub(crate) ignored: BTreeMap<String, Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default)]
    pub(crate) include_usage: bool,
}

/// One message of the request, by its `role`.
#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub(crate) enum InMessage {
    /// The caller's instructions; kept after the pipeline's system prompt.
    System {
        /// Text, or text parts.
        content: Content,
    },
    /// The newer name of `system` (o1 and later).
    Developer {
        /// Text, or text parts.
        content: Content,
    },
    /// The user.
    User {
        /// Text, or text and image parts.
        content: Content,
    },
    /// The model, earlier.
    Assistant {
        /// Text; absent or null with `tool_calls`.
        #[serde(default)]
        content: Option<Content>,
        /// The model's calls of the caller's tools in that message.
        #[serde(default)]
        tool_calls: Option<Vec<InToolCall>>,
    },
    /// The caller's result of one of its tools' calls.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result: text, or text parts.
        content: Content,
    },
}

/// One of the caller's tools (`{"type": "function", "function": {…}}`).
#[derive(Debug, Deserialize)]
pub(crate) struct InTool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) function: InFunction,
}

/// A function tool.
#[derive(Debug, Deserialize)]
pub(crate) struct InFunction {
    /// `^[a-zA-Z0-9_-]{1,64}$`.
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// JSON Schema of the arguments; an empty object schema when absent.
    #[serde(default)]
    pub(crate) parameters: Option<Value>,
}

/// A call in an assistant message's `tool_calls`.
#[derive(Debug, Deserialize)]
pub(crate) struct InToolCall {
    pub(crate) id: String,
    pub(crate) function: InFunctionCall,
}

/// The function of a call.
#[derive(Debug, Deserialize)]
pub(crate) struct InFunctionCall {
    pub(crate) name: String,
    /// JSON text.
    pub(crate) arguments: String,
}

/// A message's `content`: a string or an array of parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    /// Plain text.
    Text(String),
    /// Parts.
    Parts(Vec<Part>),
}

/// One content part, by its `type`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (`image_url.url`: an https or `data:` URL; hostpipe takes `data:`).
    ImageUrl {
        /// The image.
        image_url: ImageUrl,
    },
    /// The model's refusal (assistant messages).
    Refusal {
        /// Why.
        refusal: String,
    },
    /// Audio, a file, …: not for this door.
    #[serde(other)]
    Other,
}

// ---- responses ----------------------------------------------------------------------

/// An `image_url` part's image.
#[derive(Debug, Deserialize)]
pub(crate) struct ImageUrl {
    /// `data:image/png;base64,…` (RFC 2397), or an `https` URL.
    pub url: String,
}

/// The `chat.completion` object (API reference: "The chat completion object").
#[derive(Debug, Serialize)]
pub(crate) struct ChatCompletion<'a> {
    pub(crate) id: &'a str,
    pub(crate) object: &'static str,
    /// Unix seconds.
    pub(crate) created: u64,
    /// The pipeline id, as asked.
    pub(crate) model: &'a str,
    pub(crate) choices: [Choice<'a>; 1],
    pub(crate) usage: Option<Usage>,
}

/// A choice of a `chat.completion`.
#[derive(Debug, Serialize)]
pub(crate) struct Choice<'a> {
    pub(crate) index: u32,
    pub(crate) message: OutMessage<'a>,
    pub(crate) finish_reason: FinishReason,
}

/// The answer's message.
#[derive(Debug, Serialize)]
pub(crate) struct OutMessage<'a> {
    /// Always `assistant`.
    pub(crate) role: &'static str,
    /// Null when the model only called the caller's tools.
    pub(crate) content: Option<&'a str>,
    /// The model's calls of the caller's tools, for the caller to run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<OutToolCall>,
    /// Always null: the refusal of a model that refused, which a pipeline does not tell.
    pub(crate) refusal: Option<&'a str>,
}

/// Why the model stopped (API reference: `finish_reason`).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FinishReason {
    /// A natural stop (also: a stage answered instead of the model).
    Stop,
    /// The model called the caller's tools.
    ToolCalls,
}

/// A call of one of the caller's tools (API reference: `tool_calls`); in a chunk with
/// its `index`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<u32>,
    pub(crate) id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: OutFunctionCall,
}

/// The function of a call.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutFunctionCall {
    /// The tool's name as the caller gave it.
    pub(crate) name: String,
    /// JSON text, as the model wrote it.
    pub(crate) arguments: String,
}

/// `usage`, in tokens.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) total_tokens: u64,
}

impl From<TokenUsage> for Usage {
    fn from(u: TokenUsage) -> Self {
        Self {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            total_tokens: u.input_tokens.saturating_add(u.output_tokens),
        }
    }
}

/// The `chat.completion.chunk` object (API reference: "The chat completion chunk
/// object"); `choices` is empty in the last chunk of `include_usage`.
#[derive(Debug, Serialize)]
pub(crate) struct Chunk<'a> {
    pub(crate) id: &'a str,
    pub(crate) object: &'static str,
    pub(crate) created: u64,
    pub(crate) model: &'a str,
    pub(crate) choices: Vec<ChunkChoice<'a>>,
    /// Null but in the usage chunk (when asked for; null there too when the runner
    /// did not report usage).
    pub(crate) usage: Option<Usage>,
}

/// A choice of a chunk.
#[derive(Debug, Serialize)]
pub(crate) struct ChunkChoice<'a> {
    pub(crate) index: u32,
    pub(crate) delta: Delta<'a>,
    pub(crate) finish_reason: Option<FinishReason>,
}

/// What a chunk adds to the message.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Delta<'a> {
    /// `assistant` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<&'a str>,
    /// The calls of the caller's tools, whole, in one chunk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<OutToolCall>,
}

/// `GET /v1/models` (API reference: "List models").
#[derive(Debug, Serialize)]
pub(crate) struct ModelList<'a> {
    /// Always `list`.
    pub(crate) object: &'static str,
    pub(crate) data: Vec<Model<'a>>,
}

/// One model: a pipeline.
#[derive(Debug, Serialize)]
pub(crate) struct Model<'a> {
    /// The pipeline id.
    pub(crate) id: &'a str,
    /// Always `model`.
    pub(crate) object: &'static str,
    /// Unix seconds: the time of the answer (a pipeline has no creation time).
    pub(crate) created: u64,
    /// Always `hostpipe`.
    pub(crate) owned_by: &'static str,
}

// ---- errors -------------------------------------------------------------------------

/// An [`ApiError`] in OpenAI's shape (API reference: "Error codes"): the same status
/// and headers, the body `{"error": {"message", "type", "param", "code"}}`, so the
/// OpenAI SDKs raise their typed errors (`NotFoundError` for 404,
/// `AuthenticationError` for 401, …).
#[derive(Debug, Clone)]
pub(crate) struct OpenAiError {
    error: ApiError,
    /// The request field at fault, when one is.
    param: Option<String>,
    /// `Retry-After` (a 429), whole seconds.
    retry_after: Option<u64>,
}

impl OpenAiError {
    /// A 400 about request field `param`.
    pub(crate) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error: ApiError::bad_request(message),
            param: Some(param.into()),
            retry_after: None,
        }
    }

    /// The error, naming `param`.
    pub(crate) fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The error, with `Retry-After` (rounded up to whole seconds).
    pub(crate) fn retry_after(mut self, after: std::time::Duration) -> Self {
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        self.retry_after = Some(secs);
        self
    }

    /// OpenAI's `type` for the status.
    fn kind(&self) -> &'static str {
        match self.error.status() {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The body.
    pub(crate) fn body(&self) -> Value {
        serde_json::json!({"error": {
            "message": self.error.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.error.code,
        }})
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            param: None,
            retry_after: None,
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = self.error.respond(self.body());
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}
