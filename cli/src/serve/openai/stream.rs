//! A streamed chat completion: the turn's text deltas as `chat.completion.chunk`
//! objects, sent as server-sent events `data: {…}` and ended by `data: [DONE]` (API
//! reference: "Chat Completions", streaming; `stream_options.include_usage`).
//!
//! The response head waits for the turn's first text: a turn that fails before any is
//! answered as a request that does not stream (its status, an OpenAI error body). Then
//! the first chunk carries `delta.role` and that text; each runner `message_delta`
//! becomes a chunk with `delta.content`; a chunk with `finish_reason` follows; with
//! `include_usage`, one more chunk with empty `choices` and `usage`. A turn that fails
//! after its first text ends with one `data: {"error": {…}}` event (what the OpenAI
//! SDKs raise as an `APIError`) and no `[DONE]`. A turn a stage ended without the
//! runner sends the stage's reply as one chunk.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use hostpipe_core::RunEvent;
use hostpipe_engine::TurnOutcome;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::{ApiError, TurnEvent};
use super::wire::{Chunk, ChunkChoice, Delta, FinishReason, OpenAiError, Usage};
use super::{answerable, joined};

/// What every chunk of one completion shares.
pub(super) struct Chunks {
    /// `chatcmpl-…`.
    pub(super) id: String,
    /// The pipeline id, as asked.
    pub(super) model: String,
    /// Unix seconds.
    pub(super) created: u64,
    /// Send the usage chunk.
    pub(super) include_usage: bool,
    /// The caller's tools, as offered to the model.
    pub(super) offered: Vec<String>,
}

/// Where the stream is.
enum Phase {
    /// Before the first chunk; the turn's first text, if it had one.
    Start { first: Option<String> },
    /// Content chunks; whether one carried text.
    Content { sent_text: bool },
    /// The last events are out.
    Done,
}

type Task = JoinHandle<Result<TurnOutcome, ApiError>>;

/// Where the turn's outcome comes from.
enum End {
    /// The turn's task, still running.
    Task(Task),
    /// The turn ended before its first text.
    Ready(Box<TurnOutcome>),
}

impl Chunks {
    /// The answer to a streamed request: waits for the turn's first text, so that a
    /// turn that fails before any (an upstream that refuses, a stage that fails) is
    /// answered with its own status and error body, as a request that does not stream
    /// is; then the SSE stream ([`Chunks::respond`]).
    ///
    /// # Errors
    /// The turn's error, when it failed before its first text.
    pub(super) async fn start(
        self,
        mut rx: mpsc::Receiver<TurnEvent>,
        task: Task,
    ) -> Result<Response, OpenAiError> {
        loop {
            match rx.recv().await {
                Some(TurnEvent::Run(RunEvent::MessageDelta { text })) if !text.is_empty() => {
                    return Ok(self.respond(rx, End::Task(task), Some(text)));
                }
                Some(_) => {}
                None => {
                    let outcome = joined(task.await)?;
                    answerable(&outcome)?;
                    return Ok(self.respond(rx, End::Ready(Box::new(outcome)), None));
                }
            }
        }
    }

    /// The SSE response: the role chunk with `first`, chunks from the turn's events
    /// `rx`, then the end from `end`; a keep-alive comment every 15 s.
    fn respond(self, rx: mpsc::Receiver<TurnEvent>, end: End, first: Option<String>) -> Response {
        let state = (self, rx, Some(end), Phase::Start { first });
        let events =
            futures_util::stream::unfold(state, |(chunks, mut rx, mut end, phase)| async move {
                let (events, phase) = match phase {
                    Phase::Done => return None,
                    Phase::Start { first } => {
                        let mut events = vec![chunks.role()];
                        events.extend(first.as_deref().map(|t| chunks.content(t)));
                        let sent_text = first.is_some();
                        (events, Phase::Content { sent_text })
                    }
                    Phase::Content { sent_text } => match rx.recv().await {
                        Some(TurnEvent::Run(RunEvent::MessageDelta { text }))
                            if !text.is_empty() =>
                        {
                            (
                                vec![chunks.content(&text)],
                                Phase::Content { sent_text: true },
                            )
                        }
                        Some(_) => (Vec::new(), Phase::Content { sent_text }),
                        None => {
                            let outcome = match end.take() {
                                Some(End::Task(t)) => joined(t.await),
                                Some(End::Ready(o)) => Ok(*o),
                                None => return None,
                            };
                            (chunks.end(outcome, sent_text), Phase::Done)
                        }
                    },
                };
                let events = events.into_iter().map(Ok::<_, Infallible>);
                Some((futures_util::stream::iter(events), (chunks, rx, end, phase)))
            });
        let events = futures_util::StreamExt::flatten(events);
        Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response()
    }

    fn event(&self, choices: Vec<ChunkChoice<'_>>, usage: Option<Usage>) -> Event {
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices,
            usage,
        };
        let data = serde_json::to_string(&chunk).unwrap_or_else(|e| {
            serde_json::json!({"error": {"message": e.to_string(), "type": "server_error", "param": null, "code": "internal"}}).to_string()
        });
        Event::default().data(data)
    }

    fn choice(delta: Delta<'_>, finish_reason: Option<FinishReason>) -> ChunkChoice<'_> {
        ChunkChoice {
            index: 0,
            delta,
            finish_reason,
        }
    }

    /// The first chunk: `delta.role`.
    fn role(&self) -> Event {
        let delta = Delta {
            role: Some("assistant"),
            content: Some(""),
            tool_calls: Vec::new(),
        };
        self.event(vec![Self::choice(delta, None)], None)
    }

    /// A piece of the answer.
    fn content(&self, text: &str) -> Event {
        let delta = Delta {
            role: None,
            content: Some(text),
            tool_calls: Vec::new(),
        };
        self.event(vec![Self::choice(delta, None)], None)
    }

    /// The last events: the stage's reply when no text was streamed, the
    /// `finish_reason` chunk, the usage chunk when asked, `[DONE]`; or the error.
    fn end(&self, outcome: Result<TurnOutcome, OpenAiError>, sent_text: bool) -> Vec<Event> {
        let outcome = match outcome.and_then(|o| answerable(&o).map(|()| o)) {
            Ok(o) => o,
            Err(e) => return vec![Event::default().data(e.body().to_string())],
        };
        let mut events = Vec::with_capacity(5);
        let mut calls = super::tools::calls(&outcome, &self.offered);
        if !sent_text && !outcome.reply.is_empty() {
            events.push(self.content(&outcome.reply));
        }
        let finish = if calls.is_empty() {
            FinishReason::Stop
        } else {
            for (i, call) in calls.iter_mut().enumerate() {
                call.index = u32::try_from(i).ok();
            }
            let delta = Delta {
                tool_calls: calls,
                ..Delta::default()
            };
            events.push(self.event(vec![Self::choice(delta, None)], None));
            FinishReason::ToolCalls
        };
        events.push(self.event(vec![Self::choice(Delta::default(), Some(finish))], None));
        if self.include_usage {
            let usage = outcome.run.as_ref().and_then(|r| r.usage).map(Usage::from);
            events.push(self.event(Vec::new(), usage));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}
