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
    /// Most turns shown, each with all its records (1 to 10000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) limit: u32,
    /// Turns skipped first (the newest).
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: u32,
    /// JSON output (one array of records, those of the turns shown).
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
        limit: PAGE,
        offset: 0,
    };
    let page = TurnPage { limit, offset };
    if tools {
        return tool_history(app, query, page, json).await;
    }
    let store = store(app)?;
    let records = page
        .collect(
            query,
            |r: &hostpipe_engine::InjectionRecord| r.turn_id.as_str(),
            |q| async move { store.history(&q).await },
        )
        .await?;
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
    for turn in records.chunk_by(|a, b| a.turn_id == b.turn_id) {
        let first = &turn[0];
        let mut table = new_table(header.iter().copied());
        for r in turn {
            let read = &r.read;
            let mut row = vec![
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
        // Only the URI and the error wrap in a narrow terminal.
        keep_whole(&mut table, &[0, 2, 3, 4, 5, 6]);
        outln!(
            "{}\n{table}",
            turn_heading(
                first.at_ms,
                &first.turn_id,
                first.conversation.as_deref(),
                &first.pipeline
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Columns `columns` of `table` are never wrapped: the others take what is left of the
/// width.
fn keep_whole(table: &mut comfy_table::Table, columns: &[usize]) {
    for &i in columns {
        if let Some(column) = table.column_mut(i) {
            column.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
        }
    }
}

/// The line above a turn's table: when, which turn (the UUID v7's last 8 hex digits:
/// random, so they tell turns apart; `--json` has the whole id), where.
fn turn_heading(at_ms: i64, turn_id: &str, conversation: Option<&str>, pipeline: &str) -> String {
    format!(
        "{} · turn {} · pipeline {pipeline}{}",
        format_time(at_ms),
        &turn_id[turn_id.len().saturating_sub(8)..],
        conversation
            .map(|c| format!(" · conversation {c}"))
            .unwrap_or_default()
    )
}

/// Records asked of the store at a time while paging by turn.
const PAGE: u32 = 1000;

/// `--limit` and `--offset`, in turns: the records of the turns `offset..offset + limit`
/// (newest first), never a turn cut in half.
#[derive(Debug, Clone, Copy)]
struct TurnPage {
    limit: u32,
    offset: u32,
}

impl TurnPage {
    /// Pages through `fetch` (a store's history for `query`: newest turn first, the
    /// records of a turn together, as `HistoryQuery` orders them) and keeps the records
    /// of the turns this page covers; `turn_of` tells a record's turn.
    async fn collect<T, F, Fut>(
        self,
        mut query: HistoryQuery,
        turn_of: impl Fn(&T) -> &str,
        mut fetch: F,
    ) -> anyhow::Result<Vec<T>>
    where
        F: FnMut(HistoryQuery) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, hostpipe_engine::StoreError>>,
    {
        let end = u64::from(self.offset) + u64::from(self.limit);
        let (mut out, mut turns, mut last) = (Vec::new(), 0_u64, None::<String>);
        query.limit = PAGE;
        query.offset = 0;
        loop {
            let page = fetch(query.clone()).await?;
            let full = page.len() >= PAGE as usize;
            for record in page {
                if last.as_deref() != Some(turn_of(&record)) {
                    turns += 1;
                    if turns > end {
                        return Ok(out);
                    }
                    last = Some(turn_of(&record).to_owned());
                }
                if turns > u64::from(self.offset) {
                    out.push(record);
                }
            }
            if !full {
                return Ok(out);
            }
            query.offset = query.offset.saturating_add(PAGE);
        }
    }
}

/// `hostpipe history --tools`: the tool calls of the turns `page` covers.
async fn tool_history(
    app: &App,
    query: HistoryQuery,
    page: TurnPage,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = store(app)?;
    let calls = page
        .collect(
            query,
            |c: &hostpipe_engine::ToolCallEntry| c.turn_id.as_str(),
            |q| async move { store.call_history(&q).await },
        )
        .await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&calls)?);
        return Ok(ExitCode::SUCCESS);
    }
    if calls.is_empty() {
        outln!("no tool calls match");
        return Ok(ExitCode::SUCCESS);
    }
    for turn in calls.chunk_by(|a, b| a.turn_id == b.turn_id) {
        let first = &turn[0];
        let mut table = new_table([
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
        for c in turn {
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
        // The arguments, the error and the consent wrap; the rest stays whole.
        keep_whole(&mut table, &[0, 1, 2, 4, 5, 6]);
        outln!(
            "{}\n{table}",
            turn_heading(
                first.at_ms,
                &first.turn_id,
                first.conversation.as_deref(),
                &first.pipeline
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}
