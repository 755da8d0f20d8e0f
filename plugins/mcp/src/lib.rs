//! hostpipe's MCP host: the only crate that names `rmcp`.
//!
//! [`config`] reads the standard `mcpServers` JSON (and the same entries from hostpipe's
//! TOML) into [`ServerConfig`]s. [`McpHost`] connects them all concurrently over stdio
//! or streamable HTTP, prefetches their lists, and implements
//! [`hostpipe_core::McpSource`], converting rmcp's types to hostpipe's at this edge.
//!
//! What the host does on purpose, from what rmcp 3.11 does as a client:
//! - every request has a timeout ([`HostOptions::request_timeout`]); rmcp has none;
//! - lists are paged by hand with a page cap and repeated-cursor detection;
//! - `resources/*` is sent only to servers that declare `resources`;
//! - rmcp's client response cache is disabled; hostpipe's own content cache
//!   (by server and URI, bounded in bytes, with a TTL) is invalidated by
//!   `notifications/resources/updated` and reconnects, and shares one request among
//!   concurrent reads of a URI;
//! - notifications are applied in arrival order per server (rmcp's handler sees them
//!   out of order); `list_changed` lists again, debounced;
//! - a lost server is reconnected with exponential backoff and jitter, then re-listed;
//!   its subscriptions are made again as its resources are read again;
//! - a stdio message over the size limit fails its request at once (rmcp alone drops
//!   it and the request hangs);
//! - the protocol version offered in `initialize` is pinned to 2025-11-25;
//! - a stdio server's stderr goes to the log (target `hostpipe_mcp::server_stderr`),
//!   and its last lines explain a failed start.

pub mod auth_config;
mod cache;
pub mod config;
mod convert;
mod host;
mod stdio;

pub use config::{
    ProtocolMode, RawServerEntry, ServerConfig, TransportConfig, parse_mcp_servers_json,
};
pub use convert::decode_read_result;
pub use host::{
    AddServerError, Applied, Elicitation, HostOptions, LoginError, McpHost, MethodStats,
    PendingLogin, REQUEST_SECONDS_BUCKETS, RequestOutcome, redirect_error, redirect_state,
};
