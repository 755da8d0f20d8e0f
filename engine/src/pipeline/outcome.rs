//! What a turn, or a tool call made through a pipeline, came to.

use hostpipe_core::{RunReply, RunRequest, Trace};
use serde::Serialize;

/// How a turn ended.
#[derive(Debug, Serialize)]
pub struct TurnOutcome {
    /// The answer for the user: the runner's reply, or the reply of the stage that ended
    /// the turn, or an error message.
    pub reply: String,
    /// The stage that ended the turn early, if one did.
    pub ended_by: Option<String>,
    /// The request the runner got (absent when a stage ended the turn).
    pub request: Option<RunRequest>,
    /// The runner's collected events (absent when it did not run or failed).
    pub run: Option<RunReply>,
    /// How the turn ended.
    pub status: TurnStatus,
    /// What kind of failure the runner's was, when it failed
    /// ([`TurnStatus::RunnerFailed`]): a door answers a rate limit or a request too
    /// long for the model with its own status, not a generic one.
    #[serde(skip)]
    pub runner_failure: Option<RunnerFailure>,
    /// Everything that happened.
    pub trace: Trace,
}

/// The kind of a runner's [`RunError`](hostpipe_core::RunError), kept for the doors
/// (its text is in [`TurnOutcome::reply`] and the trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunnerFailure {
    /// The backend kept answering HTTP 429; what it asked to wait, if it said.
    RateLimited {
        /// `Retry-After`.
        retry_after: Option<std::time::Duration>,
    },
    /// The request is longer than the model's context window.
    ContextTooLong,
    /// The backend refused the runner's credentials (the operator's, not the caller's).
    Auth,
    /// The runner cannot express the request.
    Unsupported,
    /// The backend's own timeout.
    Timeout,
    /// Anything else: the backend failed, or the runner did.
    Other,
}

impl RunnerFailure {
    /// The kind of `e`.
    pub fn of(e: &hostpipe_core::RunError) -> Self {
        use hostpipe_core::RunError;
        match e {
            RunError::RateLimited { retry_after, .. } => Self::RateLimited {
                retry_after: *retry_after,
            },
            RunError::ContextTooLong { .. } => Self::ContextTooLong,
            RunError::Auth { .. } => Self::Auth,
            RunError::Unsupported(_) => Self::Unsupported,
            RunError::Timeout(_) => Self::Timeout,
            _ => Self::Other,
        }
    }
}

/// How a turn ended: [`TurnOutcome::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The runner answered.
    Completed,
    /// A stage answered instead of the runner (a prompt command that lacks an argument,
    /// a required server that is down): [`TurnOutcome::ended_by`] names it.
    Ended,
    /// A stage failed (returned an error or panicked).
    StageFailed,
    /// The runner failed.
    RunnerFailed,
    /// The runner was still running at the turn's deadline.
    TimedOut,
}

impl TurnStatus {
    /// `completed`, `ended`, `stage_failed`, `runner_failed` or `timed_out`: the
    /// serialized form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Ended => "ended",
            Self::StageFailed => "stage_failed",
            Self::RunnerFailed => "runner_failed",
            Self::TimedOut => "timed_out",
        }
    }

    /// Whether the turn failed: a stage or the runner failed, or the time ran out.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::StageFailed | Self::RunnerFailed | Self::TimedOut
        )
    }
}

impl TurnOutcome {
    /// Whether the turn failed ([`TurnStatus::is_failure`]).
    pub fn failed(&self) -> bool {
        self.status.is_failure()
    }
}

/// What [`Pipeline::call_tool`](super::Pipeline::call_tool) did.
#[derive(Debug)]
pub struct ToolCallOutcome {
    /// The name the tool is offered under in the pipeline's turns (`server__tool`), if
    /// it is offered.
    pub name: Option<String>,
    /// The tool's result (a withheld call is `Ok`, with `is_error` and a note saying so),
    /// or why the call was not made.
    pub result: Result<hostpipe_core::source::ToolCallResult, hostpipe_core::ToolError>,
    /// The stages' records and the call's.
    pub trace: Trace,
}

/// What [`Pipeline::prepare`](super::Pipeline::prepare) produced.
#[derive(Debug)]
pub enum Prepared {
    /// The stages ran to the end; the runner gets this request.
    Request(RunRequest, Trace),
    /// A stage ended the turn.
    Ended(TurnOutcome),
}

/// What [`Pipeline::read_for_caller`](super::Pipeline::read_for_caller) did.
#[derive(Debug)]
pub struct CallerReadOutcome {
    /// What the caller gets (a withheld read is `Ok`, with the note saying so), or why
    /// the read was not made.
    pub result: Result<hostpipe_core::CallerRead, hostpipe_core::ToolError>,
    /// The stages' records and the read's.
    pub trace: Trace,
}
