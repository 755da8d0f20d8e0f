//! The `hostpipe` command's library: configuration loading ([`config`]), the embedded
//! demo MCP server ([`demo`]) and [`App`], which wires the registry, the MCP host and
//! the pipelines together. `main.rs` is only argument parsing and output.

pub mod added_servers;
pub mod approver;
pub mod bench;
pub mod config;
pub mod demo;
pub mod elicitor;
pub mod eval;
#[doc(hidden)]
pub mod fuzzing;
pub mod ops;
pub mod serve;
pub mod telemetry;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use hostpipe_core::{Registry, RegistryError};
use hostpipe_engine::{AttachmentStore, MemoryStore, Pipeline};
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
    /// The attachment store, once [`App::open_store`] opened one.
    pub store: Option<Arc<dyn AttachmentStore>>,
    /// Where MCP servers added over the API are kept: the SQL store [`App::open_store`]
    /// opened, or memory for a `memory` store; `None` without one.
    pub server_entries: Option<Arc<dyn hostpipe_engine::ServerEntries>>,
    /// The SQL store's credential rows, when [`App::open_store`] opened one.
    credential_rows: Option<(Arc<dyn hostpipe_engine::SealedRows>, String)>,
    /// Where OAuth credentials are kept, once [`App::open_vault`] ran.
    pub vault: VaultUse,
    /// What every pipeline [`App::build_pipelines`] builds reports its reads, tool calls
    /// and turns to (`hostpipe serve`'s metrics); none by default.
    pub observer: Option<Arc<dyn hostpipe_engine::PipelineObserver>>,
}

/// What [`App::join_stored_servers`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Joined {
    /// The servers that joined, by name.
    pub servers: Vec<String>,
    /// What was left out, and why.
    pub warnings: Vec<String>,
}

/// Where the MCP servers' OAuth credentials are kept ([`App::open_vault`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VaultUse {
    /// No server uses OAuth (or [`App::open_vault`] did not run): nothing to keep.
    #[default]
    NotNeeded,
    /// In memory only: lost when the process ends; the reason (no key, no store).
    MemoryOnly(String),
    /// Sealed with `HOSTPIPE_CREDENTIAL_KEY` in the store described.
    Persistent(String),
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

    /// [`App::load`], with every pipeline ending in `runner` instead of its own (the
    /// pipelines' runners are then not built).
    ///
    /// # Errors
    /// As [`App::load`]; the runner's own config errors name `pipelines.ID.RUNNER`.
    pub fn load_with(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
        runner: Option<&config::RunnerChoice>,
    ) -> anyhow::Result<Self> {
        let (approver, elicitor) = Self::terminal_askers();
        Self::load_with_askers(config_file, mcp_config, runner, approver, elicitor)
    }

    /// [`App::load_unbuilt`] with the terminal asking (as [`App::load_with`]): for the
    /// command line, which joins the servers added over the API
    /// ([`App::join_stored_servers`]) before it builds the pipelines
    /// ([`App::build_own_pipelines`]).
    ///
    /// # Errors
    /// As [`App::load_unbuilt`].
    pub fn load_unbuilt_with_terminal(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let (approver, elicitor) = Self::terminal_askers();
        Self::load_unbuilt(config_file, mcp_config, approver, elicitor)
    }

    /// One terminal for both questions: consent and the servers' own (elicitation, only
    /// when there is a terminal to ask on).
    #[allow(clippy::type_complexity)]
    fn terminal_askers() -> (
        Arc<dyn hostpipe_engine::Approver>,
        Option<Arc<dyn hostpipe_core::Elicitor>>,
    ) {
        let terminal = Arc::new(approver::TerminalApprover::new());
        let elicitor = terminal
            .has_terminal()
            .then(|| Arc::clone(&terminal) as Arc<dyn hostpipe_core::Elicitor>);
        (terminal, elicitor)
    }

    /// [`App::load_with`], with `approver` answering the consent policies' `ask`s (the
    /// CLI asks on its terminal; `hostpipe serve` asks its callers), and no elicitor.
    ///
    /// # Errors
    /// As [`App::load`].
    pub fn load_with_approver(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
        runner: Option<&config::RunnerChoice>,
        approver: Arc<dyn hostpipe_engine::Approver>,
    ) -> anyhow::Result<Self> {
        Self::load_with_askers(config_file, mcp_config, runner, approver, None)
    }

    /// [`App::load_with_approver`], with `elicitor` putting the MCP servers' questions
    /// (elicitation) to the turn's user: the MCP host then declares the capability for
    /// the pipelines that keep `[pipelines.ID.elicitation] enabled` (the default).
    ///
    /// # Errors
    /// As [`App::load`].
    pub fn load_with_askers(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
        runner: Option<&config::RunnerChoice>,
        approver: Arc<dyn hostpipe_engine::Approver>,
        elicitor: Option<Arc<dyn hostpipe_core::Elicitor>>,
    ) -> anyhow::Result<Self> {
        let mut app = Self::load_unbuilt(config_file, mcp_config, approver, elicitor)?;
        let registry = registry()?;
        app.pipelines = app
            .config
            .build_pipelines(&registry, app.host.clone(), runner)?;
        Ok(app)
    }

    /// [`App::load_with_askers`] with no pipelines built yet (`pipelines` is empty):
    /// for `hostpipe serve`, whose pipelines may bind servers it finds in its store
    /// (added over the API). Build them with [`App::build_pipelines`].
    ///
    /// # Errors
    /// A configuration error (naming the file and key).
    pub fn load_unbuilt(
        config_file: Option<&Path>,
        mcp_config: Option<&Path>,
        approver: Arc<dyn hostpipe_engine::Approver>,
        elicitor: Option<Arc<dyn hostpipe_core::Elicitor>>,
    ) -> anyhow::Result<Self> {
        let exe = config::self_exe()
            .context("cannot find the hostpipe executable to spawn the demo server")?;
        let mut config = config::load(config_file, mcp_config, &exe)?;
        config.approver = Some(approver);
        config.declare_elicitation(elicitor);
        let host = Arc::new(McpHost::new(config.servers.clone(), config.host.clone()));
        Ok(Self {
            config,
            host,
            pipelines: BTreeMap::new(),
            store: None,
            server_entries: None,
            credential_rows: None,
            vault: VaultUse::NotNeeded,
            observer: None,
        })
    }

    /// The pipelines of `config`, built against this app's MCP host (its servers as
    /// they are now) and given its store and observer.
    ///
    /// # Errors
    /// As [`config::LoadedConfig::build_pipelines`]; a registry conflict.
    pub fn build_pipelines(
        &self,
        config: &config::LoadedConfig,
        runner: Option<&config::RunnerChoice>,
    ) -> anyhow::Result<BTreeMap<String, Pipeline>> {
        let registry = registry()?;
        let built = config.build_pipelines(&registry, self.host.clone(), runner)?;
        Ok(built
            .into_iter()
            .map(|(id, p)| {
                let p = match &self.store {
                    None => p,
                    Some(store) => p.with_store(Arc::clone(store)),
                };
                let p = match &self.observer {
                    None => p,
                    Some(observer) => p.with_observer(Arc::clone(observer)),
                };
                (id, p)
            })
            .collect())
    }

    /// Builds this app's own pipelines ([`App::build_pipelines`] of its config), each
    /// ending in `runner` instead of its own when given.
    ///
    /// # Errors
    /// As [`App::build_pipelines`].
    pub fn build_own_pipelines(
        &mut self,
        runner: Option<&config::RunnerChoice>,
    ) -> anyhow::Result<()> {
        self.pipelines = self.build_pipelines(&self.config, runner)?;
        Ok(())
    }

    /// Makes the servers added over the API (`hostpipe serve`'s `POST /v1/servers`,
    /// kept in the store [`App::open_store`] opened) servers of this app, beside the
    /// config files' (whose entry wins on a name both have), so that its pipelines may
    /// bind them. Call it before connecting and before building the pipelines: the MCP
    /// host is made anew. Their sealed header and env values open with
    /// `HOSTPIPE_CREDENTIAL_KEY`. Returns what was left out, and why (never fails: a
    /// store that does not answer leaves the config files' servers alone). The host is
    /// made anew only when a server joins: then build the pipelines (again).
    pub async fn join_stored_servers(&mut self) -> Joined {
        use hostpipe_engine::credentials::CREDENTIAL_KEY_ENV;
        let mut joined = Joined::default();
        let Some(entries) = &self.server_entries else {
            return joined;
        };
        let rows = match entries.stored_servers().await {
            Ok(rows) => rows,
            Err(e) => {
                joined.warnings.push(format!(
                    "the servers added over the API could not be read from the store: {e}"
                ));
                return joined;
            }
        };
        if rows.is_empty() {
            return joined;
        }
        let warnings = &mut joined.warnings;
        let key = match std::env::var(CREDENTIAL_KEY_ENV)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(|k| hostpipe_engine::CredentialKey::from_base64(&k))
        {
            None => None,
            Some(Ok(key)) => Some(key),
            Some(Err(e)) => {
                warnings.push(format!("{CREDENTIAL_KEY_ENV}: {e}"));
                None
            }
        };
        let mut servers = self.config.servers.clone();
        for row in rows {
            if servers.iter().any(|s| s.name == row.name) {
                warnings.push(format!(
                    "server `{}` added over the API is also in the config file: the file's entry is used",
                    row.name
                ));
                continue;
            }
            match added_servers::from_row(&row, key.as_ref()) {
                Ok(server) => {
                    joined.servers.push(server.name.clone());
                    servers.push(server);
                }
                Err(why) => warnings.push(format!("{why}; the server is left out")),
            }
        }
        if !joined.servers.is_empty() {
            self.host = Arc::new(McpHost::new(servers, self.config.host.clone()));
        }
        joined
    }

    /// [`App::open_store`] for the servers added over the API only: the store is not
    /// given to the pipelines (no pins, no history). `none` and `memory` have none.
    ///
    /// # Errors
    /// When the store cannot be opened.
    pub async fn open_server_entries(&mut self, url: Option<&str>) -> anyhow::Result<()> {
        let url = self.store_url(url)?;
        if matches!(url.as_str(), "none" | "memory") {
            return Ok(());
        }
        let sql = Arc::new(hostpipe_store::SqlStore::open(&url).await?);
        self.credential_rows = Some((
            Arc::clone(&sql) as Arc<dyn hostpipe_engine::SealedRows>,
            sql.describe(),
        ));
        self.server_entries = Some(sql);
        Ok(())
    }

    /// The store URL in effect: `url` (the `--store` flag or `HOSTPIPE_STORE_URL`), else
    /// `[store] url`, else `sqlite:` + `hostpipe.db` in [`config::data_dir`].
    ///
    /// # Errors
    /// When the default is needed and there is no data directory.
    pub fn store_url(&self, url: Option<&str>) -> anyhow::Result<String> {
        if let Some(url) = url {
            return Ok(url.to_owned());
        }
        if let Some(url) = self.config.store.url.as_deref() {
            // A relative SQLite path in a config file is relative to that file, so a bot
            // and a later `hostpipe history` run from elsewhere open the same database.
            let path = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"));
            let config_dir = Path::new(&self.config.source).parent();
            return Ok(match (path, config_dir) {
                (Some(p), Some(dir))
                    if !p.starts_with('/') && !p.starts_with(":memory:") && !p.is_empty() =>
                {
                    hostpipe_store::sqlite_url(&dir.join(p))
                }
                _ => url.to_owned(),
            });
        }
        let dir = config::data_dir()?;
        Ok(hostpipe_store::sqlite_url(&dir.join("hostpipe.db")))
    }

    /// Opens the attachment store at [`App::store_url`] (`none`: no store, `memory`: one
    /// that keeps nothing) and gives it to every pipeline.
    ///
    /// # Errors
    /// When the store cannot be opened (the message names it).
    pub async fn open_store(
        &mut self,
        url: Option<&str>,
    ) -> anyhow::Result<Option<Arc<dyn AttachmentStore>>> {
        let url = self.store_url(url)?;
        let store: Arc<dyn AttachmentStore> = match url.as_str() {
            "none" => return Ok(None),
            "memory" => {
                self.server_entries =
                    Some(Arc::new(hostpipe_engine::MemoryServerEntries::default()));
                Arc::new(MemoryStore::new())
            }
            url => {
                let sql = Arc::new(hostpipe_store::SqlStore::open(url).await?);
                self.credential_rows = Some((
                    Arc::clone(&sql) as Arc<dyn hostpipe_engine::SealedRows>,
                    sql.describe(),
                ));
                self.server_entries =
                    Some(Arc::clone(&sql) as Arc<dyn hostpipe_engine::ServerEntries>);
                sql
            }
        };
        self.pipelines = std::mem::take(&mut self.pipelines)
            .into_iter()
            .map(|(id, p)| (id, p.with_store(Arc::clone(&store))))
            .collect();
        self.store = Some(Arc::clone(&store));
        Ok(Some(store))
    }

    /// Whether any enabled server may use OAuth (an HTTP server without static
    /// authorization).
    pub fn uses_oauth(&self) -> bool {
        self.config.servers.iter().any(|s| {
            !s.disabled
                && matches!(
                    &s.transport,
                    hostpipe_mcp::TransportConfig::StreamableHttp { auth, .. }
                        if *auth != hostpipe_mcp::auth_config::AuthConfig::None
                )
        })
    }

    /// Gives the MCP host where to keep OAuth credentials (call before connecting):
    /// sealed with the key in `HOSTPIPE_CREDENTIAL_KEY` (base64 of 32 bytes) in the store
    /// at [`App::store_url`] (the one [`App::open_store`] opened, or opened here for
    /// it), else in memory only, with a warning. Nothing when no server uses OAuth.
    ///
    /// # Errors
    /// A key that is not base64 of 32 bytes.
    pub async fn open_vault(&mut self, url: Option<&str>) -> anyhow::Result<&VaultUse> {
        let needed = self.uses_oauth();
        self.open_vault_if(url, needed).await
    }

    /// [`App::open_vault`], for `hostpipe serve`: also when no configured server uses
    /// OAuth but `HOSTPIPE_CREDENTIAL_KEY` is set, since a server added over the API may
    /// (`POST /v1/servers`; its logins then outlive the process too).
    ///
    /// # Errors
    /// As [`App::open_vault`].
    pub async fn open_vault_for_service(&mut self, url: Option<&str>) -> anyhow::Result<&VaultUse> {
        let key_set = std::env::var(hostpipe_engine::credentials::CREDENTIAL_KEY_ENV)
            .is_ok_and(|k| !k.trim().is_empty());
        let needed = self.uses_oauth() || key_set;
        self.open_vault_if(url, needed).await
    }

    async fn open_vault_if(
        &mut self,
        url: Option<&str>,
        needed: bool,
    ) -> anyhow::Result<&VaultUse> {
        use hostpipe_engine::credentials::CREDENTIAL_KEY_ENV;
        if !needed {
            self.vault = VaultUse::NotNeeded;
            return Ok(&self.vault);
        }
        let key = std::env::var(CREDENTIAL_KEY_ENV)
            .ok()
            .filter(|k| !k.trim().is_empty());
        let Some(key) = key else {
            let why = format!("{CREDENTIAL_KEY_ENV} is not set");
            tracing::warn!(
                "{why}: OAuth credentials of MCP servers are kept in memory only and lost when hostpipe exits (docs/configuration.md, \"OAuth for remote servers\")"
            );
            self.vault = VaultUse::MemoryOnly(why);
            return Ok(&self.vault);
        };
        let key = hostpipe_engine::CredentialKey::from_base64(&key).context(CREDENTIAL_KEY_ENV)?;
        let rows = match &self.credential_rows {
            Some((rows, described)) => Some((Arc::clone(rows), described.clone())),
            None => {
                let url = self.store_url(url)?;
                match url.as_str() {
                    "none" | "memory" => None,
                    url => match hostpipe_store::SqlStore::open(url).await {
                        Ok(sql) => {
                            let described = sql.describe();
                            Some((
                                Arc::new(sql) as Arc<dyn hostpipe_engine::SealedRows>,
                                described,
                            ))
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the store for OAuth credentials cannot be opened: they are kept in memory only");
                            None
                        }
                    },
                }
            }
        };
        let Some((rows, described)) = rows else {
            let why = "there is no SQL store (--store none or memory)".to_owned();
            tracing::warn!("{why}: OAuth credentials of MCP servers are kept in memory only");
            self.vault = VaultUse::MemoryOnly(why);
            return Ok(&self.vault);
        };
        self.host
            .set_credential_vault(Arc::new(hostpipe_engine::EncryptedVault::new(key, rows)));
        self.vault = VaultUse::Persistent(described);
        Ok(&self.vault)
    }

    /// Deletes expired pins and, when `[store] history_retention_days` is set, one batch
    /// of older history ([`hostpipe_engine::store::PRUNE_BATCH`] records). Only what
    /// runs turns calls it (`hostpipe run`), so a command that only looks never deletes
    /// by a retention the store's owner did not set. A failure is logged, not returned.
    pub async fn prune_store(&self) {
        let Some(store) = &self.store else { return };
        let now = hostpipe_engine::store::unix_ms_now();
        let days = self.config.store.history_retention_days;
        let cut = (days > 0).then(|| now.saturating_sub(i64::from(days) * 86_400_000));
        if let Err(e) = store.prune(now, cut).await {
            tracing::warn!(error = %e, "pruning the attachment store failed");
        }
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
