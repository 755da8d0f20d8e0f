//! Tools offered to the model and the executor that runs the model's calls.

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

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
    /// A tool of the turn's caller (the `tools` of a request to the OpenAI-compatible
    /// door): no runner runs it. A call to it ends the run and goes back to the caller
    /// ([`crate::RunEvent::ToolCallStarted`] with no `ToolCallFinished`); the caller's
    /// result comes with its next request ([`crate::CallerRound`]).
    Caller,
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

/// Which tools a pipeline offers the model: `include` and `exclude` globs over the names
/// the model sees (`server__tool`, and the exploration tools' `list_resources`,
/// `read_resource`). `*` matches any run of characters, `?` one, `[a-z]` a class,
/// `{a,b}` alternatives. No `include` offers every tool; `exclude` wins over `include`.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    include: Vec<GlobMatcher>,
    exclude: Vec<GlobMatcher>,
}

impl ToolFilter {
    /// The filter of `include` and `exclude`.
    ///
    /// # Errors
    /// [`ConfigError`] at `include[i]` or `exclude[i]` for a glob that does not compile.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, ConfigError> {
        let compile = |key: &str, patterns: &[String]| -> Result<Vec<GlobMatcher>, ConfigError> {
            patterns
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    if p.trim().is_empty() {
                        return Err(ConfigError::new(
                            format!("{key}[{i}]"),
                            "an empty glob matches no tool: remove it",
                        ));
                    }
                    GlobBuilder::new(p)
                        .literal_separator(false)
                        .backslash_escape(true)
                        .build()
                        .map(|g| g.compile_matcher())
                        .map_err(|e| {
                            ConfigError::new(
                                format!("{key}[{i}]"),
                                format!("`{p}` is not a valid glob: {}", e.kind()),
                            )
                        })
                })
                .collect()
        };
        Ok(Self {
            include: compile("include", include)?,
            exclude: compile("exclude", exclude)?,
        })
    }

    /// Whether the tool the model would see as `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.offers_any(&[name])
    }

    /// Whether a tool known by any of `names` is offered: some `include` glob matches
    /// one of them (or there is none) and no `exclude` glob matches any. For a tool whose
    /// `server__tool` name was shortened or hashed, give both names.
    pub fn offers_any(&self, names: &[&str]) -> bool {
        let any = |globs: &[GlobMatcher]| globs.iter().any(|g| names.iter().any(|n| g.is_match(n)));
        (self.include.is_empty() || any(&self.include)) && !any(&self.exclude)
    }
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
    /// The pipeline does not offer this tool (`tool_assembly.include` / `exclude`).
    #[error("tool `{name}` is not offered by this pipeline (tool_assembly.include and exclude)")]
    NotOffered {
        /// The name the model would see.
        name: String,
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

    /// [`ToolExecutor::call`] on behalf of `origin` (the model, an HTTP API caller, a
    /// remote agent): the same policy, with the caller named in the consent request and
    /// the call's record. The default ignores `origin`.
    ///
    /// # Errors
    /// As [`ToolExecutor::call`].
    async fn call_from(
        &self,
        name: &str,
        arguments: serde_json::Value,
        origin: crate::trace::CallOrigin,
    ) -> Result<ToolCallResult, ToolError> {
        let _ = origin;
        self.call(name, arguments).await
    }

    /// Calls MCP tool `tool` of `server` (its name as the server lists it, whatever name
    /// the turn offers it under) on behalf of `origin`, as [`ToolExecutor::call_from`]
    /// would. Refusals are recorded like calls: a tool the pipeline leaves out is
    /// [`ToolError::NotOffered`], a server not bound for the turn
    /// [`ToolError::ServerNotBound`], a tool its server does not list
    /// [`ToolError::UnknownTool`]. The default refuses every call as not offered.
    ///
    /// # Errors
    /// As [`ToolExecutor::call`].
    async fn call_server_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        origin: crate::trace::CallOrigin,
    ) -> Result<ToolCallResult, ToolError> {
        let _ = (arguments, origin);
        Err(ToolError::NotOffered {
            name: format!("{server}/{tool}"),
        })
    }

    /// Reads resource `uri` of `server` for a caller outside the model's turn (the MCP
    /// door's gateway, `hostpipe serve`'s `/mcp`), on behalf of `origin`, under the same
    /// policy as the model's `read_resource`: the server is bound for the turn, the
    /// listing's audience, MIME type and size pass, the consent gate allows a model read
    /// of the URI, and each item that came back passes the byte and MIME limits (and the
    /// gate, when under another URI). The read is recorded like the model's. The default
    /// refuses every read as not offered.
    ///
    /// # Errors
    /// [`ToolError::ServerNotBound`], [`ToolError::NotOffered`], or the server's error
    /// ([`ToolError::Source`]). A read the policy withholds is `Ok`
    /// ([`CallerRead::Withheld`]).
    async fn read_for_caller(
        &self,
        server: &str,
        uri: &str,
        origin: crate::trace::CallOrigin,
    ) -> Result<CallerRead, ToolError> {
        let _ = (server, origin);
        Err(ToolError::NotOffered {
            name: format!("read of {uri}"),
        })
    }
}

/// What [`ToolExecutor::read_for_caller`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerRead {
    /// The items the policy let through, as the server sent them (blobs decoded), in
    /// the server's order; items it withheld are left out and named in `withheld`.
    Contents {
        /// The items.
        contents: Vec<crate::source::ResourceContents>,
        /// What the caller is told of each item left out (its URI and why, never its
        /// content).
        withheld: Vec<String>,
    },
    /// The policy refused the read (nothing reached the caller, and when refused before
    /// the read, nothing reached the server): what the caller is told.
    Withheld {
        /// The note, e.g. `[resource kb://a from `kb` withheld: reading it was not
        /// allowed]`.
        note: String,
    },
}

/// Marks a turn that runs a pipeline's stages only to call one tool (the HTTP API's
/// `POST /v1/servers/{server}/tools/{name}/call`, `hostpipe_engine::Pipeline::call_tool`): the
/// stages bind servers, publish their policies and assemble the tools as for any turn,
/// and stages that gather context skip their reads (there is no message to answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolsOnly;

/// A caller's resource budget for one turn, in tokens, over the pipeline's
/// `budget_tokens` / `budget_share` (`hostpipe serve`'s MCP door: `fit_context`'s
/// `budget`). In [`Turn::extensions`](crate::Turn::extensions); the injection stage
/// still lowers it to what the model has left for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetOverride(pub usize);

impl std::fmt::Debug for dyn ToolExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolExecutor")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn include_and_exclude_globs_decide_what_is_offered() {
        let none = ToolFilter::new(&[], &[]).unwrap();
        assert!(none.offers("fs__write_file"));
        let f = ToolFilter::new(
            &["fs__*".into(), "read_resource".into()],
            &["*__write_*".into()],
        )
        .unwrap();
        assert!(f.offers("fs__read_file"));
        assert!(f.offers("read_resource"));
        assert!(!f.offers("fs__write_file"), "exclude wins over include");
        assert!(!f.offers("kb__search"), "not included");
        // A hashed name is judged by its plain name too.
        assert!(!f.offers_any(&["fs__write_file_1a2b3c4d", "fs__write_file"]));
        assert!(f.offers_any(&["fs__read_file_1a2b3c4d", "fs__read_file"]));
        let e = ToolFilter::new(&[], &["ok".into(), " ".into()]).unwrap_err();
        assert_eq!(e.key, "exclude[1]");
        let e = ToolFilter::new(&["fs__[".into()], &[]).unwrap_err();
        assert_eq!(e.key, "include[0]");
    }
}
