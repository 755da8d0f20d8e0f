//! `dify`: a Dify app through the Dify service API (Dify docs, "API Access": chat,
//! agent and chatflow apps via `POST /v1/chat-messages`, workflow apps via
//! `POST /v1/workflows/run`, files via `POST /v1/files/upload`).
//!
//! - The resource context goes into one `inputs` variable (`inputs_variable`, a
//!   paragraph variable the app defines), fenced with provenance as for any model, and
//!   optionally ahead of the `query` too. The turn's user-visible variables go into
//!   `inputs` as well; nothing else of the turn does (plugin state lives in
//!   `Turn::extensions`, which never reaches a runner).
//! - Image context blocks are uploaded (`files/upload`, with the `user` field) and
//!   referenced by `upload_file_id`, with Dify's file type from the MIME type.
//! - Streaming mode (SSE): `message` / `agent_message` pieces become deltas,
//!   `message_replace` replaces the answer, `message_end` carries usage, `error` fails
//!   the run; workflows stream `text_chunk` and end with `workflow_finished`.
//! - Dify's `conversation_id` is kept per hostpipe conversation and user (Dify
//!   conversations belong to one `user`; in memory, at most 100 000, a day idle
//!   each). A 404 "Conversation Not Exists." drops the stale id and retries once with
//!   a new conversation.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BuildContext, ConfigError, EventSink, RunError, RunEvent, RunRequest, Runner, TokenUsage,
    parse_section,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{self, HttpPolicy};
use crate::render;

/// Dify app types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DifyAppType {
    /// Chatbot (`chat-messages`).
    Chat,
    /// Agent (`chat-messages`, streaming only in Dify).
    Agent,
    /// Chatflow (`chat-messages`).
    Chatflow,
    /// Workflow (`workflows/run`).
    Workflow,
}

/// Config section `[pipelines.ID.dify]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DifyConfig {
    /// API base URL including `/v1`, e.g. `https://api.dify.ai/v1`. Required.
    pub base_url: String,
    /// The environment variable holding the app's API key. Default `DIFY_API_KEY`.
    pub api_key_env: String,
    /// App type. Default `chat`.
    pub app_type: DifyAppType,
    /// The `inputs` variable that receives the resource context. Default `context`.
    pub inputs_variable: String,
    /// Also put the context ahead of the `query` (for apps without such a variable).
    /// Default false.
    pub context_in_query: bool,
    /// For workflows: the output variable holding the answer. Default `text`.
    pub output_variable: String,
    /// `user` when the turn has no sender. Default `hostpipe`.
    pub default_user: String,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Whole request timeout in milliseconds. Default 120 000.
    pub timeout_ms: u64,
    /// Connect timeout in milliseconds. Default 10 000.
    pub connect_timeout_ms: u64,
    /// Retries after HTTP 429, 5xx or a failed connect. Default 2.
    pub max_retries: u32,
}

impl Default for DifyConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            api_key_env: "DIFY_API_KEY".into(),
            app_type: DifyAppType::Chat,
            inputs_variable: "context".into(),
            context_in_query: false,
            output_variable: "text".into(),
            default_user: "hostpipe".into(),
            headers: BTreeMap::new(),
            timeout_ms: 120_000,
            connect_timeout_ms: 10_000,
            max_retries: 2,
        }
    }
}

/// Dify's file `type` for a MIME type (Dify docs, "files" of `chat-messages`).
pub fn file_type(mime: &str) -> &'static str {
    let essence = mime.split(';').next().unwrap_or("").trim();
    match essence.split('/').next().unwrap_or("") {
        "image" => "image",
        "audio" => "audio",
        "video" => "video",
        _ => match essence {
            "application/pdf"
            | "text/plain"
            | "text/markdown"
            | "text/html"
            | "text/csv"
            | "application/msword"
            | "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
            | "application/vnd.ms-excel"
            | "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
            | "application/vnd.ms-powerpoint"
            | "application/vnd.openxmlformats-officedocument.presentationml.presentation"
            | "application/xml"
            | "message/rfc822"
            | "application/epub+zip" => "document",
            _ => "custom",
        },
    }
}

/// The `dify` runner; see the module documentation.
pub struct DifyRunner {
    config: DifyConfig,
    client: reqwest::Client,
    base: String,
    policy: HttpPolicy,
    /// (pipeline, conversation, user) → Dify `conversation_id`. Dify conversations
    /// belong to one `user`: in a group chat each member has their own.
    conversations: moka::sync::Cache<(String, String, String), String>,
}

impl std::fmt::Debug for DifyRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DifyRunner")
            .field("base", &self.base)
            .field("app_type", &self.config.app_type)
            .finish_non_exhaustive()
    }
}

impl DifyRunner {
    /// The name this runner is registered under.
    pub const NAME: &'static str = "dify";

    /// A runner for `config` with the app's `api_key`.
    ///
    /// # Errors
    /// [`ConfigError`] at `base_url` (missing or not a URL), `inputs_variable` (empty),
    /// `headers.NAME`.
    pub fn new(config: DifyConfig, api_key: Option<&str>) -> Result<Self, ConfigError> {
        if reqwest::Url::parse(&config.base_url).is_err() {
            return Err(ConfigError::new(
                "base_url",
                format!(
                    "required: the Dify API URL, e.g. \"https://api.dify.ai/v1\" (got `{}`)",
                    config.base_url
                ),
            ));
        }
        if config.inputs_variable.trim().is_empty() {
            return Err(ConfigError::new("inputs_variable", "must not be empty"));
        }
        let policy = HttpPolicy::from_ms(
            config.timeout_ms,
            config.connect_timeout_ms,
            config.max_retries,
        );
        Ok(Self {
            client: http::client(&config.headers, api_key, policy)?,
            base: config.base_url.trim_end_matches('/').to_owned(),
            policy,
            conversations: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_idle(Duration::from_secs(24 * 3600))
                .build(),
            config,
        })
    }

    fn user(&self, request: &RunRequest) -> String {
        request
            .sender
            .clone()
            .unwrap_or_else(|| self.config.default_user.clone())
    }

    /// Uploads the image blocks; their `files` entries.
    async fn upload_images(
        &self,
        request: &RunRequest,
        user: &str,
    ) -> Result<Vec<Value>, RunError> {
        let mut files = Vec::new();
        for (i, (_, mime, data)) in render::images(&request.context, &request.fence)
            .into_iter()
            .enumerate()
        {
            let ext = match mime {
                "image/png" => "png",
                "image/jpeg" => "jpg",
                "image/gif" => "gif",
                "image/webp" => "webp",
                _ => "bin",
            };
            let name = format!("context-{}.{ext}", i + 1);
            let url = format!("{}/files/upload", self.base);
            let response = http::send(
                "files/upload",
                self.policy,
                http::Retry::SideEffects,
                || {
                    let part = reqwest::multipart::Part::bytes(data.to_vec())
                        .file_name(name.clone())
                        .mime_str(mime)
                        .unwrap_or_else(|_| reqwest::multipart::Part::bytes(data.to_vec()));
                    let form = reqwest::multipart::Form::new()
                        .part("file", part)
                        .text("user", user.to_owned());
                    self.client.post(&url).multipart(form)
                },
                |_, _| None,
            )
            .await?;
            let v: Value = response
                .json()
                .await
                .map_err(|e| RunError::backend(format!("files/upload: invalid JSON: {e}")))?;
            let id = v
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| RunError::backend("files/upload: the answer has no `id`"))?;
            files.push(json!({"type": file_type(mime), "transfer_method": "local_file", "upload_file_id": id}));
        }
        Ok(files)
    }

    fn inputs(&self, request: &RunRequest, context: &str) -> Value {
        let mut inputs = serde_json::Map::new();
        for (k, v) in request.variables.iter() {
            inputs.insert(k.to_owned(), Value::String(v.to_owned()));
        }
        inputs.insert(
            self.config.inputs_variable.clone(),
            Value::String(context.to_owned()),
        );
        Value::Object(inputs)
    }

    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let user = self.user(request);
        let mut context = String::new();
        if let Some(s) = &request.system_prompt {
            context.push_str(s);
            context.push_str("\n\n");
        }
        // Dify apps see images as files, so every model here "has vision" for them.
        context.push_str(&render::context_text(
            &request.context,
            true,
            &request.fence,
        ));
        let files = self.upload_images(request, &user).await?;
        if self.config.app_type == DifyAppType::Workflow {
            return self.workflow(request, events, &user, &context, files).await;
        }
        let key = request
            .ids
            .conversation
            .clone()
            .map(|c| (request.ids.pipeline.clone(), c, user.clone()));
        let query = if self.config.context_in_query && !context.trim().is_empty() {
            format!("{context}\n\n{}", request.message.text)
        } else {
            request.message.text.clone()
        };
        let mut body = json!({
            "query": query,
            "inputs": self.inputs(request, &context),
            "response_mode": "streaming",
            "user": user,
            "files": files,
        });
        let known = key.as_ref().and_then(|k| self.conversations.get(k));
        if let Some(id) = &known {
            body["conversation_id"] = Value::String(id.clone());
        }
        let url = format!("{}/chat-messages", self.base);
        let stale = |status: u16, text: &str| -> Option<RunError> {
            let lower = text.to_lowercase();
            (status == 404 && lower.contains("conversation")).then(|| RunError::Backend {
                message: "stale conversation".into(),
                source: None,
            })
        };
        let response = match http::send(
            "chat-messages",
            self.policy,
            http::Retry::SideEffects,
            || self.client.post(&url).json(&body),
            stale,
        )
        .await
        {
            Err(RunError::Backend { message, .. })
                if message == "stale conversation" && known.is_some() =>
            {
                // Dify no longer knows the conversation: start a new one, once.
                tracing::info!("Dify conversation not found; starting a new one");
                if let Some(k) = &key {
                    self.conversations.invalidate(k);
                }
                if let Some(o) = body.as_object_mut() {
                    o.remove("conversation_id");
                }
                http::send(
                    "chat-messages",
                    self.policy,
                    http::Retry::SideEffects,
                    || self.client.post(&url).json(&body),
                    |_, _| None,
                )
                .await?
            }
            Err(RunError::Backend { message, .. }) if message == "stale conversation" => {
                return Err(RunError::backend(
                    "chat-messages: 404 conversation not found",
                ));
            }
            other => other?,
        };
        let mut answer = String::new();
        let mut usage = None;
        let mut ended = false;
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if let (Some(k), Some(id)) = (&key, v.get("conversation_id").and_then(Value::as_str))
                && !id.is_empty()
            {
                self.conversations.insert(k.clone(), id.to_owned());
            }
            match v.get("event").and_then(Value::as_str).unwrap_or("") {
                "message" | "agent_message" => {
                    let piece = v.get("answer").and_then(Value::as_str).unwrap_or("");
                    if !piece.is_empty() {
                        answer.push_str(piece);
                        events
                            .emit(RunEvent::MessageDelta {
                                text: piece.to_owned(),
                            })
                            .await;
                    }
                }
                "message_replace" => {
                    answer = v
                        .get("answer")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                }
                "message_end" => {
                    usage = v.pointer("/metadata/usage").map(|u| TokenUsage {
                        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                        output_tokens: u
                            .get("completion_tokens")
                            .and_then(Value::as_u64)
                            .unwrap_or(0),
                    });
                    ended = true;
                    break;
                }
                "error" => {
                    return Err(RunError::backend(format!(
                        "Dify: {} ({})",
                        v.get("message").and_then(Value::as_str).unwrap_or("error"),
                        v.get("code").and_then(Value::as_str).unwrap_or("?")
                    )));
                }
                _ => {}
            }
        }
        if !ended {
            return Err(RunError::backend(
                "chat-messages: the stream ended without message_end (the answer may be cut off)",
            ));
        }
        events
            .emit(RunEvent::MessageCompleted { text: answer })
            .await;
        events.emit(RunEvent::RunCompleted { usage }).await;
        Ok(())
    }

    async fn workflow(
        &self,
        request: &RunRequest,
        events: &EventSink,
        user: &str,
        context: &str,
        files: Vec<Value>,
    ) -> Result<(), RunError> {
        let mut inputs = self.inputs(request, context);
        inputs["query"] = Value::String(request.message.text.clone());
        let body =
            json!({"inputs": inputs, "response_mode": "streaming", "user": user, "files": files});
        let url = format!("{}/workflows/run", self.base);
        let response = http::send(
            "workflows/run",
            self.policy,
            http::Retry::SideEffects,
            || self.client.post(&url).json(&body),
            |_, _| None,
        )
        .await?;
        let mut chunks = String::new();
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            match v.get("event").and_then(Value::as_str).unwrap_or("") {
                "text_chunk" => {
                    let piece = v
                        .pointer("/data/text")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    chunks.push_str(piece);
                    events
                        .emit(RunEvent::MessageDelta {
                            text: piece.to_owned(),
                        })
                        .await;
                }
                "workflow_finished" => {
                    let d = v.get("data").cloned().unwrap_or(Value::Null);
                    let status = d.get("status").and_then(Value::as_str);
                    if !matches!(status, Some("succeeded" | "partial-succeeded")) {
                        return Err(RunError::backend(format!(
                            "Dify workflow {}: {}",
                            d.get("status").and_then(Value::as_str).unwrap_or("failed"),
                            d.get("error")
                                .and_then(Value::as_str)
                                .unwrap_or("no error given")
                        )));
                    }
                    let text = d
                        .pointer(&format!("/outputs/{}", self.config.output_variable))
                        .and_then(Value::as_str)
                        .map_or(chunks.clone(), str::to_owned);
                    // Workflows report only `total_tokens`, not the input/output split.
                    events.emit(RunEvent::MessageCompleted { text }).await;
                    events.emit(RunEvent::RunCompleted { usage: None }).await;
                    return Ok(());
                }
                "error" => {
                    return Err(RunError::backend(format!(
                        "Dify: {}",
                        v.get("message").and_then(Value::as_str).unwrap_or("error")
                    )));
                }
                _ => {}
            }
        }
        Err(RunError::backend(
            "Dify workflow: the stream ended without workflow_finished",
        ))
    }
}

#[async_trait]
impl Runner for DifyRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        http::report(self.run_inner(request, events).await, events).await
    }
}

fn build(section: &Value, _: &BuildContext) -> Result<Box<dyn Runner>, ConfigError> {
    let config: DifyConfig = parse_section(section)?;
    let key = std::env::var(&config.api_key_env)
        .ok()
        .filter(|k| !k.is_empty());
    Ok(Box::new(DifyRunner::new(config, key.as_deref())?))
}

hostpipe_core::submit_runner! {
    name: DifyRunner::NAME,
    description: "A Dify app (chat, agent, chatflow or workflow) through the Dify service API.",
    build: build,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
