//! The `hostpipe` command's library: configuration loading ([`config`]), the embedded
//! demo MCP server ([`demo`]) and [`App`], which wires the registry, the MCP host and
//! the pipelines together. `main.rs` is only argument parsing and output.

pub mod bench;
pub mod config;
pub mod demo;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use hostpipe_core::{Pipeline, Registry, RegistryError};
use hostpipe_mcp::McpHost;

/// The registry of every stage and runner linked into this binary.
///
/// # Errors
/// [`RegistryError`] when two share a name.
pub fn registry() -> Result<Registry, RegistryError> {
    // Name every plugin crate so the linker keeps its registrations.
    hostpipe_stages::link();
    hostpipe_runners::link();
    hostpipe_plugin_example::link();
    Registry::from_inventory()
}

/// A configured hostpipe: MCP host connected, pipelines built.
pub struct App {
    /// The loaded configuration.
    pub config: config::LoadedConfig,
    /// The MCP host.
    pub host: Arc<McpHost>,
    /// Pipelines by id.
    pub pipelines: BTreeMap<String, Pipeline>,
}

impl App {
    /// Loads the configuration (see [`config::load`]) and validates every pipeline
    /// against the registry and the configured servers. Nothing is connected yet: call
    /// [`App::connect`].
    ///
    /// # Errors
    /// A configuration error (naming the file and key), or a registry conflict.
    pub fn load(config_file: Option<&Path>, mcp_config: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_with(config_file, mcp_config, None)
    }

    /// [`App::load`], with every pipeline's runner replaced: `(runner, settings)` as
    /// [`config::LoadedConfig::override_runner`] takes them.
    ///
    /// # Errors
    /// As [`App::load`]; the runner's own config errors name `pipelines.ID.RUNNER`.
    pub fn load_with(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
        runner: Option<(&str, &[(&str, String)])>,
    ) -> anyhow::Result<Self> {
        let exe = config::self_exe()
            .context("cannot find the hostpipe executable to spawn the demo server")?;
        let mut config = config::load(config_file, mcp_config, &exe)?;
        if let Some((name, settings)) = runner {
            config.override_runner(name, settings);
        }
        let registry = registry()?;
        let host = Arc::new(McpHost::new(config.servers.clone(), config.host.clone()));
        let pipelines = config.build_pipelines(&registry, host.clone())?;
        Ok(Self {
            config,
            host,
            pipelines,
        })
    }

    /// Connects every enabled server (see [`McpHost::connect_all`]).
    pub async fn connect(&self) {
        self.host.connect_all().await;
    }

    /// The pipeline `id`.
    ///
    /// # Errors
    /// When no pipeline has that id (the message lists the ids).
    pub fn pipeline(&self, id: &str) -> anyhow::Result<&Pipeline> {
        self.pipelines.get(id).with_context(|| {
            let ids = self.config.pipeline_ids();
            if ids.is_empty() {
                format!("{}: no pipeline `{id}`: the file defines no pipelines (add [pipelines.{id}], see docs/configuration.md)", self.config.source)
            } else {
                format!("{}: no pipeline `{id}`; pipelines: {}", self.config.source, ids.join(", "))
            }
        })
    }

    /// Closes every MCP session and stops the stdio servers.
    pub async fn shutdown(&self) {
        self.host.shutdown().await;
    }
}
