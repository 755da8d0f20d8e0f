//! The span of one MCP request (target `hostpipe::span`), after the OpenTelemetry
//! semantic conventions for MCP (GenAI semantic conventions, "Model Context Protocol",
//! client span): kind client, named `{mcp.method.name} {target}` with the tool or
//! prompt name as target, else `{mcp.method.name}`. A resource URI is never in the
//! name (high cardinality): it is the `mcp.resource.uri` attribute.
//!
//! Attributes: `mcp.method.name`, `mcp.resource.uri`, `gen_ai.tool.name` and
//! `gen_ai.operation.name` = `execute_tool` (`tools/call`), `gen_ai.prompt.name`
//! (`prompts/get`), `mcp.protocol.version`, `network.transport` (`pipe` for stdio,
//! `tcp` for Streamable HTTP), `server.address`/`server.port` (HTTP), and
//! `hostpipe.mcp.server` (the configured name). A failed request has status error and
//! `error.type`: the JSON-RPC error code, `timeout`, `transport`, `invalid_response`,
//! or `tool_error` for a tool result with `isError`.

use hostpipe_core::SourceError;
use tracing::Span;
use tracing::field::Empty;

use super::slot::Slot;
use crate::config::TransportConfig;

/// One MCP request about to be sent: its method, and what it is about.
pub(super) struct Call {
    pub(super) method: &'static str,
    span: Span,
}

impl Call {
    /// A request of `method` (e.g. `resources/read`) to `slot`'s server.
    pub(super) fn new(slot: &Slot, method: &'static str) -> Self {
        let span = tracing::info_span!(
            target: "hostpipe::span",
            "mcp request",
            otel.name = method,
            otel.kind = "client",
            otel.status_code = Empty,
            "mcp.method.name" = method,
            "mcp.resource.uri" = Empty,
            "mcp.protocol.version" = Empty,
            "gen_ai.operation.name" = Empty,
            "gen_ai.tool.name" = Empty,
            "gen_ai.prompt.name" = Empty,
            "network.transport" = Empty,
            "server.address" = Empty,
            "server.port" = Empty,
            "hostpipe.mcp.server" = slot.config.name.as_str(),
            "error.type" = Empty,
        );
        if !span.is_disabled() {
            match &slot.config.transport {
                TransportConfig::Stdio { .. } => {
                    span.record("network.transport", "pipe");
                }
                TransportConfig::StreamableHttp { url, .. } => {
                    span.record("network.transport", "tcp");
                    if let Ok(url) = reqwest::Url::parse(url) {
                        if let Some(host) = url.host_str() {
                            span.record("server.address", host);
                        }
                        if let Some(port) = url.port_or_known_default() {
                            span.record("server.port", i64::from(port));
                        }
                    }
                }
            }
            if let Some(version) = slot.read().protocol_version.as_deref() {
                span.record("mcp.protocol.version", version);
            }
        }
        Self { method, span }
    }

    /// The request is about the resource `uri` (an attribute, never in the name).
    pub(super) fn uri(self, uri: &str) -> Self {
        self.span.record("mcp.resource.uri", uri);
        self
    }

    /// The request calls the tool `name` (`tools/call`): named `tools/call {name}`.
    pub(super) fn tool(self, name: &str) -> Self {
        if !self.span.is_disabled() {
            self.span
                .record("otel.name", format!("{} {name}", self.method));
            self.span.record("gen_ai.tool.name", name);
            self.span.record("gen_ai.operation.name", "execute_tool");
        }
        self
    }

    /// The request gets the prompt `name` (`prompts/get`): named `prompts/get {name}`.
    pub(super) fn prompt(self, name: &str) -> Self {
        if !self.span.is_disabled() {
            self.span
                .record("otel.name", format!("{} {name}", self.method));
            self.span.record("gen_ai.prompt.name", name);
        }
        self
    }

    /// The span the request runs in.
    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    /// Records that the request failed with `e`.
    pub(super) fn failed(&self, e: &SourceError) {
        let error_type = match e {
            SourceError::Protocol { code, .. } => code.to_string(),
            SourceError::Timeout { .. } => "timeout".into(),
            SourceError::Transport { .. } => "transport".into(),
            SourceError::InvalidResponse { .. } => "invalid_response".into(),
            SourceError::Unavailable { .. } => "unavailable".into(),
            _ => "_OTHER".into(),
        };
        self.failed_with(&error_type);
    }

    /// Records a failure of the low-cardinality kind `error_type`.
    pub(super) fn failed_with(&self, error_type: &str) {
        self.span.record("otel.status_code", "error");
        self.span.record("error.type", error_type);
    }
}
