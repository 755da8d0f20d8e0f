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
//! [pipelines.default.bind_mcp_servers]          # one section per stage, by name
//! servers = [{ name = "kb", required = true }]
//! [pipelines.default.resource_context_injection]
//! budget_tokens = 4000
//! attachments = [{ server = "kb", uri = "demo://resource/static/document/features.md" }]
//! [pipelines.default.preview]                   # and one for the runner
//! format = "text"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hostpipe_core::{
    BuildContext, ConfigError, McpSource, ModelProfile, Pipeline, Registry, Summarizer,
};
use hostpipe_mcp::{HostOptions, RawServerEntry, ServerConfig, parse_mcp_servers_json};
use hostpipe_runners::{
    HttpReranker, OpenAiEmbedder, OpenAiSummarizer, OpenAiSummarizerConfig, RetrievalServiceConfig,
};
use serde::Deserialize;

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

/// `[host]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// Connect timeout in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// Request timeout in milliseconds.
    pub request_timeout_ms: Option<u64>,
    /// Page cap per list.
    pub max_list_pages: Option<usize>,
    /// Item cap per list.
    pub max_list_items: Option<usize>,
    /// Content cache size in decoded bytes; 0 disables it.
    pub content_cache_bytes: Option<u64>,
    /// How long a cached read stays fresh, in milliseconds; 0 disables the cache.
    pub content_ttl_ms: Option<u64>,
    /// Largest message a server may send, in bytes.
    pub max_message_bytes: Option<usize>,
    /// First reconnect delay in milliseconds.
    pub reconnect_delay_ms: Option<u64>,
    /// Largest reconnect delay in milliseconds.
    pub reconnect_max_delay_ms: Option<u64>,
    /// Reconnect attempts before giving up; default: never give up.
    pub max_reconnect_attempts: Option<u32>,
    /// Debounce of list refreshes after `list_changed`, in milliseconds.
    pub list_refresh_debounce_ms: Option<u64>,
    /// Ping interval for streamable HTTP servers in milliseconds; 0 disables.
    pub ping_interval_ms: Option<u64>,
}

/// `[store]`: where pins and the read history live.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `sqlite:PATH`, `postgres://…`, `memory` (nothing kept) or `none` (no pins, no
    /// history). Default: `sqlite:` + `hostpipe.db` in the data directory
    /// ([`data_dir`]). The `--store` flag and `HOSTPIPE_STORE_URL` override it.
    pub url: Option<String>,
    /// Days of read history kept: `hostpipe run` deletes older turns (in batches).
    /// Default 0: keep everything.
    #[serde(default)]
    pub history_retention_days: u32,
}

/// `[serve]`: the HTTP service, `hostpipe serve` (docs/http-api.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// The address to listen on, `HOST:PORT`. Default `127.0.0.1:8787`; the `--listen`
    /// flag overrides it.
    pub listen: Option<String>,
    /// Bearer tokens with every right (`HOSTPIPE_TOKEN` adds one). At least 16 bytes.
    #[serde(default)]
    pub admin_tokens: Vec<String>,
    /// Bearer tokens that may only look: lists, reads, completion, history
    /// (`HOSTPIPE_READ_TOKEN` adds one). At least 16 bytes.
    #[serde(default)]
    pub read_tokens: Vec<String>,
    /// Largest request body, in bytes. Default 1 MiB (1 048 576).
    pub max_body_bytes: Option<usize>,
    /// Time for any request but a turn, in milliseconds. Default 30 000.
    pub request_timeout_ms: Option<u64>,
    /// Time for a turn, stages and runner together, in milliseconds. Default 120 000.
    pub turn_timeout_ms: Option<u64>,
    /// On SIGTERM or Ctrl-C, how long running turns may take to finish, in
    /// milliseconds. Default 60 000.
    pub shutdown_timeout_ms: Option<u64>,
}

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

/// `[embedders.NAME]`: an OpenAI-compatible `/embeddings` endpoint that pipelines name in
/// `resource_context_injection.embedder` for dense retrieval.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderSection {
    /// API base URL including the version, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The environment variable that holds the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request timeout in milliseconds. Default 10 000.
    pub timeout_ms: Option<u64>,
    /// Most inputs per request. Default 64.
    pub batch_size: Option<usize>,
}

/// `[rerankers.NAME]`: a `/rerank` endpoint that pipelines name in
/// `resource_context_injection.reranker`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankerSection {
    /// API base URL including the version, e.g. `http://127.0.0.1:8081/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The request shape: `cohere` (the default; Cohere, Jina, vLLM, llama.cpp,
    /// Infinity) or `tei` (text-embeddings-inference's own).
    #[serde(default)]
    pub api: hostpipe_runners::RerankApi,
    /// The environment variable that holds the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request timeout in milliseconds. Default 10 000.
    pub timeout_ms: Option<u64>,
}

/// `[summarizers.NAME]`: a model-backed summarizer that pipelines name in
/// `resource_context_injection.summarizer`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummarizerSection {
    /// `openai`: any OpenAI-compatible chat completions endpoint.
    pub kind: SummarizerKind,
    /// API base URL including the version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The environment variable that holds the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request timeout in milliseconds. Default 60 000.
    pub timeout_ms: Option<u64>,
    /// Most document tokens sent. Default 12 000.
    pub max_input_tokens: Option<usize>,
}

/// Kinds of model-backed summarizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummarizerKind {
    /// OpenAI-compatible `POST /chat/completions`.
    Openai,
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
    pub approver: Option<Arc<dyn hostpipe_core::Approver>>,
    pipelines: BTreeMap<String, toml::Table>,
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
                "unknown key; known keys: type, command, args, env, cwd, url, headers, disabled, connect_timeout_ms, request_timeout_ms",
            )
            .in_file(source));
        }
        servers.push(config);
    }
    let defaults = HostOptions::default();
    let host = HostOptions {
        connect_timeout: file
            .host
            .connect_timeout_ms
            .map_or(defaults.connect_timeout, Duration::from_millis),
        request_timeout: file
            .host
            .request_timeout_ms
            .map_or(defaults.request_timeout, Duration::from_millis),
        max_list_pages: file.host.max_list_pages.unwrap_or(defaults.max_list_pages),
        max_list_items: file.host.max_list_items.unwrap_or(defaults.max_list_items),
        content_cache_bytes: file
            .host
            .content_cache_bytes
            .unwrap_or(defaults.content_cache_bytes),
        content_ttl: file
            .host
            .content_ttl_ms
            .map_or(defaults.content_ttl, Duration::from_millis),
        max_message_bytes: file
            .host
            .max_message_bytes
            .unwrap_or(defaults.max_message_bytes),
        reconnect_delay: file
            .host
            .reconnect_delay_ms
            .map_or(defaults.reconnect_delay, Duration::from_millis),
        reconnect_max_delay: file
            .host
            .reconnect_max_delay_ms
            .map_or(defaults.reconnect_max_delay, Duration::from_millis),
        max_reconnect_attempts: file.host.max_reconnect_attempts,
        list_refresh_debounce: file
            .host
            .list_refresh_debounce_ms
            .map_or(defaults.list_refresh_debounce, Duration::from_millis),
        ping_interval: file
            .host
            .ping_interval_ms
            .map_or(defaults.ping_interval, Duration::from_millis),
        ..defaults
    };
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
        pipelines: file.pipelines,
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

/// Loads `config` (or the embedded default, with the demo server spawned from
/// `self_exe`), then adds the servers of the `mcp_config` JSON and binds them all to
/// pipeline `default`.
///
/// # Errors
/// [`ConfigError`] naming the file and key.
pub fn load(
    config: Option<&Path>,
    mcp_config: Option<&Path>,
    self_exe: &Path,
) -> Result<LoadedConfig, ConfigError> {
    let mut loaded = match config {
        Some(path) => parse(&read(path)?, &path.display().to_string())?,
        None => {
            let mut c = parse(EMBEDDED_TOML, EMBEDDED)?;
            c.servers.push(ServerConfig::stdio(
                "demo",
                self_exe.display().to_string(),
                ["demo-server"],
            ));
            c
        }
    };
    if let Some(path) = mcp_config {
        let file = path.display().to_string();
        let extra = parse_mcp_servers_json(&read(path)?).map_err(|e| e.in_file(&file))?;
        for s in &extra {
            if !s.ignored_keys.is_empty() {
                tracing::warn!(
                    "{file}: mcpServers.{}: ignored keys (not used by hostpipe): {}",
                    s.name,
                    s.ignored_keys.join(", ")
                );
            }
        }
        let Some(default) = loaded.pipelines.get_mut("default") else {
            return Err(ConfigError::new(
                "pipelines.default",
                "--mcp-config binds its servers to pipeline `default`, which is not defined",
            )
            .in_file(&loaded.source));
        };
        let bind = default
            .entry("bind_mcp_servers")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = bind {
            let list = t
                .entry("servers")
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            if let toml::Value::Array(a) = list {
                for s in &extra {
                    a.push(toml::Value::String(s.name.clone()));
                }
            }
        }
        for s in extra {
            if loaded.servers.iter().any(|o| o.name == s.name) {
                return Err(ConfigError::new(
                    format!("mcpServers.{}", s.name),
                    "a server of this name is already configured",
                )
                .in_file(file));
            }
            loaded.servers.push(s);
        }
    }
    Ok(loaded)
}

impl LoadedConfig {
    /// The pipeline-scope attachments of pipeline `id`'s config
    /// (`[pipelines.ID.resource_context_injection] attachments`); `None` for an unknown
    /// pipeline.
    pub fn pipeline_attachments(&self, id: &str) -> Option<Vec<hostpipe_core::Attachment>> {
        let table = self.pipelines.get(id)?;
        let Some(section) = table.get("resource_context_injection") else {
            return Some(Vec::new());
        };
        let section = serde_json::to_value(section).ok()?;
        let config: hostpipe_stages::InjectConfig = serde_json::from_value(section).ok()?;
        Some(
            config
                .attachments
                .into_iter()
                .filter_map(|a| {
                    let target = match (a.uri, a.template) {
                        (Some(uri), None) => hostpipe_core::AttachmentTarget::Uri { uri },
                        (None, Some(template)) => hostpipe_core::AttachmentTarget::Template {
                            template,
                            arguments: a.arguments,
                        },
                        _ => return None,
                    };
                    Some(hostpipe_core::Attachment {
                        server: a.server,
                        target,
                        scope: hostpipe_core::Scope::Pipeline,
                    })
                })
                .collect(),
        )
    }

    /// Pipeline ids, sorted.
    pub fn pipeline_ids(&self) -> Vec<&str> {
        self.pipelines.keys().map(String::as_str).collect()
    }

    /// Builds every pipeline with `registry`, against the servers of `mcp`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and key: an unknown stage or runner (listing the
    /// known ones), a stage's invalid section, a section for a stage the pipeline does
    /// not list.
    pub fn build_pipelines(
        &self,
        registry: &Registry,
        mcp: Arc<dyn McpSource>,
    ) -> Result<BTreeMap<String, Pipeline>, ConfigError> {
        let model = Arc::new(self.model.clone());
        let summarizers = self.build_summarizers()?;
        let (embedders, rerankers) = self.build_retrieval()?;
        let mut out = BTreeMap::new();
        for (id, table) in &self.pipelines {
            let at = |k: &str| format!("pipelines.{id}{}{k}", if k.is_empty() { "" } else { "." });
            let err = |e: ConfigError| e.in_file(&self.source);
            let stages: Vec<String> = match table.get("stages") {
                None => DEFAULT_STAGES.iter().map(|s| (*s).to_owned()).collect(),
                Some(v) => v.clone().try_into().map_err(|e: toml::de::Error| {
                    err(ConfigError::new(
                        at("stages"),
                        format!("expected a list of stage names: {}", e.message()),
                    ))
                })?,
            };
            if let Some(i) = (1..stages.len()).find(|&i| stages[..i].contains(&stages[i])) {
                return Err(err(ConfigError::new(
                    at(&format!("stages[{i}]")),
                    format!("`{}` is listed twice", stages[i]),
                )));
            }
            let runner: String = match table.get("runner") {
                None => "preview".into(),
                Some(toml::Value::String(s)) => s.clone(),
                Some(_) => {
                    return Err(err(ConfigError::new(
                        at("runner"),
                        "expected a runner name",
                    )));
                }
            };
            let system_prompt = match table.get("system_prompt") {
                None => None,
                Some(toml::Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(err(ConfigError::new(
                        at("system_prompt"),
                        "expected a string",
                    )));
                }
            };
            let turn_timeout = match table.get("turn_timeout_ms") {
                None => Some(Pipeline::DEFAULT_TURN_TIMEOUT),
                Some(toml::Value::Integer(0)) => None,
                Some(toml::Value::Integer(ms)) if *ms > 0 => {
                    Some(Duration::from_millis(ms.unsigned_abs()))
                }
                Some(_) => {
                    return Err(err(ConfigError::new(
                        at("turn_timeout_ms"),
                        "expected milliseconds (a positive integer; 0 for no deadline)",
                    )));
                }
            };
            for key in table.keys() {
                let known = matches!(
                    key.as_str(),
                    "stages" | "runner" | "system_prompt" | "turn_timeout_ms" | "consent"
                ) || stages.contains(key)
                    || *key == runner;
                if !known {
                    return Err(err(ConfigError::new(
                        at(key),
                        format!(
                            "`{key}` is not a pipeline setting, a stage this pipeline lists ({}), or its runner (`{runner}`)",
                            stages.join(", ")
                        ),
                    )));
                }
            }
            let consent = match table.get("consent") {
                None => None,
                Some(v) => {
                    let value = serde_json::to_value(v)
                        .map_err(|e| err(ConfigError::new(at("consent"), e.to_string())))?;
                    let config: hostpipe_core::ConsentConfig = hostpipe_core::parse_section(&value)
                        .map_err(|e| err(e.under(&at("consent"))))?;
                    // A rule for a server that does not exist would silently never
                    // apply (a typo, a wrong letter case): an error, like in bindings.
                    let known: Vec<String> = mcp.servers().into_iter().map(|s| s.name).collect();
                    for (i, rule) in config.rules.iter().enumerate() {
                        if let Some(server) = &rule.server
                            && !known.contains(server)
                        {
                            return Err(err(ConfigError::new(
                                at(&format!("consent.rules[{i}].server")),
                                format!(
                                    "unknown MCP server `{server}`; configured servers: {}",
                                    known.join(", ")
                                ),
                            )));
                        }
                        // `tool` takes the server's own name; the model's `server__tool`
                        // name would silently never match.
                        if let Some(tool) = &rule.tool
                            && let Some((prefix, own)) = tool.split_once("__")
                            && known.iter().any(|s| {
                                s == prefix
                                    || s.replace(
                                        |c: char| {
                                            !c.is_ascii_alphanumeric() && c != '_' && c != '-'
                                        },
                                        "_",
                                    ) == prefix
                            })
                        {
                            return Err(err(ConfigError::new(
                                at(&format!("consent.rules[{i}].tool")),
                                format!(
                                    "`{tool}` is the name the model sees; a rule names the tool as its server lists it: `tool = \"{own}\"` with `server = \"{prefix}\"`"
                                ),
                            )));
                        }
                    }
                    let policy = hostpipe_core::ConsentPolicy::new(config)
                        .map_err(|e| err(e.under(&at("consent"))))?;
                    Some(Arc::new(hostpipe_core::Consent::new(
                        policy,
                        self.approver.clone(),
                    )))
                }
            };
            let ctx = BuildContext {
                pipeline_id: id.clone(),
                mcp: Arc::clone(&mcp),
                model: Arc::clone(&model),
                summarizers: summarizers.clone(),
                embedders: embedders.clone(),
                rerankers: rerankers.clone(),
            };
            let section = |name: &str| -> Result<serde_json::Value, ConfigError> {
                table.get(name).map_or(Ok(serde_json::Value::Null), |v| {
                    serde_json::to_value(v).map_err(|e| ConfigError::new(at(name), e.to_string()))
                })
            };
            let mut built = Vec::with_capacity(stages.len());
            for (i, name) in stages.iter().enumerate() {
                let d = registry
                    .stage(name)
                    .map_err(|e| err(e.under(&at(&format!("stages[{i}]")))))?;
                let stage = (d.build)(&section(name).map_err(err)?, &ctx)
                    .map_err(|e| err(e.under(&at(name))))?;
                built.push((name.clone(), stage));
            }
            // After the stages, so a stage's own error about a section comes first.
            check_attachments_bound(table, &stages)
                .map_err(|e| err(e.under(&format!("pipelines.{id}"))))?;
            let d = registry
                .runner(&runner)
                .map_err(|e| err(e.under(&at("runner"))))?;
            let r = (d.build)(&section(&runner).map_err(err)?, &ctx)
                .map_err(|e| err(e.under(&at(&runner))))?;
            out.insert(
                id.clone(),
                Pipeline::new(
                    id.clone(),
                    built,
                    (runner, r),
                    Arc::clone(&model),
                    system_prompt,
                )
                .with_turn_timeout(turn_timeout),
            );
            if let Some(c) = consent
                && let Some(p) = out.remove(id)
            {
                out.insert(id.clone(), p.with_consent(c));
            }
        }
        Ok(out)
    }
}

impl LoadedConfig {
    /// The servers pipeline `id` binds (`[pipelines.ID.bind_mcp_servers].servers`, by
    /// name); `None` when the pipeline does not exist or its binding cannot be read
    /// here (then every server is needed).
    pub fn bound_servers(&self, id: &str) -> Option<Vec<String>> {
        let servers = self
            .pipelines
            .get(id)?
            .get("bind_mcp_servers")?
            .get("servers")?
            .as_array()?;
        servers
            .iter()
            .map(|s| match s {
                toml::Value::String(name) => Some(name.clone()),
                toml::Value::Table(t) => t.get("name")?.as_str().map(str::to_owned),
                _ => None,
            })
            .collect()
    }

    /// Sets pipeline `id`'s resource budget to `budget` tokens
    /// (`[pipelines.ID.resource_context_injection] budget_tokens`, dropping a
    /// `budget_share`): `hostpipe eval` runs one pipeline per budget.
    pub fn override_budget(&mut self, id: &str, budget: usize) {
        let Some(table) = self.pipelines.get_mut(id) else {
            return;
        };
        let section = table
            .entry("resource_context_injection".to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = section {
            t.remove("budget_share");
            t.insert(
                "budget_tokens".into(),
                toml::Value::Integer(i64::try_from(budget).unwrap_or(i64::MAX)),
            );
        }
    }

    /// Makes every pipeline use `runner`, with `settings` (key, value) written into its
    /// `[pipelines.ID.RUNNER]` section over what the file says: the `run` command's
    /// `--runner`, `--base-url` and `--model`.
    ///
    /// The section of the runner it replaces is dropped: it configures a runner the
    /// pipeline no longer has (and would otherwise be an unknown key).
    pub fn override_runner(&mut self, runner: &str, settings: &[(&str, String)]) {
        for table in self.pipelines.values_mut() {
            let previous = table
                .insert("runner".into(), toml::Value::String(runner.to_owned()))
                .and_then(|v| v.as_str().map(str::to_owned));
            if let Some(previous) = previous
                && previous != runner
            {
                table.remove(&previous);
            }
            if settings.is_empty() {
                continue;
            }
            let section = table
                .entry(runner.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !section.is_table() {
                *section = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(t) = section {
                for (k, v) in settings {
                    t.insert((*k).to_owned(), toml::Value::String(v.clone()));
                }
            }
        }
    }

    /// The `[embedders.*]` and `[rerankers.*]`, built. API keys are read from the
    /// environment variables the sections name.
    #[allow(clippy::type_complexity)]
    fn build_retrieval(
        &self,
    ) -> Result<
        (
            BTreeMap<String, Arc<dyn hostpipe_core::Embedder>>,
            BTreeMap<String, Arc<dyn hostpipe_core::Reranker>>,
        ),
        ConfigError,
    > {
        let err = |at: String, m: String| ConfigError::new(at, m).in_file(&self.source);
        let service = |table: &str,
                       name: &str,
                       base_url: &str,
                       model: &str,
                       api_key_env: &Option<String>,
                       headers: &BTreeMap<String, String>,
                       timeout_ms: Option<u64>|
         -> Result<RetrievalServiceConfig, ConfigError> {
            let mut c = RetrievalServiceConfig::new(base_url, model);
            if let Some(var) = api_key_env {
                c.api_key = Some(std::env::var(var).map_err(|_| {
                    err(
                        format!("{table}.{name}.api_key_env"),
                        format!("environment variable `{var}` is not set"),
                    )
                })?);
            }
            c.headers.clone_from(headers);
            if let Some(ms) = timeout_ms {
                if ms == 0 {
                    return Err(err(
                        format!("{table}.{name}.timeout_ms"),
                        "must be at least 1 ms".into(),
                    ));
                }
                c.timeout = Duration::from_millis(ms);
            }
            Ok(c)
        };
        let mut embedders: BTreeMap<String, Arc<dyn hostpipe_core::Embedder>> = BTreeMap::new();
        for (name, e) in &self.embedders {
            let c = service(
                "embedders",
                name,
                &e.base_url,
                &e.model,
                &e.api_key_env,
                &e.headers,
                e.timeout_ms,
            )?;
            let embedder = OpenAiEmbedder::new(name.clone(), c, e.batch_size.unwrap_or(64))
                .map_err(|e| err(format!("embedders.{name}"), e.message))?;
            embedders.insert(name.clone(), Arc::new(embedder));
        }
        let mut rerankers: BTreeMap<String, Arc<dyn hostpipe_core::Reranker>> = BTreeMap::new();
        for (name, r) in &self.rerankers {
            let c = service(
                "rerankers",
                name,
                &r.base_url,
                &r.model,
                &r.api_key_env,
                &r.headers,
                r.timeout_ms,
            )?;
            let reranker = HttpReranker::new(name.clone(), c, r.api)
                .map_err(|e| err(format!("rerankers.{name}"), e.message))?;
            rerankers.insert(name.clone(), Arc::new(reranker));
        }
        Ok((embedders, rerankers))
    }

    /// The `[summarizers.*]`, built. The API key is read from the environment variable
    /// the section names (the only environment read in hostpipe's configuration).
    fn build_summarizers(&self) -> Result<BTreeMap<String, Arc<dyn Summarizer>>, ConfigError> {
        let mut out: BTreeMap<String, Arc<dyn Summarizer>> = BTreeMap::new();
        for (name, s) in &self.summarizers {
            let at = |k: &str| {
                ConfigError::new(
                    format!(
                        "summarizers.{name}{}{k}",
                        if k.is_empty() { "" } else { "." }
                    ),
                    "",
                )
            };
            let err = |k: &str, m: String| {
                ConfigError {
                    message: m,
                    ..at(k)
                }
                .in_file(&self.source)
            };
            if matches!(name.as_str(), "extractive" | "none") {
                return Err(err(
                    "",
                    format!("`{name}` is a built-in summarizer name; choose another"),
                ));
            }
            let api_key = match &s.api_key_env {
                None => None,
                Some(var) => Some(std::env::var(var).map_err(|_| {
                    err(
                        "api_key_env",
                        format!("environment variable `{var}` is not set"),
                    )
                })?),
            };
            let SummarizerKind::Openai = s.kind;
            let mut config = OpenAiSummarizerConfig::new(&s.base_url, &s.model);
            config.api_key = api_key;
            config.headers.clone_from(&s.headers);
            if let Some(ms) = s.timeout_ms {
                config.timeout = Duration::from_millis(ms);
            }
            if let Some(n) = s.max_input_tokens {
                config.max_input_tokens = n;
            }
            let summarizer =
                OpenAiSummarizer::new(name.clone(), config).map_err(|e| err("", e.message))?;
            out.insert(name.clone(), Arc::new(summarizer));
        }
        Ok(out)
    }
}

/// A pipeline that binds servers and injects resources may only attach resources of
/// servers it binds: anything else could never be read. Errors are relative to the
/// pipeline's table.
fn check_attachments_bound(table: &toml::Table, stages: &[String]) -> Result<(), ConfigError> {
    let listed = |s: &str| stages.iter().any(|x| x == s);
    if !listed("bind_mcp_servers") || !listed("resource_context_injection") {
        return Ok(());
    }
    let servers = table
        .get("bind_mcp_servers")
        .and_then(|b| b.get("servers"))
        .and_then(toml::Value::as_array);
    let bound: Vec<&str> = servers
        .into_iter()
        .flatten()
        .filter_map(|b| {
            b.as_str()
                .or_else(|| b.get("name").and_then(toml::Value::as_str))
        })
        .collect();
    let attachments = table
        .get("resource_context_injection")
        .and_then(|r| r.get("attachments"))
        .and_then(toml::Value::as_array);
    for (i, a) in attachments.into_iter().flatten().enumerate() {
        if let Some(server) = a.get("server").and_then(toml::Value::as_str)
            && !bound.contains(&server)
        {
            let list = if bound.is_empty() {
                "none".to_owned()
            } else {
                bound.join(", ")
            };
            return Err(ConfigError::new(
                format!("resource_context_injection.attachments[{i}].server"),
                format!(
                    "`{server}` is not bound by this pipeline's bind_mcp_servers (bound: {list})"
                ),
            ));
        }
    }
    Ok(())
}

/// The path of this binary, for spawning the embedded demo server.
///
/// # Errors
/// When the OS cannot tell.
pub fn self_exe() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}
