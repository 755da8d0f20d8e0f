//! Typed errors. Callers match on variants or `is_*` helpers, never on message text.

use std::time::Duration;

/// A boxed error kept as the `source` of a higher-level error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error from an MCP server or the host that talks to it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// No server of that name is configured.
    #[error("unknown MCP server `{server}`; configured servers: {}", list(known))]
    UnknownServer {
        /// The name that was asked for.
        server: String,
        /// The configured server names, sorted.
        known: Vec<String>,
    },
    /// The server is configured but not connected (disabled, failed or still connecting).
    #[error("MCP server `{server}` is unavailable: {reason}")]
    Unavailable {
        /// Server name.
        server: String,
        /// Why: the status the server is in, with the failure reason if any.
        reason: String,
    },
    /// The server did not declare the capability the operation needs
    /// (MCP spec 2025-11-25, "Lifecycle / Capability Negotiation").
    #[error("MCP server `{server}` does not declare the `{capability}` capability")]
    NotSupported {
        /// Server name.
        server: String,
        /// The capability, e.g. `resources`.
        capability: &'static str,
    },
    /// The request did not complete in time; hostpipe sent `notifications/cancelled`.
    #[error("MCP server `{server}`: {operation} timed out after {} ms", timeout.as_millis())]
    Timeout {
        /// Server name.
        server: String,
        /// The MCP method, e.g. `resources/read`.
        operation: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The server answered with a JSON-RPC error.
    #[error("MCP server `{server}`: {operation} failed with JSON-RPC error {code}: {message}")]
    Protocol {
        /// Server name.
        server: String,
        /// The MCP method.
        operation: String,
        /// The JSON-RPC error code (e.g. -32002 resource not found, -32602 invalid params).
        code: i32,
        /// The server's message.
        message: String,
    },
    /// The connection failed or closed (e.g. the server process exited).
    #[error("MCP server `{server}`: {operation} failed: {message}")]
    Transport {
        /// Server name.
        server: String,
        /// The MCP method.
        operation: String,
        /// What went wrong, with the root cause (e.g. `Connection refused (os error 111)`).
        message: String,
        /// The underlying error (shared, so that readers coalesced onto one request
        /// each get the error).
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The server's answer broke a rule of the protocol or of hostpipe's limits
    /// (e.g. invalid base64 in a blob, a repeated pagination cursor).
    #[error("MCP server `{server}`: {operation}: invalid response: {message}")]
    InvalidResponse {
        /// Server name.
        server: String,
        /// The MCP method.
        operation: String,
        /// What was wrong.
        message: String,
    },
}

impl SourceError {
    /// The server the error is about.
    pub fn server(&self) -> &str {
        match self {
            Self::UnknownServer { server, .. }
            | Self::Unavailable { server, .. }
            | Self::NotSupported { server, .. }
            | Self::Timeout { server, .. }
            | Self::Protocol { server, .. }
            | Self::Transport { server, .. }
            | Self::InvalidResponse { server, .. } => server,
        }
    }

    /// Whether the request timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// Whether the server said the resource does not exist: JSON-RPC -32002
    /// (MCP spec 2025-11-25, "Resources / Error Handling"), or -32602 which 2026-07-28
    /// servers send instead.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::Protocol {
                code: -32002 | -32602,
                ..
            }
        )
    }

    /// Whether the server cannot be used at all right now.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::UnknownServer { .. } | Self::Transport { .. }
        )
    }
}

/// A configuration error: names the place (`file`, `key`) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}{}{message}",
    file.as_deref().map(|f| format!("{f}: ")).unwrap_or_default(),
    if key.is_empty() { String::new() } else { format!("{key}: ") }
)]
pub struct ConfigError {
    /// The file the value came from, when known (core never reads files; the loader
    /// fills this in with [`ConfigError::in_file`]).
    pub file: Option<String>,
    /// The dotted key path, e.g. `pipelines.default.bind_mcp_servers.servers[1]`.
    pub key: String,
    /// What was wrong, in words a user can act on.
    pub message: String,
}

impl ConfigError {
    /// An error at `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: None,
            key: key.into(),
            message: message.into(),
        }
    }

    /// The same error, located in `file`.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    /// The same error with `prefix.` put in front of its key.
    pub fn under(mut self, prefix: &str) -> Self {
        self.key = if self.key.is_empty() {
            prefix.to_owned()
        } else if self.key.starts_with('[') {
            format!("{prefix}{}", self.key)
        } else {
            format!("{prefix}.{}", self.key)
        };
        self
    }
}

/// A stage failed in a way it could not turn into a reply or a trace warning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// An MCP error the stage could not work around.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Anything else, with a description.
    #[error("{message}")]
    Other {
        /// What went wrong.
        message: String,
        /// The cause, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl StageError {
    /// An error with a message and no source.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
            source: None,
        }
    }
}

/// A runner failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The request cannot be expressed by this runner (e.g. images for a runner that
    /// takes text only and no fallback was possible).
    #[error("the runner cannot express this request: {0}")]
    Unsupported(String),
    /// The runner's backend failed.
    #[error("runner backend failed: {message}")]
    Backend {
        /// What went wrong.
        message: String,
        /// The cause, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The run took longer than allowed.
    #[error("the run timed out after {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The backend refused the credentials (HTTP 401 or 403).
    #[error("the backend refused the credentials (HTTP {status}): {message}")]
    Auth {
        /// HTTP status.
        status: u16,
        /// The backend's message.
        message: String,
    },
    /// The backend kept answering HTTP 429 after the retries.
    #[error("rate limited by the backend{}: {message}", .retry_after.map(|d| format!(" (retry after {} s)", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// What the backend asked to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
        /// The backend's message.
        message: String,
    },
    /// The request is longer than the model's context window.
    #[error("the request is too long for the model's context window: {message}")]
    ContextTooLong {
        /// The backend's message (or hostpipe's count).
        message: String,
    },
    /// The backend failed (HTTP 5xx) after the retries.
    #[error("the backend failed (HTTP {status}): {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The backend's message.
        message: String,
    },
}

impl RunError {
    /// A [`RunError::Backend`] with a message and no source.
    pub fn backend(message: impl Into<String>) -> Self {
        Self::Backend {
            message: message.into(),
            source: None,
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_names_file_and_key() {
        let e = ConfigError::new("servers[1]", "unknown MCP server `x`")
            .under("pipelines.default.bind_mcp_servers")
            .in_file("hostpipe.toml");
        assert_eq!(
            e.to_string(),
            "hostpipe.toml: pipelines.default.bind_mcp_servers.servers[1]: unknown MCP server `x`"
        );
    }

    #[test]
    fn an_empty_key_is_left_out() {
        let e = ConfigError::new("", "cannot read: gone").in_file("x.toml");
        assert_eq!(e.to_string(), "x.toml: cannot read: gone");
    }

    #[test]
    fn not_found_covers_both_protocol_generations() {
        let e = |code| SourceError::Protocol {
            server: "s".into(),
            operation: "resources/read".into(),
            code,
            message: String::new(),
        };
        assert!(e(-32002).is_not_found());
        assert!(e(-32602).is_not_found());
        assert!(!e(-32603).is_not_found());
    }
}
