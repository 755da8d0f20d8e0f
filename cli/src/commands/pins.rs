//! `hostpipe attach`, `detach` and `attachments`: pins.

use std::process::ExitCode;

use anyhow::bail;
use hostpipe_cli::App;
use hostpipe_core::Attachment;
use hostpipe_engine::{NewPin, PinOwner};

use super::{
    DetachTarget, OwnerArgs, TargetArgs, attachment_target, describe_target, format_time,
    new_table, parse_expiry, store,
};

// The arguments of `hostpipe attach` (its help is the doc of `SessionCommand::Attach`).
#[derive(clap::Args)]
pub(crate) struct AttachArgs {
    #[command(flatten)]
    pub(crate) owner: OwnerArgs,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Stop applying after this long: 90s, 30m, 2h, 7d (`1M` is a month, `1m` a
    /// minute); at most 100 years.
    #[arg(long, value_name = "DURATION", value_parser = parse_expiry)]
    pub(crate) expires_in: Option<std::time::Duration>,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn attach(app: &App, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let AttachArgs {
        owner,
        target,
        expires_in,
        json,
    } = args;
    let owner = owner.owner();
    app.check_server(&target.server)?;
    app.check_pin_owner(&owner, &target.server)?;
    let pin_target = attachment_target(&target.target, &target.args, &target.arg_vars)?;
    match app.check_pin_target(&target.server, &pin_target).await {
        Ok(None) => {}
        Ok(Some(warning)) => eprintln!("warning: {warning}"),
        Err(e) => bail!("{e}; see `hostpipe resources {}`", target.server),
    }
    let expires_at_ms = expires_in.map(|d| {
        hostpipe_engine::store::unix_ms_now()
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

// The arguments of `hostpipe detach` (its help is the doc of `SessionCommand::Detach`).
#[derive(clap::Args)]
pub(crate) struct DetachArgs {
    #[command(flatten)]
    pub(crate) owner: OwnerArgs,
    /// The pin's id (from `hostpipe attachments`).
    #[arg(long, conflicts_with_all = ["server", "target", "args", "arg_vars"])]
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) target: DetachTarget,
}

pub(crate) async fn detach(app: &App, args: DetachArgs) -> anyhow::Result<ExitCode> {
    let DetachArgs { owner, id, target } = args;
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

// The arguments of `hostpipe attachments` (its help is the doc of `SessionCommand::Attachments`).
#[derive(clap::Args)]
pub(crate) struct AttachmentsArgs {
    #[command(flatten)]
    pub(crate) owner: OwnerArgs,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn attachments(app: &App, args: AttachmentsArgs) -> anyhow::Result<ExitCode> {
    let AttachmentsArgs { owner, json } = args;
    let owner = owner.owner();
    let pins = store(app)?
        .pins(
            std::slice::from_ref(&owner),
            hostpipe_engine::store::unix_ms_now(),
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
