//! The per-turn trace: every resource read, every decision, every failure.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::context::{Scope, Treatment};

/// Milliseconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One `resources/read` and what was done with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadRecord {
    /// Server name.
    pub server: String,
    /// URI read (or the template, when expansion failed).
    pub uri: String,
    /// MIME type of the content (or the listing's, when nothing was read).
    #[serde(default)]
    pub mime_type: Option<String>,
    /// Attachment scope.
    pub scope: Scope,
    /// Content bytes received (text as UTF-8, blobs decoded).
    pub bytes: usize,
    /// Tokens before treatment.
    pub tokens_before: usize,
    /// Whether `tokens_before` is an estimate (a text far larger than its allowance is
    /// not tokenized whole: about 4 bytes a token).
    #[serde(default)]
    pub tokens_estimated: bool,
    /// Tokens injected.
    pub tokens_after: usize,
    /// What was done.
    pub treatment: Treatment,
    /// How long the read took, in milliseconds.
    pub elapsed_ms: u64,
    /// Whether the content came from hostpipe's cache instead of a `resources/read`.
    #[serde(default)]
    pub cache_hit: bool,
    /// What became of the read ([`ReadOutcome`]): decide on this, not on `error`'s text.
    /// Absent from JSON written before it existed: [`ReadOutcome::Read`].
    #[serde(default)]
    pub outcome: ReadOutcome,
    /// What went wrong, for people: the server's error, `withheld: …` (the consent
    /// decision), `not read: …` (the policy's reason); `None` when the read went through.
    pub error: Option<String>,
    /// Who chose the read: the host (an attachment) or the model (`read_resource`).
    #[serde(default)]
    pub origin: ReadOrigin,
    /// The consent decision, when the pipeline has a consent policy
    /// ([`Verdict::how`](crate::Verdict::how)).
    #[serde(default)]
    pub consent: Option<String>,
    /// The passages kept, when the text was ranked in passages (treatment `chunked`), in
    /// document order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passages: Vec<PassageRecord>,
    /// Why the resource was left out, or only partly kept, e.g. `no passage matched the
    /// message`, `its best passage ranked 14th; the budget ran out at rank 9`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What became of one read ([`ReadRecord::outcome`]). Whether what was read then went
/// to the model, whole or in part, is the record's treatment and token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadOutcome {
    /// Read and converted (a cached content counts: see [`ReadRecord::cache_hit`]).
    #[default]
    Read,
    /// The pipeline's policy kept it from the model: the consent gate denied it (the read
    /// never reached the server), or the byte or MIME limits refused what the server sent.
    /// The model is told it was withheld or not included, not that it does not exist.
    Withheld,
    /// Left out before reading, never sent to the server: its listing says it is for the
    /// user only (`annotations.audience`), or has a MIME type or size the policy refuses;
    /// or the attachment could not be resolved (a template that could not be filled in,
    /// a server not bound for the turn). `error` says which.
    NotRead,
    /// The server failed (an error, no answer in time, the turn's deadline), or the
    /// conversion of what it sent failed (e.g. an image that cannot be decoded).
    Failed,
}

impl ReadOutcome {
    /// `read`, `withheld`, `not_read` or `failed` (as serialized and stored).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Withheld => "withheld",
            Self::NotRead => "not_read",
            Self::Failed => "failed",
        }
    }

    /// The outcome [`ReadOutcome::as_str`] gives `s`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Read, Self::Withheld, Self::NotRead, Self::Failed]
            .into_iter()
            .find(|o| o.as_str() == s)
    }

    /// Whether the read went through ([`ReadOutcome::Read`]).
    pub fn is_read(self) -> bool {
        self == Self::Read
    }
}

/// Who made a tool call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOrigin {
    /// The model, in a runner's tool loop.
    #[default]
    Model,
    /// A caller of the HTTP API (`POST /v1/servers/{server}/tools/{name}/call`).
    Api,
    /// A remote agent, through the turn's tool endpoint (remote runner protocol v2).
    Agent,
}

impl CallOrigin {
    /// `model`, `api` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Api => "api",
            Self::Agent => "agent",
        }
    }
}

/// One tool call and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The MCP server.
    pub server: String,
    /// The tool's name as its server lists it.
    pub tool: String,
    /// The name the model saw (`server__tool`).
    pub name: String,
    /// The arguments (JSON), capped at
    /// [`ToolCallRequest::MAX_ARGUMENT_BYTES`](crate::ToolCallRequest::MAX_ARGUMENT_BYTES).
    pub arguments: serde_json::Value,
    /// Bytes of the result's content (text as UTF-8, blobs decoded); 0 when the call was
    /// withheld or failed.
    pub result_bytes: usize,
    /// Tokens of the result's text as the model got it (after any truncation).
    pub result_tokens: usize,
    /// The tool reported an error, or the call failed or was withheld.
    pub is_error: bool,
    /// Why the call failed or was withheld (not the tool's own error text).
    #[serde(default)]
    pub error: Option<String>,
    /// The pipeline's policy withheld the call: it never reached the server.
    #[serde(default)]
    pub withheld: bool,
    /// How long the call took, in milliseconds.
    pub elapsed_ms: u64,
    /// The consent decision, when the pipeline has a consent policy.
    #[serde(default)]
    pub consent: Option<String>,
    /// Who made it.
    #[serde(default)]
    pub origin: CallOrigin,
}

/// Who chose a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadOrigin {
    /// The host read an attachment (pipeline, conversation or message scope): a user or
    /// the platform chose it.
    #[default]
    Host,
    /// The model asked for it (the `read_resource` exploration tool).
    Model,
}

impl ReadOrigin {
    /// `host` or `model`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Model => "model",
        }
    }
}

/// One passage of a resource that went to the model (docs/configuration.md, "How
/// resources are fitted").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassageRecord {
    /// Its place in the turn's ranking of all passages, from 1.
    pub rank: usize,
    /// The score the order was made by: BM25 over the turn's passages with the scope
    /// and priority boost; the fused score when dense retrieval is on; the reranker's
    /// relevance for reranked passages; 0 for a passage kept only because its resource
    /// is a must.
    pub score: f64,
    /// First line (1-based).
    pub first_line: u32,
    /// Last line (1-based).
    pub last_line: u32,
    /// The headings it sits under, joined by ` > ` (empty when it has none).
    #[serde(default)]
    pub heading: String,
    /// Whether only the sentences around its best match were kept (it did not fit whole).
    #[serde(default)]
    pub cut: bool,
}

/// How a stage finished ([`TraceEvent::StageFinished`]): serialized `continue`, `reply`
/// or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageOutcomeKind {
    /// The turn went on ([`StageOutcome::Continue`](crate::StageOutcome::Continue)).
    Continue,
    /// The stage ended the turn with a reply
    /// ([`StageOutcome::Reply`](crate::StageOutcome::Reply)).
    Reply,
    /// The stage failed (or panicked); the turn ended with an error reply.
    Error,
}

impl StageOutcomeKind {
    /// `continue`, `reply` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Reply => "reply",
            Self::Error => "error",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A stage started.
    StageStarted {
        /// Stage name.
        stage: String,
    },
    /// A stage finished.
    StageFinished {
        /// Stage name.
        stage: String,
        /// How it finished.
        outcome: StageOutcomeKind,
        /// Duration in milliseconds.
        elapsed_ms: u64,
    },
    /// A bound server could not be used.
    ServerUnavailable {
        /// Server name.
        server: String,
        /// Why.
        reason: String,
        /// Whether the binding required it (then the turn ended).
        required: bool,
    },
    /// A resource was read (or the read failed).
    ResourceRead(ReadRecord),
    /// A tool was called (or the call was withheld or failed).
    ToolCall(ToolCallRecord),
    /// Tools were assembled.
    ToolsAssembled {
        /// Tools offered, exploration tools included.
        count: usize,
        /// Tools dropped (e.g. a name collision or an invalid schema), with reasons.
        dropped: Vec<String>,
    },
    /// What a stage did that is worth seeing (e.g. a prompt command expanded).
    Note {
        /// What.
        message: String,
    },
    /// Something worth knowing that did not stop the turn.
    Warning {
        /// What.
        message: String,
    },
    /// A server asked the user a question (MCP elicitation), and what it was told.
    Elicitation(crate::elicit::ElicitationRecord),
    /// The runner finished or failed.
    RunFinished {
        /// Runner name.
        runner: String,
        /// The error, if it failed.
        error: Option<String>,
        /// How long the runner ran, in milliseconds (0 in traces written before it was
        /// recorded).
        #[serde(default)]
        elapsed_ms: u64,
        /// The runner's own time, in milliseconds: `elapsed_ms` less the time of the
        /// tool calls and `read_resource` reads hostpipe made for it meanwhile (a tool
        /// loop runs them one after the other). For a runner that calls a model this is
        /// the model's time; hostpipe's own overhead in a turn is the rest.
        #[serde(default)]
        model_ms: u64,
    },
}

/// A trace event with the time it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Milliseconds since the turn started.
    pub at_ms: u64,
    /// The event.
    #[serde(flatten)]
    pub event: TraceEvent,
}

/// Where code that runs outside the stages (the model's tool calls, during the runner)
/// reports its resource reads and tool calls; [`Trace::collect_reported`] moves them
/// into the trace. Cloning shares the sink.
#[derive(Debug, Clone, Default)]
pub struct ReadSink(std::sync::Arc<std::sync::Mutex<Vec<TraceEvent>>>);

impl ReadSink {
    /// Reports a read.
    pub fn push(&self, record: ReadRecord) {
        self.report(TraceEvent::ResourceRead(record));
    }

    /// Reports a tool call.
    pub fn push_call(&self, record: ToolCallRecord) {
        self.report(TraceEvent::ToolCall(record));
    }

    /// Reports an elicitation.
    pub fn push_elicitation(&self, record: crate::elicit::ElicitationRecord) {
        self.report(TraceEvent::Elicitation(record));
    }

    fn report(&self, event: TraceEvent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }

    fn take(&self) -> Vec<TraceEvent> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The trace of one turn, in the order events were recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trace {
    turn_id: String,
    started_at_ms: i64,
    #[serde(skip, default = "Instant::now")]
    started: Instant,
    records: Vec<TraceRecord>,
    #[serde(skip)]
    sink: ReadSink,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            turn_id: uuid::Uuid::now_v7().to_string(),
            started_at_ms: unix_ms_now(),
            started: Instant::now(),
            records: Vec::new(),
            sink: ReadSink::default(),
        }
    }
}

impl Trace {
    /// An empty trace starting now, with a new turn id.
    pub fn new() -> Self {
        Self::default()
    }

    /// The turn's id: a UUID v7 made when the trace was, so ids sort by time. The read
    /// history (`hostpipe_engine::InjectionRecord::turn_id`) keys on it.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The sink for reads made outside the stages (see [`ReadSink`]).
    pub fn read_sink(&self) -> ReadSink {
        self.sink.clone()
    }

    /// Moves the reads and tool calls reported to [`Trace::read_sink`] into the trace;
    /// returns how many.
    pub fn collect_reported(&mut self) -> usize {
        let events = self.sink.take();
        let n = events.len();
        for e in events {
            self.record(e);
        }
        n
    }

    /// The tool calls, oldest first.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallRecord> {
        self.records.iter().filter_map(|r| match &r.event {
            TraceEvent::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// When the turn started (Unix ms).
    pub fn started_at_ms(&self) -> i64 {
        self.started_at_ms
    }

    /// Records `event`, and logs it through `tracing` at DEBUG (the trace is the record;
    /// whoever runs the turn decides what to show).
    pub fn record(&mut self, event: TraceEvent) {
        tracing::debug!(event = ?event, "trace");
        let at_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.records.push(TraceRecord { at_ms, event });
    }

    /// Records a note.
    pub fn note(&mut self, message: impl Into<String>) {
        self.record(TraceEvent::Note {
            message: message.into(),
        });
    }

    /// Records a warning.
    pub fn warn(&mut self, message: impl Into<String>) {
        self.record(TraceEvent::Warning {
            message: message.into(),
        });
    }

    /// All records, oldest first.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The warnings' messages, oldest first.
    pub fn warnings(&self) -> impl Iterator<Item = &str> {
        self.records.iter().filter_map(|r| match &r.event {
            TraceEvent::Warning { message } => Some(message.as_str()),
            _ => None,
        })
    }

    /// The resource reads, oldest first.
    pub fn reads(&self) -> impl Iterator<Item = &ReadRecord> {
        self.records.iter().filter_map(|r| match &r.event {
            TraceEvent::ResourceRead(read) => Some(read),
            _ => None,
        })
    }

    /// Time since the turn started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_outcome_is_written_as_before() {
        let event = TraceEvent::StageFinished {
            stage: "a".into(),
            outcome: StageOutcomeKind::Reply,
            elapsed_ms: 3,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"event": "stage_finished", "stage": "a", "outcome": "reply", "elapsed_ms": 3})
        );
        assert_eq!(serde_json::from_value::<TraceEvent>(json).unwrap(), event);
    }

    #[test]
    fn a_read_record_without_an_outcome_still_parses() {
        let old = serde_json::json!({
            "server": "kb", "uri": "kb://a", "scope": "pipeline", "bytes": 3,
            "tokens_before": 1, "tokens_after": 1, "treatment": {"kind": "whole"},
            "elapsed_ms": 0, "error": null
        });
        let r: ReadRecord = serde_json::from_value(old).unwrap();
        assert_eq!(r.outcome, ReadOutcome::Read);
        let mut json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["outcome"], "read");
        json["outcome"] = "not_read".into();
        let r: ReadRecord = serde_json::from_value(json).unwrap();
        assert_eq!(r.outcome, ReadOutcome::NotRead);
        for o in [
            ReadOutcome::Read,
            ReadOutcome::Withheld,
            ReadOutcome::NotRead,
            ReadOutcome::Failed,
        ] {
            assert_eq!(ReadOutcome::parse(o.as_str()), Some(o));
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        assert_eq!(ReadOutcome::parse("withheld: x"), None);
    }
}
