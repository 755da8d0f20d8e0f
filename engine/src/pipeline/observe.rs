//! What a pipeline tells its [`PipelineObserver`] (e.g. `hostpipe serve`'s Prometheus
//! metrics): every read and tool call once, where it goes to the history, and every
//! turn once, when it ends. Every door of a service (its `/v1/turns`, an
//! OpenAI-compatible endpoint, an MCP tool, a retrieval API) runs its turns through a
//! [`Pipeline`], so an observer sees them all from here, whatever the door.

use std::time::Duration;

use hostpipe_core::{ReadRecord, RunRequest, ToolCallRecord, Trace, TraceEvent};

use super::{Pipeline, TurnOutcome, TurnStatus};

/// How an observed turn ended: a [`TurnStatus`], or [`TurnEnd::Prepared`] for a turn
/// that only ran its stages ([`Pipeline::prepare`]: a retrieval that wants the fitted
/// context, not a model's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnEnd {
    /// The stages ran to the end and the request was handed back, no runner ran.
    Prepared,
    /// The turn ran as far as it went, with this status.
    Finished(TurnStatus),
}

impl TurnEnd {
    /// `prepared`, or the [`TurnStatus`] as it is serialized ([`TurnStatus::as_str`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prepared => "prepared",
            Self::Finished(status) => status.as_str(),
        }
    }
}

impl From<TurnStatus> for TurnEnd {
    fn from(status: TurnStatus) -> Self {
        Self::Finished(status)
    }
}

/// One finished turn, as [`PipelineObserver::turn_finished`] gets it.
#[derive(Debug, Clone, Copy)]
pub struct TurnReport<'a> {
    /// The pipeline's id.
    pub pipeline: &'a str,
    /// How it ended.
    pub end: TurnEnd,
    /// How long it took, from the pipeline taking it to its outcome.
    pub duration: Duration,
    /// The runner's own time ([`TraceEvent::RunFinished`]'s `model_ms`: the model's, for
    /// a runner that calls one); `None` when no runner ran. `duration` less this is
    /// hostpipe's own overhead.
    pub model: Option<Duration>,
    /// The request the stages built (absent when a stage ended the turn).
    pub request: Option<&'a RunRequest>,
    /// Its trace.
    pub trace: &'a Trace,
}

impl<'a> TurnReport<'a> {
    /// The report of `outcome`, a turn of `pipeline` that took `duration`.
    pub fn of(pipeline: &'a str, outcome: &'a TurnOutcome, duration: Duration) -> Self {
        let model = outcome
            .trace
            .records()
            .iter()
            .rev()
            .find_map(|r| match &r.event {
                TraceEvent::RunFinished { model_ms, .. } => Some(Duration::from_millis(*model_ms)),
                _ => None,
            });
        Self {
            pipeline,
            end: outcome.status.into(),
            duration,
            model,
            request: outcome.request.as_ref(),
            trace: &outcome.trace,
        }
    }

    /// hostpipe's own time in the turn: `duration` less `model` (all of it when no
    /// runner ran).
    pub fn overhead(&self) -> Duration {
        self.duration.saturating_sub(self.model.unwrap_or_default())
    }
}

/// Sees what a pipeline's turns did ([`Pipeline::with_observer`]). Called on the turn's
/// task once it has the records: keep each call short (count, do not wait).
pub trait PipelineObserver: Send + Sync {
    /// Resource reads of a turn, a tool call or a caller's read of `pipeline` (the
    /// stages' and the model's), each reported once.
    fn reads(&self, pipeline: &str, reads: &[&ReadRecord]);

    /// Tool calls made in a turn of `pipeline` (the model's, an agent's) or through it
    /// ([`Pipeline::call_tool`]), each reported once.
    fn tool_calls(&self, pipeline: &str, calls: &[&ToolCallRecord]);

    /// A turn ended ([`Pipeline::run_turn`] and its siblings, [`Pipeline::prepare`]);
    /// its reads and tool calls were reported before.
    fn turn_finished(&self, turn: &TurnReport<'_>);
}

impl Pipeline {
    /// Gives the pipeline an observer that sees every read, tool call and turn
    /// ([`PipelineObserver`]).
    #[must_use]
    pub fn with_observer(mut self, observer: std::sync::Arc<dyn PipelineObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Reports the reads of `trace` from the `from`-th on to the observer.
    pub(super) fn observe_reads(&self, trace: &Trace, from: usize) {
        let Some(observer) = &self.observer else {
            return;
        };
        let reads: Vec<&ReadRecord> = trace.reads().skip(from).collect();
        if !reads.is_empty() {
            observer.reads(&self.id, &reads);
        }
    }

    /// Reports the tool calls of `trace` from the `from`-th on to the observer.
    pub(super) fn observe_calls(&self, trace: &Trace, from: usize) {
        let Some(observer) = &self.observer else {
            return;
        };
        let calls: Vec<&ToolCallRecord> = trace.tool_calls().skip(from).collect();
        if !calls.is_empty() {
            observer.tool_calls(&self.id, &calls);
        }
    }

    /// Reports a finished turn to the observer; `report` is built only when there is one.
    pub(super) fn observe_turn<'a>(&self, report: impl FnOnce() -> TurnReport<'a>) {
        if let Some(observer) = &self.observer {
            observer.turn_finished(&report());
        }
    }
}
