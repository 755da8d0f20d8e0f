//! The top-level sections of hostpipe's TOML besides pipelines and servers.

use std::collections::BTreeMap;
use std::time::Duration;

use hostpipe_mcp::HostOptions;
use serde::Deserialize;

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
    /// Shortest time a 2026-07-28 server's list is kept, in milliseconds, when its
    /// `ttlMs` says less; 0 follows the server exactly.
    pub min_list_ttl_ms: Option<u64>,
}

/// `[store]`: where pins and the read history live.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `sqlite:PATH`, `postgres://…`, `memory` (nothing kept) or `none` (no pins, no
    /// history). Default: `sqlite:` + `hostpipe.db` in the data directory
    /// ([`data_dir`](super::data_dir)). The `--store` flag and `HOSTPIPE_STORE_URL` override it.
    pub url: Option<String>,
    /// Days of read history kept: `hostpipe run` deletes older turns (in batches).
    /// Default 0: keep everything.
    #[serde(default)]
    pub history_retention_days: u32,
}

/// `[serve]`: the HTTP service, `hostpipe serve` (docs/http-api.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// The address to listen on, `HOST:PORT`. Default `127.0.0.1:8787`; the `--listen`
    /// flag overrides it.
    pub listen: Option<String>,
    /// Bearer tokens with every right (`HOSTPIPE_TOKEN` adds one). At least 16 bytes.
    #[serde(default)]
    pub admin_tokens: Vec<String>,
    /// Bearer tokens that may look and run turns (`/v1/turns`, `/v1/chat/completions`),
    /// for bot platforms (`HOSTPIPE_TURN_TOKEN` adds one). At least 16 bytes.
    #[serde(default)]
    pub turn_tokens: Vec<String>,
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
    /// The URL browsers reach this service at (`https://hostpipe.example`), for the
    /// OAuth redirect URI `PUBLIC_URL/oauth/callback`. Default: `http://` + the `Host`
    /// of the login request.
    pub public_url: Option<String>,
    /// Whether `POST /v1/servers` may add a stdio server (`command`): that runs a
    /// program on this host, so an admin token would be remote command execution.
    /// Default false: only streamable HTTP servers (`url`) may be added over HTTP.
    #[serde(default)]
    pub allow_stdio_servers: bool,
    /// Where to serve `GET /metrics` (Prometheus) instead of on `listen`: an address of
    /// its own, `HOST:PORT`, e.g. `127.0.0.1:9464`. Default: none, `/metrics` is on the
    /// main listener (without a token, as `/healthz`).
    pub metrics_listen: Option<String>,
}

impl HostSection {
    /// The host options: [`HostOptions::default`] where the section says nothing.
    pub fn options(&self) -> HostOptions {
        let defaults = HostOptions::default();
        HostOptions {
            connect_timeout: self
                .connect_timeout_ms
                .map_or(defaults.connect_timeout, Duration::from_millis),
            request_timeout: self
                .request_timeout_ms
                .map_or(defaults.request_timeout, Duration::from_millis),
            max_list_pages: self.max_list_pages.unwrap_or(defaults.max_list_pages),
            max_list_items: self.max_list_items.unwrap_or(defaults.max_list_items),
            content_cache_bytes: self
                .content_cache_bytes
                .unwrap_or(defaults.content_cache_bytes),
            content_ttl: self
                .content_ttl_ms
                .map_or(defaults.content_ttl, Duration::from_millis),
            max_message_bytes: self.max_message_bytes.unwrap_or(defaults.max_message_bytes),
            reconnect_delay: self
                .reconnect_delay_ms
                .map_or(defaults.reconnect_delay, Duration::from_millis),
            reconnect_max_delay: self
                .reconnect_max_delay_ms
                .map_or(defaults.reconnect_max_delay, Duration::from_millis),
            max_reconnect_attempts: self.max_reconnect_attempts,
            list_refresh_debounce: self
                .list_refresh_debounce_ms
                .map_or(defaults.list_refresh_debounce, Duration::from_millis),
            ping_interval: self
                .ping_interval_ms
                .map_or(defaults.ping_interval, Duration::from_millis),
            min_list_ttl: self
                .min_list_ttl_ms
                .map_or(defaults.min_list_ttl, Duration::from_millis),
            ..defaults
        }
    }
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
