//! `GET /metrics`: what the service did, in the Prometheus text exposition format
//! (version 0.0.4), or OpenMetrics 1.0 for a scraper that asks for it (`Accept:
//! application/openmetrics-text`). The names follow Prometheus's conventions (base units
//! in the name, `_total` on counters); docs/http-api.md, "Metrics", lists them.
//!
//! Two sources, so that every door is counted once and nothing waits on a scrape:
//!
//! - [`TurnMetrics`], every pipeline's [`PipelineObserver`]: turns, reads, tokens,
//!   passages and tool calls, counted when the pipeline hands them to the history,
//!   whatever door the turn came through (`/v1/turns`, `/v1/chat/completions`, `/mcp`,
//!   `/retrieval`). A count is an atomic add on a series found under a read lock.
//! - [`Snapshot`], a collector read at each scrape: the MCP host's requests per server
//!   and method ([`McpHost::request_stats`]) and its servers' status, the content
//!   cache's size, and the consent and elicitation questions waiting.
//!
//! Labels are bounded: pipeline, server, scope, outcome, method and tool names, never
//! URIs, conversation ids, arguments or user text. A server label the host does not know
//! (a model's made-up `read_resource` server) becomes `_unknown`, and tool labels stop at
//! [`MAX_TOOL_SERIES`] series (then `_other`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hostpipe_core::{McpSource as _, ReadOutcome, ReadRecord, ServerStatus, ToolCallRecord};
use hostpipe_engine::{PipelineObserver, TurnReport};
use hostpipe_mcp::{McpHost, REQUEST_SECONDS_BUCKETS, RequestOutcome};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric as _, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::{HttpApprover, HttpElicitor, ServeState};

/// Upper bounds of the turn latency buckets, seconds (up to the 120 s turn timeout).
const TURN_SECONDS_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The most `hostpipe_tool_calls_total` series with a tool's own name; the calls of
/// tools beyond them are counted under `tool="_other"`.
pub(crate) const MAX_TOOL_SERIES: usize = 2000;

/// The server label of a record whose server the host does not know.
const UNKNOWN: &str = "_unknown";

/// The `Content-Type` of OpenMetrics 1.0 text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    pipeline: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PipelineLabels {
    pipeline: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadLabels {
    server: String,
    scope: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    server: String,
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassageLabels {
    server: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    server: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolTimeLabels {
    server: String,
    tool: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn turn_histogram() -> Histogram {
    Histogram::new(TURN_SECONDS_BUCKETS)
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_SECONDS_BUCKETS)
}

/// The pipelines' observer: counts turns, reads and tool calls as they are recorded.
pub(crate) struct TurnMetrics {
    host: Arc<McpHost>,
    turns: Family<TurnLabels, Counter>,
    turn_seconds: Histograms<TurnLabels>,
    model_seconds: Histograms<PipelineLabels>,
    overhead_seconds: Histograms<TurnLabels>,
    injected_tokens: Family<PipelineLabels, Counter>,
    budget_tokens: Family<PipelineLabels, Counter>,
    reads: Family<ReadLabels, Counter>,
    read_bytes: Family<SourceLabels, Counter>,
    passages: Family<PassageLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    /// The series of `tool_calls` made so far (about: see [`MAX_TOOL_SERIES`]).
    tool_series: AtomicUsize,
    tool_seconds: Histograms<ToolTimeLabels>,
}

impl TurnMetrics {
    fn new(host: Arc<McpHost>) -> Self {
        Self {
            host,
            turns: Family::default(),
            turn_seconds: Family::new_with_constructor(turn_histogram),
            model_seconds: Family::new_with_constructor(turn_histogram),
            overhead_seconds: Family::new_with_constructor(turn_histogram),
            injected_tokens: Family::default(),
            budget_tokens: Family::default(),
            reads: Family::default(),
            read_bytes: Family::default(),
            passages: Family::default(),
            tool_calls: Family::default(),
            tool_series: AtomicUsize::new(0),
            tool_seconds: Family::new_with_constructor(request_histogram),
        }
    }

    /// `server` if the host knows it, else [`UNKNOWN`].
    fn server_label(&self, server: &str) -> String {
        if self.host.has_server(server) {
            server.to_owned()
        } else {
            UNKNOWN.to_owned()
        }
    }

    fn register(self: &Arc<Self>, registry: &mut Registry) {
        let tokens = || Unit::Other("tokens".into());
        registry.register(
            "hostpipe_turns",
            "Turns ended, by pipeline and outcome (completed, ended by a stage, stage_failed, runner_failed, timed_out; prepared: stages only, e.g. /retrieval)",
            self.turns.clone(),
        );
        registry.register_with_unit(
            "hostpipe_turn_duration",
            "How long turns took, from the pipeline taking the turn to its outcome",
            Unit::Seconds,
            self.turn_seconds.clone(),
        );
        registry.register_with_unit(
            "hostpipe_turn_model_duration",
            "The runner's own time in turns that ran one (the model's, for a runner that calls one): its run less the tool calls and reads hostpipe made for it",
            Unit::Seconds,
            self.model_seconds.clone(),
        );
        registry.register_with_unit(
            "hostpipe_turn_overhead_duration",
            "hostpipe's own time in turns: the turn's duration less the runner's own time",
            Unit::Seconds,
            self.overhead_seconds.clone(),
        );
        registry.register_with_unit(
            "hostpipe_context_injected",
            "Tokens of resource context given to the runner, by pipeline (turns with a context budget)",
            tokens(),
            self.injected_tokens.clone(),
        );
        registry.register_with_unit(
            "hostpipe_context_budget",
            "The context budgets of those turns, tokens, by pipeline: injected over budget is how full the budget ran",
            tokens(),
            self.budget_tokens.clone(),
        );
        registry.register(
            "hostpipe_resource_reads",
            "Resource reads by server, scope and outcome: hit (from the cache), read (from the server), not_read (left out before reading), withheld (by the policy), failed",
            self.reads.clone(),
        );
        registry.register_with_unit(
            "hostpipe_resource_read",
            "Content bytes of the reads that went through, by server and source (cache or server)",
            Unit::Bytes,
            self.read_bytes.clone(),
        );
        registry.register(
            "hostpipe_context_passages",
            "Passages of resources ranked in passages, by server and outcome (kept, dropped)",
            self.passages.clone(),
        );
        registry.register(
            "hostpipe_tool_calls",
            "Tool calls by server, tool and outcome: ok, error (the tool said so), failed, withheld (by the policy)",
            self.tool_calls.clone(),
        );
        registry.register_with_unit(
            "hostpipe_tool_call_duration",
            "How long tool calls took, by server and tool",
            Unit::Seconds,
            self.tool_seconds.clone(),
        );
    }
}

/// A read's outcome label: `hit` or `read` for one that went through (from the cache or
/// the server), else its [`ReadOutcome`].
fn read_outcome(r: &ReadRecord) -> &'static str {
    match r.outcome {
        ReadOutcome::Read if r.cache_hit => "hit",
        o => o.as_str(),
    }
}

/// A tool call's outcome label.
fn call_outcome(c: &ToolCallRecord) -> &'static str {
    if c.withheld {
        "withheld"
    } else if c.error.is_some() {
        "failed"
    } else if c.is_error {
        "error"
    } else {
        "ok"
    }
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl PipelineObserver for TurnMetrics {
    fn reads(&self, _pipeline: &str, reads: &[&ReadRecord]) {
        for r in reads {
            let server = self.server_label(&r.server);
            let outcome = read_outcome(r);
            self.reads
                .get_or_create(&ReadLabels {
                    server: server.clone(),
                    scope: r.scope.as_str(),
                    outcome,
                })
                .inc();
            if r.outcome.is_read() {
                let source = if r.cache_hit { "cache" } else { "server" };
                self.read_bytes
                    .get_or_create(&SourceLabels {
                        server: server.clone(),
                        source,
                    })
                    .inc_by(as_u64(r.bytes));
            }
            if let hostpipe_core::Treatment::Chunked { kept, total } = r.treatment {
                for (outcome, n) in [("kept", kept), ("dropped", total.saturating_sub(kept))] {
                    self.passages
                        .get_or_create(&PassageLabels {
                            server: server.clone(),
                            outcome,
                        })
                        .inc_by(as_u64(n));
                }
            }
        }
    }

    fn tool_calls(&self, _pipeline: &str, calls: &[&ToolCallRecord]) {
        for c in calls {
            let server = self.server_label(&c.server);
            let outcome = call_outcome(c);
            let mut labels = ToolLabels {
                server,
                tool: c.tool.clone(),
                outcome,
            };
            // A name the server does not list is the caller's or the model's text,
            // not a tool: it never becomes a label.
            if labels.server == UNKNOWN || !self.host.has_tool(&c.server, &c.tool) {
                UNKNOWN.clone_into(&mut labels.tool);
            } else if self.tool_calls.get(&labels).is_none() {
                // A new series: within the cap (two new ones at once may both count).
                if self.tool_series.load(Ordering::Relaxed) >= MAX_TOOL_SERIES {
                    "_other".clone_into(&mut labels.tool);
                } else {
                    self.tool_series.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.tool_calls.get_or_create(&labels).inc();
            self.tool_seconds
                .get_or_create(&ToolTimeLabels {
                    server: labels.server,
                    tool: labels.tool,
                })
                .observe(ms_to_seconds(c.elapsed_ms));
        }
    }

    fn turn_finished(&self, turn: &TurnReport<'_>) {
        let labels = TurnLabels {
            pipeline: turn.pipeline.to_owned(),
            outcome: turn.end.as_str(),
        };
        self.turns.get_or_create(&labels).inc();
        self.turn_seconds
            .get_or_create(&labels)
            .observe(turn.duration.as_secs_f64());
        self.overhead_seconds
            .get_or_create(&labels)
            .observe(turn.overhead().as_secs_f64());
        let pipeline = PipelineLabels {
            pipeline: labels.pipeline,
        };
        if let Some(model) = turn.model {
            self.model_seconds
                .get_or_create(&pipeline)
                .observe(model.as_secs_f64());
        }
        if let Some(request) = turn.request
            && let Some(budget) = request.context_budget
        {
            self.injected_tokens
                .get_or_create(&pipeline)
                .inc_by(as_u64(request.context_tokens()));
            self.budget_tokens
                .get_or_create(&pipeline)
                .inc_by(as_u64(budget));
        }
    }
}

#[allow(clippy::cast_precision_loss)] // milliseconds below 2^52
fn ms_to_seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// What is read at each scrape: the MCP host's requests and servers, the cache, the
/// questions waiting.
struct Snapshot {
    host: Arc<McpHost>,
    approver: HttpApprover,
    elicitor: HttpElicitor,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").finish_non_exhaustive()
    }
}

/// A status as the `status` label says it.
impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.host.request_stats();
        let mut requests = encoder.encode_descriptor(
            "hostpipe_mcp_requests",
            "Requests sent to MCP servers that ended, by server, method and outcome (ok, error, timeout, cancelled)",
            None,
            MetricType::Counter,
        )?;
        for (server, methods) in &stats {
            for (method, s) in methods {
                for outcome in RequestOutcome::ALL {
                    let labels = [
                        ("server", server.as_str()),
                        ("method", *method),
                        ("outcome", outcome.as_str()),
                    ];
                    ConstCounter::new(s.ended(outcome)).encode(requests.encode_family(&labels)?)?;
                }
            }
        }
        let seconds = Unit::Seconds;
        let mut latency = encoder.encode_descriptor(
            "hostpipe_mcp_request_duration",
            "How long requests to MCP servers took, by server and method",
            Some(&seconds),
            MetricType::Histogram,
        )?;
        for (server, methods) in &stats {
            for (method, s) in methods {
                let labels = [("server", server.as_str()), ("method", *method)];
                let buckets: Vec<(f64, u64)> = REQUEST_SECONDS_BUCKETS
                    .iter()
                    .copied()
                    .chain([f64::INFINITY])
                    .zip(s.buckets.iter().copied())
                    .collect();
                latency
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        s.seconds_sum,
                        s.ended_total(),
                        &buckets,
                        None,
                    )?;
            }
        }
        let servers = self.host.servers();
        let mut up = encoder.encode_descriptor(
            "hostpipe_mcp_server_up",
            "1 when the MCP server is connected, else 0",
            None,
            MetricType::Gauge,
        )?;
        for s in &servers {
            ConstGauge::new(i64::from(s.status.is_connected()))
                .encode(up.encode_family(&[("server", s.name.as_str())])?)?;
        }
        let mut status = encoder.encode_descriptor(
            "hostpipe_mcp_server_status",
            "The MCP server's status: 1 for the one it is in, 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for s in &servers {
            let current = s.status.state();
            for st in ServerStatus::STATES {
                ConstGauge::new(i64::from(st == current)).encode(
                    status.encode_family(&[("server", s.name.as_str()), ("status", st)])?,
                )?;
            }
        }
        let bytes = Unit::Bytes;
        ConstGauge::new(i64::try_from(self.host.cache_bytes()).unwrap_or(i64::MAX))
            .encode(encoder.encode_descriptor(
            "hostpipe_resource_cache",
            "The content cache's size, bytes as it weighs its entries (content plus 128 an item)",
            Some(&bytes),
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(as_i64(self.approver.pending_count())).encode(
            encoder.encode_descriptor(
                "hostpipe_consent_questions_pending",
                "Consent questions waiting for an answer",
                None,
                MetricType::Gauge,
            )?,
        )?;
        ConstGauge::new(as_i64(self.elicitor.pending_count())).encode(
            encoder.encode_descriptor(
                "hostpipe_elicitation_questions_pending",
                "MCP servers' questions to users (elicitation) waiting for an answer",
                None,
                MetricType::Gauge,
            )?,
        )?;
        Ok(())
    }
}

fn as_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The service's metrics: the registry scraped at `GET /metrics`, and the observer its
/// pipelines count into.
pub(crate) struct Metrics {
    registry: Registry,
    observer: Arc<TurnMetrics>,
}

impl Metrics {
    /// The metrics of a service with `host`, asking through `approver` and `elicitor`.
    pub(crate) fn new(host: Arc<McpHost>, approver: HttpApprover, elicitor: HttpElicitor) -> Self {
        let mut registry = Registry::default();
        let observer = Arc::new(TurnMetrics::new(Arc::clone(&host)));
        observer.register(&mut registry);
        registry.register_collector(Box::new(Snapshot {
            host,
            approver,
            elicitor,
        }));
        Self { registry, observer }
    }

    /// What every pipeline is given ([`hostpipe_engine::Pipeline::with_observer`]).
    pub(crate) fn observer(&self) -> Arc<dyn PipelineObserver> {
        Arc::clone(&self.observer) as Arc<dyn PipelineObserver>
    }

    /// The exposition: OpenMetrics when `openmetrics`, else the Prometheus text format
    /// 0.0.4. The content type and the text.
    ///
    /// # Errors
    /// Only a formatting error of the encoder (none is expected writing to a `String`).
    pub(crate) fn encode(
        &self,
        openmetrics: bool,
    ) -> Result<(&'static str, String), std::fmt::Error> {
        let mut text = String::with_capacity(16 * 1024);
        if openmetrics {
            prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
            Ok((OPENMETRICS, text))
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)?;
            Ok((
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                text,
            ))
        }
    }
}

/// `GET /metrics`: the exposition (see the module docs). No token: it names pipelines
/// and servers, nothing a turn said.
pub(crate) async fn metrics(State(state): State<Arc<ServeState>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    match state.metrics.encode(openmetrics) {
        Ok((content_type, text)) => (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "the metrics could not be encoded");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
