//! Dify's streamed answers, event by event: a chat app's ([`ChatAnswer`]) and a
//! workflow's ([`WorkflowAnswer`]).

use hostpipe_core::{RunError, TokenUsage};

use super::wire::{ChatEvent, ChatEventKind, WorkflowEvent, WorkflowEventKind};

/// A chat app's answer, assembled from its events.
#[derive(Debug, Default)]
pub(super) struct ChatAnswer {
    text: String,
    usage: Option<TokenUsage>,
    ended: bool,
}

impl ChatAnswer {
    /// Takes one event: the piece of text to report as a delta, if any.
    /// `message` and `agent_message` add a piece; `message_replace` replaces the
    /// answer (no delta); `message_end` ends it ([`ChatAnswer::has_ended`]) with its
    /// usage; other events are ignored.
    ///
    /// # Errors
    /// [`RunError::Backend`] for an `error` event: `Dify: MESSAGE (CODE)`.
    pub(super) fn push(&mut self, event: ChatEvent) -> Result<Option<String>, RunError> {
        match event.event {
            ChatEventKind::Message | ChatEventKind::AgentMessage => {
                let piece = event.answer.filter(|p| !p.is_empty());
                if let Some(p) = &piece {
                    self.text.push_str(p);
                }
                return Ok(piece);
            }
            ChatEventKind::MessageReplace => self.text = event.answer.unwrap_or_default(),
            ChatEventKind::MessageEnd => {
                self.usage = event.metadata.and_then(|m| m.usage).map(TokenUsage::from);
                self.ended = true;
            }
            ChatEventKind::Error => {
                return Err(RunError::backend(format!(
                    "Dify: {} ({})",
                    event.message.as_deref().unwrap_or("error"),
                    event.code.as_deref().unwrap_or("?")
                )));
            }
            ChatEventKind::Other => {}
        }
        Ok(None)
    }

    /// Whether `message_end` came.
    pub(super) fn has_ended(&self) -> bool {
        self.ended
    }

    /// The answer and its usage, once the stream has ended.
    ///
    /// # Errors
    /// [`RunError::Backend`] when the stream ended without `message_end`.
    pub(super) fn finish(self) -> Result<(String, Option<TokenUsage>), RunError> {
        if !self.ended {
            return Err(RunError::backend(
                "chat-messages: the stream ended without message_end (the answer may be cut off)",
            ));
        }
        Ok((self.text, self.usage))
    }
}

/// A workflow's answer, assembled from its events.
#[derive(Debug)]
pub(super) struct WorkflowAnswer<'a> {
    /// The output variable that holds the answer.
    output_variable: &'a str,
    chunks: String,
    finished: Option<String>,
}

impl<'a> WorkflowAnswer<'a> {
    /// An answer read from `output_variable`.
    pub(super) fn new(output_variable: &'a str) -> Self {
        Self {
            output_variable,
            chunks: String::new(),
            finished: None,
        }
    }

    /// Takes one event: the piece of text to report as a delta, if any (every
    /// `text_chunk`, even an empty one). `workflow_finished` with status `succeeded`
    /// or `partial-succeeded` ends the answer ([`WorkflowAnswer::finished`]): the
    /// output variable's text, else the chunks so far. Other events are ignored.
    ///
    /// # Errors
    /// [`RunError::Backend`] for `workflow_finished` with another status (`Dify
    /// workflow STATUS: ERROR`) and for an `error` event (`Dify: MESSAGE`).
    pub(super) fn push(&mut self, event: WorkflowEvent) -> Result<Option<String>, RunError> {
        let data = event.data;
        match event.event {
            WorkflowEventKind::TextChunk => {
                let piece = data.text.unwrap_or_default();
                self.chunks.push_str(&piece);
                return Ok(Some(piece));
            }
            WorkflowEventKind::WorkflowFinished => {
                let status = data.status.as_deref();
                if !matches!(status, Some("succeeded" | "partial-succeeded")) {
                    return Err(RunError::backend(format!(
                        "Dify workflow {}: {}",
                        status.unwrap_or("failed"),
                        data.error.as_deref().unwrap_or("no error given")
                    )));
                }
                let text = data
                    .outputs
                    .get(self.output_variable)
                    .and_then(|v| v.as_str())
                    .map_or_else(|| self.chunks.clone(), str::to_owned);
                self.finished = Some(text);
            }
            WorkflowEventKind::Error => {
                return Err(RunError::backend(format!(
                    "Dify: {}",
                    event.message.as_deref().unwrap_or("error")
                )));
            }
            WorkflowEventKind::Other => {}
        }
        Ok(None)
    }

    /// The answer, once `workflow_finished` came.
    pub(super) fn finished(&mut self) -> Option<String> {
        self.finished.take()
    }
}
