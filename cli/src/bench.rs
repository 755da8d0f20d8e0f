//! `hostpipe bench`: the production `ResourceContextInjection` path over one stdio
//! server, turn after turn, for the side-by-side benchmark (`../shared/bench/`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use hostpipe_core::{BuildContext, McpSource as _, ModelProfile, Turn};
use hostpipe_engine::{AttachmentStore, MemoryStore, Pipeline, Prepared};
use hostpipe_mcp::{HostOptions, McpHost, ServerConfig};
use hostpipe_runners::{PreviewConfig, PreviewRunner};
use hostpipe_stages::{
    AttachmentConfig, BindConfig, BindMcpServers, Binding, InjectConfig, ResourceContextInjection,
};
use serde::Serialize;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Turns to run.
    pub turns: usize,
    /// Token budget per turn.
    pub budget: usize,
    /// The user message of every turn.
    pub query: String,
    /// Every turn reads and processes everything afresh.
    pub no_cache: bool,
    /// Turns in flight at once (at least 1).
    pub concurrency: usize,
    /// An attachment store URL (`sqlite:PATH`, `postgres://…`, `memory`): each turn then
    /// loads its conversation's pins and writes its reads to the history, as in
    /// production. `None`: no store.
    pub store: Option<String>,
    /// The protocol era to speak with the server (`auto`, `2025-11-25`, `2026-07-28`).
    pub protocol: hostpipe_mcp::ProtocolMode,
}

/// What one bench run measured; printed as the last line, one JSON object.
#[derive(Debug, Serialize)]
pub struct BenchResult {
    /// Turns run.
    pub turns: usize,
    /// Turns in flight at once.
    pub concurrency: usize,
    /// Wall-clock seconds of the turns only (not the connection).
    pub seconds: f64,
    /// `turns / seconds`.
    pub turns_per_s: f64,
    /// Tokens injected by the last turn.
    pub tokens_injected: usize,
}

/// Connects to `server` (program and arguments) over stdio, attaches every listed
/// resource at pipeline scope with a `budget`-token budget, and runs `turns` turns whose
/// message is `query`, `concurrency` at a time over the one session. With `no_cache`,
/// every turn reads and processes everything afresh (no content, split, count or summary
/// cache); otherwise the production caches apply (a warm turn reads nothing).
///
/// # Errors
/// When the server cannot be started or lists no resources, or a turn ends early.
pub async fn run(options: &BenchOptions, server: &[String]) -> anyhow::Result<BenchResult> {
    let BenchOptions {
        turns,
        budget,
        ref query,
        no_cache,
        concurrency,
        ref store,
        protocol,
    } = *options;
    let store: Option<Arc<dyn AttachmentStore>> = match store.as_deref() {
        None | Some("none") => None,
        Some("memory") => Some(Arc::new(MemoryStore::new())),
        Some(url) => Some(Arc::new(hostpipe_store::SqlStore::open(url).await?)),
    };
    let concurrency = concurrency.max(1);
    let host = connect(server, no_cache, protocol).await?;
    let config = InjectConfig {
        budget_tokens: Some(budget),
        attachments: attachments(&host).await?,
        ..InjectConfig::default()
    };
    // A pipeline owns its stages' caches (splits, token counts, summaries); `--no-cache`
    // builds a fresh one every turn, so every turn processes everything afresh.
    let build = || pipeline(&host, &config, store.as_ref());
    let shared = Arc::new(build()?);
    let turn = |pipeline: Arc<Pipeline>| {
        let query = query.clone();
        async move {
            let mut turn = Turn::new("bench", query);
            turn.ids.conversation = Some("bench".into());
            match pipeline.prepare(turn).await {
                Prepared::Request(request, _) => Ok(request.context_tokens()),
                Prepared::Ended(outcome) => {
                    Err(anyhow::anyhow!("the turn ended early: {}", outcome.reply))
                }
            }
        }
    };
    let started = Instant::now();
    let mut tokens_injected = 0;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..turns {
        if set.len() == concurrency
            && let Some(done) = set.join_next().await
        {
            tokens_injected = done??;
        }
        let pipeline = if no_cache {
            Arc::new(build()?)
        } else {
            Arc::clone(&shared)
        };
        set.spawn(turn(pipeline));
    }
    while let Some(done) = set.join_next().await {
        tokens_injected = done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    host.shutdown().await;
    Ok(BenchResult {
        turns,
        concurrency,
        seconds,
        turns_per_s: turns as f64 / seconds.max(f64::EPSILON),
        tokens_injected,
    })
}

/// The bench server (`server`: its command and arguments), connected; without the
/// content cache when `no_cache`.
async fn connect(
    server: &[String],
    no_cache: bool,
    protocol: hostpipe_mcp::ProtocolMode,
) -> anyhow::Result<Arc<McpHost>> {
    let Some((command, args)) = server.split_first() else {
        bail!("give the server command after `--`")
    };
    let host_options = HostOptions {
        content_cache_bytes: if no_cache {
            0
        } else {
            HostOptions::default().content_cache_bytes
        },
        ..HostOptions::default()
    };
    let mut config = ServerConfig::stdio("bench", command, args);
    config.protocol = protocol;
    let host = Arc::new(McpHost::new([config], host_options));
    host.connect_all().await;
    let info = host.server("bench").context("bench server missing")?;
    if !info.status.is_connected() {
        bail!(
            "the bench server did not connect: {}",
            info.status.describe()
        );
    }
    Ok(host)
}

/// Every resource the bench server lists, as an attachment.
async fn attachments(host: &McpHost) -> anyhow::Result<Vec<AttachmentConfig>> {
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
            must: false,
        })
        .collect::<Vec<_>>();
    if attachments.is_empty() {
        bail!("the bench server lists no resources");
    }
    Ok(attachments)
}

/// A pipeline binding the bench server and injecting with `config`, ending in the
/// preview runner, with `store` when given.
fn pipeline(
    host: &Arc<McpHost>,
    config: &InjectConfig,
    store: Option<&Arc<dyn AttachmentStore>>,
) -> anyhow::Result<Pipeline> {
    let bind = BindMcpServers::new(
        BindConfig {
            servers: vec![Binding::Name("bench".into())],
        },
        host.clone(),
    )?;
    let ctx = BuildContext {
        pipeline_id: "bench".into(),
        mcp: host.clone(),
        model: Arc::new(ModelProfile::default()),
        summarizers: Default::default(),
        embedders: Default::default(),
        rerankers: Default::default(),
    };
    let inject = ResourceContextInjection::new(config.clone(), &ctx)?;
    let pipeline = Pipeline::new(
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
    );
    Ok(match store {
        Some(s) => pipeline.with_store(Arc::clone(s)),
        None => pipeline,
    })
}
