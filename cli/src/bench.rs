//! `hostpipe bench`: the production `ResourceContextInjection` path over one stdio
//! server, turn after turn, for the side-by-side benchmark (`../shared/bench/`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use hostpipe_core::{McpSource as _, ModelProfile, Pipeline, Prepared, Turn};
use hostpipe_mcp::{HostOptions, McpHost, ServerConfig};
use hostpipe_runners::{PreviewConfig, PreviewRunner};
use hostpipe_stages::{
    AttachmentConfig, BindConfig, BindMcpServers, Binding, InjectConfig, ResourceContextInjection,
};
use serde::Serialize;

/// What one bench run measured; printed as the last line, one JSON object.
#[derive(Debug, Serialize)]
pub struct BenchResult {
    /// Turns run.
    pub turns: usize,
    /// Wall-clock seconds of the turns only (not the connection).
    pub seconds: f64,
    /// `turns / seconds`.
    pub turns_per_s: f64,
    /// Tokens injected by the last turn.
    pub tokens_injected: usize,
}

/// Connects to `server` (program and arguments) over stdio, attaches every listed
/// resource at pipeline scope with a `budget`-token budget, and runs `turns` turns whose
/// message is `query`. With `no_cache`, every turn reads and processes everything afresh
/// (no split, count or summary cache); otherwise the production caches apply. Every turn
/// reads every resource either way: hostpipe has no content cache yet.
///
/// # Errors
/// When the server cannot be started or lists no resources.
pub async fn run(
    turns: usize,
    budget: usize,
    query: &str,
    no_cache: bool,
    server: &[String],
) -> anyhow::Result<BenchResult> {
    let Some((command, args)) = server.split_first() else {
        bail!("give the server command after `--`")
    };
    let host = Arc::new(McpHost::new(
        [ServerConfig::stdio("bench", command, args)],
        HostOptions::default(),
    ));
    host.connect_all().await;
    let info = host.server("bench").context("bench server missing")?;
    if !info.status.is_connected() {
        bail!(
            "the bench server did not connect: {}",
            info.status.describe()
        );
    }
    let attachments = host
        .list_resources("bench")
        .await?
        .iter()
        .map(|r| AttachmentConfig {
            server: "bench".into(),
            uri: Some(r.uri.clone()),
            template: None,
            arguments: Default::default(),
            strategy: None,
        })
        .collect::<Vec<_>>();
    if attachments.is_empty() {
        bail!("the bench server lists no resources");
    }
    let config = InjectConfig {
        budget_tokens: Some(budget),
        attachments,
        ..InjectConfig::default()
    };
    // A pipeline owns its stages' caches (splits, token counts, summaries); `--no-cache`
    // builds a fresh one every turn, so every turn processes everything afresh.
    let build = || -> anyhow::Result<Pipeline> {
        let bind = BindMcpServers::new(
            BindConfig {
                servers: vec![Binding::Name("bench".into())],
            },
            host.clone(),
        )?;
        let inject =
            ResourceContextInjection::new(config.clone(), host.clone(), &Default::default())?;
        Ok(Pipeline::new(
            "bench",
            vec![
                (BindMcpServers::NAME.into(), Box::new(bind)),
                (ResourceContextInjection::NAME.into(), Box::new(inject)),
            ],
            (
                PreviewRunner::NAME.into(),
                Box::new(PreviewRunner::new(PreviewConfig::default())),
            ),
            Arc::new(ModelProfile::default()),
            None,
        ))
    };
    let mut pipeline = build()?;
    let started = Instant::now();
    let mut tokens_injected = 0;
    for _ in 0..turns {
        if no_cache {
            pipeline = build()?;
        }
        match pipeline.prepare(Turn::new("bench", query)).await {
            Prepared::Request(request, _) => tokens_injected = request.context_tokens(),
            Prepared::Ended(outcome) => bail!("the turn ended early: {}", outcome.reply),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    host.shutdown().await;
    Ok(BenchResult {
        turns,
        seconds,
        turns_per_s: turns as f64 / seconds.max(f64::EPSILON),
        tokens_injected,
    })
}
