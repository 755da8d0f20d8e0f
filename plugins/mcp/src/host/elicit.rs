//! Elicitation on the client side of each session: [`Handler`], the session's
//! `ClientHandler`, declares the capability only when [`HostOptions::elicitation`]
//! says so, and puts a server's question (MCP 2025-11-25 `elicitation/create`, or a
//! 2026-07-28 `input_required` round's elicitation input request) to the user of the
//! turn it belongs to ([`hostpipe_core::ElicitScope`]).
//!
//! Which turn: a 2026-07-28 round is driven in the task of the request that got it, so
//! that task's scope answers. A legacy `elicitation/create` arrives on the session's
//! own task; the requests in flight to the server each registered their scope
//! ([`Askers`]), and the question goes to that user only when every request in flight
//! belongs to the same user. Otherwise, and with no scope at all, it is declined and
//! the log (and each candidate's trace) says why.

use std::sync::{Mutex, PoisonError, Weak};
use std::time::Duration;

use hostpipe_core::elicit::url_domain;
use hostpipe_core::{ElicitScope, ElicitationAnswer, ElicitationMode};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, UrlElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ErrorData, RoleClient};

use super::options::{Elicitation, HostOptions};
use super::slot::Slot;

/// The client capabilities hostpipe declares: elicitation (form, and URL when allowed)
/// only when an elicitor is configured, else none (rmcp then declines any request).
pub(super) fn capabilities(options: &HostOptions) -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    let mut elicitation = ElicitationCapability::new();
    match options.elicitation {
        Elicitation::Off => return caps,
        Elicitation::Form => {}
        Elicitation::FormAndUrl => elicitation.url = Some(UrlElicitationCapability::new()),
    }
    let mut form = FormElicitationCapability::new();
    // Content is checked against the requested schema before it is sent.
    form.schema_validation = Some(true);
    elicitation.form = Some(form);
    caps.elicitation = Some(elicitation);
    caps
}

/// One session's client handler: what hostpipe says about itself, and elicitation.
pub(super) struct Handler {
    pub(super) config: ClientConfig,
    /// The slot (weak: the slot holds the session, which holds this).
    pub(super) slot: Weak<Slot>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(slot) = self.slot.upgrade() else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let server = slot.config.name.clone();
        let (message, mode) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
                (
                    message,
                    ElicitationMode::Form {
                        requested_schema: schema,
                    },
                )
            }
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                let Some(domain) = url_domain(&url) else {
                    tracing::info!(server = %server, "elicitation declined: the URL is not an http(s) URL with a host");
                    return Ok(ElicitResult::new(ElicitationAction::Decline));
                };
                (message, ElicitationMode::Url { url, domain })
            }
            _ => {
                tracing::info!(server = %server, "elicitation declined: a mode this host does not know");
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            }
        };
        // Only what was declared is asked (spec: a server must not ask for an
        // undeclared capability; one that does is declined).
        let declared = self.config.capabilities.elicitation.as_ref();
        let allowed = match mode {
            ElicitationMode::Form { .. } => declared.is_some_and(|e| e.form.is_some()),
            ElicitationMode::Url { .. } => declared.is_some_and(|e| e.url.is_some()),
        };
        if !allowed {
            tracing::info!(server = %server, mode = mode.as_str(), "elicitation declined: this mode is not declared");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        // A 2026-07-28 round runs in the task of the request; a legacy request on the
        // session's task, where only the requests in flight can tell whose it is.
        let scope = match ElicitScope::current() {
            Some(scope) => Some(scope),
            None => slot.askers.resolve(&server, &mode),
        };
        let Some(scope) = scope else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let is_url = matches!(mode, ElicitationMode::Url { .. });
        Ok(match scope.ask(&server, &message, mode).await {
            // URL mode: the user's consent only, no content (spec 2025-11-25).
            ElicitationAnswer::Accept { .. } if is_url => {
                ElicitResult::new(ElicitationAction::Accept)
            }
            ElicitationAnswer::Accept { content } => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::Value::Object(content)),
            ElicitationAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

/// The elicitation scopes of a server's requests in flight (`None`: a request made
/// outside any scope, e.g. with elicitation off for its pipeline).
#[derive(Default)]
pub(super) struct Askers {
    next: std::sync::atomic::AtomicU64,
    inflight: Mutex<Vec<(u64, Option<ElicitScope>)>>,
}

/// A request in flight ([`Askers::enter`]), until dropped.
pub(super) struct Asking<'a> {
    askers: &'a Askers,
    id: u64,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.askers.lock().retain(|(id, _)| *id != self.id);
    }
}

impl Askers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Option<ElicitScope>)>> {
        self.inflight.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a request of the current task's scope (if any) until the guard drops.
    pub(super) fn enter(&self) -> Asking<'_> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().push((id, ElicitScope::current()));
        Asking { askers: self, id }
    }

    /// The scope a legacy `elicitation/create` from `server` is for: the one user every
    /// request in flight belongs to; else `None` (declined; the candidates' traces and
    /// the log say why).
    pub(super) fn resolve(&self, server: &str, mode: &ElicitationMode) -> Option<ElicitScope> {
        let inflight = self.lock().clone();
        let scopes: Vec<&ElicitScope> = inflight.iter().filter_map(|(_, s)| s.as_ref()).collect();
        let Some(first) = scopes.first() else {
            tracing::info!(
                server,
                requests = inflight.len(),
                "elicitation declined: no request in flight to this server belongs to a turn that can ask its user"
            );
            return None;
        };
        if scopes.len() == inflight.len() && scopes.iter().all(|s| s.same_user(first)) {
            return Some((*first).clone());
        }
        let why = "declined without asking: several users' requests were in flight to this server, and a legacy elicitation/create does not say whose it is";
        tracing::info!(server, requests = inflight.len(), "elicitation {why}");
        for scope in scopes {
            scope.record_unasked(server, mode, why);
        }
        None
    }
}

/// How long a request may still run: `timeout`, plus the time its turn spent waiting
/// for the user meanwhile, and with no end while a question is open (the question has
/// its own timeout).
pub(super) struct Budget {
    scope: Option<ElicitScope>,
    start: std::time::Instant,
    timeout: Duration,
    /// The turn's time spent waiting for its user before this request.
    paused_before: Duration,
}

impl Budget {
    /// The budget of a request starting now in the current task's scope.
    pub(super) fn start(timeout: Duration) -> Self {
        let scope = ElicitScope::current();
        let paused_before = scope.as_ref().map_or(Duration::ZERO, |s| s.paused().1);
        Self {
            scope,
            start: std::time::Instant::now(),
            timeout,
            paused_before,
        }
    }

    /// The time left now; `None` once spent.
    pub(super) fn left(&self) -> Option<Duration> {
        let (asking, paused) = self
            .scope
            .as_ref()
            .map_or((false, Duration::ZERO), ElicitScope::paused);
        if asking {
            // Check again shortly: the question ends by its own timeout.
            return Some(Duration::from_millis(100));
        }
        let end = self.start + self.timeout + paused.saturating_sub(self.paused_before);
        let left = end.saturating_duration_since(std::time::Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use hostpipe_core::{ElicitationRequest, ElicitationSettings, Elicitor, Turn};

    use super::*;

    struct Never;

    #[async_trait]
    impl Elicitor for Never {
        async fn elicit(&self, _request: &ElicitationRequest) -> ElicitationAnswer {
            ElicitationAnswer::Cancel
        }
    }

    fn scope(conversation: Option<&str>) -> ElicitScope {
        let mut turn = Turn::new("p", "hi");
        turn.ids.conversation = conversation.map(str::to_owned);
        ElicitScope::new(Arc::new(Never), &turn, ElicitationSettings::default())
    }

    fn form() -> ElicitationMode {
        ElicitationMode::Form {
            requested_schema: serde_json::json!({"type": "object"}),
        }
    }

    async fn resolve_with(scopes: Vec<Option<ElicitScope>>) -> Option<String> {
        let askers = Askers::default();
        let mut guards = Vec::new();
        for s in scopes {
            guards.push(match s {
                Some(s) => s.run(async { askers.enter() }).await,
                None => askers.enter(),
            });
        }
        askers.resolve("s", &form()).map(|s| s.turn_id().to_owned())
    }

    #[tokio::test]
    async fn one_user_is_asked_and_several_or_none_decline() {
        let a = scope(Some("c1"));
        let a_id = a.turn_id().to_owned();
        assert_eq!(
            resolve_with(vec![Some(a.clone())]).await,
            Some(a_id.clone())
        );
        // Two turns of one conversation: the same user.
        assert_eq!(
            resolve_with(vec![Some(a.clone()), Some(scope(Some("c1")))]).await,
            Some(a_id)
        );
        // Two conversations, or two turns without one: ambiguous.
        assert_eq!(
            resolve_with(vec![Some(a.clone()), Some(scope(Some("c2")))]).await,
            None
        );
        assert_eq!(
            resolve_with(vec![Some(scope(None)), Some(scope(None))]).await,
            None
        );
        // A request outside any scope might be the asker: ambiguous too.
        assert_eq!(resolve_with(vec![Some(a), None]).await, None);
        assert_eq!(resolve_with(vec![None]).await, None);
        assert_eq!(resolve_with(vec![]).await, None);
    }

    #[tokio::test]
    async fn a_finished_request_is_no_longer_a_candidate() {
        let askers = Askers::default();
        let a = scope(Some("c1"));
        {
            let _b = scope(Some("c2")).run(async { askers.enter() }).await;
        }
        let _a = a.clone().run(async { askers.enter() }).await;
        assert!(askers.resolve("s", &form()).is_some());
    }

    struct Slow;

    #[async_trait]
    impl Elicitor for Slow {
        async fn elicit(&self, _request: &ElicitationRequest) -> ElicitationAnswer {
            tokio::time::sleep(Duration::from_millis(150)).await;
            ElicitationAnswer::Decline
        }
    }

    #[tokio::test]
    async fn a_request_budget_counts_only_the_waits_during_it() {
        let turn = Turn::new("p", "hi");
        let scope = ElicitScope::new(Arc::new(Slow), &turn, ElicitationSettings::default());
        scope
            .clone()
            .run(async {
                // A question before the request does not lengthen its budget.
                let _ = ElicitScope::current()
                    .unwrap_or_else(|| unreachable!())
                    .ask("s", "?", form())
                    .await;
                let budget = Budget::start(Duration::from_millis(100));
                let left = budget.left().unwrap_or_default();
                assert!(left <= Duration::from_millis(100), "{left:?}");
                // One during it does.
                let _ = scope.ask("s", "?", form()).await;
                let left = budget.left().unwrap_or_default();
                assert!(left > Duration::ZERO, "{left:?}");
            })
            .await;
    }

    #[test]
    fn the_capability_is_declared_only_with_an_elicitor() {
        let mut options = HostOptions::default();
        assert!(capabilities(&options).elicitation.is_none());
        options.elicitation = Elicitation::Form;
        let caps = capabilities(&options).elicitation.unwrap_or_default();
        assert!(caps.form.is_some() && caps.url.is_none());
        options.elicitation = Elicitation::FormAndUrl;
        let caps = capabilities(&options).elicitation.unwrap_or_default();
        assert!(caps.form.is_some() && caps.url.is_some());
    }
}
