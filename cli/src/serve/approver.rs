//! Consent questions (`ask`) answered over HTTP.
//!
//! When a pipeline's consent policy says `ask`, [`HttpApprover`] files the question as a
//! pending consent request with its own id. The caller of the turn sees it as a
//! `consent_request` server-sent event (when it streams the turn) and in
//! `GET /v1/consent-requests` (always), and answers with
//! `POST /v1/consent-requests/{id}`. The consent gate stops waiting after the policy's
//! `ask_timeout_ms` and denies; the request is then no longer pending.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use hostpipe_core::ConsentRequest;
use hostpipe_engine::{Approver, ConsentAnswer};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::TurnEvent;

/// A question waiting for its answer, as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingConsent {
    /// The id to answer with (`POST /v1/consent-requests/{id}`).
    pub id: String,
    /// When it was asked, Unix milliseconds.
    pub asked_at_ms: i64,
    /// The read and who wants it.
    #[serde(flatten)]
    pub request: ConsentRequest,
}

struct Waiting {
    shown: PendingConsent,
    answer: oneshot::Sender<ConsentAnswer>,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerError {
    /// No question with that id is waiting: never asked, already answered, or the gate
    /// stopped waiting (a denial).
    NotPending,
}

#[derive(Default)]
struct Inner {
    waiting: HashMap<String, Waiting>,
    /// The event streams of running turns, by turn id.
    streams: HashMap<String, mpsc::Sender<TurnEvent>>,
}

/// The [`Approver`] of `hostpipe serve` (see the module docs). Cheap to clone.
#[derive(Clone, Default)]
pub struct HttpApprover {
    inner: Arc<Mutex<Inner>>,
}

impl HttpApprover {
    /// An approver with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every critical section leaves the maps consistent; a panic elsewhere does not
        // make them unusable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends this turn's questions to `events` too, until [`HttpApprover::unwatch`].
    pub(super) fn watch(&self, turn_id: &str, events: mpsc::Sender<TurnEvent>) {
        self.lock().streams.insert(turn_id.to_owned(), events);
    }

    /// Stops sending `turn_id`'s questions to its stream.
    pub(super) fn unwatch(&self, turn_id: &str) {
        self.lock().streams.remove(turn_id);
    }

    /// The questions waiting, oldest first; only those of `turn_id` when given.
    pub fn pending(&self, turn_id: Option<&str>) -> Vec<PendingConsent> {
        let mut out: Vec<PendingConsent> = self
            .lock()
            .waiting
            .values()
            .filter(|w| turn_id.is_none_or(|t| w.shown.request.turn_id == t))
            .map(|w| w.shown.clone())
            .collect();
        out.sort_by(|a, b| (a.asked_at_ms, &a.id).cmp(&(b.asked_at_ms, &b.id)));
        out
    }

    /// How many questions are waiting.
    pub fn pending_count(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Answers the question `id`.
    ///
    /// # Errors
    /// [`AnswerError::NotPending`] when no such question is waiting.
    pub fn answer(&self, id: &str, answer: ConsentAnswer) -> Result<(), AnswerError> {
        let waiting = self
            .lock()
            .waiting
            .remove(id)
            .ok_or(AnswerError::NotPending)?;
        // The gate may have stopped waiting between the two lines; then it denied.
        waiting
            .answer
            .send(answer)
            .map_err(|_| AnswerError::NotPending)
    }
}

/// Removes a question when its asker stops waiting (answered, timed out, turn dropped).
struct Withdraw<'a> {
    approver: &'a HttpApprover,
    id: String,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.approver.lock().waiting.remove(&self.id);
    }
}

#[async_trait]
impl Approver for HttpApprover {
    async fn approve(&self, request: &ConsentRequest) -> ConsentAnswer {
        let (tx, rx) = oneshot::channel();
        let shown = PendingConsent {
            id: uuid::Uuid::new_v4().to_string(),
            asked_at_ms: hostpipe_engine::store::unix_ms_now(),
            request: request.clone(),
        };
        let _withdraw = Withdraw {
            approver: self,
            id: shown.id.clone(),
        };
        let stream = {
            let mut inner = self.lock();
            inner.waiting.insert(
                shown.id.clone(),
                Waiting {
                    shown: shown.clone(),
                    answer: tx,
                },
            );
            inner.streams.get(&request.turn_id).cloned()
        };
        tracing::info!(
            id = %shown.id, turn_id = %request.turn_id, server = %request.server,
            uri = %request.uri, "consent request pending"
        );
        if let Some(stream) = stream {
            // A caller that stopped reading can still answer through the endpoint.
            let _ = stream.send(TurnEvent::ConsentRequest(shown)).await;
        }
        // A dropped sender (never answered) is a denial.
        rx.await.unwrap_or(ConsentAnswer::Deny)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use hostpipe_core::ReadOrigin;

    use super::*;

    fn request(turn: &str) -> ConsentRequest {
        ConsentRequest {
            turn_id: turn.into(),
            pipeline: "default".into(),
            conversation: Some("c1".into()),
            sender: None,
            server: "kb".into(),
            uri: "kb://secret/plan".into(),
            origin: ReadOrigin::Host,
            reason: "attached at message scope".into(),
            tool: None,
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_asker_once() {
        let approver = HttpApprover::new();
        let (tx, mut rx) = mpsc::channel(4);
        approver.watch("t1", tx);
        let asking = tokio::spawn({
            let approver = approver.clone();
            async move { approver.approve(&request("t1")).await }
        });
        let Some(TurnEvent::ConsentRequest(shown)) = rx.recv().await else {
            panic!("no consent_request event");
        };
        assert_eq!(approver.pending(Some("t1")).len(), 1);
        assert!(approver.pending(Some("t2")).is_empty());
        approver
            .answer(&shown.id, ConsentAnswer::AllowConversation)
            .unwrap();
        assert_eq!(asking.await.unwrap(), ConsentAnswer::AllowConversation);
        assert_eq!(
            approver.answer(&shown.id, ConsentAnswer::Deny),
            Err(AnswerError::NotPending)
        );
        assert!(approver.pending(None).is_empty());
    }

    #[tokio::test]
    async fn a_dropped_question_is_withdrawn() {
        let approver = HttpApprover::new();
        let request = request("t1");
        let asking = approver.approve(&request);
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(20), asking).await;
        assert!(timed_out.is_err());
        assert!(approver.pending(None).is_empty(), "withdrawn on drop");
    }
}
