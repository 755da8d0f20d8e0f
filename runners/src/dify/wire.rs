//! The wire types of the Dify service API (Dify docs, "API Access" of an app): the
//! bodies of "Send Chat Message" (`POST /chat-messages`) and "Execute Workflow" (`POST
//! /workflows/run`), the answer of "File Upload" (`POST /files/upload`), and the
//! events of a streaming response (`response_mode: "streaming"`: server-sent events
//! whose `data` is a JSON object named by its `event`). Private to the `dify` runner.
//!
//! Answers are read field by field with [`crate::lenient`]: a field of another shape
//! counts as absent rather than failing the event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{DifyConfig, Prepared};
pub(super) use crate::lenient::Usage;
use crate::lenient::{lenient, object, present};

/// `response_mode`: always `streaming` (agent apps take nothing else, and a stream
/// does not time out on a long answer).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum ResponseMode {
    Streaming,
}

/// `inputs`: the turn's user-visible variables, then the resource context under the
/// configured `inputs_variable` (which wins over a variable of the same name).
fn inputs<'a>(turn: &'a Prepared<'_>, config: &'a DifyConfig) -> BTreeMap<&'a str, &'a str> {
    let mut inputs: BTreeMap<&str, &str> = turn.request.variables.iter().collect();
    inputs.insert(config.inputs_variable.as_str(), turn.context.as_str());
    inputs
}

/// The body of "Send Chat Message" (chat, agent and chatflow apps).
#[derive(Debug, Serialize)]
pub(super) struct ChatMessageRequest<'a> {
    query: String,
    inputs: BTreeMap<&'a str, &'a str>,
    response_mode: ResponseMode,
    user: &'a str,
    files: &'a [InputFile],
    /// The Dify conversation to continue; a new one when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) conversation_id: Option<String>,
}

impl<'a> ChatMessageRequest<'a> {
    /// The body for `turn`: the user's message as `query` (after the context when
    /// `context_in_query` is set and there is context), the context in `inputs`.
    pub(super) fn new(
        turn: &'a Prepared<'_>,
        config: &'a DifyConfig,
        conversation_id: Option<String>,
    ) -> Self {
        let message = &turn.request.message.text;
        let query = if config.context_in_query && !turn.context.trim().is_empty() {
            format!("{}\n\n{message}", turn.context)
        } else {
            message.clone()
        };
        Self {
            query,
            inputs: inputs(turn, config),
            response_mode: ResponseMode::Streaming,
            user: &turn.user,
            files: &turn.files,
            conversation_id,
        }
    }
}

/// The body of "Execute Workflow".
#[derive(Debug, Serialize)]
pub(super) struct WorkflowRunRequest<'a> {
    inputs: BTreeMap<&'a str, &'a str>,
    response_mode: ResponseMode,
    user: &'a str,
    files: &'a [InputFile],
}

impl<'a> WorkflowRunRequest<'a> {
    /// The body for `turn`: `inputs` as for a chat, plus the user's message as `query`
    /// (which wins over a variable of that name).
    pub(super) fn new(turn: &'a Prepared<'_>, config: &'a DifyConfig) -> Self {
        let mut inputs = inputs(turn, config);
        inputs.insert("query", &turn.request.message.text);
        Self {
            inputs,
            response_mode: ResponseMode::Streaming,
            user: &turn.user,
            files: &turn.files,
        }
    }
}

/// An entry of `files`: an uploaded file.
#[derive(Debug, Clone, Serialize)]
pub(super) struct InputFile {
    /// Dify's file type ([`super::file_type`]).
    #[serde(rename = "type")]
    kind: &'static str,
    transfer_method: TransferMethod,
    upload_file_id: String,
}

impl InputFile {
    /// A file uploaded through `files/upload` as `id`, of Dify's file type `kind`.
    pub(super) fn uploaded(kind: &'static str, id: String) -> Self {
        Self {
            kind,
            transfer_method: TransferMethod::LocalFile,
            upload_file_id: id,
        }
    }
}

/// `transfer_method`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum TransferMethod {
    /// A file uploaded through `files/upload`.
    LocalFile,
}

/// The answer of "File Upload".
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct UploadedFile {
    #[serde(deserialize_with = "lenient")]
    pub(super) id: Option<String>,
}

/// One event of a chat app's stream.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatEvent {
    #[serde(deserialize_with = "lenient")]
    pub(super) event: ChatEventKind,
    /// On every event of a conversation.
    #[serde(deserialize_with = "lenient")]
    pub(super) conversation_id: Option<String>,
    /// `message`, `agent_message`: a piece; `message_replace`: the whole answer.
    #[serde(deserialize_with = "lenient")]
    pub(super) answer: Option<String>,
    /// `message_end`.
    #[serde(deserialize_with = "object")]
    pub(super) metadata: Option<Metadata>,
    /// `error`.
    #[serde(deserialize_with = "lenient")]
    pub(super) message: Option<String>,
    /// `error`.
    #[serde(deserialize_with = "lenient")]
    pub(super) code: Option<String>,
}

/// The `event` of a chat app's stream, as far as the runner reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ChatEventKind {
    /// A piece of the answer.
    Message,
    /// A piece of an agent's answer.
    AgentMessage,
    /// The answer so far is replaced (content moderation).
    MessageReplace,
    /// The end, with usage.
    MessageEnd,
    /// The run failed.
    Error,
    /// Any other event (`workflow_started`, `node_finished`, `agent_thought`, `ping`…).
    #[default]
    #[serde(other)]
    Other,
}

/// `metadata` of `message_end`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Metadata {
    /// Present with any value (an odd one reads as zero tokens).
    #[serde(deserialize_with = "present")]
    pub(super) usage: Option<Usage>,
}

/// One event of a workflow app's stream.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WorkflowEvent {
    #[serde(deserialize_with = "lenient")]
    pub(super) event: WorkflowEventKind,
    #[serde(deserialize_with = "object")]
    pub(super) data: WorkflowEventData,
    /// `error`.
    #[serde(deserialize_with = "lenient")]
    pub(super) message: Option<String>,
}

/// The `event` of a workflow app's stream, as far as the runner reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum WorkflowEventKind {
    /// A piece of the output text.
    TextChunk,
    /// The end, with the status and outputs.
    WorkflowFinished,
    /// The run failed.
    Error,
    /// Any other event (`workflow_started`, `node_started`, `ping`…).
    #[default]
    #[serde(other)]
    Other,
}

/// `data` of a workflow event.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WorkflowEventData {
    /// `text_chunk`: the piece.
    #[serde(deserialize_with = "lenient")]
    pub(super) text: Option<String>,
    /// `workflow_finished`: `succeeded`, `partial-succeeded`, `failed`, `stopped`.
    #[serde(deserialize_with = "lenient")]
    pub(super) status: Option<String>,
    /// `workflow_finished`: why it failed.
    #[serde(deserialize_with = "lenient")]
    pub(super) error: Option<String>,
    /// `workflow_finished`: the output variables by name; their values have whatever
    /// JSON type the app gives them.
    #[serde(deserialize_with = "lenient")]
    pub(super) outputs: BTreeMap<String, Value>,
}
