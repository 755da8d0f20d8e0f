//! The `tracing` spans of a turn, exported as OpenTelemetry spans when the binary
//! exports traces (target `hostpipe::span`; docs/observability.md has the tree):
//!
//! ```text
//! turn {pipeline}                 hostpipe.pipeline.id, hostpipe.turn.id,
//! │                               gen_ai.conversation.id, hostpipe.turn.status
//! ├── stage {stage}               hostpipe.stage.name, hostpipe.stage.outcome
//! │   └── (the MCP requests the stage makes: resources/read, …)
//! └── run {runner}                hostpipe.runner.name
//!     └── (the runner's spans: chat {model}, execute_tool {tool}, …)
//! ```
//!
//! A failed turn, stage or run has status error and `error.type` (semantic
//! conventions, "Recording errors"): the [`TurnStatus`], the stage outcome, or the
//! kind of [`RunError`]; never an error message, which may quote the upstream.
//!
//! A disabled span (no export, and not in the log) costs no formatting: names are
//! recorded only on enabled spans.

use hostpipe_core::{RunError, StageOutcomeKind, Turn};
use tracing::Span;
use tracing::field::Empty;

use super::TurnOutcome;

/// The span of `turn`, named `turn {pipeline}`.
pub(super) fn turn(turn: &Turn) -> Span {
    let span = tracing::info_span!(
        target: "hostpipe::span",
        "turn",
        otel.name = Empty,
        otel.status_code = Empty,
        "hostpipe.pipeline.id" = turn.ids.pipeline.as_str(),
        "hostpipe.turn.id" = turn.trace.turn_id(),
        "gen_ai.conversation.id" = turn.ids.conversation.as_deref(),
        "hostpipe.turn.status" = Empty,
        "error.type" = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("turn {}", turn.ids.pipeline));
    }
    span
}

/// Records how the turn ended on its span.
pub(super) fn turn_ended(span: &Span, outcome: &TurnOutcome) {
    span.record("hostpipe.turn.status", outcome.status.as_str());
    if outcome.status.is_failure() {
        failed(span, outcome.status.as_str());
    }
}

/// The span of one stage's `process`, named `stage {name}`.
pub(super) fn stage(name: &str) -> Span {
    let span = tracing::info_span!(
        target: "hostpipe::span",
        "stage",
        otel.name = Empty,
        otel.status_code = Empty,
        "hostpipe.stage.name" = name,
        "hostpipe.stage.outcome" = Empty,
        "error.type" = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("stage {name}"));
    }
    span
}

/// Records the stage's outcome on its span.
pub(super) fn stage_ended(span: &Span, outcome: StageOutcomeKind) {
    span.record("hostpipe.stage.outcome", outcome.as_str());
    if outcome == StageOutcomeKind::Error {
        failed(span, "stage_failed");
    }
}

/// The span of the runner's run, named `run {runner}`.
pub(super) fn run(runner: &str) -> Span {
    let span = tracing::info_span!(
        target: "hostpipe::span",
        "run",
        otel.name = Empty,
        otel.status_code = Empty,
        "hostpipe.runner.name" = runner,
        "error.type" = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("run {runner}"));
    }
    span
}

/// Records the run's failure, if it failed, on its span.
pub(super) fn run_ended(span: &Span, error: Option<&RunError>) {
    if let Some(e) = error {
        failed(span, run_error_type(e));
    }
}

/// The low-cardinality kind of a runner's error, for `error.type`.
fn run_error_type(e: &RunError) -> &'static str {
    match e {
        RunError::Unsupported(_) => "unsupported",
        RunError::Backend { .. } => "backend",
        RunError::Timeout(_) => "timeout",
        RunError::Auth { .. } => "auth",
        RunError::RateLimited { .. } => "rate_limited",
        RunError::ContextTooLong { .. } => "context_too_long",
        RunError::Server { .. } => "server",
        _ => "_OTHER",
    }
}

/// Status error, with `error.type`.
fn failed(span: &Span, error_type: &'static str) {
    span.record("otel.status_code", "error");
    span.record("error.type", error_type);
}

#[cfg(test)]
mod tests {
    use super::super::TurnStatus;
    use super::*;

    #[test]
    fn run_errors_have_a_low_cardinality_type() {
        assert_eq!(run_error_type(&RunError::backend("x: y")), "backend");
        assert_eq!(
            run_error_type(&RunError::Server {
                status: 502,
                message: "bad gateway".into()
            }),
            "server"
        );
        assert_eq!(
            run_error_type(&RunError::Timeout(std::time::Duration::from_secs(1))),
            "timeout"
        );
    }

    #[test]
    fn turn_statuses_read_as_they_serialize() {
        for status in [
            TurnStatus::Completed,
            TurnStatus::Ended,
            TurnStatus::StageFailed,
            TurnStatus::RunnerFailed,
            TurnStatus::TimedOut,
        ] {
            assert_eq!(
                serde_json::to_value(status).unwrap_or_default(),
                serde_json::Value::String(status.as_str().to_owned())
            );
        }
    }
}
