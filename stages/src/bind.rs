//! `bind_mcp_servers`: which MCP servers this pipeline may use in a turn.

use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    BoundServer, BuildContext, ConfigError, McpSource, SourceError, Stage, StageError,
    StageOutcome, StagePhase, TraceEvent, Turn,
};
use serde::Deserialize;

use crate::config::parse_section;

/// One binding: a server name, or a table with `name` and `required`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Binding {
    /// Just the name; not required.
    Name(String),
    /// Name and options.
    Full {
        /// Server name.
        name: String,
        /// End the turn with a reply when this server is down.
        #[serde(default)]
        required: bool,
    },
}

impl Binding {
    /// Server name.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(n) | Self::Full { name: n, .. } => n,
        }
    }

    /// Whether it is required.
    pub fn required(&self) -> bool {
        matches!(self, Self::Full { required: true, .. })
    }
}

/// Config section `[pipelines.ID.bind_mcp_servers]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindConfig {
    /// Servers this pipeline may use, in order: `["kb", { name = "crm", required = true }]`.
    #[serde(default)]
    pub servers: Vec<Binding>,
}

/// Binds the configured servers to each turn and checks their status. A bound server
/// that is down is a trace warning and the turn goes on, unless its binding is
/// `required`: then the turn ends with a reply that names the server and why.
pub struct BindMcpServers {
    bindings: Vec<Binding>,
    mcp: Arc<dyn McpSource>,
}

impl BindMcpServers {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "bind_mcp_servers";

    /// Checks `config` against the configured servers.
    ///
    /// # Errors
    /// [`ConfigError`] at `servers[i]` for a name no server has, or a name bound twice.
    pub fn new(config: BindConfig, mcp: Arc<dyn McpSource>) -> Result<Self, ConfigError> {
        let known: Vec<String> = mcp.servers().into_iter().map(|s| s.name).collect();
        for (i, b) in config.servers.iter().enumerate() {
            if !known.iter().any(|k| k == b.name()) {
                let e = SourceError::UnknownServer {
                    server: b.name().to_owned(),
                    known: known.clone(),
                };
                return Err(ConfigError::new(format!("servers[{i}]"), e.to_string()));
            }
            if config.servers[..i].iter().any(|o| o.name() == b.name()) {
                return Err(ConfigError::new(
                    format!("servers[{i}]"),
                    format!("`{}` is bound twice", b.name()),
                ));
            }
        }
        Ok(Self {
            bindings: config.servers,
            mcp,
        })
    }
}

#[async_trait]
impl Stage for BindMcpServers {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let servers = self.mcp.servers();
        for b in &self.bindings {
            let status = servers
                .iter()
                .find(|s| s.name == b.name())
                .map(|s| s.status.clone())
                .unwrap_or(hostpipe_core::ServerStatus::Failed {
                    reason: "no longer configured".into(),
                });
            let connected = status.is_connected();
            let reason = status.describe();
            turn.bound_servers.push(BoundServer {
                name: b.name().to_owned(),
                required: b.required(),
                status,
            });
            if !connected {
                turn.trace.record(TraceEvent::ServerUnavailable {
                    server: b.name().to_owned(),
                    reason: reason.clone(),
                    required: b.required(),
                });
                if b.required() {
                    // Why it is unavailable (an OS error, a URL) is in the trace's
                    // `server_unavailable` record and the log, not in the user's reply.
                    tracing::warn!(
                        turn_id = turn.trace.turn_id(), pipeline = %turn.ids.pipeline,
                        server = b.name(), %reason,
                        "a required MCP server is unavailable; the user was told so"
                    );
                    return Ok(StageOutcome::Reply(turn.messages.render(
                        hostpipe_core::MessageKey::ServerUnavailable,
                        &[("server", b.name())],
                    )));
                }
            }
        }
        Ok(StageOutcome::Continue)
    }
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: BindConfig = parse_section(section)?;
    Ok(Box::new(BindMcpServers::new(config, Arc::clone(&ctx.mcp))?))
}

hostpipe_core::submit_stage! {
    name: BindMcpServers::NAME,
    phase: StagePhase::Bind,
    priority: 0,
    description: "Binds the pipeline's MCP servers to the turn; ends the turn when a required one is down.",
    build: build,
}
