//! `local`: an agent on any OpenAI-compatible `POST {base_url}/chat/completions`
//! (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM), with a tool loop.
//!
//! Wire format: OpenAI API reference, "Chat Completions" (`messages`, `tools` of
//! `type: "function"`, `tool_calls`, `role: "tool"` with `tool_call_id`, streaming
//! chunks with `delta` and `data: [DONE]`, `stream_options.include_usage`).
//!
//! - The system message carries the system prompt, then the context blocks fenced with
//!   their provenance ([`crate::render`]). Image blocks go to the user message as
//!   `image_url` parts, only when the model profile has `vision`.
//! - Tool loop: the model's tool calls run through the request's tool executor (MCP
//!   `tools/call` on the bound server that owns the namespaced tool, or the exploration
//!   tools); results go back as one string per call (text joined; resources fenced like
//!   context; images as a following user message with image parts when the model has
//!   vision, else a note), each cut token-exactly (the `[… N tokens omitted …]` marker of
//!   resources) to `max_tool_result_tokens` or to what the model's window has left (its
//!   input tokens less the messages so far, but at least a quarter of its input
//!   tokens), whichever is less: a 1 MB result never overflows the request. Before
//!   every model call the messages are counted again: tool results are cut further
//!   (oldest first) so the request stays within the model's input tokens.
//! - Tool schemas go without `$schema`, `$id` and `$comment` ([`model_schema`]).
//! - Retries with backoff on 429/5xx honouring `Retry-After`; errors typed
//!   ([`RunError::Auth`], [`RunError::RateLimited`], [`RunError::ContextTooLong`],
//!   [`RunError::Server`]).
//!
//! Here: the config and the tool loop. `wire.rs` holds the private wire types (the
//! request body built from the [`RunRequest`] and the config, the answer and the
//! stream chunks, read leniently); `stream.rs` turns an answer, streamed or whole,
//! into text, tool calls and usage; `tools.rs` renders tool schemas and results;
//! `window.rs` keeps the messages within the model's input tokens.

mod stream;
mod tools;
mod window;
mod wire;

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BuildContext, ConfigError, EventSink, RunError, RunEvent, RunRequest, Runner, TokenUsage,
    Tokenizer, ToolExecutor, ToolOrigin, ToolSpec, parse_section,
};
use serde::Deserialize;
use serde_json::Value;
use tracing::Instrument as _;

use self::stream::{StreamAnswer, ToolCall, Turned};
pub use self::tools::model_schema;
use self::tools::tool_result_text;
use self::window::{NEWEST_RESULT_SHARE, TOOL_MESSAGE_OVERHEAD, fit_messages, message_tokens};
use self::wire::{
    ChatRequest, ContentPart, ErrorBody, Message, MessageToolCall, Tool, UserContent,
};
use crate::http::{self, HttpPolicy};
use crate::lenient;

/// Config section `[pipelines.ID.local]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// API base URL including the version, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:11434/v1`. Required.
    pub base_url: String,
    /// Model name. Required.
    pub model: String,
    /// The environment variable holding the API key. Default `OPENAI_API_KEY`; when it
    /// is unset, no `Authorization` header is sent (local servers need none).
    pub api_key_env: String,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Stream the answer (server-sent events). Default true.
    pub stream: bool,
    /// Model calls per turn before giving up on a model that keeps calling tools.
    /// Default 8.
    pub max_rounds: usize,
    /// Most tokens of one tool result sent back to the model. Default 4000.
    pub max_tool_result_tokens: usize,
    /// `temperature`, if set.
    pub temperature: Option<f32>,
    /// `max_tokens` of the answer, if set.
    pub max_tokens: Option<u32>,
    /// Whole request timeout in milliseconds (streaming included). Default 120 000.
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds. Default 10 000.
    pub connect_timeout_ms: u64,
    /// Retries after HTTP 429, 5xx or a failed connect. Default 3.
    pub max_retries: u32,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            headers: BTreeMap::new(),
            stream: true,
            max_rounds: 8,
            max_tool_result_tokens: 4000,
            temperature: None,
            max_tokens: None,
            timeout_ms: 120_000,
            connect_timeout_ms: 10_000,
            max_retries: 3,
        }
    }
}

/// The `local` runner; see the module documentation.
pub struct LocalAgentRunner {
    config: LocalConfig,
    client: reqwest::Client,
    url: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for LocalAgentRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalAgentRunner")
            .field("url", &self.url)
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl LocalAgentRunner {
    /// The name this runner is registered under.
    pub const NAME: &'static str = "local";

    /// A runner for `config`, with `api_key` (if any) as the bearer token.
    ///
    /// # Errors
    /// [`ConfigError`] at `base_url` or `model` when missing or not a URL, at
    /// `headers.NAME` for an invalid header, at `max_rounds` for 0.
    pub fn new(config: LocalConfig, api_key: Option<&str>) -> Result<Self, ConfigError> {
        if config.base_url.trim().is_empty() {
            return Err(ConfigError::new(
                "base_url",
                "required, e.g. \"http://127.0.0.1:11434/v1\"",
            ));
        }
        match reqwest::Url::parse(&config.base_url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                return Err(ConfigError::new(
                    "base_url",
                    format!("`{}` is not an http(s) URL", config.base_url),
                ));
            }
        }
        if config.model.trim().is_empty() {
            return Err(ConfigError::new("model", "required"));
        }
        if config.max_rounds == 0 {
            return Err(ConfigError::new("max_rounds", "must be at least 1"));
        }
        let policy = HttpPolicy::from_ms(
            config.timeout_ms,
            config.connect_timeout_ms,
            config.max_retries,
        );
        let client = http::client(&config.headers, api_key, policy)?;
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        Ok(Self {
            config,
            client,
            url,
            policy,
        })
    }

    /// [`LocalAgentRunner::call`] in its `chat {model}` span (GenAI semantic
    /// conventions, inference client span: kind client, `gen_ai.operation.name` =
    /// `chat`, `gen_ai.provider.name` = `openai` for the OpenAI API, whoever serves it,
    /// `gen_ai.request.model`, `server.address`, `server.port`, and the usage the
    /// upstream reported as `gen_ai.usage.input_tokens` / `output_tokens`). A failed
    /// call has status error and `error.type` (the HTTP status, or the error's kind).
    async fn traced_call(
        &self,
        body: &ChatRequest<'_>,
        events: &EventSink,
    ) -> Result<Turned, RunError> {
        use tracing::field::Empty;
        let span = tracing::info_span!(
            target: "hostpipe::span",
            "chat",
            otel.name = Empty,
            otel.kind = "client",
            otel.status_code = Empty,
            "gen_ai.operation.name" = "chat",
            "gen_ai.provider.name" = "openai",
            "gen_ai.request.model" = self.config.model.as_str(),
            "gen_ai.usage.input_tokens" = Empty,
            "gen_ai.usage.output_tokens" = Empty,
            "server.address" = Empty,
            "server.port" = Empty,
            "error.type" = Empty,
        );
        if span.is_disabled() {
            return self.call(body, events).await;
        }
        span.record("otel.name", format!("chat {}", self.config.model));
        if let Ok(url) = reqwest::Url::parse(&self.url) {
            if let Some(host) = url.host_str() {
                span.record("server.address", host);
            }
            if let Some(port) = url.port_or_known_default() {
                span.record("server.port", i64::from(port));
            }
        }
        let result = self.call(body, events).instrument(span.clone()).await;
        match &result {
            Ok(turned) => {
                if let Some(u) = turned.usage {
                    // As i64: the OpenTelemetry layer records u64 as text.
                    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                    span.record("gen_ai.usage.input_tokens", count(u.input_tokens));
                    span.record("gen_ai.usage.output_tokens", count(u.output_tokens));
                }
            }
            Err(e) => {
                let error_type = match e {
                    RunError::Auth { status, .. } | RunError::Server { status, .. } => {
                        status.to_string()
                    }
                    RunError::RateLimited { .. } => "429".into(),
                    RunError::ContextTooLong { .. } => "context_length_exceeded".into(),
                    RunError::Timeout(_) => "timeout".into(),
                    _ => "_OTHER".into(),
                };
                span.record("otel.status_code", "error");
                span.record("error.type", error_type);
            }
        }
        result
    }

    /// One model call with `body`: the assistant's text, its tool calls, and usage.
    /// Text is reported as deltas as it comes.
    async fn call(&self, body: &ChatRequest<'_>, events: &EventSink) -> Result<Turned, RunError> {
        let response = http::send(
            "chat/completions",
            self.policy,
            http::Retry::Idempotent,
            || self.client.post(&self.url).json(body),
            classify,
        )
        .await?;
        // Some servers answer a streaming request with one JSON body: take it as is.
        if !http::is_event_stream(&response) {
            let completion: Value = response
                .json()
                .await
                .map_err(|e| RunError::backend(format!("chat/completions: invalid JSON: {e}")))?;
            let turned = Turned::from_completion(lenient::read(completion))?;
            if !turned.text.is_empty() {
                events
                    .emit(RunEvent::MessageDelta {
                        text: turned.text.clone(),
                    })
                    .await;
            }
            return Ok(turned);
        }
        let mut answer = StreamAnswer::default();
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            if let Some(text) = answer.push(&data)? {
                events.emit(RunEvent::MessageDelta { text }).await;
            }
            if answer.is_done() {
                break;
            }
        }
        answer.finish()
    }
}

/// OpenAI's "context too long" shape: HTTP 400 with `error.code` =
/// `context_length_exceeded` (vLLM and others say so in the message).
fn classify(status: u16, body: &str) -> Option<RunError> {
    if status != 400 {
        return None;
    }
    let message = http::error_message(body);
    let code = lenient::parse::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.error?.code);
    let lower = message.to_lowercase();
    (code.as_deref() == Some("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("context length"))
    .then_some(RunError::ContextTooLong { message })
}

/// Appended to an answer the model could not finish (`finish_reason: "length"`).
const CUT_MARKER: &str = "\n[… the answer was cut at the token limit …]";

#[async_trait]
impl Runner for LocalAgentRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        // A failure's `run_failed` event is the pipeline's `ReportFailure` layer's.
        self.run_inner(request, events).await
    }
}

impl LocalAgentRunner {
    /// The tool loop: model calls until the model answers without calling tools, at
    /// most `max_rounds`.
    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let tk =
            Tokenizer::new(request.model.encoding).map_err(|e| RunError::backend(e.to_string()))?;
        let mut messages = Message::opening(request);
        // Tools only when there is something to run them (the caller runs its own).
        let has_caller_tools = request.tools.iter().any(|t| t.origin == ToolOrigin::Caller);
        let tools: Vec<Tool> = if request.model.tool_calling
            && (request.tool_executor.is_some() || has_caller_tools)
        {
            request.tools.iter().map(Tool::from).collect()
        } else {
            Vec::new()
        };
        let limit = request.model.input_tokens();
        let mut total = TokenUsage::default();
        let mut reported = false;
        let mut answer = String::new();
        for _ in 0..self.config.max_rounds {
            fit_messages(&mut messages, limit, &tk)?;
            let body = ChatRequest::new(&self.config, &messages, &tools);
            let mut turned = self.traced_call(&body, events).await?;
            if turned.cut {
                turned.text.push_str(CUT_MARKER);
                events
                    .emit(RunEvent::MessageDelta {
                        text: CUT_MARKER.to_owned(),
                    })
                    .await;
            }
            // The answer is what the deltas said, across rounds (text a model writes
            // before its tool calls included), so deltas and answer agree.
            answer.push_str(&turned.text);
            if let Some(u) = turned.usage {
                total.input_tokens += u.input_tokens;
                total.output_tokens += u.output_tokens;
                reported = true;
            }
            if has_caller_tools && end_for_caller(request, &turned.calls, events).await {
                finish(events, answer, reported.then_some(total)).await;
                return Ok(());
            }
            let Some(executor) = request
                .tool_executor
                .as_deref()
                .filter(|_| !turned.calls.is_empty())
            else {
                finish(events, answer, reported.then_some(total)).await;
                return Ok(());
            };
            messages.push(Message::Assistant {
                content: (!turned.text.is_empty()).then(|| turned.text.clone()),
                tool_calls: turned.calls.iter().map(MessageToolCall::from).collect(),
            });
            let round = Round {
                request,
                executor,
                events,
                tk: &tk,
                limit,
                max_tool_result_tokens: self.config.max_tool_result_tokens,
            };
            round.run_calls(&turned.calls, &mut messages).await;
        }
        Err(RunError::backend(format!(
            "the model was still calling tools after {} rounds (max_rounds)",
            self.config.max_rounds
        )))
    }
}

/// Whether the model called one of the caller's own tools in `calls`: then each such
/// call goes to `events` as a [`RunEvent::ToolCallStarted`] (arguments as the model's
/// JSON text) for the caller to run, and the run ends there. The answer's other calls
/// (the pipeline's tools) are not run: the caller's next request continues the turn,
/// and the model may call them again.
/// The run's last two events: the whole answer, then the usage (if the upstream
/// reported any).
async fn finish(events: &EventSink, answer: String, usage: Option<TokenUsage>) {
    events
        .emit(RunEvent::MessageCompleted { text: answer })
        .await;
    events.emit(RunEvent::RunCompleted { usage }).await;
}

async fn end_for_caller(request: &RunRequest, calls: &[ToolCall], events: &EventSink) -> bool {
    let is_callers = |c: &&ToolCall| {
        request
            .tools
            .iter()
            .any(|t| t.name == c.name && t.origin == ToolOrigin::Caller)
    };
    let callers: Vec<&ToolCall> = calls.iter().filter(is_callers).collect();
    for call in &callers {
        events
            .emit(RunEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: Value::String(call.arguments.clone()),
            })
            .await;
    }
    !callers.is_empty()
}

/// What running one round's tool calls needs.
struct Round<'a> {
    request: &'a RunRequest,
    executor: &'a dyn ToolExecutor,
    events: &'a EventSink,
    tk: &'a Tokenizer,
    /// The model's input tokens.
    limit: usize,
    max_tool_result_tokens: usize,
}

impl Round<'_> {
    /// Runs `calls` through the executor, in order, and adds a `tool` message with each
    /// result to `messages`, then a user message with the images the results carried
    /// (vision only). Reports each call's start and end.
    async fn run_calls(&self, calls: &[ToolCall], messages: &mut Vec<Message>) {
        let mut images = Vec::new();
        for call in calls {
            let span = tool_span(call);
            let (text, mut more) = self
                .run_call(call, messages, &span)
                .instrument(span.clone())
                .await;
            images.append(&mut more);
            messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                content: text,
            });
        }
        if !images.is_empty() {
            let mut parts = vec![ContentPart::text(
                "Images returned by the tool calls above:",
            )];
            parts.append(&mut images);
            messages.push(Message::User {
                content: UserContent::Parts(parts),
            });
        }
    }

    /// Runs one call: the `tool` message's text and the result's images.
    async fn run_call(
        &self,
        call: &ToolCall,
        messages: &[Message],
        span: &tracing::Span,
    ) -> (String, Vec<ContentPart>) {
        let arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => {
                // The model wrote invalid JSON: tell it. The executor gets the text as
                // it came, refuses it (not a JSON object) without calling the tool,
                // and records the attempt for the audit.
                let _ = self
                    .executor
                    .call(&call.name, Value::String(call.arguments.clone()))
                    .await;
                self.events
                    .emit(RunEvent::ToolCallStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: Value::String(call.arguments.clone()),
                    })
                    .await;
                self.events
                    .emit(RunEvent::ToolCallFinished {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        is_error: true,
                    })
                    .await;
                tool_failed(span, "invalid_arguments");
                return (
                    format!("Error: the arguments are not valid JSON: {e}"),
                    Vec::new(),
                );
            }
        };
        self.events
            .emit(RunEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: arguments.clone(),
            })
            .await;
        // The server the result comes from, for the fence's provenance.
        let server = match self.request.tools.iter().find(|t| t.name == call.name) {
            Some(ToolSpec {
                origin: ToolOrigin::Mcp { server, .. },
                ..
            }) => Some(server.clone()),
            _ => arguments
                .get("server")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        // Each result gets at most what the window has left (the messages so far and
        // the reserved output taken), whatever the tool returned; but the newest
        // result always gets a quarter of the window: the cut before the next model
        // call takes the difference from older results.
        let room = self
            .limit
            .saturating_sub(message_tokens(messages, self.tk) + TOOL_MESSAGE_OVERHEAD)
            .max(self.limit / NEWEST_RESULT_SHARE);
        let (text, images, is_error) = match self.executor.call(&call.name, arguments).await {
            Ok(result) => {
                if result.is_error {
                    // The tool ran and failed (or the call was withheld).
                    tool_failed(span, "tool_error");
                }
                let (text, images) = tool_result_text(
                    &result,
                    server.as_deref(),
                    &self.request.fence,
                    &self.request.model,
                    self.tk,
                    self.max_tool_result_tokens.min(room),
                );
                (text, images, result.is_error)
            }
            Err(e) => {
                tool_failed(span, "tool_call_failed");
                (format!("Error: {e}"), Vec::new(), true)
            }
        };

        self.events
            .emit(RunEvent::ToolCallFinished {
                id: call.id.clone(),
                name: call.name.clone(),
                is_error,
            })
            .await;
        (text, images)
    }
}

/// The span of one tool call the model made, `execute_tool {gen_ai.tool.name}` (GenAI
/// semantic conventions, "Execute tool span": kind internal, `gen_ai.operation.name` =
/// `execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type` =
/// `function`). The MCP `tools/call` it makes is its child.
fn tool_span(call: &ToolCall) -> tracing::Span {
    let span = tracing::info_span!(
        target: "hostpipe::span",
        "execute_tool",
        otel.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        "gen_ai.operation.name" = "execute_tool",
        "gen_ai.tool.name" = call.name.as_str(),
        "gen_ai.tool.call.id" = call.id.as_str(),
        "gen_ai.tool.type" = "function",
        "error.type" = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("execute_tool {}", call.name));
    }
    span
}

/// Marks a tool call's span failed, with `error.type`.
fn tool_failed(span: &tracing::Span, error_type: &'static str) {
    span.record("otel.status_code", "error");
    span.record("error.type", error_type);
}

fn build(section: &Value, _: &BuildContext) -> Result<Box<dyn Runner>, ConfigError> {
    let config: LocalConfig = parse_section(section)?;
    // The one environment read of this runner: the API key, by the name configured.
    let key = std::env::var(&config.api_key_env)
        .ok()
        .filter(|k| !k.is_empty());
    Ok(Box::new(LocalAgentRunner::new(config, key.as_deref())?))
}

hostpipe_core::submit_runner! {
    name: LocalAgentRunner::NAME,
    description: "An agent on any OpenAI-compatible /chat/completions endpoint, with a tool loop.",
    build: build,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
