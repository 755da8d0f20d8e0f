//! The subcommands, in two kinds: [`SessionCommand`]s run against a loaded [`App`]
//! (its servers connected as far as the command needs them, its store open when the
//! command uses one; Ctrl-C stops the command and its servers), and
//! [`StandaloneCommand`]s manage their own life cycle (`serve`, `bench`) or need no
//! app at all (`plugins`, `demo-server`, `healthcheck`).

mod eval;
mod healthcheck;
mod history;
mod login;
mod pins;
mod run;
mod servers;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use hostpipe_cli::App;
use hostpipe_core::{ArgumentValue, AttachmentTarget, VariableRef};
use hostpipe_engine::PinOwner;

/// The options every command takes (`--config`, `--mcp-config`, `--store`).
#[derive(clap::Args)]
pub(crate) struct GlobalArgs {
    /// hostpipe's TOML config (default: the embedded demo pipeline, unless
    /// --mcp-config is given).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// A standard `mcpServers` JSON file (Claude Desktop, Cursor, VS Code). Alone: its
    /// servers and a pipeline `default` binding them all. With --config: its servers
    /// join the file's, bound where the file binds them (or to pipeline `default`
    /// when no pipeline binds them).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) mcp_config: Option<PathBuf>,
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
    pub(crate) store: Option<String>,
}

/// Commands that run against a loaded app.
#[derive(Subcommand)]
pub(crate) enum SessionCommand {
    /// Run one turn and print the reply (the preview runner prints the request).
    Run(run::RunArgs),
    /// Configured MCP servers: status, capabilities, counts.
    Servers(servers::ServersArgs),
    /// Resources and resource templates of one server.
    Resources(servers::ResourcesArgs),
    /// Prompts of one server, with their arguments (`*` = required); run one with
    /// `hostpipe run "/SERVER:PROMPT arg=value"`.
    Prompts(servers::PromptsArgs),
    /// Argument completion (MCP `completion/complete`): values for ARG of a resource
    /// TEMPLATE (`demo://docs/{topic}`) or a prompt (`prompt:NAME`) that start with
    /// PREFIX, one per line.
    Complete(servers::CompleteArgs),
    /// Read one resource, converted as the pipeline would (blobs are described).
    Read(servers::ReadArgs),
    /// Pin a resource (or a URI template with its arguments) to every turn of a
    /// conversation or a pipeline, until detached or expired.
    Attach(pins::AttachArgs),
    /// Remove a pin: by server and target (as attached), or by `--id`.
    Detach(pins::DetachArgs),
    /// The pins of a conversation or a pipeline (a pipeline's also lists those of its
    /// config).
    Attachments(pins::AttachmentsArgs),
    /// The read history: each turn's resource reads with token counts, newest first.
    History(history::HistoryArgs),
    /// Log in to a remote MCP server with OAuth (authorization code + PKCE): prints
    /// the authorization URL, takes the redirect on a loopback port (or pasted with
    /// --paste), and saves the credentials, encrypted with HOSTPIPE_CREDENTIAL_KEY, in
    /// the store; later runs reuse and refresh them.
    Login(login::LoginArgs),
    /// Measure answer recall: run a questions file (JSON lines: question, answers,
    /// attach) through a pipeline at each budget and print recall and tokens used
    /// (docs/evaluation.md). Exit code 0 whatever the recall.
    Eval(eval::EvalArgs),
}

/// What a command needs of the attachment store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreUse {
    /// Nothing: the store is not opened.
    None,
    /// Pins and history when the store opens; the command goes on without them.
    Optional,
    /// The command is about pins or history: no store, no command.
    Required,
}

impl SessionCommand {
    /// What the command needs of the store.
    pub(crate) fn store_use(&self) -> StoreUse {
        match self {
            Self::Run(_) => StoreUse::Optional,
            Self::Attach(_) | Self::Detach(_) | Self::Attachments(_) | Self::History(_) => {
                StoreUse::Required
            }
            _ => StoreUse::None,
        }
    }

    /// The servers the command needs (`None`: all), so that a server that is down or
    /// slow does not hold up a command that does not use it.
    pub(crate) fn needed_servers(&self, app: &App) -> Option<Vec<String>> {
        match self {
            // To check that what it pins exists.
            Self::Attach(args) => Some(vec![args.target.server.clone()]),
            Self::Detach(_) | Self::Attachments(_) | Self::History(_) | Self::Login(_) => {
                Some(Vec::new())
            }
            Self::Resources(servers::ResourcesArgs { server, .. })
            | Self::Prompts(servers::PromptsArgs { server, .. })
            | Self::Complete(servers::CompleteArgs { server, .. })
            | Self::Read(servers::ReadArgs { server, .. }) => Some(vec![server.clone()]),
            Self::Run(args) => args.needed_servers(app),
            _ => None,
        }
    }

    /// The runner `run` asks for instead of the pipeline's, with its settings.
    ///
    /// # Errors
    /// An unknown runner, or settings that do not go together.
    pub(crate) fn runner_override(
        &self,
        global: &GlobalArgs,
    ) -> anyhow::Result<Option<hostpipe_cli::config::RunnerChoice>> {
        match self {
            Self::Run(args) => args.runner_override(global),
            _ => Ok(None),
        }
    }

    /// Runs the command.
    pub(crate) async fn execute(self, app: &App) -> anyhow::Result<ExitCode> {
        match self {
            Self::Run(args) => run::run(app, args).await,
            Self::Servers(args) => servers::servers(app, args).await,
            Self::Resources(args) => servers::resources(app, args).await,
            Self::Prompts(args) => servers::prompts(app, args).await,
            Self::Complete(args) => servers::complete(app, args).await,
            Self::Read(args) => servers::read(app, args).await,
            Self::Attach(args) => pins::attach(app, args).await,
            Self::Detach(args) => pins::detach(app, args).await,
            Self::Attachments(args) => pins::attachments(app, args).await,
            Self::History(args) => history::history(app, args).await,
            Self::Eval(args) => eval::eval(app, args).await,
            Self::Login(args) => login::login(app, args).await,
        }
    }
}

/// Commands that manage their own life cycle, or need no app.
#[derive(Subcommand)]
pub(crate) enum StandaloneCommand {
    /// Registered stages and runners.
    Plugins,
    /// Time the resource-injection path against one stdio MCP server; prints one JSON
    /// line: turns, seconds, turns_per_s, tokens_injected. With `--store URL`, each turn
    /// also loads pins and writes its history there (default: no store).
    Bench(BenchArgs),
    /// Serve the HTTP API and the admin page until SIGTERM or Ctrl-C (docs/http-api.md).
    /// Needs a token: HOSTPIPE_TOKEN (admin), HOSTPIPE_TURN_TOKEN (turns: for bot
    /// platforms), HOSTPIPE_READ_TOKEN (read-only) or `[serve] admin_tokens` /
    /// `turn_tokens` / `read_tokens`.
    Serve(ServeArgs),
    /// Serve the embedded demo MCP server on stdio.
    DemoServer(DemoServerArgs),
    /// GET a URL once (default: `hostpipe serve`'s /healthz on 127.0.0.1:8787) and
    /// exit 0 when it answers 2xx, 1 otherwise: a container health check without curl
    /// (docs/deploy.md).
    Healthcheck(healthcheck::HealthcheckArgs),
}

// The arguments of `hostpipe demo-server`.
#[derive(clap::Args)]
pub(crate) struct DemoServerArgs {
    /// The protocol eras to speak: `auto` (2025-11-25 through `initialize` and
    /// 2026-07-28, as rmcp's servers do by default) or `2026-07-28` (that revision
    /// only: `initialize` is refused, as by a server built for it alone).
    #[arg(long, default_value = "auto", value_parser = ["auto", "2026-07-28"])]
    pub(crate) protocol: String,
}

// The arguments of `hostpipe bench`.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Turns to run.
    #[arg(long, default_value_t = 20)]
    pub(crate) turns: usize,
    /// Token budget per turn.
    #[arg(long, default_value_t = 8000)]
    pub(crate) budget: usize,
    /// The user message of every turn.
    #[arg(long, default_value = "how does the cache handle subscription timeout")]
    pub(crate) query: String,
    /// Read and process everything afresh every turn (no content, split, count or
    /// summary cache): the cold path.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// Turns in flight at once, over the one MCP session.
    #[arg(long, default_value_t = 1)]
    pub(crate) concurrency: usize,
    /// The protocol era to speak: auto, 2025-11-25 or 2026-07-28 (a server's `protocol`).
    #[arg(long, default_value = "auto", value_parser = parse_protocol)]
    pub(crate) protocol: hostpipe_mcp::ProtocolMode,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub(crate) server: Vec<String>,
}

// The arguments of `hostpipe serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// HOST:PORT to listen on (default: `[serve] listen`, else 127.0.0.1:8787; port 0
    /// picks a free one). Prints `hostpipe: listening on http://ADDR` when ready.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// Log as JSON, one object per line (access logs have target `hostpipe::access`).
    #[arg(long)]
    pub(crate) log_json: bool,
}

impl StandaloneCommand {
    /// Runs the command; `interrupted` resolves on Ctrl-C or SIGTERM.
    pub(crate) async fn execute(
        self,
        global: &GlobalArgs,
        interrupted: impl Future<Output = &'static str> + Send + 'static,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Self::Healthcheck(args) => return healthcheck::healthcheck(args).await,
            Self::DemoServer(DemoServerArgs { protocol }) => {
                let server = hostpipe_cli::demo::DemoServer::new();
                let server = if protocol == "2026-07-28" {
                    server.modern_only()
                } else {
                    server
                };
                hostpipe_cli::demo::serve_stdio(server).await?;
            }
            Self::Plugins => out!("{}", hostpipe_cli::registry()?.listing()),
            Self::Serve(ServeArgs { listen, .. }) => {
                let approver = hostpipe_cli::serve::HttpApprover::new();
                let elicitor = hostpipe_cli::serve::HttpElicitor::new();
                // The pipelines are built once the store is open: they may bind servers
                // added over the API, which live there.
                let mut app = App::load_unbuilt(
                    global.config.as_deref(),
                    global.mcp_config.as_deref(),
                    std::sync::Arc::new(approver.clone()),
                    Some(std::sync::Arc::new(elicitor.clone())),
                )?;
                let options =
                    hostpipe_cli::serve::ServeOptions::from_config(&app.config.serve, listen)?;
                app.open_store(global.store.as_deref()).await?;
                app.open_vault_for_service(global.store.as_deref()).await?;
                let source = hostpipe_cli::serve::ConfigSource {
                    config: global.config.clone(),
                    mcp_config: global.mcp_config.clone(),
                };
                hostpipe_cli::serve::serve(app, approver, elicitor, options, source, interrupted)
                    .await?;
            }
            Self::Bench(BenchArgs {
                turns,
                budget,
                query,
                no_cache,
                concurrency,
                protocol,
                server,
            }) => {
                let options = hostpipe_cli::bench::BenchOptions {
                    turns,
                    budget,
                    query,
                    no_cache,
                    concurrency,
                    store: global.store.clone(),
                    protocol,
                };
                let result = hostpipe_cli::bench::run(&options, &server).await?;
                outln!("{}", serde_json::to_string(&result)?);
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Whose pins: exactly one of `--conversation` and `--pipeline`.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct OwnerArgs {
    /// The conversation id (as the platform sends it in the turn).
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub(crate) conversation: Option<String>,
    /// The pipeline id.
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub(crate) pipeline: Option<String>,
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
pub(crate) struct TargetArgs {
    /// MCP server name.
    pub(crate) server: String,
    /// A resource URI, or an RFC 6570 URI template (`demo://docs/{topic}`) whose
    /// variables come from --arg and --arg-var.
    pub(crate) target: String,
    /// A template argument (repeatable).
    #[arg(long = "arg", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub(crate) args: Vec<(String, String)>,
    /// A template argument taken from the turn variable NAME on each turn (repeatable).
    #[arg(long = "arg-var", value_name = "KEY=NAME", value_parser = parse_var)]
    pub(crate) arg_vars: Vec<(String, String)>,
}

/// [`TargetArgs`], optional (for `detach --id`).
#[derive(clap::Args)]
pub(crate) struct DetachTarget {
    /// MCP server name.
    #[arg(required_unless_present = "id")]
    pub(crate) server: Option<String>,
    /// The URI or URI template, as attached.
    #[arg(required_unless_present = "id")]
    pub(crate) target: Option<String>,
    /// A template argument, as attached (repeatable).
    #[arg(long = "arg", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub(crate) args: Vec<(String, String)>,
    /// A template argument from a turn variable, as attached (repeatable).
    #[arg(long = "arg-var", value_name = "KEY=NAME", value_parser = parse_var)]
    pub(crate) arg_vars: Vec<(String, String)>,
}

/// `--expires-in`: a humantime duration, more than zero and at most 100 years.
pub(crate) fn parse_expiry(s: &str) -> Result<std::time::Duration, String> {
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

/// `--protocol`: a server's `protocol` value.
pub(crate) fn parse_protocol(s: &str) -> Result<hostpipe_mcp::ProtocolMode, String> {
    s.parse().map_err(|e: hostpipe_core::ConfigError| e.message)
}

/// An id given on the command line: not empty.
pub(crate) fn parse_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("an id cannot be empty".into())
    } else {
        Ok(s.to_owned())
    }
}

/// A time for `--since`/`--until`: RFC 3339, or a duration ago. Unix ms.
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(hostpipe_engine::store::unix_ms_now()
            .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
        Err(_) => Err(format!(
            "`{s}` is neither an RFC 3339 time (2026-11-30T09:00:00Z) nor a duration (2h, 30m)"
        )),
    }
}

pub(crate) fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

pub(crate) fn store(app: &App) -> anyhow::Result<&dyn hostpipe_engine::AttachmentStore> {
    app.store
        .as_deref()
        .context("there is no attachment store (--store none)")
}

/// A URI, or (when `target` has a `{`) an RFC 6570 template with every variable given.
pub(crate) fn attachment_target(
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
pub(crate) fn describe_target(target: &AttachmentTarget) -> String {
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
pub(crate) fn format_time(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
        || unix_ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

pub(crate) fn new_table<'a>(header: impl IntoIterator<Item = &'a str>) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(header.into_iter().collect::<Vec<_>>());
    match table_width() {
        // Cells wrap so that the table fits.
        Some(width) => table
            .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
            .set_width(width),
        // A pipe or a file gets whole lines, for grep.
        None => table.set_content_arrangement(comfy_table::ContentArrangement::Disabled),
    };
    table
}

/// The width, in columns, that tables fit: `COLUMNS` when it is set (as `ls` and
/// Python's `shutil.get_terminal_size` read it), else the terminal's when stdout is one;
/// `None` when output goes to a pipe or a file.
fn table_width() -> Option<u16> {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|&c| c > 0)
    {
        return Some(columns);
    }
    terminal_size::terminal_size_of(std::io::stdout()).map(|(terminal_size::Width(w), _)| w)
}
