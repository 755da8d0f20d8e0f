//! `POST /v1/turns`: a turn through a pipeline, answered as one JSON document or
//! streamed as server-sent events.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use hostpipe_core::{EventSink, HistoryMessage, Scope as PinScope, Turn, Variables};
use hostpipe_engine::{Pipeline, TurnOutcome};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::super::dto::{TurnResponse, TurnStarted, document};
use super::super::error::ApiResult;
use super::super::{ApiError, Body, ServeState, TurnEvent};
use super::{St, check_ids, json, pipeline};
use crate::ops::AttachmentSpec;

/// `POST /v1/turns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnBody {
    pipeline: String,
    message: String,
    /// `preview`, or the pipeline's own runner (default).
    runner: Option<String>,
    conversation_id: Option<String>,
    message_id: Option<String>,
    bot_id: Option<String>,
    sender: Option<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    #[serde(default)]
    history: Vec<HistoryMessage>,
    /// Message-scope attachments.
    #[serde(default)]
    attachments: Vec<AttachmentSpec>,
    /// Stream server-sent events (also: `Accept: text/event-stream`).
    #[serde(default)]
    stream: bool,
}

/// Why a turn ended without an outcome.
enum TurnEnd {
    /// `[serve] turn_timeout_ms` passed.
    Timeout,
    /// The shutdown timeout passed.
    ShuttingDown,
}

/// Largest message, in bytes (the body limit bounds it too).
pub(crate) const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The pipeline a turn asks for, and whether it runs with the `preview` runner instead
/// of its own.
fn turn_pipeline(state: &ServeState, body: &TurnBody) -> ApiResult<(Arc<Pipeline>, bool)> {
    let configured = pipeline(state, &body.pipeline)?;
    match body.runner.as_deref() {
        None => Ok((configured, false)),
        Some(r) if r == configured.runner_name() => Ok((configured, false)),
        Some("preview") => Ok((configured, true)),
        Some(r) => Err(ApiError::bad_request(format!(
            "pipeline `{}` runs with runner `{}`; a turn may ask for that one or `preview`, not `{r}` (set `runner` in [pipelines.{}])",
            body.pipeline,
            configured.runner_name(),
            body.pipeline
        ))),
    }
}

fn turn_from(state: &ServeState, body: TurnBody) -> ApiResult<Turn> {
    if body.message.trim().is_empty() {
        return Err(ApiError::bad_request("`message` is empty"));
    }
    if body.message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "message_too_large",
            format!(
                "`message` is {} bytes; at most {MAX_MESSAGE_BYTES}",
                body.message.len()
            ),
        ));
    }
    let mut attachments = Vec::with_capacity(body.attachments.len());
    for (i, a) in body.attachments.into_iter().enumerate() {
        state
            .app
            .check_server(&a.server)
            .map_err(|e| ApiError::bad_request(format!("attachments[{i}]: {e}")))?;
        attachments.push(
            a.attachment(PinScope::Message)
                .map_err(|e| ApiError::bad_request(format!("attachments[{i}]: {e}")))?,
        );
    }
    check_ids(&[
        ("conversation_id", &body.conversation_id),
        ("message_id", &body.message_id),
        ("bot_id", &body.bot_id),
        ("sender", &body.sender),
    ])?;
    let mut turn = Turn::new(body.pipeline, body.message);
    turn.ids.conversation = body.conversation_id;
    turn.ids.bot = body.bot_id;
    turn.ids.message = body
        .message_id
        .unwrap_or_else(|| format!("http-{}", uuid::Uuid::new_v4()));
    turn.sender = body.sender;
    turn.variables = body.variables.into_iter().collect::<Variables>();
    turn.history = body.history;
    turn.attachments = attachments;
    Ok(turn)
}

/// The turn's result document: the JSON response, and the `done` event's data.
fn outcome_json(
    outcome: &TurnOutcome,
    pipeline: &str,
    runner: &str,
) -> ApiResult<serde_json::Value> {
    document(&TurnResponse::new(outcome, pipeline, runner))
}

/// `POST /v1/turns`: checks the request and builds the turn, starts its task, then
/// answers with its events as they come (`stream`) or with its document at the end.
pub(crate) async fn run_turn(
    State(state): St,
    headers: HeaderMap,
    Body(body): Body<TurnBody>,
) -> ApiResult {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this instance is shutting down; send the turn to another",
        ));
    }
    let stream = body.stream
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
    let (p, use_preview) = turn_pipeline(&state, &body)?;
    let runner = if use_preview {
        "preview".to_owned()
    } else {
        p.runner_name().to_owned()
    };
    let pipeline_id = p.id().to_owned();
    let turn = turn_from(&state, body)?;
    let turn_id = turn.trace.turn_id().to_owned();
    let (tx, rx) = mpsc::channel::<TurnEvent>(64);
    if stream {
        let started = document(&TurnStarted {
            turn_id: &turn_id,
            pipeline: &pipeline_id,
            runner: &runner,
        })?;
        state.approver.watch(&turn_id, tx.clone());
        state.elicitor.watch(&turn_id, tx.clone());
        let _ = tx.send(TurnEvent::Started(started)).await;
    }
    let run = TurnRun {
        state: Arc::clone(&state),
        pipeline_id,
        runner,
        turn_id,
        use_preview,
        stream,
        tx,
    };
    // The turn runs to its end (and its reads reach the history) even when the caller
    // goes away; shutdown waits for it.
    let task = state.turns.clone().spawn(run.run(turn).in_current_span());
    if stream {
        return Ok(event_stream(rx));
    }
    drop(rx);
    match task.await {
        Ok(Ok(doc)) => Ok(json(doc)),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the turn's task failed: {e}"),
        )),
    }
}

/// A turn's events as server-sent events, a keep-alive comment every 15 s.
fn event_stream(rx: mpsc::Receiver<TurnEvent>) -> Response {
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let e = rx.recv().await?;
        let (name, data) = e.encode();
        let event = Event::default().event(name).data(data);
        Some((Ok::<_, Infallible>(event), rx))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// A started turn: what its task needs besides the turn.
pub(crate) struct TurnRun {
    state: Arc<ServeState>,
    pipeline_id: String,
    runner: String,
    turn_id: String,
    /// Run it with the pipeline's `preview` runner instead of its own.
    use_preview: bool,
    /// The caller takes the events: the runner's go to `tx`, and the last one.
    stream: bool,
    /// Where the turn's events go (unread unless `stream`).
    tx: mpsc::Sender<TurnEvent>,
}

impl TurnRun {
    /// A turn of pipeline `pipeline_id` with its own runner (`runner` names it), for
    /// another door than `/v1/turns`: the runner's events go to `events` as
    /// [`TurnEvent::Run`] when given, and nothing else does.
    pub(crate) fn own_runner(
        state: Arc<ServeState>,
        pipeline_id: String,
        runner: String,
        turn_id: String,
        events: Option<mpsc::Sender<TurnEvent>>,
    ) -> Self {
        let stream = events.is_some();
        let tx = events.unwrap_or_else(|| mpsc::channel(1).0);
        Self {
            state,
            pipeline_id,
            runner,
            turn_id,
            use_preview: false,
            stream,
            tx,
        }
    }

    /// A turn of pipeline `pipeline_id` with the pipeline's `preview` runner (the
    /// stages run, the model does not), for another door than `/v1/turns` (the MCP
    /// door's `fit_context`); no event goes anywhere. The caller checks that the
    /// pipeline has a preview runner ([`ServeState::has_preview`]).
    pub(crate) fn preview(state: Arc<ServeState>, pipeline_id: String, turn_id: String) -> Self {
        Self {
            state,
            pipeline_id,
            runner: "preview".to_owned(),
            turn_id,
            use_preview: true,
            stream: false,
            tx: mpsc::channel(1).0,
        }
    }

    /// The turn's task: runs it ([`TurnRun::outcome`]) and sends the `done` or `error`
    /// event when streaming. Its result is the turn's document or the error to answer
    /// with.
    async fn run(self, turn: Turn) -> ApiResult<serde_json::Value> {
        let result = self
            .outcome(turn)
            .await
            .and_then(|o| outcome_json(&o, &self.pipeline_id, &self.runner));
        if self.stream {
            let last = match &result {
                Ok(doc) => TurnEvent::Done(doc.clone()),
                Err(e) => TurnEvent::Error(e.clone()),
            };
            let _ = self.tx.send(last).await;
        }
        result
    }

    /// Runs `turn` within `[serve] turn_timeout_ms` and logs how it ended: its outcome,
    /// or the error to answer with (504 `turn_timeout`, 503 `shutting_down`).
    pub(crate) async fn outcome(&self, turn: Turn) -> ApiResult<TurnOutcome> {
        // The pipelines in effect now: a reload meanwhile does not change this turn's.
        let current = self.state.current();
        let Some(p) = current.pipelines.get(&self.pipeline_id) else {
            return Err(ApiError::not_found(
                "unknown_pipeline",
                self.pipeline_id.clone(),
            ));
        };
        let started = std::time::Instant::now();
        let deadline = started + self.state.options.turn_timeout;
        let preview = current.preview.get(&self.pipeline_id).cloned();
        let outcome = self.run_within(p, preview, turn, deadline).await;
        self.state.approver.unwatch(&self.turn_id);
        self.state.elicitor.unwatch(&self.turn_id);
        let checked = self.check(&outcome, started);
        if let (Err(e), Err(_)) = (&checked, &outcome) {
            let Self {
                turn_id,
                pipeline_id,
                runner,
                ..
            } = self;
            // The turn's reads so far went with it: the log is its only record.
            tracing::warn!(
                target: "hostpipe::turns",
                turn_id, pipeline = pipeline_id, runner, code = e.code,
                "turn stopped before it finished; its reads are not in the history"
            );
        }
        checked?;
        outcome.map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the turn ended without an outcome",
            )
        })
    }

    /// Runs `turn` through `p`, forwarding the runner's events when streaming. The
    /// pipeline ends the turn at `deadline`, trace and history kept; the outer bound (5 s
    /// later) only catches a stage that does not honour it. Shutdown's timeout stops it.
    async fn run_within(
        &self,
        p: &Pipeline,
        preview: Option<Arc<dyn hostpipe_core::Runner>>,
        turn: Turn,
        deadline: std::time::Instant,
    ) -> Result<TurnOutcome, TurnEnd> {
        let (sink, mut run_events) = EventSink::channel(64);
        let forward = {
            let tx = self.tx.clone();
            async move {
                while let Some(e) = run_events.recv().await {
                    let _ = tx.send(TurnEvent::Run(e)).await;
                }
            }
        };
        let stop = self.state.stop_turns.clone();
        let turn_timeout = self.state.options.turn_timeout;
        let stream = self.stream;
        let use_preview = self.use_preview;
        let preview = preview.as_deref();
        // `sink` moves in: the forwarding ends when the run does.
        let run = async move {
            let tap = stream.then_some(&sink);
            let runner = if use_preview {
                preview.map(|r| ("preview", r))
            } else {
                None
            };
            let bounded = p.run_turn_on(turn, tap, Some(deadline), runner);
            tokio::select! {
                r = tokio::time::timeout(turn_timeout + Duration::from_secs(5), bounded) => {
                    r.map_err(|_| TurnEnd::Timeout)
                }
                () = stop.cancelled() => Err(TurnEnd::ShuttingDown),
            }
        };
        let (outcome, ()) = tokio::join!(run, forward);
        outcome
    }

    /// Whether `outcome` may be answered (then `Ok`), or 504 `turn_timeout` (a
    /// turn whose runner was still running at its deadline, or one the outer bound
    /// stopped), or 503
    /// `shutting_down`; logged on the `hostpipe::turns` target.
    fn check(
        &self,
        outcome: &Result<TurnOutcome, TurnEnd>,
        started: std::time::Instant,
    ) -> ApiResult<()> {
        let Self {
            turn_id,
            pipeline_id,
            runner,
            ..
        } = self;
        let turn_timeout = self.state.options.turn_timeout;
        match outcome {
            Ok(outcome) if outcome.status == hostpipe_engine::TurnStatus::TimedOut => {
                tracing::warn!(
                    target: "hostpipe::turns",
                    turn_id, pipeline = pipeline_id, runner,
                    reads = outcome.trace.reads().count(),
                    "turn timed out; its reads so far are in the history"
                );
                Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "turn_timeout",
                    format!(
                        "turn {turn_id} did not finish within {} ms ([serve] turn_timeout_ms); its reads so far are in the history",
                        turn_timeout.as_millis()
                    ),
                ))
            }
            Ok(outcome) => {
                tracing::info!(
                    target: "hostpipe::turns",
                    turn_id, pipeline = pipeline_id, runner,
                    failed = outcome.failed(), ended_by = outcome.ended_by,
                    reads = outcome.trace.reads().count(),
                    elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "turn finished"
                );
                Ok(())
            }
            Err(TurnEnd::Timeout) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "turn_timeout",
                format!(
                    "turn {turn_id} did not finish within {} ms ([serve] turn_timeout_ms)",
                    turn_timeout.as_millis()
                ),
            )),
            Err(TurnEnd::ShuttingDown) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                format!(
                    "turn {turn_id} was stopped: the instance shut down before it finished ([serve] shutdown_timeout_ms)"
                ),
            )),
        }
    }
}
