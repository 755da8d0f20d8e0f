//! Tools offered to the model and the executor that runs the model's calls.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::source::ToolCallResult;

/// Where a tool offered to the model comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolOrigin {
    /// A tool of a bound MCP server.
    Mcp {
        /// Server name.
        server: String,
        /// The server's own tool name.
        tool: String,
    },
    /// One of hostpipe's exploration tools (`list_resources`, `read_resource`).
    Exploration,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model sees: unique in the turn, `^[a-zA-Z0-9_-]{1,64}$` (the
    /// function-name rule of the OpenAI Chat Completions API reference, which other
    /// model APIs share).
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: serde_json::Value,
    /// Where it comes from.
    pub origin: ToolOrigin,
}

/// A tool call the executor could not carry out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool of that name was offered in this turn.
    #[error("no tool named `{name}` is offered in this turn")]
    UnknownTool {
        /// The name the model used.
        name: String,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments {
        /// Tool name.
        tool: String,
        /// What was wrong.
        message: String,
    },
    /// The call named a server that is not bound for this turn.
    #[error("server `{server}` is not bound for this turn; bound servers: {}", if allowed.is_empty() { "(none)".to_owned() } else { allowed.join(", ") })]
    ServerNotBound {
        /// The server asked for.
        server: String,
        /// The servers bound for this turn.
        allowed: Vec<String>,
    },
    /// The MCP request failed.
    #[error(transparent)]
    Source(#[from] crate::error::SourceError),
}

impl ToolError {
    /// Whether the call was refused because its server is not bound for the turn.
    pub fn is_server_not_bound(&self) -> bool {
        matches!(self, Self::ServerNotBound { .. })
    }
}

/// Runs the tool calls a model makes during one turn. Built by the tool-assembly stage;
/// knows which servers are bound for the turn and refuses the others.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Calls the tool named `name` (as offered in [`ToolSpec::name`]) with JSON
    /// `arguments`.
    ///
    /// # Errors
    /// [`ToolError`]; a tool that ran and reported failure is `Ok` with
    /// [`ToolCallResult::is_error`] set.
    async fn call(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<ToolCallResult, ToolError>;
}

impl std::fmt::Debug for dyn ToolExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolExecutor")
    }
}
