//! The uniform request every runner takes, the events runners report, and the runner
//! contract.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::context::ContextBlock;
use crate::error::RunError;
use crate::model::ModelProfile;
use crate::tool::{ToolExecutor, ToolSpec};
use crate::trace::ReadRecord;
use crate::turn::{CallerRound, HistoryMessage, Turn, TurnIds, UserMessage, Variables};

/// Everything a runner needs for one turn: the uniform context interface. Runners
/// convert it into their own private wire types.
#[derive(Debug, Clone, Serialize)]
pub struct RunRequest {
    /// Ids of the turn (a runner may use `conversation` to keep backend state).
    pub ids: TurnIds,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Earlier messages, oldest first.
    pub history: Vec<HistoryMessage>,
    /// The user's message.
    pub message: UserMessage,
    /// The turn's user-visible variables (sender id, group id, values the user set);
    /// never internal state. Runners may pass them on (e.g. Dify `inputs`).
    pub variables: Variables,
    /// Who sent the message (platform user id), if known.
    pub sender: Option<String>,
    /// Context blocks, in the order the model should see them.
    pub context: Vec<ContextBlock>,
    /// The token budget the context was fitted into, if one was set.
    pub context_budget: Option<usize>,
    /// Tools offered to the model (the caller's own last,
    /// [`crate::ToolOrigin::Caller`]).
    pub tools: Vec<ToolSpec>,
    /// The rounds of the caller's own tools since the user's message (the
    /// OpenAI-compatible door); only the `local` runner takes them.
    #[serde(skip)]
    pub caller_rounds: Vec<CallerRound>,
    /// Executes the model's tool calls.
    #[serde(skip)]
    pub tool_executor: Option<Arc<dyn ToolExecutor>>,
    /// The model.
    pub model: ModelProfile,
    /// Every resource read of the turn (including those left out, refused or failed),
    /// from the trace, for runners that report on them.
    pub reads: Vec<ReadRecord>,
    /// The turn's fence: runners that render resource text for a model put it inside
    /// this fence ([`crate::fence`]). Not serialized: a remote agent gets the blocks as
    /// data and fences them itself.
    #[serde(skip)]
    pub fence: crate::fence::Fence,
    /// When the run must end: the `hostpipe_engine::layer::Timeout` a pipeline
    /// puts its runner under stops it then with [`RunError::Timeout`]. `None`: no
    /// deadline but the runner's own.
    #[serde(skip)]
    pub deadline: Option<std::time::Instant>,
}

impl RunRequest {
    /// Moves the turn's prepared parts into a request.
    pub fn from_turn(turn: &mut Turn) -> Self {
        Self {
            ids: turn.ids.clone(),
            system_prompt: turn.system_prompt.clone(),
            history: std::mem::take(&mut turn.history),
            message: turn.message.clone(),
            variables: turn.variables.clone(),
            sender: turn.sender.clone(),
            context: std::mem::take(&mut turn.context),
            context_budget: turn.context_budget,
            tools: {
                let mut tools = std::mem::take(&mut turn.tools);
                tools.append(&mut turn.caller_tools);
                tools
            },
            caller_rounds: std::mem::take(&mut turn.caller_rounds),
            tool_executor: turn.tool_executor.clone(),
            model: (*turn.model).clone(),
            reads: turn.trace.reads().cloned().collect(),
            fence: turn.fence.clone(),
            deadline: None,
        }
    }

    /// Tokens of all text context blocks as injected.
    pub fn context_tokens(&self) -> usize {
        self.context.iter().map(|b| b.tokens_after).sum()
    }
}

/// Token usage reported by a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
}

/// What a runner reports while it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// A piece of the answer.
    MessageDelta {
        /// The text piece.
        text: String,
    },
    /// The model called a tool.
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name as offered.
        name: String,
        /// Arguments.
        arguments: serde_json::Value,
    },
    /// A tool call finished.
    ToolCallFinished {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// The whole answer.
    MessageCompleted {
        /// The text.
        text: String,
    },
    /// The run finished.
    RunCompleted {
        /// Usage, if the backend reports it.
        usage: Option<TokenUsage>,
    },
    /// The run failed.
    RunFailed {
        /// The error.
        error: String,
    },
}

/// Where a runner sends its events. Cloneable; sending never fails from the runner's
/// point of view (events for a receiver that went away are dropped).
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<RunEvent>,
    /// Set once a [`RunEvent::RunFailed`] went through any clone of this sink.
    failure_reported: Arc<AtomicBool>,
}

impl EventSink {
    /// A sink and its receiver, holding up to `capacity` unread events (at least 1).
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<RunEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let failure_reported = Arc::new(AtomicBool::new(false));
        (
            Self {
                tx,
                failure_reported,
            },
            rx,
        )
    }

    /// Whether a [`RunEvent::RunFailed`] was emitted through this sink (or a clone):
    /// `hostpipe_engine::layer::ReportFailure` then adds none.
    pub fn failure_reported(&self) -> bool {
        self.failure_reported.load(Ordering::Relaxed)
    }

    /// Sends one event, waiting while the receiver is `capacity` events behind.
    /// Cancel-safe.
    pub async fn emit(&self, event: RunEvent) {
        if matches!(event, RunEvent::RunFailed { .. }) {
            self.failure_reported.store(true, Ordering::Relaxed);
        }
        // A closed receiver means nobody listens any more; the runner just goes on.
        let _ = self.tx.send(event).await;
    }
}

/// Runs a prepared turn against some model backend.
#[async_trait]
pub trait Runner: Send + Sync {
    /// Runs `request`, reporting progress to `events`. A successful run ends with
    /// [`RunEvent::MessageCompleted`] and [`RunEvent::RunCompleted`].
    ///
    /// # Errors
    /// [`RunError`] when the run cannot complete.
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError>;
}

#[async_trait]
impl<R: Runner + ?Sized> Runner for Box<R> {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        (**self).run(request, events).await
    }
}

#[async_trait]
impl<R: Runner + ?Sized> Runner for &R {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        (**self).run(request, events).await
    }
}

/// The collected result of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReply {
    /// The final message (the last `MessageCompleted`, else the joined deltas).
    pub text: String,
    /// Usage, if reported.
    pub usage: Option<TokenUsage>,
    /// Every event, in order.
    pub events: Vec<RunEvent>,
}

/// Runs `runner` and collects its events into a [`RunReply`].
///
/// # Errors
/// The runner's [`RunError`].
pub async fn collect_reply(
    runner: &dyn Runner,
    request: &RunRequest,
) -> Result<RunReply, RunError> {
    collect_reply_tapped(runner, request, None).await
}

/// [`collect_reply`], also sending a copy of every event to `tap` as it comes (a
/// service streams them to its caller). A tap that stops listening is ignored; a slow
/// one slows the runner down (back-pressure), it loses nothing.
///
/// # Errors
/// The runner's [`RunError`].
pub async fn collect_reply_tapped(
    runner: &dyn Runner,
    request: &RunRequest,
    tap: Option<&EventSink>,
) -> Result<RunReply, RunError> {
    let (sink, mut rx) = EventSink::channel(64);
    let run = async move {
        let result = runner.run(request, &sink).await;
        drop(sink);
        result
    };
    let collect = async {
        let mut reply = RunReply::default();
        let mut deltas = String::new();
        let mut completed = None;
        while let Some(event) = rx.recv().await {
            match &event {
                RunEvent::MessageDelta { text } => deltas.push_str(text),
                RunEvent::MessageCompleted { text } => completed = Some(text.clone()),
                RunEvent::RunCompleted { usage } => reply.usage = *usage,
                _ => {}
            }
            if let Some(tap) = tap {
                tap.emit(event.clone()).await;
            }
            reply.events.push(event);
        }
        reply.text = completed.unwrap_or(deltas);
        reply
    };
    let (result, reply) = tokio::join!(run, collect);
    result.map(|()| reply)
}
