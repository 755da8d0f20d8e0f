//! The `hostpipe` command.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use hostpipe_cli::App;
use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, HistoryQuery, McpSource as _, NewPin, PinOwner,
    TraceEvent, Turn, VariableRef,
};
use hostpipe_runners::PreviewReport;
use hostpipe_stages::convert::Converted;

/// Set once stdout's reader has gone (`hostpipe history | head -1`): later output is
/// dropped instead of panicking, and the command finishes (stopping its servers).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!`, without the panic on a closed pipe.
macro_rules! outln {
    () => {
        emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!`, without the panic on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        emit(format_args!($($arg)*))
    };
}

fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write the output: {e}");
        }
    }
}

/// Put MCP resources in front of a model: run a bot message through a pipeline.
///
/// Exit codes: 0 done; 1 the turn failed (or, for `servers`, a server failed);
/// 2 bad usage or configuration; 3 a stage ended the turn early with a reply (e.g. a
/// required server is down); 130 interrupted.
#[derive(Parser)]
#[command(name = "hostpipe", version, about, long_about)]
struct Cli {
    /// hostpipe's TOML config (default: the embedded demo pipeline).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A standard `mcpServers` JSON file (Claude Desktop, Cursor, VS Code); its servers
    /// are all bound to pipeline `default`.
    #[arg(long, global = true, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// Where pins and the read history live: sqlite:PATH, postgres://USER@HOST/DB,
    /// `memory` or `none` (default: `[store] url`, else hostpipe.db in the data
    /// directory, $HOSTPIPE_DATA_DIR or ~/.local/share/hostpipe).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "HOSTPIPE_STORE_URL",
        hide_env_values = true
    )]
    store: Option<String>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one turn and print the reply (the preview runner prints the request).
    Run {
        /// The message; read from stdin when absent.
        message: Option<String>,
        /// Pipeline id.
        #[arg(long, default_value = "default")]
        pipeline: String,
        /// Conversation id (its pins apply; its reads are recorded under it).
        #[arg(long, value_name = "ID", value_parser = parse_id)]
        conversation: Option<String>,
        /// A turn variable (repeatable).
        #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
        vars: Vec<(String, String)>,
        /// Attach a resource for this message (repeatable).
        #[arg(long = "attach", num_args = 2, value_names = ["SERVER", "URI"])]
        attach: Vec<String>,
        /// An earlier user message of the conversation (repeatable, oldest first): a
        /// follow-up ("and its timeout?") is ranked with the recent ones.
        #[arg(long = "history", value_name = "TEXT")]
        history: Vec<String>,
        /// Print one JSON document: reply, preview, trace.
        #[arg(long)]
        json: bool,
        /// The runner for this turn instead of the pipeline's: preview, local, dify,
        /// remote (its settings come from `[pipelines.ID.RUNNER]`).
        #[arg(long, value_name = "NAME")]
        runner: Option<String>,
        /// For `--runner local`: the OpenAI-compatible base URL, e.g.
        /// http://127.0.0.1:11434/v1 (the API key comes from OPENAI_API_KEY).
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
        /// For `--runner local`: the model name.
        #[arg(long, value_name = "NAME")]
        model: Option<String>,
    },
    /// Configured MCP servers: status, capabilities, counts.
    Servers {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Resources and resource templates of one server.
    Resources {
        /// Server name.
        server: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Prompts of one server, with their arguments (`*` = required); run one with
    /// `hostpipe run "/SERVER:PROMPT arg=value"`.
    Prompts {
        /// Server name.
        server: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Argument completion (MCP `completion/complete`): values for ARG of a resource
    /// TEMPLATE (`demo://docs/{topic}`) or a prompt (`prompt:NAME`) that start with
    /// PREFIX, one per line.
    Complete {
        /// Server name.
        server: String,
        /// A URI template, or `prompt:NAME`.
        target: String,
        /// The argument (template variable or prompt argument) to complete.
        argument: String,
        /// What the user has typed so far.
        #[arg(default_value = "")]
        prefix: String,
        /// An argument already chosen, sent as context (repeatable).
        #[arg(long = "context", value_name = "KEY=VALUE", value_parser = parse_var)]
        context: Vec<(String, String)>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Read one resource, converted as the pipeline would (blobs are described).
    Read {
        /// Server name.
        server: String,
        /// Resource URI.
        uri: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Pin a resource (or a URI template with its arguments) to every turn of a
    /// conversation or a pipeline, until detached or expired.
    Attach {
        #[command(flatten)]
        owner: OwnerArgs,
        #[command(flatten)]
        target: TargetArgs,
        /// Stop applying after this long: 90s, 30m, 2h, 7d (`1M` is a month, `1m` a
        /// minute); at most 100 years.
        #[arg(long, value_name = "DURATION", value_parser = parse_expiry)]
        expires_in: Option<std::time::Duration>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Remove a pin: by server and target (as attached), or by `--id`.
    Detach {
        #[command(flatten)]
        owner: OwnerArgs,
        /// The pin's id (from `hostpipe attachments`).
        #[arg(long, conflicts_with_all = ["server", "target", "args", "arg_vars"])]
        id: Option<String>,
        #[command(flatten)]
        target: DetachTarget,
    },
    /// The pins of a conversation or a pipeline (a pipeline's also lists those of its
    /// config).
    Attachments {
        #[command(flatten)]
        owner: OwnerArgs,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// The read history: each turn's resource reads with token counts, newest first.
    History {
        /// Only this conversation.
        #[arg(long, value_name = "ID", value_parser = parse_id)]
        conversation: Option<String>,
        /// Only this pipeline.
        #[arg(long, value_name = "ID", value_parser = parse_id)]
        pipeline: Option<String>,
        /// Only this MCP server.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
        /// Only turns since: an RFC 3339 time (2026-11-30T09:00:00Z) or a duration ago (2h).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        since: Option<i64>,
        /// Only turns before: an RFC 3339 time or a duration ago.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        until: Option<i64>,
        /// Only failed reads (with --tools: calls that failed or were withheld).
        #[arg(long)]
        errors: bool,
        /// Tool calls instead of resource reads.
        #[arg(long)]
        tools: bool,
        /// Most records shown (1 to 10000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Records skipped first.
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// JSON output (one array of records).
        #[arg(long)]
        json: bool,
    },
    /// Registered stages and runners.
    Plugins,
    /// Time the resource-injection path against one stdio MCP server; prints one JSON
    /// line: turns, seconds, turns_per_s, tokens_injected. With `--store URL`, each turn
    /// also loads pins and writes its history there (default: no store).
    Bench {
        /// Turns to run.
        #[arg(long, default_value_t = 20)]
        turns: usize,
        /// Token budget per turn.
        #[arg(long, default_value_t = 8000)]
        budget: usize,
        /// The user message of every turn.
        #[arg(long, default_value = "how does the cache handle subscription timeout")]
        query: String,
        /// Read and process everything afresh every turn (no content, split, count or
        /// summary cache): the cold path.
        #[arg(long)]
        no_cache: bool,
        /// Turns in flight at once, over the one MCP session.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// The server command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        server: Vec<String>,
    },
    /// Measure answer recall: run a questions file (JSON lines: question, answers,
    /// attach) through a pipeline at each budget and print recall and tokens used
    /// (docs/evaluation.md). Exit code 0 whatever the recall.
    Eval {
        /// The questions file (JSON lines).
        questions: PathBuf,
        /// Budgets in tokens, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,2000,4000")]
        budgets: Vec<usize>,
        /// Pipeline id.
        #[arg(long, default_value = "default")]
        pipeline: String,
        /// Turns run at a time.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Print the report as one JSON document (with every miss).
        #[arg(long)]
        json: bool,
    },
    /// Serve the HTTP API and the admin page until SIGTERM or Ctrl-C (docs/http-api.md).
    /// Needs a token: HOSTPIPE_TOKEN (admin), HOSTPIPE_READ_TOKEN (read-only) or
    /// `[serve] admin_tokens` / `read_tokens`.
    Serve {
        /// HOST:PORT to listen on (default: `[serve] listen`, else 127.0.0.1:8787; port 0
        /// picks a free one). Prints `hostpipe: listening on http://ADDR` when ready.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Log as JSON, one object per line (access logs have target `hostpipe::access`).
        #[arg(long)]
        log_json: bool,
    },
    /// Serve the embedded demo MCP server on stdio.
    DemoServer,
}

/// Whose pins: exactly one of `--conversation` and `--pipeline`.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct OwnerArgs {
    /// The conversation id (as the platform sends it in the turn).
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    conversation: Option<String>,
    /// The pipeline id.
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pipeline: Option<String>,
}

impl OwnerArgs {
    fn owner(&self) -> PinOwner {
        match (&self.conversation, &self.pipeline) {
            (Some(c), _) => PinOwner::Conversation(c.clone()),
            (None, Some(p)) => PinOwner::Pipeline(p.clone()),
            // clap's group makes one of them required.
            (None, None) => PinOwner::Pipeline(String::new()),
        }
    }
}

/// A server and a URI or URI template.
#[derive(clap::Args)]
struct TargetArgs {
    /// MCP server name.
    server: String,
    /// A resource URI, or an RFC 6570 URI template (`demo://docs/{topic}`) whose
    /// variables come from --arg and --arg-var.
    target: String,
    /// A template argument (repeatable).
    #[arg(long = "arg", value_name = "KEY=VALUE", value_parser = parse_var)]
    args: Vec<(String, String)>,
    /// A template argument taken from the turn variable NAME on each turn (repeatable).
    #[arg(long = "arg-var", value_name = "KEY=NAME", value_parser = parse_var)]
    arg_vars: Vec<(String, String)>,
}

/// [`TargetArgs`], optional (for `detach --id`).
#[derive(clap::Args)]
struct DetachTarget {
    /// MCP server name.
    #[arg(required_unless_present = "id")]
    server: Option<String>,
    /// The URI or URI template, as attached.
    #[arg(required_unless_present = "id")]
    target: Option<String>,
    /// A template argument, as attached (repeatable).
    #[arg(long = "arg", value_name = "KEY=VALUE", value_parser = parse_var)]
    args: Vec<(String, String)>,
    /// A template argument from a turn variable, as attached (repeatable).
    #[arg(long = "arg-var", value_name = "KEY=NAME", value_parser = parse_var)]
    arg_vars: Vec<(String, String)>,
}

/// `--expires-in`: a humantime duration, more than zero and at most 100 years.
fn parse_expiry(s: &str) -> Result<std::time::Duration, String> {
    const MAX: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
    let d =
        humantime::parse_duration(s).map_err(|e| format!("`{s}`: {e} (e.g. 90s, 30m, 2h, 7d)"))?;
    if d.is_zero() {
        return Err("a pin that expires at once never applies; give a duration above 0".into());
    }
    if d > MAX {
        return Err(format!(
            "`{s}` is more than 100 years; leave --expires-in out for a pin that never expires"
        ));
    }
    Ok(d)
}

/// An id given on the command line: not empty.
fn parse_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("an id cannot be empty".into())
    } else {
        Ok(s.to_owned())
    }
}

/// A time for `--since`/`--until`: RFC 3339, or a duration ago. Unix ms.
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(hostpipe_core::store::unix_ms_now()
            .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
        Err(_) => Err(format!(
            "`{s}` is neither an RFC 3339 time (2026-11-30T09:00:00Z) nor a duration (2h, 30m)"
        )),
    }
}

fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

fn init_logging(verbose: u8, command: &Command) {
    // rmcp logs what hostpipe already reports (and its own worker noise) at WARN and
    // ERROR; it shows from -v on. A service logs each request and its life cycle.
    let serve = matches!(command, Command::Serve { .. });
    let default = match verbose {
        0 if serve => {
            "warn,rmcp=off,sqlx=error,hostpipe::access=info,hostpipe::turns=info,hostpipe_cli::serve=info"
        }
        0 => "warn,rmcp=off,sqlx=error",
        1 => "info,rmcp=warn",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOSTPIPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if matches!(command, Command::Serve { log_json: true, .. }) {
        builder.json().with_current_span(false).init();
    } else {
        builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(serve)
            .init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, &cli.command);
    match dispatch(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            // An MCP server that is down or answered with an error is a failure (1);
            // everything else that stops a command early is bad usage or config (2).
            if e.chain()
                .any(|c| c.downcast_ref::<hostpipe_core::SourceError>().is_some())
            {
                ExitCode::FAILURE
            } else {
                ExitCode::from(2)
            }
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::DemoServer => {
            hostpipe_cli::demo::serve_stdio().await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Plugins => {
            out!("{}", hostpipe_cli::registry()?.listing());
            return Ok(ExitCode::SUCCESS);
        }
        Command::Serve { listen, .. } => {
            let approver = hostpipe_cli::serve::HttpApprover::new();
            let mut app = App::load_with_approver(
                cli.config.as_deref(),
                cli.mcp_config.as_deref(),
                None,
                std::sync::Arc::new(approver.clone()),
            )?;
            let options =
                hostpipe_cli::serve::ServeOptions::from_config(&app.config.serve, listen)?;
            app.open_store(cli.store.as_deref()).await?;
            hostpipe_cli::serve::serve(app, approver, options, interrupted()).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Bench {
            turns,
            budget,
            query,
            no_cache,
            concurrency,
            server,
        } => {
            let options = hostpipe_cli::bench::BenchOptions {
                turns,
                budget,
                query,
                no_cache,
                concurrency,
                store: cli.store.clone(),
            };
            let result = hostpipe_cli::bench::run(&options, &server).await?;
            outln!("{}", serde_json::to_string(&result)?);
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let runner = match &cli.command {
        Command::Run {
            runner,
            base_url,
            model,
            ..
        } => {
            let mut settings: Vec<(&str, String)> = Vec::new();
            settings.extend(base_url.clone().map(|u| ("base_url", u)));
            settings.extend(model.clone().map(|m| ("model", m)));
            let registry = hostpipe_cli::registry()?;
            if let Some(r) = runner.as_deref()
                && registry.runner(r).is_err()
            {
                let known: Vec<&str> = registry.runners().map(|d| d.name).collect();
                bail!(
                    "--runner: unknown runner `{r}`; known runners: {}",
                    known.join(", ")
                );
            }
            if !settings.is_empty() && runner.as_deref().is_some_and(|r| r != "local") {
                bail!("--base-url and --model are for `--runner local`");
            }
            if model.is_some() && base_url.is_none() && cli.config.is_none() {
                bail!(
                    "--model needs --base-url (the OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1)"
                );
            }
            if base_url.is_some() && model.is_none() && cli.config.is_none() {
                bail!("--base-url needs --model (the model name the endpoint serves)");
            }
            match (runner.as_deref(), settings.is_empty()) {
                (Some(r), _) => Some((r.to_owned(), settings)),
                (None, false) => Some(("local".to_owned(), settings)),
                (None, true) => None,
            }
        }
        _ => None,
    };
    let mut app = App::load_with(
        cli.config.as_deref(),
        cli.mcp_config.as_deref(),
        runner.as_ref().map(|(r, s)| (r.as_str(), s.as_slice())),
    )?;
    let pins_or_history = matches!(
        &cli.command,
        Command::Attach { .. }
            | Command::Detach { .. }
            | Command::Attachments { .. }
            | Command::History { .. }
    );
    if matches!(&cli.command, Command::Run { .. }) {
        // A turn goes on without pins or history when the store cannot be opened.
        match app.open_store(cli.store.as_deref()).await {
            Ok(_) => app.prune_store().await,
            Err(e) => eprintln!(
                "warning: {e:#}; the turn goes on without pinned attachments and its reads are not recorded"
            ),
        }
    } else if pins_or_history && app.open_store(cli.store.as_deref()).await?.is_none() {
        bail!("there is no attachment store (--store none): pins and history need one");
    }
    let app = app;
    let work = async {
        let needed = needed_servers(&app, &cli.command);
        app.host.connect_only(needed.as_deref()).await;
        command(&app, cli.command).await
    };
    let result = tokio::select! {
        r = work => r,
        signal = interrupted() => {
            eprintln!("hostpipe: {signal}; stopping the MCP servers");
            Ok(ExitCode::from(130))
        }
    };
    // Also on Ctrl-C: stdio servers run in their own process groups, so the terminal's
    // signal never reaches them.
    app.shutdown().await;
    result
}

/// The servers `command` needs (`None`: all), so that a server that is down or slow
/// does not hold up a command that does not use it.
fn needed_servers(app: &App, command: &Command) -> Option<Vec<String>> {
    match command {
        Command::Attach { .. }
        | Command::Detach { .. }
        | Command::Attachments { .. }
        | Command::History { .. } => Some(Vec::new()),
        Command::Resources { server, .. }
        | Command::Prompts { server, .. }
        | Command::Complete { server, .. }
        | Command::Read { server, .. } => Some(vec![server.clone()]),
        Command::Run {
            pipeline, attach, ..
        } => {
            let mut names = app.config.bound_servers(pipeline)?;
            names.extend(attach.chunks(2).map(|c| c[0].clone()));
            Some(names)
        }
        _ => None,
    }
}

/// Resolves on Ctrl-C or SIGTERM, saying which.
async fn interrupted() -> &'static str {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c().await,
            };
        tokio::select! {
            s = ctrl_c() => s,
            _ = term.recv() => "terminated",
        }
    }
    #[cfg(not(unix))]
    ctrl_c().await
}

async fn ctrl_c() -> &'static str {
    match tokio::signal::ctrl_c().await {
        Ok(()) => "interrupted",
        // No signal handling available: never resolve, the command runs to its end.
        Err(_) => std::future::pending().await,
    }
}

async fn command(app: &App, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            message,
            pipeline,
            conversation,
            vars,
            attach,
            history,
            json,
            ..
        } => {
            let text = match message {
                Some(m) => m,
                None if std::io::stdin().is_terminal() => {
                    bail!("give the message as an argument or on stdin")
                }
                None => {
                    // Read asynchronously, so Ctrl-C still ends the command.
                    use tokio::io::AsyncReadExt as _;
                    let mut s = String::new();
                    tokio::io::stdin()
                        .read_to_string(&mut s)
                        .await
                        .context("cannot read the message from stdin")?;
                    s.trim_end().to_owned()
                }
            };
            if text.trim().is_empty() {
                bail!("the message is empty");
            }
            let configured: Vec<String> = app.host.servers().into_iter().map(|s| s.name).collect();
            if let Some(unknown) = attach
                .chunks(2)
                .map(|c| &c[0])
                .find(|s| !configured.contains(s))
            {
                bail!(
                    "--attach: unknown MCP server `{unknown}`; configured servers: {}",
                    configured.join(", ")
                );
            }
            let p = app.pipeline(&pipeline)?;
            let mut turn = Turn::new(pipeline.clone(), text);
            turn.ids.conversation = conversation;
            turn.ids.message = format!("cli-{}", std::process::id());
            turn.variables = vars.into_iter().collect();
            turn.attachments = attach
                .chunks(2)
                .map(|c| Attachment::message_uri(&c[0], &c[1]))
                .collect();
            turn.history = history
                .into_iter()
                .map(|text| hostpipe_core::HistoryMessage {
                    role: hostpipe_core::Role::User,
                    text,
                })
                .collect();
            let outcome = p.run_turn(turn).await;
            if json {
                let doc = serde_json::json!({
                    "turn_id": outcome.trace.turn_id(),
                    "reply": outcome.reply,
                    "ended_by": outcome.ended_by,
                    "failed": outcome.failed,
                    "preview": outcome.request.as_ref().map(PreviewReport::new),
                    "trace": outcome.trace.records(),
                });
                outln!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                for r in outcome.trace.records() {
                    match &r.event {
                        TraceEvent::Warning { message } => eprintln!("warning: {message}"),
                        TraceEvent::Note { message } => eprintln!("note: {message}"),
                        TraceEvent::ServerUnavailable { server, reason, .. } => {
                            eprintln!("warning: MCP server `{server}` unavailable: {reason}")
                        }
                        TraceEvent::ResourceRead(read) if read.error.is_some() => {
                            eprintln!(
                                "warning: {} from `{}`: {}",
                                read.uri,
                                read.server,
                                read.error.as_deref().unwrap_or("")
                            )
                        }
                        // A withheld or failed call (not one whose tool reported an
                        // error: that is the tool's answer).
                        TraceEvent::ToolCall(call) if call.error.is_some() => eprintln!(
                            "warning: tool call {} of `{}` ({}): {}",
                            call.tool,
                            call.server,
                            call.origin.as_str(),
                            call.error.as_deref().unwrap_or("")
                        ),
                        _ => {}
                    }
                }
                outln!("{}", outcome.reply.trim_end());
            }
            Ok(if outcome.failed {
                if !json {
                    eprintln!("error: the turn failed (see the reply above)");
                }
                ExitCode::FAILURE
            } else if outcome.ended_by.is_some() {
                // A stage answered instead of the runner (e.g. a prompt command that
                // lacks an argument, a required server that is down).
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Eval {
            questions,
            budgets,
            pipeline,
            jobs,
            json,
        } => {
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
                config.override_runner("preview", &[]);
                config.override_budget(&pipeline, budget);
                let mut built = config.build_pipelines(&registry, app.host.clone())?;
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
        Command::Servers { json } => {
            let servers = app.host.servers();
            let code = if servers
                .iter()
                .any(|s| matches!(s.status, hostpipe_core::ServerStatus::Failed { .. }))
            {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
            if json {
                outln!("{}", serde_json::to_string_pretty(&servers)?);
                return Ok(code);
            }
            if servers.is_empty() {
                outln!(
                    "no MCP servers are configured in {} (add [mcp_servers.NAME] or --mcp-config FILE; see docs/configuration.md)",
                    app.config.source
                );
            }
            for s in &servers {
                outln!("{}: {}", s.name, s.status.describe());
                if let Some((name, version)) = &s.implementation {
                    outln!(
                        "  server: {name} {version}, protocol {}",
                        s.protocol_version.as_deref().unwrap_or("?")
                    );
                }
                if s.status.is_connected() {
                    let c = s.capabilities;
                    let caps: Vec<&str> = [
                        (c.tools, "tools"),
                        (c.resources, "resources"),
                        (c.resources_subscribe, "resources.subscribe"),
                        (c.resources_list_changed, "resources.listChanged"),
                        (c.prompts, "prompts"),
                        (c.completions, "completions"),
                        (c.logging, "logging"),
                    ]
                    .into_iter()
                    .filter_map(|(on, name)| on.then_some(name))
                    .collect();
                    outln!(
                        "  capabilities: {}",
                        if caps.is_empty() {
                            "none".into()
                        } else {
                            caps.join(", ")
                        }
                    );
                    outln!(
                        "  {} tools, {} resources, {} resource templates, {} prompts",
                        s.counts.tools,
                        s.counts.resources,
                        s.counts.resource_templates,
                        s.counts.prompts
                    );
                }
                for w in &s.warnings {
                    outln!("  warning: {w}");
                }
                if !s.status.is_connected() {
                    for line in &s.stderr_tail {
                        outln!("  stderr: {line}");
                    }
                }
            }
            Ok(code)
        }
        Command::Resources { server, json } => {
            let resources = app.host.list_resources(&server).await?;
            let templates = app.host.list_resource_templates(&server).await?;
            if json {
                let doc = serde_json::json!({ "resources": &*resources, "resource_templates": &*templates });
                outln!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(ExitCode::SUCCESS);
            }
            outln!("resources ({}):", resources.len());
            for r in resources.iter() {
                let size = r.size.map(|s| format!(", {s} bytes")).unwrap_or_default();
                outln!(
                    "  {}  {} [{}{size}]",
                    r.uri,
                    r.title.as_deref().unwrap_or(&r.name),
                    r.mime_type.as_deref().unwrap_or("?")
                );
            }
            outln!("resource templates ({}):", templates.len());
            for t in templates.iter() {
                outln!(
                    "  {}  {}",
                    t.uri_template,
                    t.title.as_deref().unwrap_or(&t.name)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Prompts { server, json } => {
            let prompts = app.host.list_prompts(&server).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&*prompts)?);
                return Ok(ExitCode::SUCCESS);
            }
            outln!("prompts ({}):", prompts.len());
            for p in prompts.iter() {
                let args: Vec<String> = p
                    .arguments
                    .iter()
                    .map(|a| format!("{}{}", a.name, if a.required { "*" } else { "" }))
                    .collect();
                outln!(
                    "  /{server}:{}  {}{}",
                    p.name,
                    args.join(" "),
                    p.description
                        .as_deref()
                        .map(|d| format!("  — {d}"))
                        .unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Complete {
            server,
            target,
            argument,
            prefix,
            context,
            json,
        } => {
            let reference = match target.strip_prefix("prompt:") {
                Some(name) => hostpipe_core::CompletionRef::Prompt { name: name.into() },
                None => hostpipe_core::CompletionRef::ResourceTemplate {
                    uri_template: target.clone(),
                },
            };
            let context: std::collections::BTreeMap<String, String> = context.into_iter().collect();
            let c = app
                .host
                .complete(&server, &reference, &argument, &prefix, &context)
                .await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                for v in &c.values {
                    outln!("{v}");
                }
                if c.has_more {
                    eprintln!(
                        "(more values: {} in all)",
                        c.total.map_or("?".to_owned(), |t| t.to_string())
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Read { server, uri, json } => {
            let items = app
                .preview_read(&server, &uri, None, &app.config.model)
                .await?;
            if json {
                let items: Vec<serde_json::Value> = items
                    .iter()
                    .map(|item| {
                        let (kind, text) = match &item.converted {
                            Converted::Text(t) => ("text", Some(t.clone())),
                            Converted::Image { width, height, .. } => {
                                ("image", Some(format!("{width}x{height}")))
                            }
                            Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                                ("fallback", Some(note.clone()))
                            }
                        };
                        serde_json::json!({"uri": item.uri, "mime_type": item.mime_type, "bytes": item.bytes, "kind": kind, "text": text})
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&items)?);
                return Ok(ExitCode::SUCCESS);
            }
            for item in items {
                match item.converted {
                    Converted::Text(t) => outln!("{}", t.trim_end()),
                    Converted::Image {
                        mime_type,
                        width,
                        height,
                        data,
                    } => {
                        outln!(
                            "[image {} ({mime_type}, {width}×{height} px, {} bytes)]",
                            item.uri,
                            data.len()
                        )
                    }
                    Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                        outln!("{note}")
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Attach {
            owner,
            target,
            expires_in,
            json,
        } => {
            let owner = owner.owner();
            app.check_server(&target.server)?;
            app.check_pin_owner(&owner, &target.server)?;
            let pin_target = attachment_target(&target.target, &target.args, &target.arg_vars)?;
            let expires_at_ms = expires_in.map(|d| {
                hostpipe_core::store::unix_ms_now()
                    .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            });
            let store = store(app)?;
            let pin = store
                .pin(NewPin {
                    owner: owner.clone(),
                    server: target.server.clone(),
                    target: pin_target,
                    expires_at_ms,
                })
                .await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&pin)?);
            } else {
                outln!(
                    "pinned {} from server `{}` to {owner}{} (id {}, store {})",
                    describe_target(&pin.target),
                    pin.server,
                    pin.expires_at_ms
                        .map(|t| format!(" until {}", format_time(t)))
                        .unwrap_or_default(),
                    pin.id,
                    store.describe()
                );
            }
            if store.describe() == "memory" {
                eprintln!(
                    "warning: the memory store keeps nothing: this pin is gone when the command ends"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Detach { owner, id, target } => {
            let owner = owner.owner();
            let store = store(app)?;
            let (removed, what, configured) = match (id, target.server, target.target) {
                (Some(id), _, _) => {
                    // Ids are UUIDs, printed in lower case.
                    let id = id.to_ascii_lowercase();
                    (
                        store.unpin_id(&owner, &id).await?,
                        format!("pin {id}"),
                        false,
                    )
                }
                (None, Some(server), Some(t)) => {
                    let t = attachment_target(&t, &target.args, &target.arg_vars)?;
                    let what = format!("{} of server `{server}`", describe_target(&t));
                    let configured = match &owner {
                        PinOwner::Pipeline(p) => app
                            .config
                            .pipeline_attachments(p)
                            .unwrap_or_default()
                            .iter()
                            .any(|a| a.server == server && a.target == t),
                        PinOwner::Conversation(_) => false,
                    };
                    (store.unpin(&owner, &server, &t).await?, what, configured)
                }
                _ => bail!("give SERVER and TARGET, or --id ID"),
            };
            if removed {
                outln!("detached {what} from {owner}");
                Ok(ExitCode::SUCCESS)
            } else if configured {
                eprintln!(
                    "error: {what} is attached by the config of pipeline `{}` ({}): remove it from [pipelines.{}.resource_context_injection] attachments",
                    owner.id(),
                    app.config.source,
                    owner.id()
                );
                Ok(ExitCode::FAILURE)
            } else {
                eprintln!(
                    "error: {owner} has no {what} (see `hostpipe attachments --{} {}`)",
                    owner.scope().as_str(),
                    owner.id()
                );
                Ok(ExitCode::FAILURE)
            }
        }
        Command::Attachments { owner, json } => {
            let owner = owner.owner();
            let pins = store(app)?
                .pins(
                    std::slice::from_ref(&owner),
                    hostpipe_core::store::unix_ms_now(),
                )
                .await?;
            // A pipeline's config attachments apply too; list them.
            let configured: Vec<Attachment> = match &owner {
                PinOwner::Pipeline(id) => app.config.pipeline_attachments(id).unwrap_or_default(),
                PinOwner::Conversation(_) => Vec::new(),
            };
            if json {
                let doc = serde_json::json!({ "pins": pins, "configured": configured });
                outln!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(ExitCode::SUCCESS);
            }
            if pins.is_empty() && configured.is_empty() {
                outln!("{owner} has no attachments");
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = new_table(["id", "server", "resource", "pinned", "expires"]);
            for p in &pins {
                table.add_row([
                    p.id.clone(),
                    p.server.clone(),
                    describe_target(&p.target),
                    format_time(p.created_at_ms),
                    p.expires_at_ms.map_or_else(|| "never".into(), format_time),
                ]);
            }
            for a in &configured {
                table.add_row([
                    "(config)".into(),
                    a.server.clone(),
                    describe_target(&a.target),
                    "-".into(),
                    "never".into(),
                ]);
            }
            outln!("{table}");
            Ok(ExitCode::SUCCESS)
        }
        Command::History {
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
        } => {
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
        Command::Plugins | Command::DemoServer | Command::Bench { .. } | Command::Serve { .. } => {
            unreachable!("handled before the app starts")
        }
    }
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

fn store(app: &App) -> anyhow::Result<&dyn hostpipe_core::AttachmentStore> {
    app.store
        .as_deref()
        .context("there is no attachment store (--store none)")
}

/// A URI, or (when `target` has a `{`) an RFC 6570 template with every variable given.
fn attachment_target(
    target: &str,
    args: &[(String, String)],
    arg_vars: &[(String, String)],
) -> anyhow::Result<AttachmentTarget> {
    use hostpipe_cli::ops::TargetError;
    let mut arguments = std::collections::BTreeMap::new();
    let given = args
        .iter()
        .map(|(k, v)| (k, ArgumentValue::Literal(v.clone())))
        .chain(arg_vars.iter().map(|(k, var)| {
            (
                k,
                ArgumentValue::Variable(VariableRef {
                    var: var.clone(),
                    default: None,
                }),
            )
        }));
    for (k, v) in given {
        if arguments.insert(k.clone(), v).is_some() {
            bail!("template argument `{k}` is given twice (--arg / --arg-var): give it once");
        }
    }
    hostpipe_cli::ops::pin_target(target, arguments).map_err(|e| match &e {
        TargetError::ArgumentsWithoutTemplate(t) => anyhow::anyhow!(
            "--arg and --arg-var are for a URI template (`{t}` has no {{variable}})"
        ),
        TargetError::MissingVariable { name, .. } => anyhow::anyhow!(
            "{e}: give --arg {name}=VALUE, or --arg-var {name}=NAME to take turn variable NAME"
        ),
        _ => e.into(),
    })
}

/// `uri`, or `template (k=v, k=${var})`.
fn describe_target(target: &AttachmentTarget) -> String {
    match target {
        AttachmentTarget::Uri { uri } => uri.clone(),
        AttachmentTarget::Template {
            template,
            arguments,
        } => {
            let args: Vec<String> = arguments
                .iter()
                .map(|(k, v)| match v {
                    ArgumentValue::Literal(s) => format!("{k}={s}"),
                    ArgumentValue::Variable(r) => format!("{k}=${{{}}}", r.var),
                })
                .collect();
            format!("{template} ({})", args.join(", "))
        }
        AttachmentTarget::Embedded { contents } => format!("{} (embedded)", contents.uri()),
    }
}

/// `2026-11-30 15:04:05Z` (UTC, second precision).
fn format_time(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
        || unix_ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

fn new_table<'a>(header: impl IntoIterator<Item = &'a str>) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.into_iter().collect::<Vec<_>>());
    table
}
