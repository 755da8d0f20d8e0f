//! `hostpipe eval`: answer recall of a pipeline on a questions file, per budget.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use hostpipe_cli::App;
use hostpipe_cli::config::RunnerChoice;
use hostpipe_core::McpSource as _;

// The arguments of `hostpipe eval` (its help is the doc of `SessionCommand::Eval`).
#[derive(clap::Args)]
pub(crate) struct EvalArgs {
    /// The questions file (JSON lines).
    pub(crate) questions: PathBuf,
    /// Budgets in tokens, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,4000")]
    pub(crate) budgets: Vec<usize>,
    /// Pipeline id.
    #[arg(long, default_value = "default")]
    pub(crate) pipeline: String,
    /// Turns run at a time.
    #[arg(long, default_value_t = 2)]
    pub(crate) jobs: usize,
    /// Print the report as one JSON document (with every miss).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn eval(app: &App, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let EvalArgs {
        questions,
        budgets,
        pipeline,
        jobs,
        json,
    } = args;
    let path = questions;
    let questions = hostpipe_cli::eval::read_questions(&path)?;
    if budgets.is_empty() || budgets.contains(&0) {
        bail!("--budgets: give budgets in tokens (e.g. 1000,2000,4000), none of them 0");
    }
    let mut budgets = budgets;
    let mut seen = std::collections::HashSet::new();
    budgets.retain(|b| seen.insert(*b));
    if jobs == 0 {
        bail!("--jobs: at least 1");
    }
    app.pipeline(&pipeline)?;
    // A server that is not there would make every question a miss: measuring
    // needs every server the questions and the pipeline read.
    let servers = app.host.servers();
    let mut needed: Vec<String> = app
        .config
        .bound_servers(&pipeline)
        .unwrap_or_else(|| servers.iter().map(|s| s.name.clone()).collect());
    for (q, line) in questions.iter().map(|q| (q, q.line)) {
        for a in &q.attach {
            if !servers.iter().any(|s| s.name == a.server) {
                let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                bail!(
                    "{}:{line}: attach: unknown MCP server `{}`; configured servers: {}",
                    path.display(),
                    a.server,
                    known.join(", ")
                );
            }
            if !needed.contains(&a.server) {
                needed.push(a.server.clone());
            }
        }
    }
    for s in servers.iter().filter(|s| needed.contains(&s.name)) {
        if !s.status.is_connected() {
            bail!(
                "MCP server `{}` is not connected ({}): its resources would make every answer a miss",
                s.name,
                s.status.describe()
            );
        }
    }
    let registry = hostpipe_cli::registry()?;
    let mut pipelines = Vec::with_capacity(budgets.len());
    for budget in budgets {
        let mut config = app.config.clone();
        // Only the pipeline measured, at this budget, ending in the preview runner.
        config.pipelines.retain(|id, _| *id == pipeline);
        if let Some(spec) = config.pipelines.get_mut(&pipeline) {
            spec.set_budget(budget);
        }
        let mut built = config.build_pipelines(
            &registry,
            app.host.clone(),
            Some(&RunnerChoice::named("preview")),
        )?;
        let p = built
            .remove(&pipeline)
            .with_context(|| format!("pipeline `{pipeline}` was not built"))?;
        pipelines.push((budget, p));
    }
    let report = hostpipe_cli::eval::run(&pipelines, &questions, jobs).await;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "pipeline `{}`, {} question{}",
            report.pipeline,
            questions.len(),
            if questions.len() == 1 { "" } else { "s" }
        );
        out!("{}", report.table());
        for b in &report.budgets {
            if !b.misses.is_empty() {
                outln!("missed at {}: {}", b.budget, b.misses.join(", "));
            }
            for (message, turns) in &b.warnings {
                eprintln!(
                    "warning: at {} ({turns} turn{}): {message}",
                    b.budget,
                    if *turns == 1 { "" } else { "s" }
                );
            }
            for (id, reply) in &b.ended {
                eprintln!(
                    "warning: {id} at {}: a stage ended the turn: {}",
                    b.budget,
                    reply.trim()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
