//! What a pipeline's observer sees: each read and tool call once, each turn once, with
//! the runner's own time apart from the tool calls hostpipe made for it.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::run::{EventSink, RunEvent};
use hostpipe_core::trace::{CallOrigin, ReadSink};
use hostpipe_core::{
    ReadOrigin, ReadOutcome, ReadRecord, RunError, RunRequest, Scope, Stage, StageError,
    StageOutcome, ToolCallRecord, Treatment, Turn,
};

use super::*;

/// Everything the observer was told, as lines.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl PipelineObserver for Seen {
    fn reads(&self, pipeline: &str, reads: &[&ReadRecord]) {
        for r in reads {
            self.0
                .lock()
                .unwrap()
                .push(format!("read {pipeline} {}", r.uri));
        }
    }

    fn tool_calls(&self, pipeline: &str, calls: &[&ToolCallRecord]) {
        for c in calls {
            self.0
                .lock()
                .unwrap()
                .push(format!("call {pipeline} {}", c.tool));
        }
    }

    fn turn_finished(&self, turn: &TurnReport<'_>) {
        self.0.lock().unwrap().push(format!(
            "turn {} {} runner={}",
            turn.pipeline,
            turn.end.as_str(),
            turn.model.is_some()
        ));
    }
}

fn read(uri: &str) -> ReadRecord {
    ReadRecord {
        server: "kb".into(),
        uri: uri.into(),
        mime_type: None,
        scope: Scope::Pipeline,
        bytes: 3,
        tokens_before: 1,
        tokens_estimated: false,
        tokens_after: 1,
        treatment: Treatment::Whole,
        elapsed_ms: 0,
        cache_hit: false,
        outcome: ReadOutcome::Read,
        error: None,
        origin: ReadOrigin::Host,
        consent: None,
        passages: Vec::new(),
        reason: None,
    }
}

/// Reads `kb://a`, and hands the turn's sink to the runner.
struct ReadsAndShares(Arc<Mutex<Option<ReadSink>>>);
#[async_trait]
impl Stage for ReadsAndShares {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        turn.trace
            .record(hostpipe_core::TraceEvent::ResourceRead(read("kb://a")));
        *self.0.lock().unwrap() = Some(turn.trace.read_sink());
        Ok(StageOutcome::Continue)
    }
}

/// Runs at least 300 ms, and reports a tool call of 200 ms and a model read of 40 ms
/// made for it meanwhile.
struct CallsATool(Arc<Mutex<Option<ReadSink>>>);
#[async_trait]
impl Runner for CallsATool {
    async fn run(&self, _: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let sink = self.0.lock().unwrap().clone().unwrap();
        sink.push_call(ToolCallRecord {
            server: "kb".into(),
            tool: "search".into(),
            name: "kb__search".into(),
            arguments: serde_json::json!({}),
            result_bytes: 0,
            result_tokens: 0,
            is_error: false,
            error: None,
            withheld: false,
            elapsed_ms: 200,
            consent: None,
            origin: CallOrigin::Model,
        });
        sink.push(ReadRecord {
            elapsed_ms: 40,
            origin: ReadOrigin::Model,
            ..read("kb://b")
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        events
            .emit(RunEvent::MessageCompleted { text: "ok".into() })
            .await;
        events.emit(RunEvent::RunCompleted { usage: None }).await;
        Ok(())
    }
}

struct Stop;
#[async_trait]
impl Stage for Stop {
    async fn process(&self, _: &mut Turn) -> Result<StageOutcome, StageError> {
        Ok(StageOutcome::Reply("stopped".into()))
    }
}

#[tokio::test]
async fn the_observer_sees_each_read_call_and_turn_once_and_the_runner_time_without_the_tools() {
    let shared = Arc::new(Mutex::new(None));
    let seen = Arc::new(Seen::default());
    let p = Pipeline::new(
        "docs",
        vec![(
            "reads".into(),
            Box::new(ReadsAndShares(Arc::clone(&shared))) as Box<dyn Stage>,
        )],
        ("tools".into(), Box::new(CallsATool(shared))),
        Arc::new(ModelProfile::default()),
        None,
    )
    .with_observer(Arc::clone(&seen) as Arc<dyn PipelineObserver>);
    let out = p.run_turn(Turn::new("docs", "x")).await;
    assert_eq!(out.status, TurnStatus::Completed, "{}", out.reply);
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            "read docs kb://a",
            "read docs kb://b",
            "call docs search",
            "turn docs completed runner=true",
        ]
    );
    let (elapsed_ms, model_ms) = out
        .trace
        .records()
        .iter()
        .find_map(|r| match r.event {
            TraceEvent::RunFinished {
                elapsed_ms,
                model_ms,
                ..
            } => Some((elapsed_ms, model_ms)),
            _ => None,
        })
        .unwrap();
    assert!(elapsed_ms >= 300, "{elapsed_ms}");
    // The tool call's 200 ms and the read's 40 ms were hostpipe's, not the model's.
    assert_eq!(model_ms, elapsed_ms - 240);
    let report = TurnReport::of("docs", &out, Duration::from_millis(elapsed_ms + 5));
    assert_eq!(report.model, Some(Duration::from_millis(model_ms)));
    assert_eq!(report.overhead(), Duration::from_millis(245));
}

#[tokio::test]
async fn a_prepared_turn_and_an_ended_one_are_turns_without_a_runner() {
    let seen = Arc::new(Seen::default());
    let shared = Arc::new(Mutex::new(None));
    let p = Pipeline::new(
        "docs",
        vec![(
            "reads".into(),
            Box::new(ReadsAndShares(Arc::clone(&shared))) as Box<dyn Stage>,
        )],
        ("tools".into(), Box::new(CallsATool(shared))),
        Arc::new(ModelProfile::default()),
        None,
    )
    .with_observer(Arc::clone(&seen) as Arc<dyn PipelineObserver>);
    assert!(matches!(
        p.prepare(Turn::new("docs", "x")).await,
        Prepared::Request(..)
    ));
    let stops = Pipeline::new(
        "stops",
        vec![("stop".into(), Box::new(Stop) as Box<dyn Stage>)],
        ("tools".into(), Box::new(CallsATool(Arc::default()))),
        Arc::new(ModelProfile::default()),
        None,
    )
    .with_observer(Arc::clone(&seen) as Arc<dyn PipelineObserver>);
    let out = stops.run_turn(Turn::new("stops", "x")).await;
    assert_eq!(out.status, TurnStatus::Ended);
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            "read docs kb://a",
            "turn docs prepared runner=false",
            "turn stops ended runner=false",
        ]
    );
}
