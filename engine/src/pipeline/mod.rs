//! The pipeline executor: runs a pipeline's stages in order, then its runner
//! ([`Pipeline`]); the store calls around them (`history.rs`), the stages' loop
//! (`stages.rs`), tool calls made outside a model's turn (`tools.rs`), what a turn
//! came to (`outcome.rs`) and who is told (`observe.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hostpipe_core::messages::{MessageKey, Messages};
use hostpipe_core::model::ModelProfile;
use hostpipe_core::run::{EventSink, Runner, collect_reply_tapped};
use hostpipe_core::stage::Stage;
use hostpipe_core::trace::TraceEvent;
use hostpipe_core::turn::Turn;

use tracing::Instrument as _;

use crate::layer::{CatchPanic, ReportFailure, Timeout};
use crate::store::AttachmentStore;

mod history;
mod observe;
mod outcome;
mod spans;
mod stages;
mod tools;

pub use observe::{PipelineObserver, TurnEnd, TurnReport};

pub use outcome::{
    CallerReadOutcome, Prepared, RunnerFailure, ToolCallOutcome, TurnOutcome, TurnStatus,
};

/// A named stage in a pipeline.
struct NamedStage {
    name: String,
    stage: Box<dyn Stage>,
}

/// An ordered list of stages plus a runner, with the pipeline's model and system prompt.
///
/// # Order
///
/// Stages run exactly in the order the pipeline lists them, each seeing the turn as the
/// ones before it left it (as layers of a tower stack see a request), and the order
/// changes what a turn does:
///
/// - `bind_mcp_servers, resource_context_injection, tool_assembly` (the default's core):
///   injection reads only from the servers bound for the turn, and a required server
///   that is down ends the turn (its reply names the server) before anything is read;
/// - `resource_context_injection, bind_mcp_servers, tool_assembly`: injection finds no
///   bound server, so every attachment becomes a fallback block saying its server is not
///   bound for the turn, and the model gets no resource content.
///
/// Around the stages: pins are loaded before the first ([`Pipeline::with_store`]); after
/// the last, the runner runs under the [`layer`](crate::layer)s, then the turn's reads
/// and tool calls go to the history.
pub struct Pipeline {
    id: String,
    stages: Vec<NamedStage>,
    runner_name: String,
    runner: Box<dyn Runner>,
    model: Arc<ModelProfile>,
    system_prompt: Option<String>,
    turn_timeout: Option<Duration>,
    store: Option<Arc<dyn AttachmentStore>>,
    consent: Option<Arc<crate::consent::Consent>>,
    messages: Arc<Messages>,
    elicitation: Option<(
        Arc<dyn hostpipe_core::Elicitor>,
        hostpipe_core::ElicitationSettings,
    )>,
    observer: Option<Arc<dyn PipelineObserver>>,
}

impl Pipeline {
    /// A pipeline `id` running `stages` (name and stage, in order), then `runner`.
    ///
    /// Loads the model's tokenizer now (about 150 ms for `o200k_base`, once per
    /// process), so that the first turn does not pay for it.
    pub fn new(
        id: impl Into<String>,
        stages: Vec<(String, Box<dyn Stage>)>,
        runner: (String, Box<dyn Runner>),
        model: Arc<ModelProfile>,
        system_prompt: Option<String>,
    ) -> Self {
        if let Err(e) = hostpipe_core::Tokenizer::new(model.encoding) {
            // The stages that count tokens report it on their turn.
            tracing::warn!(error = %e, "the model's tokenizer failed to load");
        }
        Self {
            id: id.into(),
            stages: stages
                .into_iter()
                .map(|(name, stage)| NamedStage { name, stage })
                .collect(),
            runner_name: runner.0,
            runner: runner.1,
            model,
            system_prompt,
            turn_timeout: Some(Self::DEFAULT_TURN_TIMEOUT),
            store: None,
            consent: None,
            messages: Arc::default(),
            elicitation: None,
            observer: None,
        }
    }

    /// Lets the MCP servers of this pipeline's turns ask the turn's user (MCP
    /// elicitation): each turn (and each [`Pipeline::call_tool`]) runs in an
    /// [`ElicitScope`](hostpipe_core::ElicitScope) that puts a server's question to
    /// `elicitor` under `settings`. Without it, a server's question is declined. The MCP
    /// host must declare the capability too (`hostpipe_mcp::HostOptions::elicitation`).
    #[must_use]
    pub fn with_elicitation(
        mut self,
        elicitor: Arc<dyn hostpipe_core::Elicitor>,
        settings: hostpipe_core::ElicitationSettings,
    ) -> Self {
        self.elicitation = Some((elicitor, settings));
        self
    }

    /// The elicitation settings, when the pipeline elicits.
    pub fn elicitation(&self) -> Option<hostpipe_core::ElicitationSettings> {
        self.elicitation.as_ref().map(|(_, s)| *s)
    }

    /// The scope `turn` elicits in, when the pipeline elicits.
    pub(crate) fn elicit_scope(&self, turn: &Turn) -> Option<hostpipe_core::ElicitScope> {
        self.elicitation.as_ref().map(|(elicitor, settings)| {
            hostpipe_core::ElicitScope::new(Arc::clone(elicitor), turn, *settings)
        })
    }

    /// Gives the pipeline a consent gate: every turn's reads, the stages' and the
    /// model's, are checked against its policy before they reach a server
    /// ([`crate::consent`]).
    #[must_use]
    pub fn with_consent(mut self, consent: Arc<crate::consent::Consent>) -> Self {
        self.consent = Some(match &self.store {
            Some(store) => Arc::new(consent.with_grant_store(Arc::clone(store) as _)),
            None => consent,
        });
        self
    }

    /// The consent gate, if the pipeline has one.
    pub fn consent(&self) -> Option<&Arc<crate::consent::Consent>> {
        self.consent.as_ref()
    }

    /// How long the pipeline waits on one [`AttachmentStore`] call: 5 s.
    pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);

    /// Gives the pipeline an attachment store. Before the stages run, each turn then
    /// gets the live pins of its pipeline and of its conversation (if it has one) added
    /// to [`Turn::attachments`], at pipeline and conversation scope; after them, every
    /// [`TraceEvent::ResourceRead`] of the turn is written to the store's history.
    ///
    /// A store that fails or takes longer than [`Pipeline::STORE_TIMEOUT`] does not stop
    /// the turn: it goes on without the pins, or without its history written, and the
    /// trace has a warning saying which. The pipeline's consent gate keeps its
    /// conversation grants there too
    /// ([`Consent::with_grant_store`](crate::consent::Consent::with_grant_store)).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn AttachmentStore>) -> Self {
        if let Some(consent) = &self.consent {
            self.consent = Some(Arc::new(consent.with_grant_store(Arc::clone(&store) as _)));
        }
        self.store = Some(store);
        self
    }

    /// The attachment store, if the pipeline has one.
    pub fn store(&self) -> Option<&Arc<dyn AttachmentStore>> {
        self.store.as_ref()
    }

    /// The turn timeout of [`Pipeline::new`]: 60 s.
    pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(60);

    /// Sets how long [`Pipeline::prepare`] gives the stages (`None`: no deadline). A
    /// turn that arrives with its own [`Turn::deadline`] keeps it.
    #[must_use]
    pub fn with_turn_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.turn_timeout = timeout;
        self
    }

    /// Sets what the pipeline's turns say to the end user: the catalog of its locale with
    /// the configuration's overrides ([`hostpipe_core::messages`]). English by default.
    #[must_use]
    pub fn with_messages(mut self, messages: Arc<Messages>) -> Self {
        self.messages = messages;
        self
    }

    /// What the pipeline's turns say to the end user ([`Pipeline::with_messages`]).
    pub fn messages(&self) -> &Arc<Messages> {
        &self.messages
    }

    /// The pipeline id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Stage names in order.
    pub fn stage_names(&self) -> impl Iterator<Item = &str> {
        self.stages.iter().map(|s| s.name.as_str())
    }

    /// The runner's name.
    pub fn runner_name(&self) -> &str {
        &self.runner_name
    }

    /// The model.
    pub fn model(&self) -> &Arc<ModelProfile> {
        &self.model
    }

    /// The pipeline's own system prompt (`[pipelines.ID] system_prompt`), if it has one.
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// Runs the stages over `turn` and builds the [`RunRequest`](hostpipe_core::RunRequest), without running the
    /// runner. Sets the turn's pipeline id, model and (if unset) system prompt first.
    /// The observer sees it as a turn ending [`TurnEnd::Prepared`] (or as the stage
    /// that ended it left it).
    pub async fn prepare(&self, turn: Turn) -> Prepared {
        let started = Instant::now();
        let prepared = self.prepare_unobserved(turn).await;
        self.observe_turn(|| match &prepared {
            Prepared::Request(request, trace) => TurnReport {
                pipeline: &self.id,
                end: TurnEnd::Prepared,
                duration: started.elapsed(),
                model: None,
                request: Some(request),
                trace,
            },
            Prepared::Ended(outcome) => TurnReport::of(&self.id, outcome, started.elapsed()),
        });
        prepared
    }

    /// [`Pipeline::prepare`], not reported to the observer as a turn (a whole turn is,
    /// once it ends).
    async fn prepare_unobserved(&self, mut turn: Turn) -> Prepared {
        self.begin(&mut turn);
        self.load_pins(&mut turn).await;
        let prepared = self.run_stages(&mut turn).await;
        match prepared {
            Prepared::Request(request, mut trace) => {
                self.record_reads(&turn.ids, &mut trace, 0).await;
                Prepared::Request(request, trace)
            }
            Prepared::Ended(mut outcome) => {
                self.record_reads(&turn.ids, &mut outcome.trace, 0).await;
                Prepared::Ended(outcome)
            }
        }
    }

    /// Gives `turn` the pipeline's id, model, deadline, system prompt and consent gate.
    fn begin(&self, turn: &mut Turn) {
        turn.ids.pipeline.clone_from(&self.id);
        turn.model = Arc::clone(&self.model);
        turn.messages = Arc::clone(&self.messages);
        if turn.deadline.is_none() {
            turn.deadline = self.turn_timeout.map(|t| Instant::now() + t);
        }
        if turn.system_prompt.is_none() {
            turn.system_prompt.clone_from(&self.system_prompt);
        }
        // The pipeline's policy binds every turn; a turn may bring a gate of its own
        // only through a pipeline without one.
        if let Some(consent) = &self.consent {
            turn.consent = Some(Arc::clone(consent) as _);
        }
    }

    /// Runs one turn end to end. Never fails: errors become the reply, with
    /// [`TurnOutcome::failed`] set and a trace record.
    pub async fn run_turn(&self, turn: Turn) -> TurnOutcome {
        self.run_turn_tapped(turn, None).await
    }

    /// [`Pipeline::run_turn`], sending a copy of each [`RunEvent`](hostpipe_core::RunEvent) to
    /// `tap` as the runner reports it ([`collect_reply_tapped`]).
    pub async fn run_turn_tapped(&self, turn: Turn, tap: Option<&EventSink>) -> TurnOutcome {
        self.run_turn_within(turn, tap, None).await
    }

    /// [`Pipeline::run_turn_tapped`], with the whole turn bounded by `deadline`: the
    /// stages get it as [`Turn::deadline`] (or their own, when earlier), and a runner
    /// still running at it is stopped with [`RunError::Timeout`](hostpipe_core::RunError::Timeout).
    /// The turn then ends failed, but like any other: the reads made so far are in its
    /// trace and in the history.
    pub async fn run_turn_within(
        &self,
        turn: Turn,
        tap: Option<&EventSink>,
        deadline: Option<Instant>,
    ) -> TurnOutcome {
        self.run_turn_on(turn, tap, deadline, None).await
    }

    /// [`Pipeline::run_turn_within`], ending in `runner` (its name and the runner)
    /// instead of the pipeline's own when given: the runner is chosen per call (a
    /// service's preview turns), so no copy of the pipeline is needed for it.
    ///
    /// Whichever runs is put under the [`layer`](crate::layer)s: a panic fails it
    /// ([`CatchPanic`]), a failure is its last event ([`ReportFailure`]), and `deadline`
    /// bounds it ([`Timeout`]; the turn then ends [`TurnStatus::TimedOut`]).
    ///
    /// The turn runs in the pipeline's elicitation scope ([`Pipeline::with_elicitation`]).
    pub async fn run_turn_on(
        &self,
        mut turn: Turn,
        tap: Option<&EventSink>,
        deadline: Option<Instant>,
        runner: Option<(&str, &dyn Runner)>,
    ) -> TurnOutcome {
        let started = Instant::now();
        if let Some(d) = deadline {
            let own = turn
                .deadline
                .or_else(|| self.turn_timeout.map(|t| started + t));
            turn.deadline = Some(own.map_or(d, |own| own.min(d)));
        }
        if turn.deadline.is_none() {
            turn.deadline = self.turn_timeout.map(|t| started + t);
        }
        turn.ids.pipeline.clone_from(&self.id);
        let span = spans::turn(&turn);
        let outcome = match self.elicit_scope(&turn) {
            Some(scope) => {
                scope
                    .run(self.run_turn_scoped(turn, tap, deadline, runner))
                    .instrument(span.clone())
                    .await
            }
            None => {
                self.run_turn_scoped(turn, tap, deadline, runner)
                    .instrument(span.clone())
                    .await
            }
        };
        spans::turn_ended(&span, &outcome);
        self.observe_turn(|| TurnReport::of(&self.id, &outcome, started.elapsed()));
        outcome
    }

    async fn run_turn_scoped(
        &self,
        turn: Turn,
        tap: Option<&EventSink>,
        deadline: Option<Instant>,
        runner: Option<(&str, &dyn Runner)>,
    ) -> TurnOutcome {
        let (mut request, mut trace) = match self.prepare_unobserved(turn).await {
            Prepared::Request(request, trace) => (request, trace),
            Prepared::Ended(outcome) => return outcome,
        };
        request.deadline = deadline;
        let (name, runner) = runner.unwrap_or((&self.runner_name, self.runner.as_ref()));
        let layered = Timeout::new(ReportFailure::new(CatchPanic::new(runner)), None);
        let span = spans::run(name);
        let run_started = Instant::now();
        let result = collect_reply_tapped(&layered, &request, tap)
            .instrument(span.clone())
            .await;
        let run_elapsed = run_started.elapsed();
        spans::run_ended(&span, result.as_ref().err());
        // The model's own reads (read_resource) and tool calls happened during the runner.
        let (reads, calls) = (trace.reads().count(), trace.tool_calls().count());
        if trace.collect_reported() > 0 {
            self.record_reads(&request.ids, &mut trace, reads).await;
            self.record_calls(&request.ids, &mut trace, calls).await;
        }
        // hostpipe's time inside the run: the tool calls and reads it made for the runner.
        let hosted_ms: u64 = trace.reads().skip(reads).map(|r| r.elapsed_ms).sum::<u64>()
            + trace
                .tool_calls()
                .skip(calls)
                .map(|c| c.elapsed_ms)
                .sum::<u64>();
        let elapsed_ms = u64::try_from(run_elapsed.as_millis()).unwrap_or(u64::MAX);
        let runner_failure = result.as_ref().err().map(RunnerFailure::of);
        let (reply, run, status, error) = match result {
            Ok(run) => (run.text.clone(), Some(run), TurnStatus::Completed, None),
            Err(e) => {
                let (status, key) = match e {
                    // The deadline this call set, not a backend's own timeout.
                    hostpipe_core::RunError::Timeout(_)
                        if deadline.is_some_and(|d| Instant::now() >= d) =>
                    {
                        (TurnStatus::TimedOut, MessageKey::TurnTimedOut)
                    }
                    _ => (TurnStatus::RunnerFailed, MessageKey::RunnerFailed),
                };
                // The user is told that it failed, never how: the error names the
                // upstream endpoint and quotes OS errors (the log, the trace and the
                // turn's `error` have it, under the turn id the reply gives).
                tracing::warn!(
                    turn_id = trace.turn_id(), pipeline = %self.id, runner = name,
                    error = %e, "the runner failed; the user was told so, with the turn id"
                );
                (
                    self.messages.render(key, &[("turn", trace.turn_id())]),
                    None,
                    status,
                    Some(e.to_string()),
                )
            }
        };
        trace.record(TraceEvent::RunFinished {
            runner: name.to_owned(),
            error,
            elapsed_ms,
            model_ms: elapsed_ms.saturating_sub(hosted_ms),
        });
        TurnOutcome {
            reply,
            ended_by: None,
            request: Some(request),
            run,
            status,
            runner_failure,
            trace,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_observe;
