//! The OpenTelemetry HTTP server span of each request (semantic conventions, "HTTP
//! server span": named `{method} {http.route}`, kind server), parented by the caller's
//! W3C `traceparent` (and `tracestate`) when it sends one, so that a turn's spans join
//! the caller's trace. Every route has one but the health probes (`/healthz`,
//! `/readyz`). With no trace export, the span is disabled and the request goes on
//! untouched.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Runs the request in its server span. The span ends with the response head, or with
/// the last task that runs in it (a streamed turn's).
pub(super) async fn http_span(req: Request, next: Next) -> Response {
    // Probes (every few seconds, from every orchestrator) would bury the turns.
    if matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    let span = tracing::info_span!(
        target: "hostpipe::span",
        "http request",
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %req.method(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
    );
    if span.is_disabled() {
        return next.run(req).await;
    }
    // The route template, never the path: a path holds ids (low-cardinality names).
    match req.extensions().get::<MatchedPath>() {
        Some(route) => {
            span.record("otel.name", format!("{} {}", req.method(), route.as_str()));
            span.record("http.route", route.as_str());
        }
        None => {
            span.record("otel.name", req.method().as_str());
        }
    }
    // No export (only the log has the span): there is no OpenTelemetry span to parent.
    let _ = span.set_parent(crate::telemetry::extract_trace_context(req.headers()));
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status();
    // As i64: the OpenTelemetry layer records u64 as text.
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "error");
        span.record("error.type", status.as_str());
    }
    response
}
