//! `remote`: hands the turn to an agent behind an HTTP endpoint, in any language.
//!
//! hostpipe POSTs the [`RemoteRunRequest`] (versioned JSON, schema
//! `docs/remote-run-request.v1.schema.json`, generated from these types and checked by
//! a test) to the configured URL with `Authorization: Bearer TOKEN`, asking for
//! `text/event-stream` or `application/json`. The agent answers either
//! - one JSON object, [`RemoteReply`]: `{"text": "...", "usage": {...}}`; or
//! - server-sent events whose `data` is one `RunEvent` each (`{"event":
//!   "message_delta", "text": "..."}`, `tool_call_started`, `tool_call_finished`,
//!   `message_completed`, `run_completed`, `run_failed`), ending with `run_completed` or
//!   `run_failed`.
//!
//! The request lists the turn's tools so the agent knows what the user's servers offer;
//! version 1 has no way for the agent to call them through hostpipe.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BlockBody, BuildContext, ConfigError, EventSink, RunError, RunEvent, RunRequest, Runner,
    TokenUsage, parse_section,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::http::{self, HttpPolicy};

/// The `version` of the request body this runner sends.
pub const VERSION: &str = "hostpipe.remote_run_request.v1";

/// Config section `[pipelines.ID.remote]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// The agent's endpoint. Required.
    pub url: String,
    /// The environment variable holding the bearer token. Default
    /// `HOSTPIPE_REMOTE_TOKEN`; unset means no `Authorization` header.
    pub token_env: String,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Whole request timeout in milliseconds (streaming included). Default 120 000.
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds. Default 10 000.
    pub connect_timeout_ms: u64,
    /// Retries after HTTP 429, 5xx or a failed connect. Default 2.
    pub max_retries: u32,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            token_env: "HOSTPIPE_REMOTE_TOKEN".into(),
            headers: BTreeMap::new(),
            timeout_ms: 120_000,
            connect_timeout_ms: 10_000,
            max_retries: 2,
        }
    }
}

/// The body hostpipe POSTs: the turn as the model would get it, with provenance.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteRunRequest {
    /// Always [`VERSION`]; a new major version gets a new name.
    pub version: String,
    /// Pipeline, conversation and message ids.
    pub ids: RemoteIds,
    /// The sender's platform user id, if known.
    pub sender: Option<String>,
    /// The turn's user-visible variables.
    pub variables: BTreeMap<String, String>,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Earlier messages, oldest first.
    pub history: Vec<RemoteMessage>,
    /// The user's message.
    pub message: String,
    /// Context blocks, in the order the model should see them.
    pub context: Vec<RemoteBlock>,
    /// The token budget the context was fitted into.
    pub context_budget: Option<usize>,
    /// Tools the turn offers (for information; v1 cannot call them back).
    pub tools: Vec<RemoteTool>,
    /// The model profile: name, context window, output tokens, vision, tool calling.
    pub model: RemoteModel,
}

/// Ids of the turn.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteIds {
    /// Pipeline id.
    pub pipeline: String,
    /// Conversation id, if any.
    pub conversation: Option<String>,
    /// Message id.
    pub message: String,
}

/// One earlier message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub text: String,
}

/// One context block.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteBlock {
    /// The MCP server it came from.
    pub server: String,
    /// The resource URI.
    pub uri: String,
    /// `message`, `conversation` or `pipeline`.
    pub scope: String,
    /// MIME type, if known.
    pub mime_type: Option<String>,
    /// What was done to fit the budget: `whole`, `chunked 2/9`, `head kept, 1200 cut`, ...
    pub treatment: String,
    /// Tokens as sent.
    pub tokens: usize,
    /// The content.
    pub body: RemoteBody,
}

/// A block's content.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RemoteBody {
    /// Text for the model.
    Text {
        /// The text.
        text: String,
    },
    /// An image (only for a model profile with vision).
    Image {
        /// MIME type.
        mime_type: String,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
        /// The encoded image, base64 (RFC 4648, standard alphabet).
        data_base64: String,
    },
    /// A note in place of content the model cannot or should not get.
    Note {
        /// The note.
        note: String,
    },
}

/// A tool the turn offers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteTool {
    /// Name as offered (`server__tool`).
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: serde_json::Value,
}

/// The model profile.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteModel {
    /// Model name.
    pub name: String,
    /// Context window in tokens.
    pub context_window: usize,
    /// Tokens reserved for the answer.
    pub max_output_tokens: usize,
    /// Whether it takes images.
    pub vision: bool,
    /// Whether it calls tools.
    pub tool_calling: bool,
}

/// A non-streaming answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteReply {
    /// The answer.
    pub text: String,
    /// Token usage, if the agent reports it.
    #[serde(default)]
    pub usage: Option<RemoteUsage>,
}

/// Token usage, as in `RunEvent::RunCompleted`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct RemoteUsage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
}

impl RemoteRunRequest {
    /// The wire form of `request`.
    pub fn from_request(request: &RunRequest) -> Self {
        use base64::Engine as _;
        Self {
            version: VERSION.into(),
            ids: RemoteIds {
                pipeline: request.ids.pipeline.clone(),
                conversation: request.ids.conversation.clone(),
                message: request.ids.message.clone(),
            },
            sender: request.sender.clone(),
            variables: request
                .variables
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            system_prompt: request.system_prompt.clone(),
            history: request
                .history
                .iter()
                .map(|h| RemoteMessage {
                    role: match h.role {
                        hostpipe_core::Role::User => "user".into(),
                        hostpipe_core::Role::Assistant => "assistant".into(),
                    },
                    text: h.text.clone(),
                })
                .collect(),
            message: request.message.text.clone(),
            context: request
                .context
                .iter()
                .map(|b| RemoteBlock {
                    server: b.source.server.clone(),
                    uri: b.source.uri.clone(),
                    scope: b.source.scope.as_str().into(),
                    mime_type: b.mime_type.clone(),
                    treatment: crate::render::treatment_label(&b.treatment),
                    tokens: b.tokens_after,
                    body: match &b.body {
                        BlockBody::Text { text } => RemoteBody::Text { text: text.clone() },
                        BlockBody::Image {
                            mime_type,
                            data,
                            width,
                            height,
                        } => RemoteBody::Image {
                            mime_type: mime_type.clone(),
                            width: *width,
                            height: *height,
                            data_base64: base64::engine::general_purpose::STANDARD.encode(data),
                        },
                        BlockBody::Fallback { note, .. } => RemoteBody::Note { note: note.clone() },
                    },
                })
                .collect(),
            context_budget: request.context_budget,
            tools: request
                .tools
                .iter()
                .map(|t| RemoteTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                })
                .collect(),
            model: RemoteModel {
                name: request.model.name.clone(),
                context_window: request.model.context_window,
                max_output_tokens: request.model.max_output_tokens,
                vision: request.model.vision,
                tool_calling: request.model.tool_calling,
            },
        }
    }
}

/// The JSON Schema of the request body (`docs/remote-run-request.v1.schema.json`).
pub fn request_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RemoteRunRequest)).unwrap_or_default()
}

/// The `remote` runner; see the module documentation.
#[derive(Debug)]
pub struct RemoteRunner {
    url: String,
    client: reqwest::Client,
    policy: HttpPolicy,
}

impl RemoteRunner {
    /// The name this runner is registered under.
    pub const NAME: &'static str = "remote";

    /// A runner for `config` with `token` (if any) as the bearer token.
    ///
    /// # Errors
    /// [`ConfigError`] at `url` when missing or not a URL, at `headers.NAME`.
    pub fn new(config: RemoteConfig, token: Option<&str>) -> Result<Self, ConfigError> {
        if reqwest::Url::parse(&config.url).is_err() {
            return Err(ConfigError::new(
                "url",
                format!("required: the agent's endpoint URL (got `{}`)", config.url),
            ));
        }
        let policy = HttpPolicy::from_ms(
            config.timeout_ms,
            config.connect_timeout_ms,
            config.max_retries,
        );
        Ok(Self {
            client: http::client(&config.headers, token, policy)?,
            url: config.url,
            policy,
        })
    }

    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let body = RemoteRunRequest::from_request(request);
        let response = http::send(
            "remote agent",
            self.policy,
            http::Retry::SideEffects,
            || {
                self.client
                    .post(&self.url)
                    .header(
                        reqwest::header::ACCEPT,
                        "text/event-stream, application/json",
                    )
                    // A retried hand-over (after 429/503) carries the same key, so
                    // the agent can tell it from a new turn.
                    .header("Idempotency-Key", &request.ids.message)
                    .json(&body)
            },
            |_, _| None,
        )
        .await?;
        if !http::is_event_stream(&response) {
            let reply: RemoteReply = response.json().await.map_err(|e| {
                RunError::backend(format!(
                    "remote agent: the answer is not a RemoteReply: {e}"
                ))
            })?;
            events
                .emit(RunEvent::MessageCompleted { text: reply.text })
                .await;
            let usage = reply.usage.map(|u| TokenUsage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            });
            events.emit(RunEvent::RunCompleted { usage }).await;
            return Ok(());
        }
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        let mut deltas = String::new();
        let mut completed = false;
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            let event: RunEvent = serde_json::from_str(&data).map_err(|e| {
                let start: String = data.chars().take(200).collect();
                RunError::backend(format!(
                    "remote agent: an event is not a RunEvent: {e}: {start}"
                ))
            })?;
            match &event {
                RunEvent::MessageDelta { .. } | RunEvent::MessageCompleted { .. } if completed => {
                    return Err(RunError::backend(
                        "remote agent: a message event came after message_completed",
                    ));
                }
                RunEvent::MessageDelta { text } => deltas.push_str(text),
                RunEvent::MessageCompleted { .. } => completed = true,
                RunEvent::RunFailed { error } => {
                    return Err(RunError::backend(format!("remote agent: {error}")));
                }
                RunEvent::RunCompleted { .. } => {
                    if !completed {
                        events
                            .emit(RunEvent::MessageCompleted {
                                text: std::mem::take(&mut deltas),
                            })
                            .await;
                    }
                    events.emit(event).await;
                    return Ok(());
                }
                _ => {}
            }
            events.emit(event).await;
        }
        Err(RunError::backend(
            "remote agent: the event stream ended without run_completed or run_failed",
        ))
    }
}

#[async_trait]
impl Runner for RemoteRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        http::report(self.run_inner(request, events).await, events).await
    }
}

fn build(section: &serde_json::Value, _: &BuildContext) -> Result<Box<dyn Runner>, ConfigError> {
    let config: RemoteConfig = parse_section(section)?;
    let token = std::env::var(&config.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    Ok(Box::new(RemoteRunner::new(config, token.as_deref())?))
}

hostpipe_core::submit_runner! {
    name: RemoteRunner::NAME,
    description: "Hands the turn to an agent behind an HTTP endpoint (versioned JSON; JSON or SSE answer).",
    build: build,
}
