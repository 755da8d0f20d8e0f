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

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BuildContext, ConfigError, EventSink, ModelProfile, ResourceContents, Role, RunError, RunEvent,
    RunRequest, Runner, TokenUsage, Tokenizer, ToolCallResult, ToolContent, TruncationSide,
    parse_section,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{self, HttpPolicy};
use crate::render;

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

    /// The `messages` for the first model call.
    fn messages(&self, request: &RunRequest) -> Vec<Value> {
        let vision = request.model.vision;
        let mut system = request.system_prompt.clone().unwrap_or_default();
        let mut context = render::context_text(&request.context, vision, &request.fence);
        // Tool results may carry fenced resource text (read_resource, embedded
        // resources): the model needs the preamble that says what the fence means.
        if context.is_empty() && !request.tools.is_empty() {
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
            messages.push(json!({"role": "system", "content": system}));
        }
        for h in &request.history {
            let role = match h.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": h.text}));
        }
        let images = if vision {
            render::images(&request.context, &request.fence)
        } else {
            Vec::new()
        };
        if images.is_empty() {
            messages.push(json!({"role": "user", "content": request.message.text}));
        } else {
            let mut parts = vec![json!({"type": "text", "text": request.message.text})];
            for (tag, mime, data) in images {
                parts.push(json!({"type": "text", "text": tag}));
                parts.push(json!({"type": "image_url", "image_url": {"url": render::data_url(mime, data)}}));
            }
            messages.push(json!({"role": "user", "content": parts}));
        }
        messages
    }

    fn body(&self, messages: &[Value], tools: &[Value]) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": self.config.stream,
        });
        if self.config.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = self.config.max_tokens {
            body["max_tokens"] = json!(m);
        }
        body
    }

    /// One model call: the assistant's text, its tool calls, and usage.
    async fn call(&self, body: &Value, events: &EventSink) -> Result<Turned, RunError> {
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
            let v: Value = response
                .json()
                .await
                .map_err(|e| RunError::backend(format!("chat/completions: invalid JSON: {e}")))?;
            if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
                return Err(RunError::backend(format!(
                    "chat/completions: {}",
                    err.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                )));
            }
            let Some(message) = v.pointer("/choices/0/message").cloned() else {
                return Err(RunError::backend(
                    "chat/completions: the answer has no choices[0].message",
                ));
            };
            let text = message
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if !text.is_empty() {
                events
                    .emit(RunEvent::MessageDelta { text: text.clone() })
                    .await;
            }
            let calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(ToolCall::from_json).collect())
                .unwrap_or_default();
            let finish = v
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str);
            return Ok(Turned {
                text,
                calls,
                usage: usage(&v),
                cut: finish == Some("length"),
            });
        }
        let mut text = String::new();
        let mut calls: Vec<ToolCall> = Vec::new();
        // Stream index → position in `calls`.
        let mut by_index: BTreeMap<u64, usize> = BTreeMap::new();
        let mut used = None;
        let mut finish: Option<String> = None;
        let mut done = false;
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            if data.trim() == "[DONE]" {
                done = true;
                break;
            }
            let chunk: Value = serde_json::from_str(&data).map_err(|e| {
                RunError::backend(format!("chat/completions: invalid stream chunk: {e}"))
            })?;
            if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
                return Err(RunError::backend(format!(
                    "chat/completions stream error: {}",
                    err.get("message").and_then(Value::as_str).unwrap_or("?")
                )));
            }
            used = usage(&chunk).or(used);
            if let Some(f) = chunk
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
            {
                finish = Some(f.to_owned());
            }
            let Some(delta) = chunk.pointer("/choices/0/delta") else {
                continue;
            };
            if let Some(piece) = delta.get("content").and_then(Value::as_str)
                && !piece.is_empty()
            {
                text.push_str(piece);
                events
                    .emit(RunEvent::MessageDelta {
                        text: piece.to_owned(),
                    })
                    .await;
            }
            for tc in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|i| !i.is_empty());
                // `index` names the call (OpenAI); a server without it starts a new
                // call with each new id.
                let at = match tc.get("index").and_then(Value::as_u64) {
                    Some(index) => *by_index.entry(index).or_insert_with(|| {
                        calls.push(ToolCall::default());
                        calls.len() - 1
                    }),
                    None => match (id, calls.last()) {
                        (Some(id), Some(last)) if last.id != id => {
                            calls.push(ToolCall::default());
                            calls.len() - 1
                        }
                        (_, Some(_)) => calls.len() - 1,
                        (_, None) => {
                            calls.push(ToolCall::default());
                            0
                        }
                    },
                };
                let call = &mut calls[at];
                if let Some(id) = id {
                    id.clone_into(&mut call.id);
                }
                if let Some(name) = tc.pointer("/function/name").and_then(Value::as_str)
                    && call.name.is_empty()
                {
                    name.clone_into(&mut call.name);
                }
                if let Some(args) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                    call.arguments.push_str(args);
                }
            }
        }
        if !done && finish.is_none() {
            return Err(RunError::backend(
                "chat/completions: the stream ended without a finish_reason or [DONE] (the answer is cut off)",
            ));
        }
        Ok(Turned {
            text,
            calls,
            usage: used,
            cut: finish.as_deref() == Some("length"),
        })
    }
}

/// OpenAI's "context too long" shape: HTTP 400 with `error.code` =
/// `context_length_exceeded` (vLLM and others say so in the message).
fn classify(status: u16, body: &str) -> Option<RunError> {
    if status != 400 {
        return None;
    }
    let message = http::error_message(body);
    let code: Option<String> = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/code")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let lower = message.to_lowercase();
    (code.as_deref() == Some("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("context length"))
    .then_some(RunError::ContextTooLong { message })
}

fn usage(v: &Value) -> Option<TokenUsage> {
    // Streaming chunks carry `"usage": null` until the last one.
    let u = v.get("usage").filter(|u| u.is_object())?;
    Some(TokenUsage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// What one model call produced.
struct Turned {
    text: String,
    calls: Vec<ToolCall>,
    usage: Option<TokenUsage>,
    /// `finish_reason: "length"`: the answer hit the token limit.
    cut: bool,
}

/// Appended to an answer the model could not finish (`finish_reason: "length"`).
const CUT_MARKER: &str = "\n[… the answer was cut at the token limit …]";

#[derive(Debug, Default, Clone)]
struct ToolCall {
    id: String,
    name: String,
    /// JSON text, as the model wrote it.
    arguments: String,
}

impl ToolCall {
    fn from_json(v: &Value) -> Option<Self> {
        Some(Self {
            id: v.get("id")?.as_str()?.to_owned(),
            name: v.pointer("/function/name")?.as_str()?.to_owned(),
            arguments: v
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_owned(),
        })
    }

    fn to_json(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// A tool result as the string the `tool` message carries, plus images for a
/// following user message (vision only). Cut to `max_tokens`.
fn tool_result_text(
    result: &ToolCallResult,
    server: Option<&str>,
    fence: &hostpipe_core::Fence,
    model: &ModelProfile,
    tk: &Tokenizer,
    max_tokens: usize,
) -> (String, Vec<Value>) {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for c in &result.content {
        match c {
            // Text from a server: a leaked nonce cannot open or close a fence in it.
            ToolContent::Text { text } => parts.push(fence.defuse(text)),
            ToolContent::Image { mime_type, data } if model.vision => {
                parts.push(format!(
                    "[image {mime_type}, {} bytes: attached below]",
                    data.len()
                ));
                images.push(json!({"type": "image_url", "image_url": {"url": render::data_url(mime_type, data)}}));
            }
            ToolContent::Image { mime_type, data } => parts.push(format!(
                "[image {mime_type}, {} bytes: not shown, the model has no vision]",
                data.len()
            )),
            ToolContent::Audio { mime_type, data } => parts.push(format!(
                "[audio {mime_type}, {} bytes: not shown]",
                data.len()
            )),
            ToolContent::ResourceLink { resource } => parts.push(format!(
                "[resource link: {} ({}{})]",
                resource.uri,
                resource.name,
                resource
                    .mime_type
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default()
            )),
            ToolContent::Resource { contents } => match contents {
                ResourceContents::Text {
                    uri,
                    mime_type,
                    text,
                } => {
                    // A resource in a tool result is resource text: in the turn's fence.
                    let mut attrs = Vec::new();
                    if let Some(s) = server {
                        attrs.push(("server", s));
                    }
                    attrs.push(("uri", uri.as_str()));
                    if let Some(m) = mime_type.as_deref() {
                        attrs.push(("mime", m));
                    }
                    parts.push(fence.wrap(&attrs, text));
                }
                ResourceContents::Blob {
                    uri,
                    mime_type,
                    data,
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    if model.vision && mime.starts_with("image/") {
                        parts.push(format!("[image resource {uri}: attached below]"));
                        images.push(json!({"type": "image_url", "image_url": {"url": render::data_url(mime, data)}}));
                    } else {
                        parts.push(format!(
                            "[binary resource {uri} ({mime}, {} bytes) not shown]",
                            data.len()
                        ));
                    }
                }
            },
        }
    }
    if parts.is_empty()
        && let Some(s) = &result.structured_content
    {
        parts.push(s.to_string());
    }
    let mut text = parts.join("\n");
    if result.is_error {
        text = format!("Error: {text}");
    }
    match tk.truncate(&text, max_tokens, TruncationSide::Head) {
        Some(t) => text = t.text,
        // Over the room and not even the marker fits: the whole result is left out.
        None if tk.count(&text) > max_tokens => {
            text = format!(
                "[tool result of {} tokens omitted: no room left in the model's context]",
                tk.count(&text)
            );
        }
        None => {}
    }
    (text, images)
}

/// The newest tool result may take at least 1/N of the model's input tokens, however
/// full the window is (older results are cut for it).
const NEWEST_RESULT_SHARE: usize = 4;

/// Tokens a `tool` message costs besides its content (role, id, separators), counted
/// generously.
const TOOL_MESSAGE_OVERHEAD: usize = 16;

/// The JSON Schema of a tool as the model API gets it: without the keywords that only
/// describe the schema document (`$schema`, `$id`, `$comment`), which some strict
/// OpenAI-compatible backends reject (a server built with zod-to-json-schema sends
/// `$schema` in every tool). Everything that constrains the arguments stays.
/// Keys of `properties`, `patternProperties`, `$defs` and `definitions` are names, not
/// keywords: an argument called `$id` stays.
pub fn model_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "$id" | "$comment"))
                .map(|(k, v)| {
                    let named = matches!(
                        k.as_str(),
                        "properties" | "patternProperties" | "$defs" | "definitions"
                    );
                    let v = match v {
                        Value::Object(names) if named => Value::Object(
                            names
                                .iter()
                                .map(|(n, s)| (n.clone(), model_schema(s)))
                                .collect(),
                        ),
                        _ => model_schema(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(model_schema).collect()),
        other => other.clone(),
    }
}

/// Tokens of the text in `messages` (content strings and text parts; images are not
/// counted here: their cost is the provider's).
fn message_tokens(messages: &[Value], tk: &Tokenizer) -> usize {
    messages
        .iter()
        .map(|m| {
            let content = match m.get("content") {
                Some(Value::String(s)) => tk.count(s),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .map(|t| tk.count(t))
                    .sum(),
                _ => 0,
            };
            let calls = m.get("tool_calls").map_or(0, |c| tk.count(&c.to_string()));
            content + calls + 4
        })
        .sum()
}

/// Cuts tool results, oldest first, until `messages` fit `limit` tokens.
fn fit_messages(messages: &mut [Value], limit: usize, tk: &Tokenizer) -> Result<(), RunError> {
    let mut total = message_tokens(messages, tk);
    if total <= limit {
        return Ok(());
    }
    for m in messages.iter_mut() {
        if total <= limit {
            break;
        }
        if m.get("role").and_then(Value::as_str) != Some("tool") {
            continue;
        }
        let Some(text) = m.get("content").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        let tokens = tk.count(&text);
        let over = total - limit;
        let keep = tokens.saturating_sub(over).max(16);
        if let Some(t) = tk.truncate(&text, keep, TruncationSide::Head) {
            total = total - tokens + t.tokens;
            m["content"] = Value::String(t.text);
        }
    }
    if total > limit {
        return Err(RunError::ContextTooLong {
            message: format!(
                "the messages are {total} tokens, over the {limit} input tokens the model has, even with tool results cut"
            ),
        });
    }
    Ok(())
}

#[async_trait]
impl Runner for LocalAgentRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        http::report(self.run_inner(request, events).await, events).await
    }
}

impl LocalAgentRunner {
    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let tk =
            Tokenizer::new(request.model.encoding).map_err(|e| RunError::backend(e.to_string()))?;
        let mut messages = self.messages(request);
        // Tools only when there is something to run them.
        let tools: Vec<Value> = match &request.tool_executor {
            Some(_) if request.model.tool_calling => request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": model_schema(&t.input_schema)}}))
                .collect(),
            _ => Vec::new(),
        };
        let limit = request.model.input_tokens();
        let mut total = TokenUsage::default();
        let mut reported = false;
        let mut answer = String::new();
        for _ in 0..self.config.max_rounds {
            fit_messages(&mut messages, limit, &tk)?;
            let mut turned = self.call(&self.body(&messages, &tools), events).await?;
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
            let Some(executor) = request
                .tool_executor
                .as_ref()
                .filter(|_| !turned.calls.is_empty())
            else {
                events
                    .emit(RunEvent::MessageCompleted {
                        text: answer.clone(),
                    })
                    .await;
                events
                    .emit(RunEvent::RunCompleted {
                        usage: reported.then_some(total),
                    })
                    .await;
                return Ok(());
            };
            let content = if turned.text.is_empty() {
                Value::Null
            } else {
                Value::String(turned.text.clone())
            };
            messages.push(json!({
                "role": "assistant",
                "content": content,
                "tool_calls": turned.calls.iter().map(ToolCall::to_json).collect::<Vec<_>>(),
            }));
            let mut images = Vec::new();
            for call in &turned.calls {
                let arguments: Value = match serde_json::from_str(&call.arguments) {
                    Ok(v) => v,
                    Err(e) => {
                        // The model wrote invalid JSON: tell it. The executor gets the
                        // text as it came, refuses it (not a JSON object) without
                        // calling the tool, and records the attempt for the audit.
                        let _ = executor
                            .call(&call.name, Value::String(call.arguments.clone()))
                            .await;
                        events
                            .emit(RunEvent::ToolCallStarted {
                                id: call.id.clone(),
                                name: call.name.clone(),
                                arguments: Value::String(call.arguments.clone()),
                            })
                            .await;
                        events
                            .emit(RunEvent::ToolCallFinished {
                                id: call.id.clone(),
                                name: call.name.clone(),
                                is_error: true,
                            })
                            .await;
                        messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": format!("Error: the arguments are not valid JSON: {e}")}));
                        continue;
                    }
                };
                events
                    .emit(RunEvent::ToolCallStarted {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: arguments.clone(),
                    })
                    .await;
                // The server the result comes from, for the fence's provenance.
                let server = match request.tools.iter().find(|t| t.name == call.name) {
                    Some(hostpipe_core::ToolSpec {
                        origin: hostpipe_core::ToolOrigin::Mcp { server, .. },
                        ..
                    }) => Some(server.clone()),
                    _ => arguments
                        .get("server")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                };
                // Each result gets at most what the window has left (the messages so
                // far and the reserved output taken), whatever the tool returned; but
                // the newest result always gets a quarter of the window: the cut before
                // the next model call takes the difference from older results.
                let room = limit
                    .saturating_sub(message_tokens(&messages, &tk) + TOOL_MESSAGE_OVERHEAD)
                    .max(limit / NEWEST_RESULT_SHARE);
                let (text, is_error) = match executor.call(&call.name, arguments).await {
                    Ok(result) => {
                        let (text, mut more) = tool_result_text(
                            &result,
                            server.as_deref(),
                            &request.fence,
                            &request.model,
                            &tk,
                            self.config.max_tool_result_tokens.min(room),
                        );
                        images.append(&mut more);
                        (text, result.is_error)
                    }
                    Err(e) => (format!("Error: {e}"), true),
                };
                events
                    .emit(RunEvent::ToolCallFinished {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        is_error,
                    })
                    .await;
                messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": text}));
            }
            if !images.is_empty() {
                let mut parts = vec![
                    json!({"type": "text", "text": "Images returned by the tool calls above:"}),
                ];
                parts.append(&mut images);
                messages.push(json!({"role": "user", "content": parts}));
            }
        }
        Err(RunError::backend(format!(
            "the model was still calling tools after {} rounds (max_rounds)",
            self.config.max_rounds
        )))
    }
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
