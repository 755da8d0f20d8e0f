//! hostpipe's TOML configuration: parsed once here, at the edge, into typed values.
//!
//! ```toml
//! [model]                      # hostpipe_core::ModelProfile; every key optional
//! name = "gpt-4o"
//! context_window = 128000
//!
//! [host]                       # MCP host limits (these are the defaults)
//! connect_timeout_ms = 30000
//! request_timeout_ms = 30000
//! max_list_pages = 100
//! max_list_items = 10000
//! content_cache_bytes = 268435456   # 0 disables the content cache
//! content_ttl_ms = 300000
//! max_message_bytes = 16777216
//! reconnect_delay_ms = 500
//! reconnect_max_delay_ms = 30000
//! # max_reconnect_attempts = 10     # default: never give up
//! list_refresh_debounce_ms = 100
//! ping_interval_ms = 30000          # streamable HTTP servers only; 0 disables
//! min_list_ttl_ms = 1000            # 2026-07-28 lists kept at least this long; 0 = ttlMs only
//!
//! [store]                      # pins and read history (docs/attachments.md)
//! url = "sqlite:/var/lib/hostpipe/hostpipe.db"  # default: hostpipe.db in the data directory
//! history_retention_days = 30  # `run` deletes older history; default 0 keeps it all
//!
//! [mcp_servers.kb]             # the same keys as a standard `mcpServers` entry
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything@2026.8.31"]
//!
//! [pipelines.default]
//! stages = ["bind_mcp_servers", "prompt_expansion", "resource_mentions", "resource_context_injection", "tool_assembly"]
//! runner = "preview"
//! system_prompt = "…"
//! turn_timeout_ms = 60000      # stages stop waiting on servers after this
//! locale = "zh-Hans"           # what end users are told (default en); [pipelines.default.messages] overrides
//! [pipelines.default.bind_mcp_servers]          # one section per stage, by name
//! servers = [{ name = "kb", required = true }]
//! [pipelines.default.resource_context_injection]
//! budget_tokens = 4000
//! attachments = [{ server = "kb", uri = "demo://resource/static/document/features.md" }]
//! [pipelines.default.preview]                   # and one for the runner
//! format = "text"
//! ```

mod build;
mod pipeline;
mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hostpipe_core::{Attachment, ConfigError, ModelProfile, Scope};
use hostpipe_mcp::{HostOptions, RawServerEntry, ServerConfig, parse_mcp_servers_json};
use serde::Deserialize;

pub use build::RunnerChoice;
pub use pipeline::{ElicitationSpec, PipelineSpec};
pub use sections::{
    EmbedderSection, HostSection, RerankerSection, ServeSection, StoreSection, SummarizerKind,
    SummarizerSection,
};

/// Where the embedded default configuration says it comes from, in errors.
pub const EMBEDDED: &str = "<embedded default config>";

/// The stages a pipeline runs when its config lists none.
pub const DEFAULT_STAGES: [&str; 5] = [
    "bind_mcp_servers",
    "prompt_expansion",
    "resource_mentions",
    "resource_context_injection",
    "tool_assembly",
];

/// The embedded default: pipeline `default` bound to the demo server (added by
/// [`load`], spawned from this very binary as `hostpipe demo-server`).
pub const EMBEDDED_TOML: &str = r#"
[pipelines.default]
stages = ["bind_mcp_servers", "prompt_expansion", "resource_mentions", "resource_context_injection", "tool_assembly"]
runner = "preview"
system_prompt = """
You are the Acme support assistant. Answer from the attached resources when they are \
relevant, say which resource you used, and say so when they do not cover the question."""

[pipelines.default.bind_mcp_servers]
servers = [{ name = "demo", required = true }]

[pipelines.default.resource_context_injection]
budget_tokens = 4000
attachments = [
  { server = "demo", uri = "demo://config/app.json" },
  { server = "demo", uri = "demo://docs/handbook.md" },
  { server = "demo", template = "demo://docs/{topic}", arguments = { topic = { var = "topic", default = "deployment" } } },
  { server = "demo", uri = "demo://images/logo.png" },
]
"#;

/// The data directory: `HOSTPIPE_DATA_DIR` if set, else the platform's per-user data
/// directory (`$XDG_DATA_HOME/hostpipe`, `~/.local/share/hostpipe` on Linux).
///
/// # Errors
/// When neither exists (no home directory).
pub fn data_dir() -> Result<PathBuf, ConfigError> {
    if let Some(dir) = std::env::var_os("HOSTPIPE_DATA_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    directories::ProjectDirs::from("", "", "hostpipe")
        .map(|d| d.data_dir().to_path_buf())
        .ok_or_else(|| {
            ConfigError::new(
                "store.url",
                "no home directory to keep hostpipe.db in: set HOSTPIPE_DATA_DIR or [store] url",
            )
        })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    model: ModelProfile,
    #[serde(default)]
    host: HostSection,
    #[serde(default)]
    store: StoreSection,
    #[serde(default)]
    serve: ServeSection,
    #[serde(default)]
    mcp_servers: BTreeMap<String, RawServerEntry>,
    #[serde(default)]
    summarizers: BTreeMap<String, SummarizerSection>,
    #[serde(default)]
    embedders: BTreeMap<String, EmbedderSection>,
    #[serde(default)]
    rerankers: BTreeMap<String, RerankerSection>,
    #[serde(default)]
    pipelines: BTreeMap<String, toml::Table>,
}

/// A loaded, validated configuration (servers not yet connected).
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The file pipelines came from (or [`EMBEDDED`]).
    pub source: String,
    /// The model.
    pub model: ModelProfile,
    /// Host options.
    pub host: HostOptions,
    /// Servers.
    pub servers: Vec<ServerConfig>,
    /// Model-backed summarizers by name.
    pub summarizers: BTreeMap<String, SummarizerSection>,
    /// Embedding endpoints by name.
    pub embedders: BTreeMap<String, EmbedderSection>,
    /// Rerank endpoints by name.
    pub rerankers: BTreeMap<String, RerankerSection>,
    /// Pins and read history.
    pub store: StoreSection,
    /// The HTTP service.
    pub serve: ServeSection,
    /// Who answers `ask` decisions of the pipelines' consent policies (none: `ask`
    /// denies). Set it before [`LoadedConfig::build_pipelines`].
    pub approver: Option<Arc<dyn hostpipe_engine::Approver>>,
    /// Who puts the MCP servers' questions (elicitation) to the turn's user (none: they
    /// are declined, and the capability is not declared). Set it, then
    /// [`LoadedConfig::declare_elicitation`], before building the host and pipelines.
    pub elicitor: Option<Arc<dyn hostpipe_core::Elicitor>>,
    /// The pipelines by id.
    pub pipelines: BTreeMap<String, PipelineSpec>,
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new("", format!("cannot read: {e}")).in_file(path.display().to_string())
    })
}

/// Parses hostpipe TOML `text` from `source` (a file name for errors).
///
/// # Errors
/// [`ConfigError`] naming `source` and the key.
pub fn parse(text: &str, source: &str) -> Result<LoadedConfig, ConfigError> {
    let de = toml::Deserializer::parse(text)
        .map_err(|e| toml_error(text, &e, String::new()).in_file(source))?;
    let file: FileConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." { String::new() } else { path };
        toml_error(text, e.inner(), key).in_file(source)
    })?;
    file.model
        .validate()
        .map_err(|e| ConfigError::new(format!("model.{}", e.field), e.message).in_file(source))?;
    let mut servers = Vec::new();
    for (name, raw) in file.mcp_servers {
        let at = format!("mcp_servers.{name}");
        let config =
            ServerConfig::from_entry(&name, raw).map_err(|e| e.under(&at).in_file(source))?;
        // hostpipe's own file is strict; only other clients' JSON may carry their keys.
        if let Some(key) = config.ignored_keys.first() {
            return Err(ConfigError::new(
                format!("{at}.{key}"),
                "unknown key; known keys: type, command, args, env, cwd, url, headers, disabled, connect_timeout_ms, request_timeout_ms, protocol, inherit_env",
            )
            .in_file(source));
        }
        servers.push(config);
    }
    let host = file.host.options();
    if host.max_message_bytes < 1024 {
        return Err(ConfigError::new(
            "host.max_message_bytes",
            format!(
                "{} bytes is too small for any MCP message (at least 1024)",
                host.max_message_bytes
            ),
        )
        .in_file(source));
    }
    let mut pipelines = BTreeMap::new();
    for (id, table) in file.pipelines {
        let spec = PipelineSpec::try_from(table)
            .map_err(|e| e.under(&format!("pipelines.{id}")).in_file(source))?;
        pipelines.insert(id, spec);
    }
    Ok(LoadedConfig {
        source: source.to_owned(),
        model: file.model,
        host,
        servers,
        summarizers: file.summarizers,
        embedders: file.embedders,
        rerankers: file.rerankers,
        store: file.store,
        serve: file.serve,
        approver: None,
        elicitor: None,
        pipelines,
    })
}

fn toml_error(text: &str, e: &toml::de::Error, key: String) -> ConfigError {
    let at = e
        .span()
        .map(|s| line_col(text, s.start))
        .map(|(l, c)| format!(" (line {l}, column {c})"))
        .unwrap_or_default();
    ConfigError::new(key, format!("{}{at}", e.message().trim_end()))
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Loads the configuration the command line names:
/// - neither file: the embedded default (pipeline `default` and the demo server,
///   spawned from `self_exe` as `hostpipe demo-server`);
/// - `mcp_config` alone: its servers, and a plain pipeline `default` (the default
///   stages, the preview runner) binding them all;
/// - `config` (and maybe `mcp_config`): the file, with the JSON's servers beside its
///   own. A JSON server that no pipeline of the file binds is bound to pipeline
///   `default`; one the file binds stays where the file put it (made `required`,
///   say, or left out of other pipelines).
///
/// # Errors
/// [`ConfigError`] naming the file and key: a server defined in both files, JSON
/// servers to bind to a pipeline `default` the file does not define.
pub fn load(
    config: Option<&Path>,
    mcp_config: Option<&Path>,
    self_exe: &Path,
) -> Result<LoadedConfig, ConfigError> {
    let extra = match mcp_config {
        None => None,
        Some(path) => {
            let file = path.display().to_string();
            let servers = parse_mcp_servers_json(&read(path)?).map_err(|e| e.in_file(&file))?;
            for s in &servers {
                if !s.ignored_keys.is_empty() {
                    tracing::warn!(
                        "{file}: mcpServers.{}: ignored keys (not used by hostpipe): {}",
                        s.name,
                        s.ignored_keys.join(", ")
                    );
                }
            }
            Some((file, servers))
        }
    };
    let mut loaded = match (config, &extra) {
        (Some(path), _) => parse(&read(path)?, &path.display().to_string())?,
        (None, Some((file, _))) => {
            let mut c = parse("", file)?;
            c.pipelines
                .insert("default".into(), PipelineSpec::default());
            c
        }
        (None, None) => {
            let mut c = parse(EMBEDDED_TOML, EMBEDDED)?;
            c.servers.push(ServerConfig::stdio(
                "demo",
                self_exe.display().to_string(),
                ["demo-server"],
            ));
            c
        }
    };
    if let Some((file, servers)) = extra {
        loaded.add_servers(&file, servers)?;
    }
    Ok(loaded)
}

impl LoadedConfig {
    /// Gives the config `elicitor` and sets what the MCP host declares accordingly
    /// (`host.elicitation`): form mode when a pipeline elicits, URL mode too when one
    /// of them allows it; nothing without an elicitor or when every pipeline turned
    /// elicitation off.
    pub fn declare_elicitation(&mut self, elicitor: Option<Arc<dyn hostpipe_core::Elicitor>>) {
        let eliciting: Vec<&PipelineSpec> = self
            .pipelines
            .values()
            .filter(|p| p.elicitation.enabled)
            .collect();
        self.host.elicitation = match (&elicitor, eliciting.is_empty()) {
            (None, _) | (_, true) => hostpipe_mcp::Elicitation::Off,
            _ if eliciting.iter().any(|p| p.elicitation.settings.url_mode) => {
                hostpipe_mcp::Elicitation::FormAndUrl
            }
            _ => hostpipe_mcp::Elicitation::Form,
        };
        self.elicitor = elicitor;
    }

    /// Adds the servers of `--mcp-config` `file`, binding each that no pipeline binds
    /// to pipeline `default`.
    fn add_servers(&mut self, file: &str, servers: Vec<ServerConfig>) -> Result<(), ConfigError> {
        for s in servers {
            if self.servers.iter().any(|o| o.name == s.name) {
                return Err(ConfigError::new(
                    format!("mcpServers.{}", s.name),
                    format!(
                        "a server of this name is already configured in {}",
                        self.source
                    ),
                )
                .in_file(file));
            }
            let bound = self
                .pipelines
                .values()
                .any(|p| p.bound_servers().is_some_and(|b| b.contains(&s.name)));
            if !bound {
                let Some(default) = self.pipelines.get_mut("default") else {
                    return Err(ConfigError::new(
                        "pipelines.default",
                        format!(
                            "--mcp-config server `{}` is bound by no pipeline, and there is no pipeline `default` to bind it to: bind it in a pipeline's bind_mcp_servers",
                            s.name
                        ),
                    )
                    .in_file(&self.source));
                };
                default.bind(s.name.clone());
            }
            self.servers.push(s);
        }
        Ok(())
    }

    /// The pipeline-scope attachments of pipeline `id`'s config
    /// (`[pipelines.ID.resource_context_injection] attachments`); `None` for an unknown
    /// pipeline.
    pub fn pipeline_attachments(&self, id: &str) -> Option<Vec<Attachment>> {
        let spec = self.pipelines.get(id)?;
        Some(
            spec.attachments()
                .iter()
                // The stage refuses an invalid entry when the pipeline is built.
                .filter_map(|a| a.spec().attachment(Scope::Pipeline).ok())
                .collect(),
        )
    }

    /// Pipeline ids, sorted.
    pub fn pipeline_ids(&self) -> Vec<&str> {
        self.pipelines.keys().map(String::as_str).collect()
    }

    /// The servers pipeline `id` binds (`[pipelines.ID.bind_mcp_servers].servers`, by
    /// name); `None` when the pipeline does not exist or its binding cannot be read
    /// here (then every server is needed).
    pub fn bound_servers(&self, id: &str) -> Option<Vec<String>> {
        self.pipelines.get(id)?.bound_servers()
    }
}

/// The path of this binary, for spawning the embedded demo server.
///
/// # Errors
/// When the OS cannot tell.
pub fn self_exe() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}
