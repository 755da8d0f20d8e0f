//! `hostpipe run`: one turn through a pipeline.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use hostpipe_cli::App;
use hostpipe_cli::config::RunnerChoice;
use hostpipe_cli::ops::{AttachmentSpec, TargetError};
use hostpipe_core::McpSource as _;
use hostpipe_core::{Scope, TraceEvent, Turn};
use hostpipe_runners::PreviewReport;

use super::{GlobalArgs, parse_id, parse_var};

// The arguments of `hostpipe run` (its help is the doc of `SessionCommand::Run`).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The message; read from stdin when absent.
    pub(crate) message: Option<String>,
    /// Pipeline id.
    #[arg(long, default_value = "default")]
    pub(crate) pipeline: String,
    /// Conversation id (its pins apply; its reads are recorded under it).
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    pub(crate) conversation: Option<String>,
    /// A turn variable (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub(crate) vars: Vec<(String, String)>,
    /// Attach a resource for this message (repeatable).
    #[arg(long = "attach", num_args = 2, value_names = ["SERVER", "URI"])]
    pub(crate) attach: Vec<String>,
    /// An earlier user message of the conversation (repeatable, oldest first): a
    /// follow-up ("and its timeout?") is ranked with the recent ones.
    #[arg(long = "history", value_name = "TEXT")]
    pub(crate) history: Vec<String>,
    /// Print one JSON document: reply, preview, trace.
    #[arg(long)]
    pub(crate) json: bool,
    /// The runner for this turn instead of the pipeline's: preview, local, dify,
    /// remote (its settings come from `[pipelines.ID.RUNNER]`).
    #[arg(long, value_name = "NAME")]
    pub(crate) runner: Option<String>,
    /// For `--runner local`: the OpenAI-compatible base URL, e.g.
    /// http://127.0.0.1:11434/v1 (the API key comes from OPENAI_API_KEY).
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// For `--runner local`: the model name.
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
}

pub(crate) async fn run(app: &App, args: RunArgs) -> anyhow::Result<ExitCode> {
    let RunArgs {
        message,
        pipeline,
        conversation,
        vars,
        attach,
        history,
        json,
        ..
    } = args;
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
        .map(|c| {
            AttachmentSpec::from_target(&c[0], &c[1], Default::default())
                .attachment(Scope::Message)
                .map_err(|e| match e {
                    TargetError::MissingVariable { .. } => anyhow::anyhow!(
                        "--attach {} {}: {e}: --attach takes a resource URI; attach a template with `hostpipe attach … --arg NAME=VALUE` or in the pipeline's config",
                        c[0],
                        c[1]
                    ),
                    e => anyhow::anyhow!("--attach {} {}: {e}", c[0], c[1]),
                })
        })
        .collect::<anyhow::Result<_>>()?;
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
            "failed": outcome.failed(),
            "status": outcome.status,
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
    Ok(if outcome.failed() {
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

impl RunArgs {
    /// The servers the pipeline binds and those of `--attach`.
    pub(crate) fn needed_servers(&self, app: &App) -> Option<Vec<String>> {
        let mut names = app.config.bound_servers(&self.pipeline)?;
        names.extend(self.attach.chunks(2).map(|c| c[0].clone()));
        Some(names)
    }

    /// `--runner`, `--base-url` and `--model`, checked.
    pub(crate) fn runner_override(
        &self,
        global: &GlobalArgs,
    ) -> anyhow::Result<Option<RunnerChoice>> {
        let (runner, base_url, model) = (&self.runner, &self.base_url, &self.model);
        let mut settings: Vec<(String, String)> = Vec::new();
        settings.extend(base_url.clone().map(|u| ("base_url".to_owned(), u)));
        settings.extend(model.clone().map(|m| ("model".to_owned(), m)));
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
        if model.is_some() && base_url.is_none() && global.config.is_none() {
            bail!(
                "--model needs --base-url (the OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1)"
            );
        }
        if base_url.is_some() && model.is_none() && global.config.is_none() {
            bail!("--base-url needs --model (the model name the endpoint serves)");
        }
        Ok(match (runner.as_deref(), settings.is_empty()) {
            (Some(r), _) => Some(RunnerChoice {
                name: r.to_owned(),
                settings,
            }),
            (None, false) => Some(RunnerChoice {
                name: "local".to_owned(),
                settings,
            }),
            (None, true) => None,
        })
    }
}
