//! `hostpipe servers`, `resources`, `prompts`, `complete` and `read`: what the MCP
//! servers offer.

use std::process::ExitCode;

use hostpipe_cli::App;
use hostpipe_core::McpSource as _;
use hostpipe_stages::convert::Converted;

use super::parse_var;

// The arguments of `hostpipe servers` (its help is the doc of `SessionCommand::Servers`).
#[derive(clap::Args)]
pub(crate) struct ServersArgs {
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn servers(app: &App, args: ServersArgs) -> anyhow::Result<ExitCode> {
    let ServersArgs { json } = args;
    let servers = app.host.servers();
    // A server that cannot be used until an administrator logs in is as unusable to a
    // script as a failed one.
    let code = if servers.iter().any(|s| {
        matches!(
            s.status,
            hostpipe_core::ServerStatus::Failed { .. }
                | hostpipe_core::ServerStatus::NeedsLogin { .. }
        )
    }) {
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
            // A server may give an empty version.
            let who = format!("{name} {version}");
            outln!(
                "  server: {}, protocol {}",
                who.trim_end(),
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

// The arguments of `hostpipe resources` (its help is the doc of `SessionCommand::Resources`).
#[derive(clap::Args)]
pub(crate) struct ResourcesArgs {
    /// Server name.
    pub(crate) server: String,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn resources(app: &App, args: ResourcesArgs) -> anyhow::Result<ExitCode> {
    let ResourcesArgs { server, json } = args;
    let resources = app.host.list_resources(&server).await?;
    let templates = app.host.list_resource_templates(&server).await?;
    if json {
        let doc =
            serde_json::json!({ "resources": &*resources, "resource_templates": &*templates });
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

// The arguments of `hostpipe prompts` (its help is the doc of `SessionCommand::Prompts`).
#[derive(clap::Args)]
pub(crate) struct PromptsArgs {
    /// Server name.
    pub(crate) server: String,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn prompts(app: &App, args: PromptsArgs) -> anyhow::Result<ExitCode> {
    let PromptsArgs { server, json } = args;
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

// The arguments of `hostpipe complete` (its help is the doc of `SessionCommand::Complete`).
#[derive(clap::Args)]
pub(crate) struct CompleteArgs {
    /// Server name.
    pub(crate) server: String,
    /// A URI template, or `prompt:NAME`.
    pub(crate) target: String,
    /// The argument (template variable or prompt argument) to complete.
    pub(crate) argument: String,
    /// What the user has typed so far.
    #[arg(default_value = "")]
    pub(crate) prefix: String,
    /// An argument already chosen, sent as context (repeatable).
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = parse_var)]
    pub(crate) context: Vec<(String, String)>,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn complete(app: &App, args: CompleteArgs) -> anyhow::Result<ExitCode> {
    let CompleteArgs {
        server,
        target,
        argument,
        prefix,
        context,
        json,
    } = args;
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
    if c.values.is_empty() {
        // Servers answer an unknown template or prompt with no values: say which it was.
        check_completion_target(app, &server, &reference, &argument).await?;
        if !json {
            eprintln!("(no value of `{argument}` starts with `{prefix}`)");
        }
    }
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

/// An error naming what exists when `reference` is not one of `server`'s templates or
/// prompts, or `argument` not one of its variables or arguments.
async fn check_completion_target(
    app: &App,
    server: &str,
    reference: &hostpipe_core::CompletionRef,
    argument: &str,
) -> anyhow::Result<()> {
    use hostpipe_core::McpSource as _;
    match reference {
        hostpipe_core::CompletionRef::ResourceTemplate { uri_template } => {
            let templates = app.host.list_resource_templates(server).await?;
            let Some(t) = templates.iter().find(|t| &t.uri_template == uri_template) else {
                let names: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
                anyhow::bail!(
                    "`{uri_template}` is not a resource template of `{server}`; its templates: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                );
            };
            let variables =
                hostpipe_stages::uri_template::variables(&t.uri_template).unwrap_or_default();
            if !variables.iter().any(|v| v == argument) {
                anyhow::bail!(
                    "`{uri_template}` has no variable `{argument}`; its variables: {}",
                    variables.join(", ")
                );
            }
        }
        hostpipe_core::CompletionRef::Prompt { name } => {
            let prompts = app.host.list_prompts(server).await?;
            let Some(p) = prompts.iter().find(|p| &p.name == name) else {
                let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
                anyhow::bail!(
                    "`{name}` is not a prompt of `{server}`; its prompts: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                );
            };
            if !p.arguments.iter().any(|a| a.name == argument) {
                let names: Vec<&str> = p.arguments.iter().map(|a| a.name.as_str()).collect();
                anyhow::bail!(
                    "prompt `{name}` has no argument `{argument}`; its arguments: {}",
                    names.join(", ")
                );
            }
        }
    }
    Ok(())
}

// The arguments of `hostpipe read` (its help is the doc of `SessionCommand::Read`).
#[derive(clap::Args)]
pub(crate) struct ReadArgs {
    /// Server name.
    pub(crate) server: String,
    /// Resource URI.
    pub(crate) uri: String,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn read(app: &App, args: ReadArgs) -> anyhow::Result<ExitCode> {
    let ReadArgs { server, uri, json } = args;
    if uri.contains('{') {
        // The server would answer "no resource" (and the exit code would say it failed):
        // it is the command that was wrong.
        let variable = uri
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or("VARIABLE", |(v, _)| {
                v.trim_start_matches(['+', '#', '/', '?', '&'])
            });
        anyhow::bail!(
            "`{uri}` is a URI template, not a resource: read one of its resources (`hostpipe complete {server} '{uri}' {variable}` lists values)"
        );
    }
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
