//! The `hostpipe` command.

#[macro_use]
mod output;
mod commands;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use commands::{GlobalArgs, SessionCommand, StandaloneCommand, StoreUse};
use hostpipe_cli::App;
use hostpipe_cli::telemetry::{self, Telemetry};

/// Put MCP resources in front of a model: run a bot message through a pipeline.
///
/// Exit codes: 0 done; 1 the turn failed (or, for `servers`, a server failed);
/// 2 bad usage or configuration; 3 a stage ended the turn early with a reply (e.g. a
/// required server is down); 130 interrupted.
#[derive(Parser)]
#[command(name = "hostpipe", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// Both kinds of command, as one set of subcommands.
#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Session(SessionCommand),
    #[command(flatten)]
    Standalone(StandaloneCommand),
}

/// Sets up the log on stderr (`HOSTPIPE_LOG`, `-v`) and, when the standard `OTEL_*`
/// variables ask for it, the OpenTelemetry trace export ([`hostpipe_cli::telemetry`]),
/// which is returned to be shut down at exit.
fn init_logging(verbose: u8, command: &Command) -> Option<Telemetry> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // rmcp logs what hostpipe already reports (and its own worker noise) at WARN and
    // ERROR; it shows from -v on. A service logs each request and its life cycle. The
    // spans exported to OpenTelemetry show in the log from -vv on.
    let (serve, log_json) = match command {
        Command::Standalone(StandaloneCommand::Serve(args)) => (true, args.log_json),
        _ => (false, false),
    };
    let default = match verbose {
        0 if serve => {
            "warn,rmcp=off,sqlx=error,hostpipe::access=info,hostpipe::turns=info,hostpipe_cli::serve=info,hostpipe::span=off"
        }
        0 => "warn,rmcp=off,sqlx=error,hostpipe::span=off",
        1 => "info,rmcp=warn,hostpipe::span=off",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOSTPIPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if log_json {
        fmt.json()
            .with_current_span(false)
            .with_filter(filter)
            .boxed()
    } else {
        fmt.with_ansi(std::io::stderr().is_terminal())
            .with_target(serve)
            .with_filter(filter)
            .boxed()
    };
    let choice = telemetry::choose(|name| std::env::var(name).ok());
    let (telemetry, problem) = match choice {
        telemetry::TracesChoice::Otlp => match Telemetry::from_env() {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        },
        telemetry::TracesChoice::Unsupported(why) => {
            (None, Some(format!("OpenTelemetry traces are off: {why}")))
        }
        telemetry::TracesChoice::NotAsked | telemetry::TracesChoice::Disabled(_) => (None, None),
    };
    let mut layers = vec![fmt];
    if let Some(t) = &telemetry {
        layers.push(t.layer());
    }
    tracing_subscriber::registry().with(layers).init();
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    telemetry
}

/// Sends the spans still queued, off the runtime's workers (the exporter blocks).
async fn shutdown_telemetry(telemetry: Option<Telemetry>) {
    let Some(telemetry) = telemetry else { return };
    let done = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    if let Ok(Err(e)) = done {
        tracing::warn!(error = %e, "OpenTelemetry: the last spans could not be sent");
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = init_logging(cli.verbose, &cli.command);
    let result = match cli.command {
        Command::Standalone(command) => command.execute(&cli.global, interrupted()).await,
        Command::Session(command) => session(&cli.global, command).await,
    };
    shutdown_telemetry(telemetry).await;
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            // An MCP server that is down or answered with an error is a failure (1);
            // everything else that stops a command early is bad usage or config (2),
            // a server name that is not configured included.
            if e.chain().any(|c| {
                c.downcast_ref::<hostpipe_core::SourceError>()
                    .is_some_and(|s| !matches!(s, hostpipe_core::SourceError::UnknownServer { .. }))
            }) {
                ExitCode::FAILURE
            } else {
                ExitCode::from(2)
            }
        }
    }
}

/// Loads the app, opens the store and connects the servers `command` needs, runs it
/// (until Ctrl-C or SIGTERM), then stops the servers.
async fn session(global: &GlobalArgs, command: SessionCommand) -> anyhow::Result<ExitCode> {
    let runner = command.runner_override(global)?;
    let mut app =
        App::load_unbuilt_with_terminal(global.config.as_deref(), global.mcp_config.as_deref())?;
    // Against the config files' servers first, so their mistakes are named as they are.
    let built = app.build_own_pipelines(runner.as_ref());
    let url = global.store.as_deref();
    let opened = match command.store_use() {
        // Only for the servers added over `hostpipe serve`'s API: quietly, and the
        // pipelines get no store (no pins or history for this command).
        StoreUse::None => {
            if let Err(e) = app.open_server_entries(url).await {
                tracing::debug!(error = %e, "no store: the config files' servers only");
            }
            Ok(None)
        }
        StoreUse::Optional | StoreUse::Required => app.open_store(url).await,
    };
    // Servers added over the API may be bound by the pipelines: they join, and the
    // pipelines are built again against them.
    let joined = app.join_stored_servers().await;
    if joined.servers.is_empty() {
        built?;
    } else {
        app.build_own_pipelines(runner.as_ref())?;
    }
    for w in &joined.warnings {
        eprintln!("warning: {w}");
    }
    match command.store_use() {
        StoreUse::None => {}
        // A turn goes on without pins or history when the store cannot be opened.
        StoreUse::Optional => match opened {
            Ok(_) => app.prune_store().await,
            Err(e) => eprintln!(
                "warning: {e:#}; the turn goes on without pinned attachments and its reads are not recorded"
            ),
        },
        StoreUse::Required => {
            if opened?.is_none() {
                anyhow::bail!(
                    "there is no attachment store (--store none): pins and history need one"
                );
            }
        }
    }
    // Every command that connects a server may need its OAuth credentials.
    app.open_vault(global.store.as_deref()).await?;
    let app = app;
    let work = async {
        let needed = command.needed_servers(&app);
        app.host.connect_only(needed.as_deref()).await;
        command.execute(&app).await
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
