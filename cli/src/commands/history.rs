//! `hostpipe history`: the read history and the tool calls.

use std::process::ExitCode;

use anyhow::bail;
use hostpipe_cli::App;
use hostpipe_engine::HistoryQuery;

use super::{format_time, new_table, parse_id, parse_time, store};

// The arguments of `hostpipe history` (its help is the doc of `SessionCommand::History`).
#[derive(clap::Args)]
pub(crate) struct HistoryArgs {
    /// Only this conversation.
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub(crate) conversation: Option<String>,
    /// Only this pipeline.
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub(crate) pipeline: Option<String>,
    /// Only this MCP server.
    #[arg(long, value_name = "NAME")]
    pub(crate) server: Option<String>,
    /// Only turns since: an RFC 3339 time (2026-11-30T09:00:00Z) or a duration ago (2h).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) since: Option<i64>,
    /// Only turns before: an RFC 3339 time or a duration ago.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) until: Option<i64>,
    /// Only failed reads (with --tools: calls that failed or were withheld).
    #[arg(long)]
    pub(crate) errors: bool,
    /// Tool calls instead of resource reads.
    #[arg(long)]
    pub(crate) tools: bool,
    /// Most records shown (1 to 10000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) limit: u32,
    /// Records skipped first.
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: u32,
    /// JSON output (one array of records).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn history(app: &App, args: HistoryArgs) -> anyhow::Result<ExitCode> {
    let HistoryArgs {
        conversation,
        pipeline,
        server,
        since,
        until,
        errors,
        tools,
        limit,
        offset,
        json,
    } = args;
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        bail!(
            "--since ({}) is not before --until ({}): no turn can match",
            format_time(s),
            format_time(u)
        );
    }
    let query = HistoryQuery {
        conversation,
        pipeline,
        server,
        since_ms: since,
        until_ms: until,
        errors_only: errors,
        limit,
        offset,
    };
    if tools {
        return tool_history(app, &query, json).await;
    }
    let records = store(app)?.history(&query).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&records)?);
        return Ok(ExitCode::SUCCESS);
    }
    if records.is_empty() {
        outln!("no reads match");
        return Ok(ExitCode::SUCCESS);
    }
    let with_consent = records.iter().any(|r| r.read.consent.is_some());
    let mut header = vec![
        "time",
        "turn",
        "conversation",
        "pipeline",
        "server",
        "resource",
        "scope",
        "bytes",
        "tokens",
        "treatment",
        "ms",
        "error",
    ];
    if with_consent {
        header.push("consent");
    }
    let mut table = new_table(header);
    for r in &records {
        let read = &r.read;
        let mut row = vec![
            format_time(r.at_ms),
            // The UUID v7's last 8 hex digits: random, so they tell turns apart.
            r.turn_id[r.turn_id.len().saturating_sub(8)..].to_owned(),
            r.conversation.clone().unwrap_or_else(|| "-".into()),
            r.pipeline.clone(),
            read.server.clone(),
            read.uri.clone(),
            // A read the model asked for has no attachment scope.
            match read.origin {
                hostpipe_core::ReadOrigin::Model => "model".to_owned(),
                hostpipe_core::ReadOrigin::Host => read.scope.as_str().to_owned(),
            },
            read.bytes.to_string(),
            format!(
                "{}{} → {}",
                if read.tokens_estimated { "~" } else { "" },
                read.tokens_before,
                read.tokens_after
            ),
            match read.treatment {
                // Nothing reached the model: left out of the budget, or refused.
                hostpipe_core::Treatment::Omitted if read.tokens_after == 0 => {
                    "left out".to_owned()
                }
                ref t => hostpipe_runners::render::treatment_label(t),
            },
            read.elapsed_ms.to_string(),
            read.error.clone().unwrap_or_default(),
        ];
        if with_consent {
            row.push(read.consent.clone().unwrap_or_default());
        }
        table.add_row(row);
    }
    outln!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// `hostpipe history --tools`: the tool calls matching `query`.
async fn tool_history(app: &App, query: &HistoryQuery, json: bool) -> anyhow::Result<ExitCode> {
    let calls = store(app)?.call_history(query).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&calls)?);
        return Ok(ExitCode::SUCCESS);
    }
    if calls.is_empty() {
        outln!("no tool calls match");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = new_table(vec![
        "time",
        "turn",
        "conversation",
        "pipeline",
        "server",
        "tool",
        "by",
        "arguments",
        "bytes",
        "tokens",
        "ms",
        "error",
        "consent",
    ]);
    for c in &calls {
        let call = &c.call;
        let mut arguments = call.arguments.to_string();
        if arguments.len() > 60 {
            let mut end = 57;
            while !arguments.is_char_boundary(end) {
                end -= 1;
            }
            arguments.truncate(end);
            arguments.push('…');
        }
        table.add_row(vec![
            format_time(c.at_ms),
            c.turn_id[c.turn_id.len().saturating_sub(8)..].to_owned(),
            c.conversation.clone().unwrap_or_else(|| "-".into()),
            c.pipeline.clone(),
            call.server.clone(),
            call.tool.clone(),
            call.origin.as_str().to_owned(),
            hostpipe_cli::approver::printable(&arguments),
            call.result_bytes.to_string(),
            call.result_tokens.to_string(),
            call.elapsed_ms.to_string(),
            match (&call.error, call.is_error) {
                (Some(e), _) => e.clone(),
                (None, true) => "the tool reported an error".into(),
                (None, false) => String::new(),
            },
            call.consent.clone().unwrap_or_default(),
        ]);
    }
    outln!("{table}");
    Ok(ExitCode::SUCCESS)
}
