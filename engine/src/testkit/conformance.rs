//! The runner contract ([`Runner::run`]), checked on any
//! runner: the built-in ones pass these checks in hostpipe's tests, and a third-party
//! runner should too.
//!
//! Give each check a runner set up for the case (a backend that answers, one that
//! fails, one that never answers); they return the first broken expectation.

use std::time::Duration;

use hostpipe_core::{EventSink, RunError, RunEvent, RunRequest, Runner, collect_reply};

use crate::layer::ReportFailure;

/// A run that succeeds: it ends with `message_completed` (the whole answer, `text`) then
/// `run_completed`; before them come only deltas and tool call pairs; nothing after.
///
/// # Errors
/// What broke the contract, naming `name`.
pub async fn check_success(
    name: &str,
    runner: &dyn Runner,
    request: &RunRequest,
    text: &str,
) -> Result<(), String> {
    let reply = collect_reply(runner, request)
        .await
        .map_err(|e| format!("{name}: the run failed: {e}"))?;
    if reply.text != text {
        return Err(format!("{name}: answered {:?}, want {text:?}", reply.text));
    }
    let events = &reply.events;
    let n = events.len();
    let ends_right = n >= 2
        && matches!(&events[n - 2], RunEvent::MessageCompleted { text: t } if t == text)
        && matches!(events[n - 1], RunEvent::RunCompleted { .. });
    let middle_right = events[..n.saturating_sub(2)].iter().all(|e| {
        matches!(
            e,
            RunEvent::MessageDelta { .. }
                | RunEvent::ToolCallStarted { .. }
                | RunEvent::ToolCallFinished { .. }
        )
    });
    if ends_right && middle_right {
        Ok(())
    } else {
        Err(format!(
            "{name}: a successful run's events must be deltas and tool calls, then message_completed, then run_completed: {events:?}"
        ))
    }
}

/// A run whose backend fails: a typed error that `is_expected` accepts, and, under the
/// pipeline's [`ReportFailure`] layer, `run_failed` as the last event.
///
/// # Errors
/// What broke the contract, naming `name`.
pub async fn check_failure(
    name: &str,
    runner: &dyn Runner,
    request: &RunRequest,
    is_expected: impl Fn(&RunError) -> bool,
) -> Result<(), String> {
    let layered = ReportFailure::new(runner);
    let (sink, mut rx) = EventSink::channel(64);
    let result = layered.run(request, &sink).await;
    drop(sink);
    let mut last = None;
    while let Some(e) = rx.recv().await {
        last = Some(e);
    }
    match result {
        Ok(()) => Err(format!("{name}: the run succeeded; want a failure")),
        Err(e) if !is_expected(&e) => Err(format!("{name}: unexpected error {e:?}")),
        Err(_) if !matches!(last, Some(RunEvent::RunFailed { .. })) => Err(format!(
            "{name}: the last event of a failed run is {last:?}, not run_failed"
        )),
        Err(_) => Ok(()),
    }
}

/// A run whose backend never answers stops when the caller drops it: `collect_reply`
/// under a 200 ms timeout returns at once, and nothing of the run goes on.
///
/// # Errors
/// When the run ended by itself instead (it must not answer), naming `name`.
pub async fn check_cancellation(
    name: &str,
    runner: &dyn Runner,
    request: &RunRequest,
) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_millis(200), collect_reply(runner, request)).await {
        Err(_) => Ok(()),
        Ok(r) => Err(format!(
            "{name}: a backend that never answers ended the run: {r:?}"
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testkit::{Script, ScriptedRunner};

    fn request() -> RunRequest {
        RunRequest::from_turn(&mut hostpipe_core::Turn::new("p", "hi"))
    }

    #[tokio::test]
    async fn the_scripted_runner_keeps_the_contract_and_a_broken_one_is_caught() {
        let ok = ScriptedRunner::answering("All good.");
        check_success("scripted", &ok, &request(), "All good.")
            .await
            .unwrap();
        assert_eq!(ok.requests().len(), 1);
        let failing = ScriptedRunner::new(Script::Fail("boom".into()));
        check_failure("scripted", &failing, &request(), |e| {
            matches!(e, RunError::Backend { .. })
        })
        .await
        .unwrap();
        let slow = ScriptedRunner::new(Script::Slow(Duration::from_secs(30), "late".into()));
        check_cancellation("scripted", &slow, &request())
            .await
            .unwrap();
        // A check that cannot fail is no check.
        let err = check_success("scripted", &ok, &request(), "Something else.")
            .await
            .unwrap_err();
        assert!(err.contains("want \"Something else.\""), "{err}");
        let err = check_cancellation("scripted", &ok, &request())
            .await
            .unwrap_err();
        assert!(err.contains("never answers"), "{err}");
    }
}
