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
//!
//! Here: the config and the runner. `wire.rs` holds the private wire types (the
//! request bodies built from the turn and the config, the upload answer, the stream
//! events, read leniently); `stream.rs` assembles the answer from the events.

mod stream;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
mod wire;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use hostpipe_core::{
    BuildContext, ConfigError, EventSink, RunError, RunEvent, RunRequest, Runner, parse_section,
};
use serde::Deserialize;
use serde_json::Value;

use self::stream::{ChatAnswer, WorkflowAnswer};
use self::wire::{
    ChatEvent, ChatMessageRequest, InputFile, UploadedFile, WorkflowEvent, WorkflowRunRequest,
};
use crate::http::{self, HttpPolicy};
use crate::{lenient, render};

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
    conversations: moka::sync::Cache<ConversationKey, String>,
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

    /// Uploads the image blocks as `user`; their `files` entries.
    async fn upload_images(
        &self,
        request: &RunRequest,
        user: &str,
    ) -> Result<Vec<InputFile>, RunError> {
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
            let uploaded: Value = response
                .json()
                .await
                .map_err(|e| RunError::backend(format!("files/upload: invalid JSON: {e}")))?;
            let id = lenient::read::<UploadedFile>(uploaded)
                .id
                .ok_or_else(|| RunError::backend("files/upload: the answer has no `id`"))?;
            files.push(InputFile::uploaded(file_type(mime), id));
        }
        Ok(files)
    }

    /// What both app kinds send: the `user`, the context (the system prompt, then the
    /// fenced context blocks) and the uploaded images.
    async fn prepare<'a>(&self, request: &'a RunRequest) -> Result<Prepared<'a>, RunError> {
        let user = request
            .sender
            .clone()
            .unwrap_or_else(|| self.config.default_user.clone());
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
        Ok(Prepared {
            request,
            user,
            context,
            files,
        })
    }

    async fn run_inner(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let turn = self.prepare(request).await?;
        if self.config.app_type == DifyAppType::Workflow {
            return self.workflow(&turn, events).await;
        }
        self.chat(&turn, events).await
    }

    /// A chat, agent or chatflow app: `chat-messages`, continuing the Dify
    /// conversation of the turn's conversation and user when there is one.
    async fn chat(&self, turn: &Prepared<'_>, events: &EventSink) -> Result<(), RunError> {
        let request = turn.request;
        let key = request
            .ids
            .conversation
            .clone()
            .map(|c| (request.ids.pipeline.clone(), c, turn.user.clone()));
        let known = key.as_ref().and_then(|k| self.conversations.get(k));
        let mut body = ChatMessageRequest::new(turn, &self.config, known);
        let response = self.send_chat(&mut body, key.as_ref()).await?;
        let mut answer = ChatAnswer::default();
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            // Data that is not JSON is skipped.
            let Ok(event) = lenient::parse::<ChatEvent>(&data) else {
                continue;
            };
            if let (Some(k), Some(id)) = (&key, &event.conversation_id)
                && !id.is_empty()
            {
                self.conversations.insert(k.clone(), id.clone());
            }
            if let Some(text) = answer.push(event)? {
                events.emit(RunEvent::MessageDelta { text }).await;
            }
            if answer.has_ended() {
                break;
            }
        }
        let (text, usage) = answer.finish()?;
        events.emit(RunEvent::MessageCompleted { text }).await;
        events.emit(RunEvent::RunCompleted { usage }).await;
        Ok(())
    }

    /// Sends `body`. A 404 that names the conversation when `body` continues one (Dify
    /// no longer knows it) drops the stale id (from `body` and the cache at `key`) and
    /// sends it again, once, for a new conversation.
    async fn send_chat(
        &self,
        body: &mut ChatMessageRequest<'_>,
        key: Option<&ConversationKey>,
    ) -> Result<reqwest::Response, RunError> {
        let url = format!("{}/chat-messages", self.base);
        let stale = |status: u16, text: &str| -> Option<RunError> {
            let lower = text.to_lowercase();
            (status == 404 && lower.contains("conversation")).then(|| RunError::Backend {
                message: STALE.into(),
                source: None,
            })
        };
        let first = http::send(
            "chat-messages",
            self.policy,
            http::Retry::SideEffects,
            || self.client.post(&url).json(&*body),
            stale,
        )
        .await;
        match first {
            Err(RunError::Backend { message, .. })
                if message == STALE && body.conversation_id.is_some() =>
            {
                tracing::info!("Dify conversation not found; starting a new one");
                if let Some(k) = key {
                    self.conversations.invalidate(k);
                }
                body.conversation_id = None;
                http::send(
                    "chat-messages",
                    self.policy,
                    http::Retry::SideEffects,
                    || self.client.post(&url).json(&*body),
                    |_, _| None,
                )
                .await
            }
            Err(RunError::Backend { message, .. }) if message == STALE => Err(RunError::backend(
                "chat-messages: 404 conversation not found",
            )),
            other => other,
        }
    }

    /// A workflow app: `workflows/run`; the answer is the configured output variable.
    async fn workflow(&self, turn: &Prepared<'_>, events: &EventSink) -> Result<(), RunError> {
        let body = WorkflowRunRequest::new(turn, &self.config);
        let url = format!("{}/workflows/run", self.base);
        let response = http::send(
            "workflows/run",
            self.policy,
            http::Retry::SideEffects,
            || self.client.post(&url).json(&body),
            |_, _| None,
        )
        .await?;
        let mut answer = WorkflowAnswer::new(&self.config.output_variable);
        let mut stream = std::pin::pin!(http::events(response, self.policy.timeout));
        while let Some(item) = stream.next().await {
            let (_, data) = item?;
            // Data that is not JSON is skipped.
            let Ok(event) = lenient::parse::<WorkflowEvent>(&data) else {
                continue;
            };
            if let Some(text) = answer.push(event)? {
                events.emit(RunEvent::MessageDelta { text }).await;
            }
            if let Some(text) = answer.finished() {
                // Workflows report only `total_tokens`, not the input/output split.
                events.emit(RunEvent::MessageCompleted { text }).await;
                events.emit(RunEvent::RunCompleted { usage: None }).await;
                return Ok(());
            }
        }
        Err(RunError::backend(
            "Dify workflow: the stream ended without workflow_finished",
        ))
    }
}

/// The message of the internal error that marks a stale conversation (a 404 naming
/// the conversation) between [`DifyRunner::send_chat`]'s classifier and its retry.
const STALE: &str = "stale conversation";

/// (pipeline, conversation, user): whose Dify `conversation_id` is cached.
type ConversationKey = (String, String, String);

/// What both app kinds send for one turn.
#[derive(Debug)]
struct Prepared<'a> {
    request: &'a RunRequest,
    /// Dify's `user`: the sender, or the configured `default_user`.
    user: String,
    /// The system prompt and the fenced context blocks.
    context: String,
    /// The uploaded image blocks.
    files: Vec<InputFile>,
}

#[async_trait]
impl Runner for DifyRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        // A failure's `run_failed` event is the pipeline's `ReportFailure` layer's.
        self.run_inner(request, events).await
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
