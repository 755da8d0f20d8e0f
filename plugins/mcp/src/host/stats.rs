//! What the requests to one server came to, per MCP method ([`MethodStats`]): how many
//! were sent, how they ended and how long they took, counted by [`timed`](super::slot)
//! around every request. `hostpipe serve` exposes them as Prometheus metrics
//! (docs/http-api.md, "Metrics"); they live as long as the server's entry (a reload that
//! changes the entry starts them from zero, which Prometheus reads as a counter reset).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The upper bounds, in seconds, of the latency buckets of [`MethodStats::buckets`]
/// (Prometheus's default buckets, extended to the 30 s default request timeout).
pub const REQUEST_SECONDS_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// The server answered with a result.
    Ok,
    /// The server answered with an error, or the transport failed.
    Error,
    /// No answer within the request's timeout.
    Timeout,
    /// The caller stopped waiting first (its turn ended, its client went away).
    Cancelled,
}

impl RequestOutcome {
    /// `ok`, `error`, `timeout` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
        }
    }

    /// Every outcome, in the order above.
    pub const ALL: [Self; 4] = [Self::Ok, Self::Error, Self::Timeout, Self::Cancelled];
}

/// The requests of one MCP method (`resources/read`, `tools/call`, …) to one server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MethodStats {
    /// Requests sent.
    pub sent: u64,
    /// Requests ended, by [`RequestOutcome`] (indexed as [`RequestOutcome::ALL`]);
    /// `sent` minus their sum are in flight.
    pub ended: [u64; 4],
    /// Ended requests by latency: `buckets[i]` counts those that took more than
    /// `REQUEST_SECONDS_BUCKETS[i - 1]` and at most `REQUEST_SECONDS_BUCKETS[i]`
    /// seconds; the last counts those above the last bound. Not cumulative.
    pub buckets: [u64; REQUEST_SECONDS_BUCKETS.len() + 1],
    /// The ended requests' latencies added up, in seconds.
    pub seconds_sum: f64,
}

impl MethodStats {
    /// Requests that ended with `outcome`.
    pub fn ended(&self, outcome: RequestOutcome) -> u64 {
        self.ended[outcome as usize]
    }

    /// Requests ended, whatever the outcome.
    pub fn ended_total(&self) -> u64 {
        self.ended.iter().sum()
    }

    fn finish(&mut self, outcome: RequestOutcome, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        self.ended[outcome as usize] += 1;
        let bucket = REQUEST_SECONDS_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(REQUEST_SECONDS_BUCKETS.len());
        self.buckets[bucket] += 1;
        self.seconds_sum += seconds;
    }
}

/// A server's [`MethodStats`] by method, behind one lock taken twice a request.
#[derive(Debug, Default)]
pub(super) struct RequestStats(Mutex<BTreeMap<&'static str, MethodStats>>);

impl RequestStats {
    fn with(&self, method: &'static str, f: impl FnOnce(&mut MethodStats)) {
        f(self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(method)
            .or_default());
    }

    /// Counts a request of `method` sent.
    pub(super) fn sent(&self, method: &'static str) {
        self.with(method, |s| s.sent += 1);
    }

    /// Counts a request of `method` ended with `outcome` after `elapsed`.
    pub(super) fn finish(&self, method: &'static str, outcome: RequestOutcome, elapsed: Duration) {
        self.with(method, |s| s.finish(outcome, elapsed));
    }

    /// A copy of the counts.
    pub(super) fn snapshot(&self) -> BTreeMap<&'static str, MethodStats> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A request in progress: [`Ending::end`] records how it ended; dropped without that
/// (the caller stopped waiting on the request's future), it ended
/// [`RequestOutcome::Cancelled`].
pub(super) struct Ending<'a> {
    stats: &'a RequestStats,
    method: &'static str,
    started: std::time::Instant,
    ended: bool,
}

impl<'a> Ending<'a> {
    /// Counts a request of `method` sent, now.
    pub(super) fn start(stats: &'a RequestStats, method: &'static str) -> Self {
        stats.sent(method);
        Self {
            stats,
            method,
            started: std::time::Instant::now(),
            ended: false,
        }
    }

    /// Records that the request ended with `outcome`, now.
    pub(super) fn end(mut self, outcome: RequestOutcome) {
        self.ended = true;
        self.stats
            .finish(self.method, outcome, self.started.elapsed());
    }

    /// Records the end of a request bounded by `tokio::time::timeout`: `Ok`, `Error`
    /// or `Timeout` by `answered`.
    pub(super) fn end_bounded<T, E>(
        self,
        answered: &Result<Result<T, E>, tokio::time::error::Elapsed>,
    ) {
        self.end(match answered {
            Ok(Ok(_)) => RequestOutcome::Ok,
            Ok(Err(_)) => RequestOutcome::Error,
            Err(_) => RequestOutcome::Timeout,
        });
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.stats.finish(
                self.method,
                RequestOutcome::Cancelled,
                self.started.elapsed(),
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_request_lands_in_the_bucket_of_its_latency_and_a_dropped_one_is_cancelled() {
        let stats = RequestStats::default();
        stats.sent("resources/read");
        stats.finish(
            "resources/read",
            RequestOutcome::Ok,
            Duration::from_millis(7),
        );
        Ending::start(&stats, "resources/read").end(RequestOutcome::Timeout);
        drop(Ending::start(&stats, "tools/call"));
        let _in_flight = Ending::start(&stats, "tools/call");
        let snap = stats.snapshot();
        let read = &snap["resources/read"];
        assert_eq!(read.sent, 2);
        assert_eq!(read.ended(RequestOutcome::Ok), 1);
        assert_eq!(read.ended(RequestOutcome::Timeout), 1);
        // 7 ms: above 5 ms, at most 10 ms.
        assert_eq!(read.buckets[1], 1);
        assert!((read.seconds_sum - 0.007).abs() < 0.005, "{read:?}");
        let call = &snap["tools/call"];
        assert_eq!(call.sent, 2);
        assert_eq!(call.ended(RequestOutcome::Cancelled), 1);
        assert_eq!(call.ended_total(), 1);
        // Above the last bound: the last bucket.
        let mut s = MethodStats::default();
        s.finish(RequestOutcome::Ok, Duration::from_secs(31));
        assert_eq!(s.buckets[REQUEST_SECONDS_BUCKETS.len()], 1);
    }
}
