//! The configuration in effect ([`Current`]) and how it changes while the service runs:
//! at start, the servers added over the API are read from the store and join the
//! config file's ([`start`]); `POST /v1/reload` and SIGHUP read the files and the store
//! again and apply the difference ([`reload`]).
//!
//! A reload checks everything before it touches anything: the files must parse, and
//! every pipeline (and its preview runner) must build against the new set of servers,
//! else the error is answered (or logged) and nothing changes. Then the MCP host keeps
//! every server whose entry is unchanged, session and all
//! ([`McpHost::apply`](hostpipe_mcp::McpHost::apply)), closes the changed and removed
//! ones and connects the new ones in the background; the pipelines are rebuilt and
//! replace the old ones whole. A running turn finishes on the pipelines it started with.
//!
//! What a reload does not apply (it says so in its warnings): `[host]` (and the
//! elicitation capability the pipelines declare), `[serve]` and `[store]` take effect
//! at the next start.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use axum::http::StatusCode;
use hostpipe_core::{
    ListCounts, McpSource, Prompt, Resource, ResourceRead, ResourceTemplate, Runner,
    ServerCapabilities, ServerInfo, ServerStatus, SourceError, Tool, ToolCallResult,
};
use hostpipe_engine::Pipeline;
use hostpipe_mcp::ServerConfig;
use serde::Serialize;

use super::{ApiError, ServeOptions, ServeState};
use crate::App;
use crate::config::{self, LoadedConfig, RunnerChoice};

/// The files `hostpipe serve` was started with (`--config`, `--mcp-config`), read again
/// on every reload. Neither: the embedded default.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// hostpipe's TOML.
    pub config: Option<PathBuf>,
    /// A standard `mcpServers` JSON.
    pub mcp_config: Option<PathBuf>,
}

/// The configuration and pipelines in effect.
#[derive(Clone)]
pub(crate) struct Current {
    /// The loaded configuration (servers of the files only).
    pub(crate) config: LoadedConfig,
    /// The pipelines by id.
    pub(crate) pipelines: BTreeMap<String, Arc<Pipeline>>,
    /// Each pipeline's `preview` runner, for a turn's `"runner": "preview"` (the
    /// pipeline runs it instead of its own: [`Pipeline::run_turn_on`]).
    pub(crate) preview: BTreeMap<String, Arc<dyn Runner>>,
    /// The servers running now that were added over the API (from the store).
    pub(crate) added: BTreeSet<String>,
}

impl Current {
    /// The configuration in effect with the pipelines and preview runners built from it
    /// (by pipeline id) and the names of the servers added over the API.
    fn new(
        config: LoadedConfig,
        pipelines: BTreeMap<String, Pipeline>,
        preview: BTreeMap<String, Box<dyn Runner>>,
        added: BTreeSet<String>,
    ) -> Self {
        Self {
            config,
            pipelines: pipelines
                .into_iter()
                .map(|(id, p)| (id, Arc::new(p)))
                .collect(),
            preview: preview
                .into_iter()
                .map(|(id, r)| (id, Arc::from(r)))
                .collect(),
            added,
        }
    }

    /// The pipelines that bind `server`, sorted.
    pub(crate) fn bound_by(&self, server: &str) -> Vec<String> {
        self.pipelines
            .keys()
            .filter(|id| {
                self.config
                    .bound_servers(id)
                    .is_some_and(|b| b.iter().any(|s| s == server))
            })
            .cloned()
            .collect()
    }
}

impl ServeState {
    /// The configuration and pipelines in effect now.
    pub(crate) fn current(&self) -> Arc<Current> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes the configuration in effect with `change` (under [`ServeState::changing`]).
    pub(crate) fn update_current(&self, change: impl FnOnce(&mut Current)) {
        let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = Current::clone(&slot);
        change(&mut next);
        *slot = Arc::new(next);
    }
}

/// What a reload did: the `POST /v1/reload` response.
#[derive(Debug, Serialize)]
pub(crate) struct Reloaded {
    /// The file read (or `<embedded default config>`).
    pub(crate) source: String,
    /// Servers by what happened to them.
    pub(crate) servers: ServerChanges,
    /// The pipelines now in effect.
    pub(crate) pipelines: Vec<String>,
    /// What was not applied, or was left out, and why.
    pub(crate) warnings: Vec<String>,
}

/// [`hostpipe_mcp::Applied`], serialized.
#[derive(Debug, Serialize)]
pub(crate) struct ServerChanges {
    /// Unchanged entries: their sessions were kept.
    pub(crate) kept: Vec<String>,
    /// New: connecting.
    pub(crate) added: Vec<String>,
    /// Changed entries: closed and connecting anew.
    pub(crate) changed: Vec<String>,
    /// Gone: closed.
    pub(crate) removed: Vec<String>,
}

/// The servers added over the API, read from the store: those that are not shadowed by
/// a config file's server of the same name (which wins) and whose rows open. Problems
/// are warnings. `None` when the store did not answer.
async fn stored_servers(
    app: &App,
    options: &ServeOptions,
    config_names: &BTreeSet<String>,
) -> (Option<Vec<ServerConfig>>, Vec<String>) {
    let Some(entries) = &app.server_entries else {
        return (Some(Vec::new()), Vec::new());
    };
    let rows = match entries.stored_servers().await {
        Ok(rows) => rows,
        Err(e) => {
            return (
                None,
                vec![format!(
                    "the servers added over the API could not be read from the store ({e}); those running are left as they are"
                )],
            );
        }
    };
    let mut warnings = Vec::new();
    let mut servers = Vec::new();
    for row in rows {
        if config_names.contains(&row.name) {
            warnings.push(format!(
                "server `{}` added over the API is also in the config file: the file's entry is used",
                row.name
            ));
            continue;
        }
        match crate::added_servers::from_row(&row, options.credential_key.as_ref()) {
            Ok(config) => servers.push(config),
            Err(why) => warnings.push(format!("{why}; the server is left out")),
        }
    }
    (Some(servers), warnings)
}

/// At start: adds the stored servers to the host (connecting in the background) and
/// builds the pipelines and preview runners against the whole set.
///
/// # Errors
/// A pipeline that does not build (e.g. one that binds a server neither the files nor
/// the store has).
pub(crate) async fn start(app: &App, options: &ServeOptions) -> anyhow::Result<Current> {
    let config_names: BTreeSet<String> =
        app.config.servers.iter().map(|s| s.name.clone()).collect();
    let (stored, warnings) = stored_servers(app, options, &config_names).await;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let mut added = BTreeSet::new();
    for server in stored.unwrap_or_default() {
        let name = server.name.clone();
        match app.host.add_server(server) {
            Ok(()) => {
                added.insert(name);
            }
            Err(e) => tracing::warn!(error = %e, "a stored server was left out"),
        }
    }
    if !added.is_empty() {
        tracing::info!(servers = ?added, "servers added over the API, from the store");
    }
    let pipelines = app.build_pipelines(&app.config, None)?;
    let registry = crate::registry()?;
    let preview =
        app.config
            .build_runners(&registry, app.host.clone(), &RunnerChoice::named("preview"))?;
    Ok(Current::new(app.config.clone(), pipelines, preview, added))
}

/// A 400 `invalid_config` naming the file and key.
fn invalid_config(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_config",
        format!("{e}; the configuration in effect is unchanged"),
    )
}

/// Reads the configuration files and the store again and applies the difference (the
/// module doc says how). One change at a time ([`ServeState::changing`]).
///
/// # Errors
/// 400 `invalid_config` (nothing changed) for a file that does not parse or a
/// pipeline that does not build; 503 `starting` before the first connections are over.
pub(crate) async fn reload(state: &ServeState) -> Result<Reloaded, ApiError> {
    if !state.connected.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "starting",
            "the MCP servers are still connecting for the first time; reload once /readyz says ready",
        ));
    }
    let _one = state.changing.lock().await;
    let old = state.current();
    let exe = config::self_exe().map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "cannot find the hostpipe executable (the embedded demo server's command)",
        )
    })?;
    let mut config = config::load(
        state.source.config.as_deref(),
        state.source.mcp_config.as_deref(),
        &exe,
    )
    .map_err(invalid_config)?;
    config.approver.clone_from(&old.config.approver);
    config.declare_elicitation(old.config.elicitor.clone());
    let mut warnings = Vec::new();
    if config.host != *state.app.host.options() {
        warnings.push("[host] (or the elicitation the pipelines declare) changed: that takes effect at the next start".to_owned());
    }
    if config.serve != old.config.serve {
        warnings.push("[serve] changed: that takes effect at the next start".to_owned());
    }
    if config.store != old.config.store {
        warnings.push("[store] changed: that takes effect at the next start".to_owned());
    }
    let config_names: BTreeSet<String> = config.servers.iter().map(|s| s.name.clone()).collect();
    let (stored, mut stored_warnings) =
        stored_servers(&state.app, &state.options, &config_names).await;
    warnings.append(&mut stored_warnings);
    // The store did not answer: the servers added over the API stay as they run.
    let stored = stored.unwrap_or_else(|| {
        old.added
            .iter()
            .filter(|n| !config_names.contains(*n))
            .filter_map(|n| state.app.host.server_config(n))
            .collect()
    });
    let added: BTreeSet<String> = stored.iter().map(|s| s.name.clone()).collect();
    let all: Vec<ServerConfig> = config.servers.iter().cloned().chain(stored).collect();
    // Everything is checked against the new set of servers before anything changes.
    let registry = crate::registry().map_err(invalid_config)?;
    let planned: Arc<dyn McpSource> = Arc::new(Planned(
        all.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
    ));
    config
        .build_pipelines(&registry, Arc::clone(&planned), None)
        .map_err(invalid_config)?;
    let preview_choice = RunnerChoice::named("preview");
    config
        .build_runners(&registry, planned, &preview_choice)
        .map_err(invalid_config)?;
    let applied = state.app.host.apply(all).await;
    let internal = |e: String| {
        tracing::error!(error = %e, "reload: the pipelines did not build against the servers applied");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the pipelines did not build after the servers were applied; the old pipelines stay",
        )
    };
    let pipelines = state
        .app
        .build_pipelines(&config, None)
        .map_err(|e| internal(format!("{e:#}")))?;
    let preview = config
        .build_runners(&registry, state.app.host.clone(), &preview_choice)
        .map_err(|e| internal(e.to_string()))?;
    let reloaded = Reloaded {
        source: config.source.clone(),
        servers: ServerChanges {
            kept: applied.kept,
            added: applied.added,
            changed: applied.changed,
            removed: applied.removed,
        },
        pipelines: pipelines.keys().cloned().collect(),
        warnings,
    };
    let next = Current::new(config, pipelines, preview, added);
    *state
        .current
        .write()
        .unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
    tracing::info!(
        source = %reloaded.source,
        kept = ?reloaded.servers.kept,
        added = ?reloaded.servers.added,
        changed = ?reloaded.servers.changed,
        removed = ?reloaded.servers.removed,
        warnings = ?reloaded.warnings,
        "configuration reloaded"
    );
    Ok(reloaded)
}

/// The servers a reload is about to have, by name only: what the pipelines are checked
/// against before the host changes. Building a pipeline asks only for the names; every
/// request answers "unavailable".
struct Planned(Vec<String>);

impl Planned {
    fn unavailable(server: &str) -> SourceError {
        SourceError::Unavailable {
            server: server.to_owned(),
            reason: "not connected yet (a reload is being checked)".into(),
        }
    }
}

#[async_trait]
impl McpSource for Planned {
    fn servers(&self) -> Vec<ServerInfo> {
        self.0
            .iter()
            .map(|name| ServerInfo {
                name: name.clone(),
                status: ServerStatus::Connecting,
                capabilities: ServerCapabilities::default(),
                protocol_version: None,
                implementation: None,
                instructions: None,
                counts: ListCounts::default(),
                warnings: Vec::new(),
                stderr_tail: Vec::new(),
            })
            .collect()
    }

    async fn list_resources(&self, server: &str) -> Result<Arc<[Resource]>, SourceError> {
        Err(Self::unavailable(server))
    }

    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError> {
        Err(Self::unavailable(server))
    }

    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError> {
        Err(Self::unavailable(server))
    }

    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError> {
        Err(Self::unavailable(server))
    }

    async fn read_resource(&self, server: &str, _uri: &str) -> Result<ResourceRead, SourceError> {
        Err(Self::unavailable(server))
    }

    async fn call_tool(
        &self,
        server: &str,
        _tool: &str,
        _arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ToolCallResult, SourceError> {
        Err(Self::unavailable(server))
    }
}
