//! OpenTelemetry traces over OTLP/HTTP (protobuf), switched on by the standard `OTEL_*`
//! variables (OpenTelemetry specification, "Environment Variable Specification" and
//! "OTLP Exporter Configuration"). docs/observability.md has the span tree.
//!
//! The crates name what they do with `tracing` spans of the target [`SPAN_TARGET`],
//! attributed after the semantic conventions (`mcp.*` for MCP requests, `gen_ai.*` for
//! model calls and tool executions); [`Telemetry::layer`] turns exactly those spans into
//! OpenTelemetry spans (`tracing-opentelemetry`) and a batch span processor sends them
//! to the collector. Without the variables no layer is installed, and the spans cost
//! what a disabled `tracing` callsite costs.
//!
//! Incoming W3C trace context (`traceparent`, `tracestate`) is read by
//! [`crate::serve`]'s HTTP span ([`extract_trace_context`]).

use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

/// The `tracing` target of the spans exported to OpenTelemetry (the other targets are
/// logs only). The `fmt` log shows them from `-vv` on.
pub const SPAN_TARGET: &str = "hostpipe::span";

/// How long [`Telemetry::shutdown`] waits for the last spans to go out: 5 s.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What the standard variables ask for ([`choose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracesChoice {
    /// Export traces over OTLP/HTTP with protobuf bodies.
    Otlp,
    /// Nothing asks for traces: no OTLP endpoint and no `OTEL_TRACES_EXPORTER=otlp`.
    NotAsked,
    /// Switched off by `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` (the
    /// variable named).
    Disabled(&'static str),
    /// Asked for what hostpipe does not export (another exporter or OTLP protocol):
    /// the reason, with the variable and its value. No traces are exported.
    Unsupported(String),
}

/// Decides from the variables `var` returns (an empty value counts as unset, as the
/// specification says) whether traces are exported:
///
/// - `OTEL_SDK_DISABLED=true` (any case): off;
/// - `OTEL_TRACES_EXPORTER`: `none` off, a list holding `otlp` on, anything else
///   unsupported; unset: on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
///   `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the specification's default exporter is
///   `otlp`, but hostpipe does not send to `localhost:4318` unasked);
/// - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`: only
///   `http/protobuf` (the default) is supported.
pub fn choose(var: impl Fn(&str) -> Option<String>) -> TracesChoice {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return TracesChoice::Disabled("OTEL_SDK_DISABLED");
    }
    match var("OTEL_TRACES_EXPORTER") {
        Some(list) => {
            let names: Vec<String> = list
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .collect();
            if names.iter().any(|n| n == "otlp") {
            } else if names.iter().all(|n| n == "none") {
                return TracesChoice::Disabled("OTEL_TRACES_EXPORTER");
            } else {
                return TracesChoice::Unsupported(format!(
                    "OTEL_TRACES_EXPORTER={list}: hostpipe exports traces with `otlp` only"
                ));
            }
        }
        None if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
            && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() =>
        {
            return TracesChoice::NotAsked;
        }
        None => {}
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(name) {
            if protocol.trim() != "http/protobuf" {
                return TracesChoice::Unsupported(format!(
                    "{name}={protocol}: hostpipe exports traces over `http/protobuf` only"
                ));
            }
            break;
        }
    }
    TracesChoice::Otlp
}

/// A failure to set up the exporter (e.g. an endpoint variable that is not a URL).
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry traces are off: the OTLP exporter could not be built: {0}")]
pub struct TelemetryError(#[from] opentelemetry_otlp::ExporterBuildError);

/// The tracer provider that exports hostpipe's spans; [`Telemetry::shutdown`] sends
/// what is left.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The exporter and batch span processor the process's `OTEL_*` variables
    /// describe, when [`choose`] says [`TracesChoice::Otlp`]. The exporter itself reads
    /// `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` (`/v1/traces` is appended to the
    /// signal-less one), `_HEADERS` (never logged: they carry credentials),
    /// `_TIMEOUT` (default 10 000 ms per export) and `_COMPRESSION`; the processor
    /// reads `OTEL_BSP_*` (default: a batch every 5 000 ms); the resource comes from
    /// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`, with `service.name`
    /// `hostpipe` when neither names one.
    ///
    /// # Errors
    /// [`TelemetryError`] when the exporter cannot be built from the variables.
    pub fn from_env() -> Result<Self, TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()?;
        let detected = Resource::builder().build();
        let named = detected
            .get(&opentelemetry::Key::from_static_str("service.name"))
            .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("hostpipe");
        }
        let resource = resource
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Self { provider })
    }

    /// The `tracing` layer that turns the spans of [`SPAN_TARGET`] (and only those)
    /// into OpenTelemetry spans. Fields `otel.name`, `otel.kind` and `otel.status_code`
    /// set the span's name, kind and status; the others become attributes.
    pub fn layer(&self) -> Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("hostpipe"))
            // Only the attributes the spans name: no code location, thread, busy/idle
            // time or `tracing` target.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_filter(Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO))
            .boxed()
    }

    /// Sends the spans still queued and stops the exporter, waiting at most
    /// [`SHUTDOWN_TIMEOUT`]. Blocks: call it off the async runtime's workers.
    ///
    /// # Errors
    /// The SDK's error when the last export failed or did not finish in time.
    pub fn shutdown(&self) -> Result<(), opentelemetry_sdk::error::OTelSdkError> {
        self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
    }
}

/// The W3C trace context (`traceparent`, `tracestate`; W3C Trace Context, level 1) of
/// an incoming request's `headers`, to parent its span with
/// (`tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`). A missing or invalid
/// `traceparent` gives an empty context (the span starts a trace).
pub fn extract_trace_context(headers: &axum::http::HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// `http::HeaderMap` as the propagator reads it.
struct HeaderExtractor<'a>(&'a axum::http::HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    fn choose_with(vars: &[(&str, &str)]) -> TracesChoice {
        choose(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn traces_are_exported_only_when_the_variables_ask() {
        assert_eq!(choose_with(&[]), TracesChoice::NotAsked);
        assert_eq!(
            choose_with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]),
            TracesChoice::NotAsked
        );
        assert_eq!(
            choose_with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]),
            TracesChoice::Otlp
        );
        assert_eq!(
            choose_with(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/v1/traces"
            )]),
            TracesChoice::Otlp
        );
        assert_eq!(
            choose_with(&[("OTEL_TRACES_EXPORTER", "otlp")]),
            TracesChoice::Otlp
        );
        assert_eq!(
            choose_with(&[("OTEL_TRACES_EXPORTER", "console, OTLP")]),
            TracesChoice::Otlp
        );
    }

    #[test]
    fn the_switches_off_win_over_an_endpoint() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            choose_with(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            TracesChoice::Disabled("OTEL_SDK_DISABLED")
        );
        assert_eq!(
            choose_with(&[endpoint, ("OTEL_SDK_DISABLED", "false")]),
            TracesChoice::Otlp
        );
        assert_eq!(
            choose_with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            TracesChoice::Disabled("OTEL_TRACES_EXPORTER")
        );
    }

    #[test]
    fn other_exporters_and_protocols_are_named_as_unsupported() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            choose_with(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            TracesChoice::Unsupported(
                "OTEL_TRACES_EXPORTER=zipkin: hostpipe exports traces with `otlp` only".into()
            )
        );
        assert_eq!(
            choose_with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            TracesChoice::Unsupported(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: hostpipe exports traces over `http/protobuf` only"
                    .into()
            )
        );
        // The signal's own variable comes first.
        assert_eq!(
            choose_with(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]),
            TracesChoice::Otlp
        );
    }

    #[test]
    fn a_traceparent_header_gives_the_remote_parent() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        headers.insert("tracestate", "vendor=value".parse().unwrap());
        let cx = extract_trace_context(&headers);
        let span = cx.span();
        let parent = span.span_context();
        assert!(parent.is_remote());
        assert_eq!(
            parent.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
        assert!(parent.is_sampled());
        assert_eq!(parent.trace_state().get("vendor"), Some("value"));
        // An invalid one (version ff is forbidden) is no parent.
        headers.insert(
            "traceparent",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        assert!(
            !extract_trace_context(&headers)
                .span()
                .span_context()
                .is_valid()
        );
    }
}
