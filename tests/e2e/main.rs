//! End-to-end tests against real MCP servers: the official server-everything and
//! server-filesystem (npm), servers built on the official Python SDK, and hostpipe's
//! own rmcp demo server. `bash tests/run.sh` installs the peers and runs these.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod cli;
mod config;
mod conformance;
mod consent;
mod content;
mod deploy;
mod dify;
mod elicitation;
mod everything;
mod failures;
mod filesystem;
mod fuzz;
mod langbot;
mod live;
mod mcp_door;
mod metrics;
mod oauth;
mod openai_endpoint;
mod otel;
mod prompts;
mod protocol;
mod python;
mod ranking;
mod registry;
mod runners;
mod serve;
mod servers_api;
mod store;
mod summarizer;
mod tools;

use std::sync::Arc;

use hostpipe_core::{ContextBlock, RunRequest, Trace, Turn};
use hostpipe_engine::{Pipeline, Prepared};
use hostpipe_mcp::McpHost;

/// Builds pipeline `default` from hostpipe TOML against `host`'s servers.
pub fn pipeline(host: &Arc<McpHost>, toml: &str) -> Pipeline {
    let config = hostpipe_cli::config::parse(toml, "test.toml").unwrap();
    let registry = hostpipe_cli::registry().unwrap();
    let mut pipelines = config
        .build_pipelines(&registry, host.clone(), None)
        .unwrap();
    pipelines.remove("default").expect("pipeline `default`")
}

/// Runs the stages and returns the request the runner would get.
pub async fn prepare(pipeline: &Pipeline, turn: Turn) -> (RunRequest, Trace) {
    match pipeline.prepare(turn).await {
        Prepared::Request(request, trace) => (request, trace),
        Prepared::Ended(outcome) => panic!("the turn ended early: {}", outcome.reply),
    }
}

/// The block read from `uri`.
pub fn block<'a>(request: &'a RunRequest, uri: &str) -> &'a ContextBlock {
    request
        .context
        .iter()
        .find(|b| b.source.uri == uri)
        .unwrap_or_else(|| {
            panic!(
                "no block for {uri}; blocks: {:?}",
                request
                    .context
                    .iter()
                    .map(|b| &b.source.uri)
                    .collect::<Vec<_>>()
            )
        })
}

/// The single text content of `uri` read straight from the server.
pub async fn read_text(host: &McpHost, server: &str, uri: &str) -> String {
    use hostpipe_core::{McpSource as _, ResourceContents};
    let contents = host.read_resource(server, uri).await.unwrap().contents;
    match &*contents {
        [ResourceContents::Text { text, .. }] => text.clone(),
        other => panic!("expected one text item from {uri}, got {other:?}"),
    }
}
