//! [`ElicitScope`]: which turn, and so which user, an elicitation belongs to.
//!
//! A server's question carries no turn. The pipeline runs each turn inside a scope (a
//! tokio task-local, [`ElicitScope::run`]); the MCP host finds it:
//! - for a 2026-07-28 `input_required` round, in the task that made the request
//!   ([`ElicitScope::current`]): the round is driven there;
//! - for a legacy `elicitation/create`, which arrives on the session's own task, among
//!   the scopes of the requests in flight to that server: one candidate (or several of
//!   one conversation, [`ElicitScope::same_user`]) is asked; none or several users is a
//!   decline, never a question to the wrong user.
//!
//! The scope also keeps the time spent waiting for the user ([`ElicitScope::paused`]),
//! so that the request that led to the question is not timed out meanwhile.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{
    ElicitationAnswer, ElicitationMode, ElicitationRecord, ElicitationRequest, Elicitor,
    complete_content, validate_schema,
};
use crate::trace::ReadSink;
use crate::turn::Turn;

/// How a pipeline elicits (`[pipelines.ID.elicitation]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElicitationSettings {
    /// How long one question waits for the user; then it is declined. Default 120 s.
    /// The turn's deadline, when earlier, ends it sooner.
    pub timeout: Duration,
    /// Whether URL-mode questions are put to the user (else declined). Default true.
    pub url_mode: bool,
}

impl Default for ElicitationSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            url_mode: true,
        }
    }
}

tokio::task_local! {
    static SCOPE: ElicitScope;
}

/// The elicitation context of one turn: who asks the user, which user (pipeline,
/// conversation, turn), the pipeline's [`ElicitationSettings`], and where records go
/// (the turn's trace). Cheap to clone (shared).
#[derive(Clone)]
pub struct ElicitScope(Arc<Inner>);

struct Inner {
    elicitor: Arc<dyn Elicitor>,
    turn_id: String,
    pipeline: String,
    conversation: Option<String>,
    sender: Option<String>,
    settings: ElicitationSettings,
    deadline: Option<Instant>,
    sink: ReadSink,
    clock: Mutex<Clock>,
}

/// Time spent waiting for the user.
#[derive(Default)]
struct Clock {
    asking: usize,
    since: Option<Instant>,
    paused: Duration,
}

impl std::fmt::Debug for ElicitScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElicitScope")
            .field("turn_id", &self.0.turn_id)
            .field("pipeline", &self.0.pipeline)
            .field("conversation", &self.0.conversation)
            .field("settings", &self.0.settings)
            .finish_non_exhaustive()
    }
}

impl ElicitScope {
    /// The scope of `turn` (its ids, sender, deadline and trace), asking `elicitor`.
    pub fn new(elicitor: Arc<dyn Elicitor>, turn: &Turn, settings: ElicitationSettings) -> Self {
        Self(Arc::new(Inner {
            elicitor,
            turn_id: turn.trace.turn_id().to_owned(),
            pipeline: turn.ids.pipeline.clone(),
            conversation: turn.ids.conversation.clone(),
            sender: turn.sender.clone(),
            settings,
            deadline: turn.deadline,
            sink: turn.trace.read_sink(),
            clock: Mutex::default(),
        }))
    }

    /// The scope the current task runs in, if any.
    pub fn current() -> Option<Self> {
        SCOPE.try_with(Clone::clone).ok()
    }

    /// Runs `fut` in this scope (a task-local: tasks it spawns are outside it).
    pub async fn run<F: Future>(self, fut: F) -> F::Output {
        SCOPE.scope(self, fut).await
    }

    /// The turn's id.
    pub fn turn_id(&self) -> &str {
        &self.0.turn_id
    }

    /// Whether `other` asks the same user: the same turn, or the same pipeline and
    /// conversation.
    pub fn same_user(&self, other: &Self) -> bool {
        self.0.turn_id == other.0.turn_id
            || (self.0.conversation.is_some()
                && self.0.pipeline == other.0.pipeline
                && self.0.conversation == other.0.conversation)
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.0.clock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a question is waiting for the user now, and the time spent waiting so
    /// far (the open question included).
    pub fn paused(&self) -> (bool, Duration) {
        let clock = self.clock();
        let open = clock.since.map_or(Duration::ZERO, |s| s.elapsed());
        (clock.asking > 0, clock.paused + open)
    }

    /// Asks the user (MCP 2025-11-25 `client/elicitation`): `server`'s `message`, a
    /// form or a URL. Declines without asking a form the spec does not allow or, when
    /// the pipeline's `url_mode` is off, a URL; declines when no answer comes within the
    /// timeout (or by the turn's deadline), and when the answer does not fit the form.
    /// Records the outcome in the turn's trace (never the values). Cancel-safe.
    pub async fn ask(
        &self,
        server: &str,
        message: &str,
        mode: ElicitationMode,
    ) -> ElicitationAnswer {
        let started = Instant::now();
        let (answer, how) = self.decide(server, message, &mode).await;
        let fields = match &answer {
            ElicitationAnswer::Accept { content } => content.keys().cloned().collect(),
            _ => Vec::new(),
        };
        self.record(ElicitationRecord {
            server: server.to_owned(),
            mode: mode.kind(),
            domain: match &mode {
                ElicitationMode::Url { domain, .. } => Some(domain.clone()),
                ElicitationMode::Form { .. } => None,
            },
            action: answer.action(),
            fields,
            how,
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        answer
    }

    async fn decide(
        &self,
        server: &str,
        message: &str,
        mode: &ElicitationMode,
    ) -> (ElicitationAnswer, String) {
        let decline = |how: String| (ElicitationAnswer::Decline, how);
        match mode {
            ElicitationMode::Form { requested_schema } => {
                if let Err(e) = validate_schema(requested_schema) {
                    return decline(format!(
                        "the server's form is not one a user can be asked ({e}): declined"
                    ));
                }
            }
            ElicitationMode::Url { .. } if !self.0.settings.url_mode => {
                return decline("url mode is off for this pipeline: declined".into());
            }
            ElicitationMode::Url { .. } => {}
        }
        let mut wait = self.0.settings.timeout;
        if let Some(d) = self.0.deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        let request = ElicitationRequest {
            turn_id: self.0.turn_id.clone(),
            pipeline: self.0.pipeline.clone(),
            conversation: self.0.conversation.clone(),
            sender: self.0.sender.clone(),
            server: server.to_owned(),
            message: message.to_owned(),
            mode: mode.clone(),
        };
        let asked = {
            let _pause = Pause::start(self);
            tokio::time::timeout(wait, self.0.elicitor.elicit(&request)).await
        };
        match (asked, mode) {
            (Err(_), _) => decline(format!(
                "no answer within {} ms: declined",
                wait.as_millis()
            )),
            (
                Ok(ElicitationAnswer::Accept { content }),
                ElicitationMode::Form { requested_schema },
            ) => match complete_content(requested_schema, content) {
                Ok(content) => (ElicitationAnswer::Accept { content }, "answered".into()),
                Err(e) => decline(format!("the answer did not fit the form ({e}): declined")),
            },
            // URL mode: consent to open it; nothing else is sent.
            (Ok(ElicitationAnswer::Accept { .. }), ElicitationMode::Url { .. }) => (
                ElicitationAnswer::Accept {
                    content: serde_json::Map::new(),
                },
                "the user accepted to open the URL".into(),
            ),
            (Ok(other), _) => (other, "answered".into()),
        }
    }

    /// Records a question declined without asking the user (e.g. it could not be told
    /// which user it was for), in this turn's trace.
    pub fn record_unasked(&self, server: &str, mode: &ElicitationMode, how: impl Into<String>) {
        self.record(ElicitationRecord {
            server: server.to_owned(),
            mode: mode.kind(),
            domain: match mode {
                ElicitationMode::Url { domain, .. } => Some(domain.clone()),
                ElicitationMode::Form { .. } => None,
            },
            action: super::Action::Decline,
            fields: Vec::new(),
            how: how.into(),
            elapsed_ms: 0,
        });
    }

    fn record(&self, record: ElicitationRecord) {
        tracing::info!(
            turn_id = %self.0.turn_id, server = %record.server, mode = ?record.mode,
            domain = ?record.domain, action = ?record.action, how = %record.how,
            elapsed_ms = record.elapsed_ms, "elicitation"
        );
        self.0.sink.push_elicitation(record);
    }
}

/// A question open in a scope's clock, until dropped.
struct Pause<'a>(&'a ElicitScope);

impl<'a> Pause<'a> {
    fn start(scope: &'a ElicitScope) -> Self {
        let mut clock = scope.clock();
        if clock.asking == 0 {
            clock.since = Some(Instant::now());
        }
        clock.asking += 1;
        drop(clock);
        Self(scope)
    }
}

impl Drop for Pause<'_> {
    fn drop(&mut self) {
        let mut clock = self.0.clock();
        clock.asking = clock.asking.saturating_sub(1);
        if clock.asking == 0
            && let Some(since) = clock.since.take()
        {
            clock.paused += since.elapsed();
        }
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::trace::TraceEvent;

    struct Fixed(ElicitationAnswer, Duration);

    #[async_trait]
    impl Elicitor for Fixed {
        async fn elicit(&self, _request: &ElicitationRequest) -> ElicitationAnswer {
            tokio::time::sleep(self.1).await;
            self.0.clone()
        }
    }

    fn scope(
        answer: ElicitationAnswer,
        delay: Duration,
        settings: ElicitationSettings,
    ) -> (ElicitScope, Turn) {
        let mut turn = Turn::new("p", "hi");
        turn.ids.conversation = Some("c".into());
        (
            ElicitScope::new(Arc::new(Fixed(answer, delay)), &turn, settings),
            turn,
        )
    }

    fn form() -> ElicitationMode {
        ElicitationMode::Form {
            requested_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        }
    }

    fn content(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_valid_answer_is_passed_and_recorded_without_its_values() {
        let answer = ElicitationAnswer::Accept {
            content: content(json!({"n": 7})),
        };
        let (scope, mut turn) = scope(
            answer.clone(),
            Duration::ZERO,
            ElicitationSettings::default(),
        );
        assert_eq!(scope.ask("s", "n?", form()).await, answer);
        turn.trace.collect_reported();
        let record = turn.trace.records().iter().find_map(|r| match &r.event {
            TraceEvent::Elicitation(e) => Some(e.clone()),
            _ => None,
        });
        let record = record.unwrap_or_else(|| unreachable!("no record"));
        assert_eq!(
            (record.action, record.fields.clone()),
            (super::super::Action::Accept, vec!["n".to_owned()])
        );
        assert!(
            !serde_json::to_string(&record)
                .unwrap_or_default()
                .contains('7')
        );
    }

    #[tokio::test]
    async fn invalid_content_is_declined_not_sent() {
        let answer = ElicitationAnswer::Accept {
            content: content(json!({"n": "seven"})),
        };
        let (scope, _turn) = scope(answer, Duration::ZERO, ElicitationSettings::default());
        assert_eq!(
            scope.ask("s", "n?", form()).await,
            ElicitationAnswer::Decline
        );
    }

    #[tokio::test]
    async fn no_answer_in_time_declines_and_the_wait_is_on_the_clock() {
        let settings = ElicitationSettings {
            timeout: Duration::from_millis(50),
            url_mode: true,
        };
        let (scope, _turn) = scope(ElicitationAnswer::Cancel, Duration::from_secs(5), settings);
        assert_eq!(
            scope.ask("s", "n?", form()).await,
            ElicitationAnswer::Decline
        );
        let (asking, paused) = scope.paused();
        assert!(!asking);
        assert!(paused >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn url_mode_can_be_off_and_an_accepted_url_sends_nothing() {
        let url = ElicitationMode::Url {
            url: "https://a.example/x".into(),
            domain: "a.example".into(),
        };
        let answer = ElicitationAnswer::Accept {
            content: content(json!({"secret": 1})),
        };
        let off = ElicitationSettings {
            url_mode: false,
            ..ElicitationSettings::default()
        };
        let (scope_off, _t) = scope(answer.clone(), Duration::ZERO, off);
        assert_eq!(
            scope_off.ask("s", "go", url.clone()).await,
            ElicitationAnswer::Decline
        );
        let (scope_on, _t) = scope(answer, Duration::ZERO, ElicitationSettings::default());
        assert_eq!(
            scope_on.ask("s", "go", url).await,
            ElicitationAnswer::Accept {
                content: serde_json::Map::new()
            }
        );
    }

    #[tokio::test]
    async fn the_scope_is_the_tasks_own() {
        let (scope, _turn) = scope(
            ElicitationAnswer::Decline,
            Duration::ZERO,
            ElicitationSettings::default(),
        );
        assert!(ElicitScope::current().is_none());
        let id = scope.turn_id().to_owned();
        let inside = scope
            .run(async { ElicitScope::current().map(|s| s.turn_id().to_owned()) })
            .await;
        assert_eq!(inside, Some(id));
        let spawned = tokio::spawn(async { ElicitScope::current().is_none() }).await;
        assert!(matches!(spawned, Ok(true)));
    }
}
