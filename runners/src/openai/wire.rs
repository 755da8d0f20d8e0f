//! The wire types of the OpenAI API reference, "Chat Completions" (`POST
//! /chat/completions`): the request body ("Create chat completion"), the response (the
//! chat completion object) and the streamed chat completion chunk objects. Private to
//! the `local` runner.
//!
//! Answers are read field by field with [`crate::lenient`]: OpenAI-compatible servers
//! differ, and a field of another shape counts as absent rather than failing the answer.

use hostpipe_core::{RunRequest, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{LocalConfig, ToolCall, model_schema};
pub(super) use crate::lenient::Usage;
use crate::lenient::{lenient, not_null, object, present};
use crate::render;

/// The request body ("Create chat completion").
#[derive(Debug, Serialize)]
pub(super) struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    stream: bool,
    /// `{"include_usage": true}` when streaming: the last chunk then carries `usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[Tool]>::is_empty")]
    tools: &'a [Tool],
    /// The configured `f32` widened to `f64` (0.7 goes out as 0.699999988079071), as
    /// this runner has always sent it.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
}

impl<'a> ChatRequest<'a> {
    /// The body for one model call: the conversation so far and the offered tools,
    /// with the model and settings of `config`.
    pub(super) fn new(config: &'a LocalConfig, messages: &'a [Message], tools: &'a [Tool]) -> Self {
        Self {
            model: &config.model,
            messages,
            stream: config.stream,
            stream_options: config.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            tools,
            temperature: config.temperature.map(f64::from),
            max_tokens: config.max_tokens,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One entry of `messages`, by `role`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub(super) enum Message {
    /// The system prompt and the fenced context.
    System {
        /// The text.
        content: String,
    },
    /// A user message: text, or text and image parts.
    User {
        /// The content.
        content: UserContent,
    },
    /// An assistant message: from the history (`tool_calls` empty, not sent), or the
    /// model's own turn in the tool loop (`content` `null` when it wrote no text).
    Assistant {
        /// The text, or `null`.
        content: Option<String>,
        /// The tool calls the model made.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<MessageToolCall>,
    },
    /// The result of one tool call, as one string.
    Tool {
        /// The call's `id`.
        tool_call_id: String,
        /// The result.
        content: String,
    },
}

/// The `content` of a user message.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(super) enum UserContent {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<ContentPart>),
}

/// A content part of a user message.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ContentPart {
    /// `{"type": "text", "text": …}`.
    Text {
        /// The text.
        text: String,
    },
    /// `{"type": "image_url", "image_url": {"url": "data:…"}}`.
    ImageUrl {
        /// The image.
        image_url: ImageUrl,
    },
}

impl ContentPart {
    /// A text part.
    pub(super) fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image part with the image as a `data:` URL.
    pub(super) fn image(mime: &str, data: &[u8]) -> Self {
        Self::ImageUrl {
            image_url: ImageUrl {
                url: render::data_url(mime, data),
            },
        }
    }
}

/// `image_url`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ImageUrl {
    url: String,
}

/// The `type` of a tool and of a tool call: always `function`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[serde(rename_all = "snake_case")]
enum ToolType {
    #[default]
    Function,
}

/// A tool call in an assistant message (the message tool call object).
#[derive(Debug, Clone, Serialize)]
pub(super) struct MessageToolCall {
    id: String,
    #[serde(rename = "type")]
    kind: ToolType,
    function: FunctionCall,
}

/// `function` of a tool call: the name and the arguments as JSON text.
#[derive(Debug, Clone, Serialize)]
struct FunctionCall {
    name: String,
    arguments: String,
}

impl From<&ToolCall> for MessageToolCall {
    fn from(call: &ToolCall) -> Self {
        Self {
            id: call.id.clone(),
            kind: ToolType::Function,
            function: FunctionCall {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        }
    }
}

/// An entry of `tools`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Tool {
    #[serde(rename = "type")]
    kind: ToolType,
    function: FunctionDefinition,
}

/// `function` of a tool.
#[derive(Debug, Clone, Serialize)]
struct FunctionDefinition {
    name: String,
    description: String,
    /// The JSON Schema of the arguments, as [`model_schema`] leaves it.
    parameters: Value,
}

impl From<&ToolSpec> for Tool {
    fn from(spec: &ToolSpec) -> Self {
        Self {
            kind: ToolType::Function,
            function: FunctionDefinition {
                name: spec.name.clone(),
                description: spec.description.clone(),
                parameters: model_schema(&spec.input_schema),
            },
        }
    }
}

impl Message {
    /// The `messages` of the first model call: the system prompt with the fenced
    /// context (or the fence's preamble alone when there are hostpipe's tools, whose
    /// results carry fenced text; the caller's own tools' results are not fenced), the
    /// history, and the user's message with the image blocks as parts when the model
    /// has vision.
    pub(super) fn opening(request: &RunRequest) -> Vec<Self> {
        let vision = request.model.vision;
        let mut system = request.system_prompt.clone().unwrap_or_default();
        let mut context = render::context_text(&request.context, vision, &request.fence);
        let fenced_tools = request
            .tools
            .iter()
            .any(|t| !matches!(t.origin, hostpipe_core::ToolOrigin::Caller));
        if context.is_empty() && fenced_tools {
            context = request.fence.preamble();
        }
        if !context.is_empty() {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&context);
        }
        let mut messages = Vec::new();
        if !system.is_empty() {
            messages.push(Self::System { content: system });
        }
        for h in &request.history {
            messages.push(match h.role {
                hostpipe_core::Role::User => Self::User {
                    content: UserContent::Text(h.text.clone()),
                },
                hostpipe_core::Role::Assistant => Self::Assistant {
                    content: Some(h.text.clone()),
                    tool_calls: Vec::new(),
                },
            });
        }
        let images = if vision {
            render::images(&request.context, &request.fence)
        } else {
            Vec::new()
        };
        let content = if images.is_empty() {
            UserContent::Text(request.message.text.clone())
        } else {
            let mut parts = vec![ContentPart::text(&request.message.text)];
            // Each image inside its fence, as a text block is: the preamble says only
            // the closing tag ends an element.
            for (tag, mime, data) in images {
                parts.push(ContentPart::text(tag));
                parts.push(ContentPart::image(mime, data));
                parts.push(ContentPart::text(request.fence.close()));
            }
            UserContent::Parts(parts)
        };
        messages.push(Self::User { content });
        // The caller's own tool rounds since the message (the OpenAI-compatible door).
        for round in &request.caller_rounds {
            messages.push(Self::Assistant {
                content: round.text.clone(),
                tool_calls: round
                    .calls
                    .iter()
                    .map(|c| MessageToolCall {
                        id: c.id.clone(),
                        kind: ToolType::Function,
                        function: FunctionCall {
                            name: c.name.clone(),
                            arguments: c.arguments.clone(),
                        },
                    })
                    .collect(),
            });
            for r in &round.results {
                messages.push(Self::Tool {
                    tool_call_id: r.call_id.clone(),
                    content: r.text.clone(),
                });
            }
        }
        messages
    }
}

/// The response of a call without streaming: the chat completion object (or an error
/// object). Only `choices[0]` is read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatCompletion {
    /// An error instead of an answer (any value but `null`).
    #[serde(deserialize_with = "not_null")]
    pub(super) error: Option<ApiError>,
    #[serde(deserialize_with = "lenient")]
    pub(super) choices: Vec<Choice>,
    #[serde(deserialize_with = "object")]
    pub(super) usage: Option<Usage>,
}

/// An entry of `choices`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Choice {
    /// The answer; present with any value (an odd one reads as an empty message).
    #[serde(deserialize_with = "present")]
    pub(super) message: Option<ResponseMessage>,
    /// `stop`, `length`, `tool_calls`, …
    #[serde(deserialize_with = "lenient")]
    pub(super) finish_reason: Option<String>,
}

/// `choices[].message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ResponseMessage {
    #[serde(deserialize_with = "lenient")]
    pub(super) content: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub(super) tool_calls: Vec<ResponseToolCall>,
}

/// A tool call of a whole answer; one without `id` or `function.name` is left out.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ResponseToolCall {
    #[serde(deserialize_with = "lenient")]
    pub(super) id: Option<String>,
    #[serde(deserialize_with = "object")]
    pub(super) function: CalledFunction,
}

/// `function` of a tool call as the model wrote it, whole or (streaming) a piece.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct CalledFunction {
    #[serde(deserialize_with = "lenient")]
    pub(super) name: Option<String>,
    /// JSON text; not read when it is not a string (some servers send an object).
    #[serde(deserialize_with = "lenient")]
    pub(super) arguments: Option<String>,
}

/// The error object, `{"error": {"message", "code", …}}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ApiError {
    #[serde(deserialize_with = "lenient")]
    pub(super) message: Option<String>,
    /// E.g. `context_length_exceeded`.
    #[serde(deserialize_with = "lenient")]
    pub(super) code: Option<String>,
}

/// An error response body (HTTP 4xx).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ErrorBody {
    #[serde(deserialize_with = "object")]
    pub(super) error: Option<ApiError>,
}

/// One streamed chunk (the chat completion chunk object), or an error object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatCompletionChunk {
    /// An error in the stream (any value but `null`).
    #[serde(deserialize_with = "not_null")]
    pub(super) error: Option<ApiError>,
    #[serde(deserialize_with = "lenient")]
    pub(super) choices: Vec<ChunkChoice>,
    /// `null` on every chunk but the last (`stream_options.include_usage`).
    #[serde(deserialize_with = "object")]
    pub(super) usage: Option<Usage>,
}

/// An entry of a chunk's `choices`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChunkChoice {
    #[serde(deserialize_with = "object")]
    pub(super) delta: Option<Delta>,
    #[serde(deserialize_with = "lenient")]
    pub(super) finish_reason: Option<String>,
}

/// `choices[].delta`: the next piece of the answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Delta {
    #[serde(deserialize_with = "lenient")]
    pub(super) content: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub(super) tool_calls: Vec<DeltaToolCall>,
}

/// A piece of a streamed tool call.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct DeltaToolCall {
    /// Which call the piece belongs to (some servers leave it out).
    #[serde(deserialize_with = "lenient")]
    pub(super) index: Option<u64>,
    /// On the first piece of a call.
    #[serde(deserialize_with = "lenient")]
    pub(super) id: Option<String>,
    #[serde(deserialize_with = "object")]
    pub(super) function: CalledFunction,
}
