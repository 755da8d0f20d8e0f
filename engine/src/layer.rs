//! Runner layers in the style of tower's middleware: each wraps a [`Runner`] and adds one
//! duty, so that no runner carries it inline. A [`Pipeline`](crate::Pipeline) puts every
//! runner it ends in under all three:
//!
//! ```text
//! Timeout<ReportFailure<CatchPanic<R>>>
//! ```
//!
//! so that a panic is reported like any failure, while a run stopped at the deadline
//! reports nothing more: the turn's end is the caller's to tell (`hostpipe serve` ends
//! the stream with its `turn_timeout` error).
//!
//! - [`Timeout`]: the run ends with [`RunError::Timeout`] at the request's
//!   [`RunRequest::deadline`] or after its own limit, whichever comes first;
//! - [`ReportFailure`]: a failed run's last event is [`RunEvent::RunFailed`], exactly
//!   once (the runner contract's end on failure, [`Runner::run`]);
//! - [`CatchPanic`]: a runner that panics (a plugin's bug, a library's) fails the run with
//!   [`RunError::Backend`] instead of unwinding into the platform's worker.
//!
//! Each is a runner itself, so they nest in any order, and third-party runners can be
//! wrapped the same way:
//!
//! ```
//! use std::time::Duration;
//! use hostpipe_engine::layer::{CatchPanic, ReportFailure, Timeout};
//! use hostpipe_core::{EventSink, RunError, RunRequest, Runner};
//!
//! struct Echo;
//! #[async_trait::async_trait]
//! impl Runner for Echo {
//!     async fn run(&self, _: &RunRequest, _: &EventSink) -> Result<(), RunError> {
//!         Ok(())
//!     }
//! }
//!
//! let layered = Timeout::new(
//!     ReportFailure::new(CatchPanic::new(Echo)),
//!     Some(Duration::from_secs(60)),
//! );
//! # let _: &dyn Runner = &layered;
//! ```

use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use tokio::time::Instant;

use hostpipe_core::RunError;
use hostpipe_core::run::{EventSink, RunEvent, RunRequest, Runner};

/// Ends the inner run with [`RunError::Timeout`] at the request's deadline
/// ([`RunRequest::deadline`]) or `limit` after it starts, whichever comes first (neither:
/// no limit). The error carries how long the run had, in milliseconds when displayed.
#[derive(Debug, Clone)]
pub struct Timeout<R> {
    inner: R,
    limit: Option<Duration>,
}

impl<R> Timeout<R> {
    /// `inner`, bounded by `limit` besides the request's deadline.
    pub fn new(inner: R, limit: Option<Duration>) -> Self {
        Self { inner, limit }
    }
}

#[async_trait]
impl<R: Runner> Runner for Timeout<R> {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let started = Instant::now();
        let own = self.limit.map(|l| started + l);
        let deadline = match (request.deadline.map(Instant::from_std), own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(deadline) = deadline else {
            return self.inner.run(request, events).await;
        };
        match tokio::time::timeout_at(deadline, self.inner.run(request, events)).await {
            Ok(result) => result,
            Err(_) => Err(RunError::Timeout(
                deadline.saturating_duration_since(started),
            )),
        }
    }
}

/// Emits [`RunEvent::RunFailed`] with the error's text when the inner run fails and has
/// not reported the failure itself ([`EventSink::failure_reported`]), then returns the
/// error.
#[derive(Debug, Clone)]
pub struct ReportFailure<R> {
    inner: R,
}

impl<R> ReportFailure<R> {
    /// `inner`, reporting its failures.
    pub fn new(inner: R) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl<R: Runner> Runner for ReportFailure<R> {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let result = self.inner.run(request, events).await;
        if let Err(e) = &result
            && !events.failure_reported()
        {
            events
                .emit(RunEvent::RunFailed {
                    error: e.to_string(),
                })
                .await;
        }
        result
    }
}

/// Fails the run with [`RunError::Backend`] ("the runner panicked: …") when the inner
/// runner panics.
#[derive(Debug, Clone)]
pub struct CatchPanic<R> {
    inner: R,
}

impl<R> CatchPanic<R> {
    /// `inner`, its panics caught.
    pub fn new(inner: R) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl<R: Runner> Runner for CatchPanic<R> {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        match std::panic::AssertUnwindSafe(self.inner.run(request, events))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(panic) => Err(RunError::backend(format!(
                "the runner panicked: {}",
                panic_message(panic.as_ref())
            ))),
        }
    }
}

/// The text of a panic payload (`panic!("…")` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use hostpipe_core::run::collect_reply;

    enum Behaviour {
        Sleep(Duration),
        Fail { report: bool },
        Panic,
    }

    struct Scripted(Behaviour);

    #[async_trait]
    impl Runner for Scripted {
        async fn run(&self, _: &RunRequest, events: &EventSink) -> Result<(), RunError> {
            match &self.0 {
                Behaviour::Sleep(d) => {
                    tokio::time::sleep(*d).await;
                    events
                        .emit(RunEvent::MessageCompleted {
                            text: "done".into(),
                        })
                        .await;
                    Ok(())
                }
                Behaviour::Fail { report } => {
                    if *report {
                        events
                            .emit(RunEvent::RunFailed {
                                error: "its own words".into(),
                            })
                            .await;
                    }
                    Err(RunError::backend("boom"))
                }
                Behaviour::Panic => panic!("index out of range"),
            }
        }
    }

    fn request() -> RunRequest {
        let mut turn = hostpipe_core::Turn::new("p", "hi");
        RunRequest::from_turn(&mut turn)
    }

    fn failures(reply: &[RunEvent]) -> Vec<&str> {
        reply
            .iter()
            .filter_map(|e| match e {
                RunEvent::RunFailed { error } => Some(error.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_takes_the_earlier_of_its_limit_and_the_requests_deadline() {
        let slow = || Scripted(Behaviour::Sleep(Duration::from_secs(10)));
        let err = collect_reply(
            &Timeout::new(slow(), Some(Duration::from_secs(2))),
            &request(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, RunError::Timeout(d) if d == Duration::from_secs(2)),
            "{err}"
        );

        let mut req = request();
        req.deadline = Some(std::time::Instant::now() + Duration::from_secs(1));
        let err = collect_reply(&Timeout::new(slow(), Some(Duration::from_secs(5))), &req)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RunError::Timeout(d) if d <= Duration::from_secs(1)),
            "{err}"
        );

        let reply = collect_reply(&Timeout::new(slow(), None), &request())
            .await
            .unwrap();
        assert_eq!(reply.text, "done");
    }

    #[tokio::test]
    async fn report_failure_ends_a_failed_run_with_one_run_failed() {
        let (sink, mut rx) = EventSink::channel(8);
        let quiet = ReportFailure::new(Scripted(Behaviour::Fail { report: false }));
        assert!(quiet.run(&request(), &sink).await.is_err());
        let (sink2, mut rx2) = EventSink::channel(8);
        let loud = ReportFailure::new(Scripted(Behaviour::Fail { report: true }));
        assert!(loud.run(&request(), &sink2).await.is_err());
        drop((sink, sink2));
        let mut quiet_events = Vec::new();
        while let Some(e) = rx.recv().await {
            quiet_events.push(e);
        }
        let mut loud_events = Vec::new();
        while let Some(e) = rx2.recv().await {
            loud_events.push(e);
        }
        assert_eq!(failures(&quiet_events), ["runner backend failed: boom"]);
        assert_eq!(failures(&loud_events), ["its own words"], "not twice");
    }

    #[tokio::test]
    async fn catch_panic_turns_a_panic_into_a_backend_error() {
        let layered = ReportFailure::new(CatchPanic::new(Scripted(Behaviour::Panic)));
        let (sink, mut rx) = EventSink::channel(8);
        let err = layered.run(&request(), &sink).await.unwrap_err();
        drop(sink);
        let text = "runner backend failed: the runner panicked: index out of range";
        assert_eq!(err.to_string(), text);
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        assert_eq!(failures(&events), [text]);
    }
}
