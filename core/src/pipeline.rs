//! The pipeline executor: runs a pipeline's stages in order, then its runner.
//!
//! # Order
//!
//! Stages run exactly in the order the pipeline lists them, and order changes behaviour.
//! With `bind_mcp_servers, resource_context_injection, tool_assembly`, injection reads
//! only from servers bound for the turn and a required server that is down ends the
//! turn before anything is read. Put `resource_context_injection` first and it finds no
//! bound servers: every attachment becomes a fallback block saying its server is not
//! bound, and the turn goes on with no context.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use serde::Serialize;

use crate::layer::{CatchPanic, ReportFailure, Timeout};
use crate::model::ModelProfile;
use crate::run::{EventSink, RunReply, RunRequest, Runner, collect_reply_tapped};
use crate::stage::{Stage, StageOutcome};
use crate::store::{AttachmentStore, InjectionRecord, PinOwner};
use crate::trace::{StageOutcomeKind, Trace, TraceEvent};
use crate::turn::Turn;

/// A named stage in a pipeline.
struct NamedStage {
    name: String,
    stage: Box<dyn Stage>,
}

/// An ordered list of stages plus a runner, with the pipeline's model and system prompt.
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
}

/// How a turn ended.
#[derive(Debug, Serialize)]
pub struct TurnOutcome {
    /// The answer for the user: the runner's reply, or the reply of the stage that ended
    /// the turn, or an error message.
    pub reply: String,
    /// The stage that ended the turn early, if one did.
    pub ended_by: Option<String>,
    /// The request the runner got (absent when a stage ended the turn).
    pub request: Option<RunRequest>,
    /// The runner's collected events (absent when it did not run or failed).
    pub run: Option<RunReply>,
    /// How the turn ended.
    pub status: TurnStatus,
    /// Everything that happened.
    pub trace: Trace,
}

/// How a turn ended: [`TurnOutcome::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The runner answered.
    Completed,
    /// A stage answered instead of the runner (a prompt command that lacks an argument,
    /// a required server that is down): [`TurnOutcome::ended_by`] names it.
    Ended,
    /// A stage failed (returned an error or panicked).
    StageFailed,
    /// The runner failed.
    RunnerFailed,
    /// The runner was still running at the turn's deadline.
    TimedOut,
}

impl TurnStatus {
    /// Whether the turn failed: a stage or the runner failed, or the time ran out.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Self::StageFailed | Self::RunnerFailed | Self::TimedOut
        )
    }
}

impl TurnOutcome {
    /// Whether the turn failed ([`TurnStatus::is_failure`]).
    pub fn failed(&self) -> bool {
        self.status.is_failure()
    }
}

/// What [`Pipeline::call_tool`] did.
#[derive(Debug)]
pub struct ToolCallOutcome {
    /// The name the tool is offered under in the pipeline's turns (`server__tool`), if
    /// it is offered.
    pub name: Option<String>,
    /// The tool's result (a withheld call is `Ok`, with `is_error` and a note saying so),
    /// or why the call was not made.
    pub result: Result<crate::source::ToolCallResult, crate::ToolError>,
    /// The stages' records and the call's.
    pub trace: Trace,
}

/// What [`Pipeline::prepare`] produced.
#[derive(Debug)]
pub enum Prepared {
    /// The stages ran to the end; the runner gets this request.
    Request(RunRequest, Trace),
    /// A stage ended the turn.
    Ended(TurnOutcome),
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
        if let Err(e) = crate::Tokenizer::new(model.encoding) {
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
        }
    }

    /// Gives the pipeline a consent gate: every turn's reads, the stages' and the
    /// model's, are checked against its policy before they reach a server
    /// ([`crate::consent`]).
    #[must_use]
    pub fn with_consent(mut self, consent: Arc<crate::consent::Consent>) -> Self {
        if let Some(store) = &self.store {
            consent.use_store(Arc::clone(store));
        }
        self.consent = Some(consent);
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
    /// conversation grants there too ([`Consent::use_store`](crate::consent::Consent::use_store)).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn AttachmentStore>) -> Self {
        if let Some(consent) = &self.consent {
            consent.use_store(Arc::clone(&store));
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

    /// Runs the stages over `turn` and builds the [`RunRequest`], without running the
    /// runner. Sets the turn's pipeline id, model and (if unset) system prompt first.
    pub async fn prepare(&self, mut turn: Turn) -> Prepared {
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
        if turn.deadline.is_none() {
            turn.deadline = self.turn_timeout.map(|t| Instant::now() + t);
        }
        if turn.system_prompt.is_none() {
            turn.system_prompt.clone_from(&self.system_prompt);
        }
        // The pipeline's policy binds every turn; a turn may bring a gate of its own
        // only through a pipeline without one.
        if self.consent.is_some() {
            turn.consent.clone_from(&self.consent);
        }
    }

    /// Calls MCP tool `tool` (its name as `server` lists it) with `arguments` (a JSON
    /// object, or null for none) under this pipeline's policy, as a turn's model would,
    /// on behalf of `origin`: the stages run over `turn` marked [`ToolsOnly`] (servers
    /// bound, tools assembled, no context read), then the turn's executor makes the call,
    /// which checks `tool_assembly.include`/`exclude` and the consent gate. The call and
    /// any reads it made are in the outcome's trace and in the store's history.
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn (a required server down, a
    /// stage failing): the call was not made.
    ///
    /// [`ToolsOnly`]: crate::ToolsOnly
    pub async fn call_tool(
        &self,
        turn: Turn,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        origin: crate::trace::CallOrigin,
    ) -> Result<ToolCallOutcome, Box<TurnOutcome>> {
        let (request, mut trace) = self.tools_turn(turn).await?;
        let offered = request.tools.iter().find(|t| {
            matches!(&t.origin, crate::ToolOrigin::Mcp { server: s, tool: t } if s == server && t == tool)
        });
        let result = match &request.tool_executor {
            // Bounded inside: the approver by the turn's deadline, the server by its
            // request timeout. Refusals are recorded too.
            Some(executor) => {
                executor
                    .call_server_tool(server, tool, arguments, origin)
                    .await
            }
            // No tool_assembly stage: the pipeline offers no tool.
            None => Err(crate::ToolError::NotOffered {
                name: format!("{server}/{tool}"),
            }),
        };
        trace.collect_reported();
        self.record_reads(&request.ids, &mut trace, 0).await;
        self.record_calls(&request.ids, &mut trace, 0).await;
        Ok(ToolCallOutcome {
            name: offered.map(|t| t.name.clone()),
            result,
            trace,
        })
    }

    /// The tools this pipeline offers in `turn`, as the model sees them, with the stages
    /// run as for [`Pipeline::call_tool`].
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn.
    pub async fn offered_tools(
        &self,
        turn: Turn,
    ) -> Result<Vec<crate::ToolSpec>, Box<TurnOutcome>> {
        Ok(self.tools_turn(turn).await?.0.tools)
    }

    /// Runs the stages over `turn` marked [`crate::ToolsOnly`]: the request and the trace.
    async fn tools_turn(&self, mut turn: Turn) -> Result<(RunRequest, Trace), Box<TurnOutcome>> {
        turn.extensions.insert(crate::ToolsOnly);
        self.begin(&mut turn);
        match self.run_stages(&mut turn).await {
            Prepared::Request(request, trace) => Ok((request, trace)),
            Prepared::Ended(mut outcome) => {
                self.record_reads(&turn.ids, &mut outcome.trace, 0).await;
                Err(Box::new(outcome))
            }
        }
    }

    /// Adds the live pins of the turn's pipeline and conversation to its attachments.
    async fn load_pins(&self, turn: &mut Turn) {
        let Some(store) = &self.store else { return };
        let mut owners = vec![PinOwner::Pipeline(self.id.clone())];
        owners.extend(turn.ids.conversation.clone().map(PinOwner::Conversation));
        let now = crate::store::unix_ms_now();
        let result = tokio::time::timeout(Self::STORE_TIMEOUT, store.pins(&owners, now)).await;
        match result {
            Ok(Ok(pins)) => {
                turn.attachments
                    .extend(pins.iter().map(crate::store::Pin::attachment));
            }
            Ok(Err(e)) => turn.trace.warn(format!(
                "the pinned attachments were not loaded, the turn goes on without them: {e}"
            )),
            Err(_) => turn.trace.warn(format!(
                "the pinned attachments were not loaded, the turn goes on without them: attachment store {} did not answer within {} ms",
                store.describe(),
                Self::STORE_TIMEOUT.as_millis()
            )),
        }
    }

    /// `write` to `store`, bounded by [`Self::STORE_TIMEOUT`]; the error as text.
    async fn bounded(
        store: &dyn AttachmentStore,
        write: impl std::future::Future<Output = Result<(), crate::store::StoreError>>,
    ) -> Result<(), String> {
        match tokio::time::timeout(Self::STORE_TIMEOUT, write).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "attachment store {} did not answer within {} ms",
                store.describe(),
                Self::STORE_TIMEOUT.as_millis()
            )),
        }
    }

    /// Writes the turn's tool calls from the `from`-th on to the store's history.
    async fn record_calls(&self, ids: &crate::turn::TurnIds, trace: &mut Trace, from: usize) {
        let Some(store) = &self.store else { return };
        let calls: Vec<crate::store::ToolCallEntry> = trace
            .tool_calls()
            .enumerate()
            .skip(from)
            .map(|(seq, call)| crate::store::ToolCallEntry {
                turn_id: trace.turn_id().to_owned(),
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                at_ms: trace.started_at_ms(),
                pipeline: self.id.clone(),
                conversation: ids.conversation.clone(),
                message: Some(ids.message.clone()).filter(|m| !m.is_empty()),
                call: call.clone(),
            })
            .collect();
        if calls.is_empty() {
            return;
        }
        let Err(error) = Self::bounded(store.as_ref(), store.record_calls(&calls)).await else {
            return;
        };
        tracing::warn!(turn = trace.turn_id(), error = %error, "tool call history not written");
        trace.warn(format!(
            "{} tool calls were not written to the history: {error}",
            calls.len()
        ));
    }

    /// Writes the turn's resource reads from the `from`-th on to the store's history.
    async fn record_reads(&self, ids: &crate::turn::TurnIds, trace: &mut Trace, from: usize) {
        let Some(store) = &self.store else { return };
        let records: Vec<InjectionRecord> = trace
            .reads()
            .enumerate()
            .skip(from)
            .map(|(seq, read)| InjectionRecord {
                turn_id: trace.turn_id().to_owned(),
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                at_ms: trace.started_at_ms(),
                pipeline: self.id.clone(),
                conversation: ids.conversation.clone(),
                message: Some(ids.message.clone()).filter(|m| !m.is_empty()),
                read: read.clone(),
            })
            .collect();
        if records.is_empty() {
            return;
        }
        let Err(error) = Self::bounded(store.as_ref(), store.record(&records)).await else {
            return;
        };
        tracing::warn!(turn = trace.turn_id(), error = %error, "read history not written");
        let n = records.len();
        trace.warn(format!(
            "the read history of this turn ({n} read{}) was not written: {error}",
            if n == 1 { "" } else { "s" }
        ));
    }

    /// Runs the stages over `turn`; the trace is taken out of it, the ids stay.
    async fn run_stages(&self, turn: &mut Turn) -> Prepared {
        for s in &self.stages {
            let started = Instant::now();
            turn.trace.record(TraceEvent::StageStarted {
                stage: s.name.clone(),
            });
            // A stage that panics (a plugin's bug, a library's) ends this turn with an
            // error, not the platform's worker.
            let result = match std::panic::AssertUnwindSafe(s.stage.process(turn))
                .catch_unwind()
                .await
            {
                Ok(result) => result,
                Err(panic) => Err(crate::error::StageError::msg(format!(
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
                    let text = format!(
                        "Sorry, this message could not be handled: stage `{}` failed: {e}",
                        s.name
                    );
                    (
                        StageOutcomeKind::Error,
                        Some((text, TurnStatus::StageFailed)),
                    )
                }
            };
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
                    trace: std::mem::take(&mut turn.trace),
                });
            }
        }
        let request = RunRequest::from_turn(turn);
        Prepared::Request(request, std::mem::take(&mut turn.trace))
    }

    /// Runs one turn end to end. Never fails: errors become the reply, with
    /// [`TurnOutcome::failed`] set and a trace record.
    pub async fn run_turn(&self, turn: Turn) -> TurnOutcome {
        self.run_turn_tapped(turn, None).await
    }

    /// [`Pipeline::run_turn`], sending a copy of each [`RunEvent`](crate::RunEvent) to
    /// `tap` as the runner reports it ([`collect_reply_tapped`]).
    pub async fn run_turn_tapped(&self, turn: Turn, tap: Option<&EventSink>) -> TurnOutcome {
        self.run_turn_within(turn, tap, None).await
    }

    /// [`Pipeline::run_turn_tapped`], with the whole turn bounded by `deadline`: the
    /// stages get it as [`Turn::deadline`] (or their own, when earlier), and a runner
    /// still running at it is stopped with [`RunError::Timeout`](crate::RunError::Timeout).
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
        let (mut request, mut trace) = match self.prepare(turn).await {
            Prepared::Request(request, trace) => (request, trace),
            Prepared::Ended(outcome) => return outcome,
        };
        request.deadline = deadline;
        let (name, runner) = runner.unwrap_or((&self.runner_name, self.runner.as_ref()));
        let layered = Timeout::new(ReportFailure::new(CatchPanic::new(runner)), None);
        let result = collect_reply_tapped(&layered, &request, tap).await;
        // The model's own reads (read_resource) and tool calls happened during the runner.
        let (reads, calls) = (trace.reads().count(), trace.tool_calls().count());
        if trace.collect_reported() > 0 {
            self.record_reads(&request.ids, &mut trace, reads).await;
            self.record_calls(&request.ids, &mut trace, calls).await;
        }
        let (reply, run, status, error) = match result {
            Ok(run) => (run.text.clone(), Some(run), TurnStatus::Completed, None),
            Err(e) => {
                let status = match e {
                    // The deadline this call set, not a backend's own timeout.
                    crate::RunError::Timeout(_)
                        if deadline.is_some_and(|d| Instant::now() >= d) =>
                    {
                        TurnStatus::TimedOut
                    }
                    _ => TurnStatus::RunnerFailed,
                };
                (
                    format!("Sorry, the runner `{name}` failed: {e}"),
                    None,
                    status,
                    Some(e.to_string()),
                )
            }
        };
        trace.record(TraceEvent::RunFinished {
            runner: name.to_owned(),
            error,
        });
        TurnOutcome {
            reply,
            ended_by: None,
            request: Some(request),
            run,
            status,
            trace,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::error::{RunError, StageError};
    use crate::run::{EventSink, RunEvent};

    struct Push(&'static str);
    #[async_trait]
    impl Stage for Push {
        async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
            turn.message.text.push_str(self.0);
            Ok(StageOutcome::Continue)
        }
    }

    struct Stop;
    #[async_trait]
    impl Stage for Stop {
        async fn process(&self, _: &mut Turn) -> Result<StageOutcome, StageError> {
            Ok(StageOutcome::Reply("stopped".into()))
        }
    }

    struct Fail;
    #[async_trait]
    impl Stage for Fail {
        async fn process(&self, _: &mut Turn) -> Result<StageOutcome, StageError> {
            Err(StageError::msg("boom"))
        }
    }

    struct Echo;
    #[async_trait]
    impl Runner for Echo {
        async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
            events
                .emit(RunEvent::MessageDelta {
                    text: request.message.text.clone(),
                })
                .await;
            events.emit(RunEvent::RunCompleted { usage: None }).await;
            Ok(())
        }
    }

    fn pipeline(stages: Vec<(&str, Box<dyn Stage>)>) -> Pipeline {
        Pipeline::new(
            "p",
            stages.into_iter().map(|(n, s)| (n.to_owned(), s)).collect(),
            ("echo".into(), Box::new(Echo)),
            Arc::new(ModelProfile::default()),
            Some("sys".into()),
        )
    }

    /// Records one read per attachment it finds, with the attachment's scope.
    struct ReadAll;
    #[async_trait]
    impl Stage for ReadAll {
        async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
            for a in turn.attachments.clone() {
                let uri = match &a.target {
                    crate::AttachmentTarget::Uri { uri } => uri.clone(),
                    _ => String::new(),
                };
                turn.trace
                    .record(TraceEvent::ResourceRead(crate::trace::ReadRecord {
                        server: a.server,
                        uri,
                        mime_type: None,
                        scope: a.scope,
                        bytes: 10,
                        tokens_before: 5,
                        tokens_estimated: false,
                        tokens_after: 4,
                        treatment: crate::Treatment::Whole,
                        elapsed_ms: 1,
                        cache_hit: false,
                        outcome: crate::ReadOutcome::Read,
                        error: None,
                        origin: crate::ReadOrigin::Host,
                        consent: None,
                        passages: Vec::new(),
                        reason: None,
                    }));
            }
            Ok(StageOutcome::Continue)
        }
    }

    #[tokio::test]
    async fn a_store_adds_the_pins_and_keeps_the_reads() {
        use crate::store::{AttachmentStore as _, MemoryStore, NewPin};
        let store = Arc::new(MemoryStore::new());
        for (owner, uri) in [
            (PinOwner::Pipeline("p".into()), "kb://p"),
            (PinOwner::Conversation("c".into()), "kb://c"),
            (PinOwner::Conversation("other".into()), "kb://other"),
        ] {
            store
                .pin(NewPin {
                    owner,
                    server: "kb".into(),
                    target: crate::AttachmentTarget::Uri { uri: uri.into() },
                    expires_at_ms: None,
                })
                .await
                .unwrap();
        }
        let p = pipeline(vec![("read", Box::new(ReadAll))]).with_store(store.clone());
        let mut turn = Turn::new("p", "x");
        turn.ids.conversation = Some("c".into());
        turn.ids.message = "m-1".into();
        turn.attachments
            .push(crate::Attachment::message_uri("kb", "kb://m"));
        let out = p.run_turn(turn).await;
        assert_eq!(out.status, TurnStatus::Completed, "{}", out.reply);
        let history = store
            .history(&crate::HistoryQuery::default())
            .await
            .unwrap();
        let got: Vec<(&str, crate::Scope, u32)> = history
            .iter()
            .map(|r| (r.read.uri.as_str(), r.read.scope, r.seq))
            .collect();
        assert_eq!(
            got,
            [
                ("kb://m", crate::Scope::Message, 0),
                ("kb://p", crate::Scope::Pipeline, 1),
                ("kb://c", crate::Scope::Conversation, 2),
            ]
        );
        for r in &history {
            assert_eq!(r.turn_id, out.trace.turn_id());
            assert_eq!(r.at_ms, out.trace.started_at_ms());
            assert_eq!(
                (
                    r.pipeline.as_str(),
                    r.conversation.as_deref(),
                    r.message.as_deref()
                ),
                ("p", Some("c"), Some("m-1"))
            );
        }
        // A turn without a conversation gets the pipeline's pins only.
        let out = p.run_turn(Turn::new("p", "y")).await;
        let reads: Vec<&str> = out.trace.reads().map(|r| r.uri.as_str()).collect();
        assert_eq!(reads, ["kb://p"]);
    }

    /// A store whose every call fails.
    struct Broken;
    #[async_trait]
    impl AttachmentStore for Broken {
        fn describe(&self) -> String {
            "broken".into()
        }
        async fn pin(&self, _: crate::NewPin) -> Result<crate::Pin, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn unpin(
            &self,
            _: &PinOwner,
            _: &str,
            _: &crate::AttachmentTarget,
        ) -> Result<bool, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn unpin_id(&self, _: &PinOwner, _: &str) -> Result<bool, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn pins(&self, _: &[PinOwner], _: i64) -> Result<Vec<crate::Pin>, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn record(&self, _: &[InjectionRecord]) -> Result<(), crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn history(
            &self,
            _: &crate::HistoryQuery,
        ) -> Result<Vec<InjectionRecord>, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
        async fn prune(&self, _: i64, _: Option<i64>) -> Result<crate::Pruned, crate::StoreError> {
            Err(crate::StoreError::invalid("down"))
        }
    }

    #[tokio::test]
    async fn a_failing_store_leaves_the_turn_going_with_warnings() {
        let p = pipeline(vec![("read", Box::new(ReadAll))]).with_store(Arc::new(Broken));
        let mut turn = Turn::new("p", "x");
        turn.attachments
            .push(crate::Attachment::message_uri("kb", "kb://m"));
        let out = p.run_turn(turn).await;
        assert_eq!(out.status, TurnStatus::Completed);
        assert_eq!(out.reply, "x");
        let warnings: Vec<&str> = out.trace.warnings().collect();
        assert_eq!(
            warnings,
            [
                "the pinned attachments were not loaded, the turn goes on without them: down",
                "the read history of this turn (1 read) was not written: down",
            ]
        );
    }

    #[tokio::test]
    async fn stages_run_in_order_then_the_runner() {
        let p = pipeline(vec![("a", Box::new(Push("1"))), ("b", Box::new(Push("2")))]);
        let out = p.run_turn(Turn::new("ignored", "x")).await;
        assert_eq!(out.reply, "x12");
        assert!(out.status == TurnStatus::Completed && out.ended_by.is_none());
        let request = out
            .request
            .as_ref()
            .map(|r| (r.ids.pipeline.as_str(), r.system_prompt.as_deref()));
        assert_eq!(request, Some(("p", Some("sys"))));
        let stages: Vec<_> = out
            .trace
            .records()
            .iter()
            .filter_map(|r| match &r.event {
                TraceEvent::StageFinished { stage, outcome, .. } => {
                    Some((stage.as_str(), *outcome))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            stages,
            [
                ("a", StageOutcomeKind::Continue),
                ("b", StageOutcomeKind::Continue)
            ]
        );
    }

    #[tokio::test]
    async fn a_reply_ends_the_turn_before_later_stages() {
        let p = pipeline(vec![("stop", Box::new(Stop)), ("a", Box::new(Push("1")))]);
        let out = p.run_turn(Turn::new("p", "x")).await;
        assert_eq!(
            (out.reply.as_str(), out.ended_by.as_deref(), out.status),
            ("stopped", Some("stop"), TurnStatus::Ended)
        );
        assert!(out.request.is_none());
    }

    struct Panics;
    #[async_trait]
    impl Stage for Panics {
        #[allow(clippy::panic)]
        async fn process(&self, _: &mut Turn) -> Result<StageOutcome, StageError> {
            panic!("index out of range")
        }
    }

    #[tokio::test]
    async fn a_panicking_stage_ends_the_turn_with_an_error_not_the_process() {
        let p = pipeline(vec![("bad", Box::new(Panics)), ("a", Box::new(Push("1")))]);
        let out = p.run_turn(Turn::new("p", "x")).await;
        assert_eq!(out.status, TurnStatus::StageFailed);
        assert_eq!(
            out.reply,
            "Sorry, this message could not be handled: stage `bad` failed: it panicked: index out of range"
        );
    }

    #[tokio::test]
    async fn a_stage_error_becomes_a_reply_and_a_trace_record() {
        let p = pipeline(vec![("fail", Box::new(Fail))]);
        let out = p.run_turn(Turn::new("p", "x")).await;
        assert_eq!(out.status, TurnStatus::StageFailed);
        assert_eq!(
            out.reply,
            "Sorry, this message could not be handled: stage `fail` failed: boom"
        );
        assert!(out.trace.records().iter().any(|r| matches!(&r.event, TraceEvent::Warning { message } if message == "stage `fail` failed: boom")));
    }
}
