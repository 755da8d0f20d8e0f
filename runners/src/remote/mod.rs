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
//! The request lists the turn's tools so the agent knows what the user's servers offer.
//! In version 1 (the default) the agent cannot call them. With `protocol = 2` the body
//! is a [`RemoteRunRequestV2`] (`docs/remote-run-request.v2.schema.json`): the same
//! fields plus `tool_endpoint`, a URL and a per-turn token with which the agent calls
//! the turn's tools through hostpipe, under the pipeline's policy (offered tools, bound
//! servers, consent; every call audited with origin `agent`). The token is valid while
//! the turn runs. See `remote/tools.rs` and docs/remote-runner.md.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BlockBody, BuildContext, ConfigError, EventSink, RunError, RunEvent, RunRequest, Runner,
    TokenUsage, parse_section,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::http::{self, HttpPolicy};

mod tools;

pub use tools::PATH as TOOL_ENDPOINT_PATH;

/// The `version` of the request body of protocol 1.
pub const VERSION: &str = "hostpipe.remote_run_request.v1";

/// The `version` of the request body of protocol 2.
pub const VERSION_2: &str = "hostpipe.remote_run_request.v2";

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
    /// The protocol version: 1 (default) or 2 (the agent may call the turn's tools).
    pub protocol: u8,
    /// Protocol 2: where the tool endpoint listens. Default `127.0.0.1:0` (loopback, a
    /// port the system picks).
    pub tools_listen: String,
    /// Protocol 2: the base URL the agent reaches the tool endpoint at, when not the
    /// listening address (a container, a proxy); the agent gets it plus
    /// `/v2/tool-calls`. Default: `http://` and the listening address.
    pub tools_url: Option<String>,
    /// Protocol 2: most tool calls the agent may make in one turn. Default 64.
    pub max_tool_calls: u32,
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
            protocol: 1,
            tools_listen: "127.0.0.1:0".into(),
            tools_url: None,
            max_tool_calls: 64,
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
    /// Tools the turn offers (version 1: for information; version 2: callable through
    /// `tool_endpoint`).
    pub tools: Vec<RemoteTool>,
    /// The model profile: name, context window, output tokens, vision, tool calling.
    pub model: RemoteModel,
}

/// The body of protocol 2: the version 1 fields (with `version` =
/// [`VERSION_2`]) and the turn's tool endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteRunRequestV2 {
    /// The version 1 fields; `version` is `hostpipe.remote_run_request.v2`.
    #[serde(flatten)]
    pub request: RemoteRunRequest,
    /// Where and how the agent calls the turn's tools; null when the turn offers none.
    pub tool_endpoint: Option<RemoteToolEndpoint>,
}

/// The turn's tool endpoint (protocol 2).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RemoteToolEndpoint {
    /// `POST` here `{"name": "<a name from tools>", "arguments": {...}}`; the answer is
    /// an MCP `CallToolResult` (spec 2025-11-25, "Tools") or `{"error": {"code",
    /// "message"}}`.
    pub url: String,
    /// Send as `Authorization: Bearer TOKEN`. Valid while this turn runs; secret.
    pub token: String,
    /// Most calls this turn may make.
    pub max_calls: u32,
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

/// The JSON Schema of the protocol 2 body (`docs/remote-run-request.v2.schema.json`).
pub fn request_schema_v2() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RemoteRunRequestV2)).unwrap_or_default()
}

/// Protocol 2's settings, checked.
#[derive(Debug)]
struct Protocol2 {
    listen: std::net::SocketAddr,
    public_url: Option<String>,
    max_calls: u32,
    /// Started at the first turn; an error is kept and reported by every turn.
    endpoint: tokio::sync::OnceCell<Result<tools::ToolEndpoint, String>>,
}

impl std::fmt::Debug for tools::ToolEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEndpoint")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

/// The `remote` runner; see the module documentation.
#[derive(Debug)]
pub struct RemoteRunner {
    url: String,
    client: reqwest::Client,
    policy: HttpPolicy,
    /// Set for protocol 2.
    protocol2: Option<Protocol2>,
}

impl RemoteRunner {
    /// The name this runner is registered under.
    pub const NAME: &'static str = "remote";

    /// A runner for `config` with `token` (if any) as the bearer token.
    ///
    /// # Errors
    /// [`ConfigError`] at `url` when missing or not a URL, at `headers.NAME`, at
    /// `protocol` when not 1 or 2, at `tools_listen` (not `IP:PORT`), `tools_url` (not
    /// an http(s) URL) and `max_tool_calls` (0), and at any of these three with
    /// protocol 1.
    pub fn new(config: RemoteConfig, token: Option<&str>) -> Result<Self, ConfigError> {
        if reqwest::Url::parse(&config.url).is_err() {
            return Err(ConfigError::new(
                "url",
                format!("required: the agent's endpoint URL (got `{}`)", config.url),
            ));
        }
        let defaults = RemoteConfig::default();
        let protocol2 = match config.protocol {
            1 => {
                for (key, set) in [
                    ("tools_listen", config.tools_listen != defaults.tools_listen),
                    ("tools_url", config.tools_url.is_some()),
                    (
                        "max_tool_calls",
                        config.max_tool_calls != defaults.max_tool_calls,
                    ),
                ] {
                    if set {
                        return Err(ConfigError::new(
                            key,
                            "only for `protocol = 2` (protocol 1 gives the agent no tool endpoint)",
                        ));
                    }
                }
                None
            }
            2 => {
                let listen = config.tools_listen.parse().map_err(|_| {
                    ConfigError::new(
                        "tools_listen",
                        format!(
                            "`{}` is not IP:PORT (e.g. `127.0.0.1:0`, `0.0.0.0:7801`)",
                            config.tools_listen
                        ),
                    )
                })?;
                if let Some(u) = &config.tools_url
                    && !reqwest::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
                {
                    return Err(ConfigError::new(
                        "tools_url",
                        format!("`{u}` is not an http(s) URL"),
                    ));
                }
                if config.max_tool_calls == 0 {
                    return Err(ConfigError::new(
                        "max_tool_calls",
                        "0 would refuse every call; give at least 1",
                    ));
                }
                Some(Protocol2 {
                    listen,
                    public_url: config.tools_url.clone(),
                    max_calls: config.max_tool_calls,
                    endpoint: tokio::sync::OnceCell::new(),
                })
            }
            other => {
                return Err(ConfigError::new(
                    "protocol",
                    format!("{other} is not a protocol version; give 1 or 2"),
                ));
            }
        };
        let policy = HttpPolicy::from_ms(
            config.timeout_ms,
            config.connect_timeout_ms,
            config.max_retries,
        );
        Ok(Self {
            client: http::client(&config.headers, token, policy)?,
            url: config.url,
            policy,
            protocol2,
        })
    }

    /// The body for `request`, and the turn's access to the tool endpoint (protocol 2,
    /// when the turn offers tools): the token is valid until it is dropped.
    async fn body(
        &self,
        request: &RunRequest,
    ) -> Result<(serde_json::Value, Option<tools::TurnAccess>), RunError> {
        let mut body = RemoteRunRequest::from_request(request);
        let Some(p2) = &self.protocol2 else {
            return Ok((serde_json::to_value(body).unwrap_or_default(), None));
        };
        body.version = VERSION_2.into();
        let executor = request
            .tool_executor
            .as_ref()
            .filter(|_| !request.tools.is_empty());
        let (tool_endpoint, access) = match executor {
            None => (None, None),
            Some(executor) => {
                let endpoint = p2
                    .endpoint
                    .get_or_init(|| async {
                        tools::ToolEndpoint::start(p2.listen, p2.public_url.as_deref(), p2.max_calls)
                            .await
                            .map_err(|e| {
                                format!(
                                    "remote runner: the tool endpoint cannot listen on {} (tools_listen): {e}",
                                    p2.listen
                                )
                            })
                    })
                    .await
                    .as_ref()
                    .map_err(|e| RunError::backend(e.clone()))?;
                let access = endpoint.grant(Arc::clone(executor));
                (
                    Some(RemoteToolEndpoint {
                        url: endpoint.url().to_owned(),
                        token: access.token.clone(),
                        max_calls: p2.max_calls,
                    }),
                    Some(access),
                )
            }
        };
        let body = RemoteRunRequestV2 {
            request: body,
            tool_endpoint,
        };
        Ok((serde_json::to_value(body).unwrap_or_default(), access))
    }

    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        // The token stays valid until this function returns: the turn is over then.
        let (body, _access) = self.body(request).await?;
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
        // A failure's `run_failed` event is the pipeline's `ReportFailure` layer's.
        self.run_inner(request, events).await
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
