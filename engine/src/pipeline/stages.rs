//! Running the stages in order, each under a panic guard, into a request or an ended
//! turn.

use std::time::Instant;

use futures_util::FutureExt as _;
use hostpipe_core::{MessageKey, RunRequest, StageOutcome, StageOutcomeKind, TraceEvent, Turn};
use tracing::Instrument as _;

use super::{Pipeline, Prepared, TurnOutcome, TurnStatus};

impl Pipeline {
    /// Runs the stages over `turn`; the trace is taken out of it, the ids stay.
    pub(super) async fn run_stages(&self, turn: &mut Turn) -> Prepared {
        for s in &self.stages {
            let started = Instant::now();
            turn.trace.record(TraceEvent::StageStarted {
                stage: s.name.clone(),
            });
            // A stage that panics (a plugin's bug, a library's) ends this turn with an
            // error, not the platform's worker.
            let span = super::spans::stage(&s.name);
            let result =
                match std::panic::AssertUnwindSafe(s.stage.process(turn).instrument(span.clone()))
                    .catch_unwind()
                    .await
                {
                    Ok(result) => result,
                    Err(panic) => Err(hostpipe_core::StageError::msg(format!(
                        "it panicked: {}",
                        crate::layer::panic_message(panic.as_ref())
                    ))),
                };
            let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let (outcome, end) = match result {
                Ok(StageOutcome::Continue) => (StageOutcomeKind::Continue, None),
                Ok(StageOutcome::Reply(text)) => {
                    (StageOutcomeKind::Reply, Some((text, TurnStatus::Ended)))
                }
                Err(e) => {
                    turn.trace.warn(format!("stage `{}` failed: {e}", s.name));
                    tracing::warn!(
                        turn_id = turn.trace.turn_id(), pipeline = %self.id, stage = %s.name,
                        error = %e, "a stage failed; the user was told so, with the turn id"
                    );
                    // The error stays in the trace: it may quote internals.
                    let text = turn.messages.render(
                        MessageKey::StageFailed,
                        &[("stage", &s.name), ("turn", turn.trace.turn_id())],
                    );
                    (
                        StageOutcomeKind::Error,
                        Some((text, TurnStatus::StageFailed)),
                    )
                }
            };
            super::spans::stage_ended(&span, outcome);
            turn.trace.record(TraceEvent::StageFinished {
                stage: s.name.clone(),
                outcome,
                elapsed_ms,
            });
            if let Some((reply, status)) = end {
                return Prepared::Ended(TurnOutcome {
                    reply,
                    ended_by: Some(s.name.clone()),
                    request: None,
                    run: None,
                    status,
                    runner_failure: None,
                    trace: std::mem::take(&mut turn.trace),
                });
            }
        }
        let request = RunRequest::from_turn(turn);
        Prepared::Request(request, std::mem::take(&mut turn.trace))
    }
}
