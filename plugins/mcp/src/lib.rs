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
//! - rmcp's client response cache is disabled (reads are authoritative);
//! - the protocol version offered in `initialize` is pinned to 2025-11-25;
//! - a stdio server's stderr goes to the log (target `hostpipe_mcp::server_stderr`),
//!   and its last lines explain a failed start.

pub mod config;
mod convert;
mod host;

pub use config::{RawServerEntry, ServerConfig, TransportConfig, parse_mcp_servers_json};
pub use host::{HostOptions, McpHost};
