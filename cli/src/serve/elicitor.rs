//! MCP servers' questions (elicitation) answered over HTTP.
//!
//! When a server asks the user of a turn a question (MCP 2025-11-25
//! `client/elicitation`: a form or a URL to open), [`HttpElicitor`] files it as a
//! pending elicitation request with its own id. The caller of the turn sees it as an
//! `elicitation_request` server-sent event (when it streams the turn) and in
//! `GET /v1/elicitation-requests` (always), and answers with
//! `POST /v1/elicitation-requests/{id}` (`accept` with the form's `content`, `decline`
//! or `cancel`). Form content is checked against the requested schema before it is
//! taken: a wrong field is a 400 naming it, and the question stays pending. The
//! pipeline stops waiting after its `[pipelines.ID.elicitation] timeout_ms` and
//! declines; the request is then no longer pending.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use hostpipe_core::elicit::{ContentError, complete_content};
use hostpipe_core::{ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::TurnEvent;

/// A question waiting for its answer, as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingElicitation {
    /// The id to answer with (`POST /v1/elicitation-requests/{id}`).
    pub id: String,
    /// When it was asked, Unix milliseconds.
    pub asked_at_ms: i64,
    /// The question: server, message, and `mode` `form` (with `requested_schema`) or
    /// `url` (with `url` and its `domain`, which the user must see).
    #[serde(flatten)]
    pub request: ElicitationRequest,
}

struct Waiting {
    shown: PendingElicitation,
    answer: oneshot::Sender<ElicitationAnswer>,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// No question with that id is waiting: never asked, already answered, or the
    /// pipeline stopped waiting (a decline).
    NotPending,
    /// The content does not fit the form: the field and what is wrong with it. The
    /// question is still pending.
    Invalid(ContentError),
}

#[derive(Default)]
struct Inner {
    waiting: HashMap<String, Waiting>,
    /// The event streams of running turns, by turn id.
    streams: HashMap<String, mpsc::Sender<TurnEvent>>,
}

/// The [`Elicitor`] of `hostpipe serve` (see the module docs). Cheap to clone.
#[derive(Clone, Default)]
pub struct HttpElicitor {
    inner: Arc<Mutex<Inner>>,
}

impl HttpElicitor {
    /// An elicitor with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends this turn's questions to `events` too, until [`HttpElicitor::unwatch`].
    pub(super) fn watch(&self, turn_id: &str, events: mpsc::Sender<TurnEvent>) {
        self.lock().streams.insert(turn_id.to_owned(), events);
    }

    /// Stops sending `turn_id`'s questions to its stream.
    pub(super) fn unwatch(&self, turn_id: &str) {
        self.lock().streams.remove(turn_id);
    }

    /// The questions waiting, oldest first; only those of `turn_id` when given.
    pub fn pending(&self, turn_id: Option<&str>) -> Vec<PendingElicitation> {
        let mut out: Vec<PendingElicitation> = self
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

    /// Answers the question `id`. An `accept` of a form, with the form's defaults for
    /// the fields it leaves out, must fit its schema; an
    /// `accept` of a URL takes no content (any given is dropped).
    ///
    /// # Errors
    /// [`AnswerError::NotPending`] when no such question is waiting;
    /// [`AnswerError::Invalid`] when the content does not fit the form (the question
    /// stays pending).
    pub fn answer(&self, id: &str, answer: ElicitationAnswer) -> Result<(), AnswerError> {
        let mut inner = self.lock();
        let waiting = inner.waiting.get(id).ok_or(AnswerError::NotPending)?;
        let answer = match (answer, &waiting.shown.request.mode) {
            (ElicitationAnswer::Accept { content }, ElicitationMode::Form { requested_schema }) => {
                let content =
                    complete_content(requested_schema, content).map_err(AnswerError::Invalid)?;
                ElicitationAnswer::Accept { content }
            }
            (ElicitationAnswer::Accept { .. }, ElicitationMode::Url { .. }) => {
                ElicitationAnswer::Accept {
                    content: serde_json::Map::new(),
                }
            }
            (other, _) => other,
        };
        let waiting = inner.waiting.remove(id).ok_or(AnswerError::NotPending)?;
        drop(inner);
        // The pipeline may have stopped waiting between the two lines; then it declined.
        waiting
            .answer
            .send(answer)
            .map_err(|_| AnswerError::NotPending)
    }
}

/// Removes a question when its asker stops waiting (answered, timed out, turn dropped).
struct Withdraw<'a> {
    elicitor: &'a HttpElicitor,
    id: String,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.elicitor.lock().waiting.remove(&self.id);
    }
}

#[async_trait]
impl Elicitor for HttpElicitor {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        let (tx, rx) = oneshot::channel();
        let shown = PendingElicitation {
            id: uuid::Uuid::new_v4().to_string(),
            asked_at_ms: hostpipe_engine::store::unix_ms_now(),
            request: request.clone(),
        };
        let _withdraw = Withdraw {
            elicitor: self,
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
            mode = request.mode.as_str(), "elicitation request pending"
        );
        if let Some(stream) = stream {
            // A caller that stopped reading can still answer through the endpoint.
            let _ = stream.send(TurnEvent::ElicitationRequest(shown)).await;
        }
        // A dropped sender (never answered) is a decline.
        rx.await.unwrap_or(ElicitationAnswer::Decline)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(turn: &str) -> ElicitationRequest {
        ElicitationRequest {
            turn_id: turn.into(),
            pipeline: "default".into(),
            conversation: Some("c1".into()),
            sender: None,
            server: "s".into(),
            message: "Your name?".into(),
            mode: ElicitationMode::Form {
                requested_schema: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            },
        }
    }

    #[tokio::test]
    async fn a_valid_answer_reaches_the_asker_once_and_an_invalid_one_names_the_field() {
        let elicitor = HttpElicitor::new();
        let (tx, mut rx) = mpsc::channel(4);
        elicitor.watch("t1", tx);
        let asking = tokio::spawn({
            let elicitor = elicitor.clone();
            async move { elicitor.elicit(&request("t1")).await }
        });
        let Some(TurnEvent::ElicitationRequest(shown)) = rx.recv().await else {
            panic!("no elicitation_request event");
        };
        assert_eq!(elicitor.pending(Some("t1")).len(), 1);
        let wrong = ElicitationAnswer::Accept {
            content: json!({"name": 3}).as_object().cloned().unwrap(),
        };
        let Err(AnswerError::Invalid(e)) = elicitor.answer(&shown.id, wrong) else {
            panic!("invalid content taken");
        };
        assert_eq!(e.field, "name");
        assert_eq!(elicitor.pending(None).len(), 1, "still pending");
        let right = ElicitationAnswer::Accept {
            content: json!({"name": "Ann"}).as_object().cloned().unwrap(),
        };
        elicitor.answer(&shown.id, right.clone()).unwrap();
        assert_eq!(asking.await.unwrap(), right);
        assert_eq!(
            elicitor.answer(&shown.id, ElicitationAnswer::Decline),
            Err(AnswerError::NotPending)
        );
        assert!(elicitor.pending(None).is_empty());
    }

    #[tokio::test]
    async fn a_dropped_question_is_withdrawn() {
        let elicitor = HttpElicitor::new();
        let request = request("t1");
        let asking = elicitor.elicit(&request);
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(20), asking).await;
        assert!(timed_out.is_err());
        assert!(elicitor.pending(None).is_empty(), "withdrawn on drop");
    }
}
