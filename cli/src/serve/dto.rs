//! The response bodies of the API, typed. Each struct is one response schema of
//! docs/openapi.json (named in its doc) and serializes to the JSON the handlers built
//! with `json!` before: the same field names, and `null` where a value is absent (no
//! field is ever left out, except in [`StoreHealth`], whose two shapes differ).
//!
//! Lists borrow what the MCP host or the store returned; nothing is copied to answer.
//! Request bodies stay next to their handlers; error bodies are [`super::ApiError`]'s.

use axum::http::StatusCode;
use base64::Engine as _;
use hostpipe_core::{
    Attachment, Completion, FallbackReason, Prompt, Resource, ResourceTemplate, RunEvent,
    ServerInfo, ServerStatus, TokenUsage, Tool, ToolCallRecord, TraceRecord,
};
use hostpipe_engine::{InjectionRecord, Pin, ToolCallEntry, TurnOutcome};
use hostpipe_runners::PreviewReport;
use hostpipe_stages::convert::Converted;
use serde::Serialize;

use super::ApiError;
use super::approver::PendingConsent;
use super::elicitor::PendingElicitation;
use crate::ops::PreviewItem;

/// `dto` as a JSON value, for a document that is both a response and an event's data.
///
/// # Errors
/// 500 `internal` should it not serialize (none of these types fails; `json!` panicked).
pub(crate) fn document(dto: &impl Serialize) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(dto).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the answer could not be serialized: {e}"),
        )
    })
}

// ---- health -------------------------------------------------------------------------

/// `GET /healthz`: `{"status": "ok"}`.
#[derive(Debug, Serialize)]
pub(crate) struct Health {
    /// Always `ok`.
    pub(crate) status: &'static str,
}

/// `GET /readyz`, with 200 or 503 (the same body).
#[derive(Debug, Serialize)]
pub(crate) struct Ready {
    /// Where the instance is.
    pub(crate) status: ReadyStatus,
    /// Whether the store answered.
    pub(crate) store: StoreHealth,
    /// Each configured server's state.
    pub(crate) servers: Vec<ServerHealth>,
}

/// The `status` of `GET /readyz`, most pressing first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReadyStatus {
    /// Shutting down (SIGTERM or Ctrl-C): no new turns.
    Draining,
    /// The servers' first connection attempts are not over.
    Starting,
    /// The store did not answer.
    StoreUnavailable,
    /// Ready: the only 200.
    Ready,
}

/// The `store` of `GET /readyz`: `{"ok": true, "store": DESCRIPTION}` or
/// `{"ok": false, "error": MESSAGE}`.
#[derive(Debug, Serialize)]
pub(crate) struct StoreHealth {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl From<Result<String, String>> for StoreHealth {
    /// The store's description (`none` without a store), or why it did not answer.
    fn from(probe: Result<String, String>) -> Self {
        match probe {
            Ok(store) => Self {
                ok: true,
                store: Some(store),
                error: None,
            },
            Err(error) => Self {
                ok: false,
                store: None,
                error: Some(error),
            },
        }
    }
}

/// One server in `GET /readyz`.
#[derive(Debug, Serialize)]
pub(crate) struct ServerHealth {
    /// The configured name.
    pub(crate) name: String,
    /// Its connection state alone (`{"state": "connected"}`): `/readyz` needs no token,
    /// so no reason (an OS error, a command's path, a URL) is shown; `GET /v1/servers`
    /// has them.
    pub(crate) status: ServerState,
}

/// A [`ServerStatus`] without its details (schema `ServerState`).
#[derive(Debug, Serialize)]
pub(crate) struct ServerState {
    /// [`ServerStatus::state`].
    pub(crate) state: &'static str,
}

impl From<&ServerStatus> for ServerState {
    fn from(status: &ServerStatus) -> Self {
        Self {
            state: status.state(),
        }
    }
}

// ---- servers and what they list -----------------------------------------------------

/// `POST /v1/servers/{server}/login` (schema `LoginStarted`).
#[derive(Debug, Serialize)]
pub(crate) struct LoginStarted {
    /// The server.
    pub(crate) server: String,
    /// Where a person logs in (open it in a browser).
    pub(crate) authorization_url: String,
    /// Where the authorization server sends the browser back (`/oauth/callback`).
    pub(crate) redirect_uri: String,
    /// Seconds the login waits for that redirect.
    pub(crate) expires_in_s: u64,
    /// Whether the credentials outlive this process (`HOSTPIPE_CREDENTIAL_KEY` set).
    pub(crate) persistent: bool,
}

/// `GET /v1/servers`.
#[derive(Debug, Serialize)]
pub(crate) struct ServerList {
    /// Every configured server (schema `Server`).
    pub(crate) servers: Vec<ServerInfo>,
    /// The names of those added over the API (`POST /v1/servers`), which `DELETE`
    /// removes; the others come from the config files.
    pub(crate) added: Vec<String>,
}

/// `POST /v1/servers`: the server added (schema `Server`; `connecting` at first), and
/// the keys of its entry hostpipe does not use.
#[derive(Debug, Serialize)]
pub(crate) struct AddedServer {
    /// The server as the host sees it now.
    pub(crate) server: Option<ServerInfo>,
    /// Keys of the entry that were ignored (other clients' own, e.g. `autoApprove`).
    pub(crate) ignored_keys: Vec<String>,
}

/// `DELETE /v1/servers/{server}`.
#[derive(Debug, Serialize)]
pub(crate) struct RemovedServer {
    /// The server removed.
    pub(crate) name: String,
    /// The pipelines that still bind it: their turns find it unavailable (a required
    /// binding ends them), and the next reload or start fails until the binding goes.
    pub(crate) bound_by: Vec<String>,
}

/// `GET /v1/servers/{server}/resources`.
#[derive(Debug, Serialize)]
pub(crate) struct ResourceList<'a> {
    /// The server's resources, as listed (schema `Resource`).
    pub(crate) resources: &'a [Resource],
}

/// `GET /v1/servers/{server}/resource-templates`.
#[derive(Debug, Serialize)]
pub(crate) struct ResourceTemplateList<'a> {
    /// The server's resource templates (schema `ResourceTemplate`).
    pub(crate) resource_templates: &'a [ResourceTemplate],
}

/// `GET /v1/servers/{server}/prompts`.
#[derive(Debug, Serialize)]
pub(crate) struct PromptList<'a> {
    /// The server's prompts (schema `Prompt`).
    pub(crate) prompts: &'a [Prompt],
}

/// `GET /v1/servers/{server}/tools` without `pipeline` (schema `ToolList`).
#[derive(Debug, Serialize)]
pub(crate) struct ToolList<'a> {
    /// The server's tools (schema `Tool`, without `offered_as`).
    pub(crate) tools: &'a [Tool],
}

/// `GET /v1/servers/{server}/tools?pipeline=ID` (schema `ToolList`).
#[derive(Debug, Serialize)]
pub(crate) struct PipelineToolList<'a> {
    /// The pipeline asked about.
    pub(crate) pipeline: String,
    /// The server's tools, each with the name that pipeline offers it under.
    pub(crate) tools: Vec<OfferedTool<'a>>,
}

/// A tool, and the name a pipeline's model sees it under (schema `Tool`).
#[derive(Debug, Serialize)]
pub(crate) struct OfferedTool<'a> {
    /// The tool as its server lists it.
    #[serde(flatten)]
    pub(crate) tool: &'a Tool,
    /// `server__tool`, or null when the pipeline does not offer it.
    pub(crate) offered_as: Option<String>,
}

/// `POST /v1/servers/{server}/resources/read` (schema `ReadResponse`).
#[derive(Debug, Serialize)]
pub(crate) struct ReadResponse {
    /// The URI read (a template's expansion).
    pub(crate) uri: String,
    /// The model the contents were converted for.
    pub(crate) model: ModelSummary,
    /// Each item of the read, converted.
    pub(crate) contents: Vec<ContentItem>,
}

/// The model of a [`ReadResponse`].
#[derive(Debug, Serialize)]
pub(crate) struct ModelSummary {
    /// The model's name.
    pub(crate) name: String,
    /// Whether it takes images.
    pub(crate) vision: bool,
}

/// One item of a read, as the model would get it (schema `ContentItem`).
#[derive(Debug, Serialize)]
pub(crate) struct ContentItem {
    uri: String,
    mime_type: Option<String>,
    /// Size of the text or of the decoded blob, bytes.
    bytes: usize,
    #[serde(flatten)]
    body: ContentBody,
}

/// What a [`ContentItem`] holds, by its `kind`.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ContentBody {
    /// The text.
    Text { text: String },
    /// The converted image (vision models).
    Image { image: ImageContent },
    /// A note in place of the content, and why.
    Fallback {
        reason: FallbackReason,
        text: String,
    },
    /// The content was refused; the note the model gets.
    Refused { error: String, text: String },
}

/// The image of a [`ContentItem`].
#[derive(Debug, Serialize)]
struct ImageContent {
    mime_type: String,
    /// Pixels.
    width: u32,
    /// Pixels.
    height: u32,
    /// The converted bytes, standard base64.
    data: String,
}

impl From<PreviewItem> for ContentItem {
    fn from(item: PreviewItem) -> Self {
        let body = match item.converted {
            Converted::Text(text) => ContentBody::Text { text },
            Converted::Image {
                mime_type,
                data,
                width,
                height,
            } => ContentBody::Image {
                image: ImageContent {
                    mime_type,
                    width,
                    height,
                    data: base64::engine::general_purpose::STANDARD.encode(data),
                },
            },
            Converted::Fallback { reason, note } => ContentBody::Fallback { reason, text: note },
            Converted::Refused { error, note } => ContentBody::Refused { error, text: note },
        };
        Self {
            uri: item.uri,
            mime_type: item.mime_type,
            bytes: item.bytes,
            body,
        }
    }
}

/// `POST /v1/servers/{server}/completion` (schema `CompletionResponse`; MCP spec
/// 2025-11-25, "Utilities / Completion", hence `hasMore`).
#[derive(Debug, Serialize)]
pub(crate) struct CompletionResponse {
    completion: CompletionValues,
}

/// The `completion` of a [`CompletionResponse`].
#[derive(Debug, Serialize)]
struct CompletionValues {
    values: Vec<String>,
    total: Option<u32>,
    #[serde(rename = "hasMore")]
    has_more: bool,
}

impl From<Completion> for CompletionResponse {
    fn from(c: Completion) -> Self {
        Self {
            completion: CompletionValues {
                values: c.values,
                total: c.total,
                has_more: c.has_more,
            },
        }
    }
}

/// `POST /v1/servers/{server}/tools/{name}/call` (schema `ToolCallResponse`).
#[derive(Debug, Serialize)]
pub(crate) struct ToolCallResponse {
    /// The history's `turn_id` of the call.
    pub(crate) turn_id: String,
    /// The pipeline it was made in.
    pub(crate) pipeline: String,
    /// The server.
    pub(crate) server: String,
    /// The tool's name as its server lists it.
    pub(crate) tool: String,
    /// The name the pipeline's model sees.
    pub(crate) offered_as: Option<String>,
    /// The MCP `CallToolResult`, rendered by `hostpipe_runners::mcp_json` (the same
    /// rendering as the MCP door's).
    pub(crate) result: serde_json::Value,
    /// The call's record in the trace.
    pub(crate) call: Option<ToolCallRecord>,
}

// ---- pipelines, pins, history, consent ----------------------------------------------

/// `GET /v1/pipelines`.
#[derive(Debug, Serialize)]
pub(crate) struct PipelineList<'a> {
    /// Every configured pipeline, by id.
    pub(crate) pipelines: Vec<PipelineSummary<'a>>,
}

/// One pipeline (schema `Pipeline`).
#[derive(Debug, Serialize)]
pub(crate) struct PipelineSummary<'a> {
    /// Its id.
    pub(crate) id: &'a str,
    /// Its runner's name.
    pub(crate) runner: &'a str,
    /// Its stages, in order.
    pub(crate) stages: Vec<&'a str>,
    /// Its model's name.
    pub(crate) model: &'a str,
    /// The servers it binds; null when its binding cannot be read from the config.
    pub(crate) bound_servers: Option<Vec<String>>,
}

/// `GET …/attachments` (schema `Attachments`).
#[derive(Debug, Serialize)]
pub(crate) struct Attachments {
    /// The stored pins (schema `Pin`).
    pub(crate) pins: Vec<Pin>,
    /// A pipeline's attachments from its config; none for a conversation.
    pub(crate) configured: Vec<Attachment>,
}

/// `GET /v1/pins` (schema `PinPage`).
#[derive(Debug, Serialize)]
pub(crate) struct PinPage {
    /// The live pins of this page, oldest first (schema `Pin`).
    pub(crate) pins: Vec<Pin>,
    /// The `offset` of the next page; null on the last.
    pub(crate) next_offset: Option<u32>,
}

/// `GET /v1/history` (schema `HistoryPage`).
#[derive(Debug, Serialize)]
pub(crate) struct HistoryPage {
    /// The reads of this page (schema `InjectionRecord`).
    pub(crate) records: Vec<InjectionRecord>,
    /// The `offset` of the next page; null on the last.
    pub(crate) next_offset: Option<u32>,
}

/// `GET /v1/history/tool-calls` (schema `ToolCallPage`).
#[derive(Debug, Serialize)]
pub(crate) struct ToolCallPage {
    /// The calls of this page (schema `ToolCallEntry`).
    pub(crate) calls: Vec<ToolCallEntry>,
    /// The `offset` of the next page; null on the last.
    pub(crate) next_offset: Option<u32>,
}

/// `GET /v1/consent-requests`.
#[derive(Debug, Serialize)]
pub(crate) struct ConsentRequestList {
    /// The questions waiting, oldest first (schema `ConsentRequest`).
    pub(crate) consent_requests: Vec<PendingConsent>,
}

/// `GET /v1/elicitation-requests`.
#[derive(Debug, Serialize)]
pub(crate) struct ElicitationRequestList {
    pub(crate) elicitation_requests: Vec<PendingElicitation>,
}

// ---- turns --------------------------------------------------------------------------

/// The data of a streamed turn's first event, `turn`.
#[derive(Debug, Serialize)]
pub(crate) struct TurnStarted<'a> {
    /// The history's `turn_id`.
    pub(crate) turn_id: &'a str,
    /// The pipeline.
    pub(crate) pipeline: &'a str,
    /// The runner that answers.
    pub(crate) runner: &'a str,
}

/// `POST /v1/turns` (schema `TurnResponse`), and the data of a streamed turn's `done`
/// event.
#[derive(Debug, Serialize)]
pub(crate) struct TurnResponse<'a> {
    turn_id: &'a str,
    pipeline: &'a str,
    runner: &'a str,
    reply: &'a str,
    failed: bool,
    status: hostpipe_engine::TurnStatus,
    ended_by: Option<&'a str>,
    usage: Option<TokenUsage>,
    events: Option<&'a [RunEvent]>,
    request: Option<PreviewReport>,
    trace: &'a [TraceRecord],
}

impl<'a> TurnResponse<'a> {
    /// The document of `outcome`, a turn of `pipeline` answered by `runner`.
    pub(crate) fn new(outcome: &'a TurnOutcome, pipeline: &'a str, runner: &'a str) -> Self {
        Self {
            turn_id: outcome.trace.turn_id(),
            pipeline,
            runner,
            reply: &outcome.reply,
            failed: outcome.failed(),
            status: outcome.status,
            ended_by: outcome.ended_by.as_deref(),
            usage: outcome.run.as_ref().and_then(|r| r.usage),
            events: outcome.run.as_ref().map(|r| r.events.as_slice()),
            request: outcome.request.as_ref().map(PreviewReport::new),
            trace: outcome.trace.records(),
        }
    }
}

#[cfg(test)]
mod tests;
