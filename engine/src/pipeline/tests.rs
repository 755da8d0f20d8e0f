//! The pipeline on scripted stages, runners and stores.

#![allow(clippy::unwrap_used)]

use async_trait::async_trait;

use hostpipe_core::run::{EventSink, RunEvent};
use hostpipe_core::{
    RunError, RunRequest, Stage, StageError, StageOutcome, StageOutcomeKind, Turn,
};

use super::*;
use crate::store::{
    AttachmentStore, GrantStore, HistorySink, InjectionRecord, PinOwner, PinSource,
};

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
                hostpipe_core::AttachmentTarget::Uri { uri } => uri.clone(),
                _ => String::new(),
            };
            turn.trace
                .record(TraceEvent::ResourceRead(hostpipe_core::trace::ReadRecord {
                    server: a.server,
                    uri,
                    mime_type: None,
                    scope: a.scope,
                    bytes: 10,
                    tokens_before: 5,
                    tokens_estimated: false,
                    tokens_after: 4,
                    treatment: hostpipe_core::Treatment::Whole,
                    elapsed_ms: 1,
                    cache_hit: false,
                    outcome: hostpipe_core::ReadOutcome::Read,
                    error: None,
                    origin: hostpipe_core::ReadOrigin::Host,
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
                target: hostpipe_core::AttachmentTarget::Uri { uri: uri.into() },
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
        .push(hostpipe_core::Attachment::message_uri("kb", "kb://m"));
    let out = p.run_turn(turn).await;
    assert_eq!(out.status, TurnStatus::Completed, "{}", out.reply);
    let history = store
        .history(&crate::HistoryQuery::default())
        .await
        .unwrap();
    let got: Vec<(&str, hostpipe_core::Scope, u32)> = history
        .iter()
        .map(|r| (r.read.uri.as_str(), r.read.scope, r.seq))
        .collect();
    assert_eq!(
        got,
        [
            ("kb://m", hostpipe_core::Scope::Message, 0),
            ("kb://p", hostpipe_core::Scope::Pipeline, 1),
            ("kb://c", hostpipe_core::Scope::Conversation, 2),
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
impl PinSource for Broken {
    async fn pins(&self, _: &[PinOwner], _: i64) -> Result<Vec<crate::Pin>, crate::StoreError> {
        Err(crate::StoreError::invalid("down"))
    }
}

#[async_trait]
impl HistorySink for Broken {
    async fn record(&self, _: &[InjectionRecord]) -> Result<(), crate::StoreError> {
        Err(crate::StoreError::invalid("down"))
    }
}

#[async_trait]
impl GrantStore for Broken {}

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
        _: &hostpipe_core::AttachmentTarget,
    ) -> Result<bool, crate::StoreError> {
        Err(crate::StoreError::invalid("down"))
    }
    async fn unpin_id(&self, _: &PinOwner, _: &str) -> Result<bool, crate::StoreError> {
        Err(crate::StoreError::invalid("down"))
    }
    async fn list_pins(
        &self,
        _: &crate::PinQuery,
        _: i64,
    ) -> Result<Vec<crate::Pin>, crate::StoreError> {
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
        .push(hostpipe_core::Attachment::message_uri("kb", "kb://m"));
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
            TraceEvent::StageFinished { stage, outcome, .. } => Some((stage.as_str(), *outcome)),
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
        format!(
            "Sorry, this message could not be handled: stage `bad` failed (turn {}).",
            out.trace.turn_id()
        )
    );
    // What went wrong is in the trace, not in the user's reply.
    assert!(out.trace.records().iter().any(|r| matches!(&r.event, TraceEvent::Warning { message } if message.contains("it panicked: index out of range"))));
}

#[tokio::test]
async fn a_stage_error_becomes_a_reply_and_a_trace_record() {
    let p = pipeline(vec![("fail", Box::new(Fail))]);
    let out = p.run_turn(Turn::new("p", "x")).await;
    assert_eq!(out.status, TurnStatus::StageFailed);
    assert_eq!(
        out.reply,
        format!(
            "Sorry, this message could not be handled: stage `fail` failed (turn {}).",
            out.trace.turn_id()
        )
    );
    assert!(out.trace.records().iter().any(|r| matches!(&r.event, TraceEvent::Warning { message } if message == "stage `fail` failed: boom")));
}

struct Slow;
#[async_trait]
impl Runner for Slow {
    async fn run(&self, _: &RunRequest, _: &EventSink) -> Result<(), RunError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_turn_past_its_deadline_and_a_failed_stage_are_told_in_the_pipelines_language() {
    let zh = Arc::new(hostpipe_core::Messages::new(hostpipe_core::Locale::ZhHans));
    let p = Pipeline::new(
        "p",
        Vec::new(),
        ("slow".into(), Box::new(Slow)),
        Arc::new(ModelProfile::default()),
        None,
    )
    .with_messages(Arc::clone(&zh));
    let deadline = Instant::now() + Duration::from_millis(50);
    let out = p
        .run_turn_within(Turn::new("p", "你好"), None, Some(deadline))
        .await;
    assert_eq!(out.status, TurnStatus::TimedOut);
    assert_eq!(
        out.reply,
        format!(
            "抱歉，这条消息处理超时，已停止（请求编号 {}）。",
            out.trace.turn_id()
        )
    );

    let p = pipeline(vec![("fail", Box::new(Fail))]).with_messages(zh);
    let out = p.run_turn(Turn::new("p", "x")).await;
    assert_eq!(
        out.reply,
        format!(
            "抱歉，无法处理这条消息：处理步骤 `fail` 出错了（请求编号 {}）。",
            out.trace.turn_id()
        )
    );
}
