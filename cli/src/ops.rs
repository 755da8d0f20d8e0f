//! Operations shared by the command line and the HTTP service ([`crate::serve`]): what a
//! pin may point at, and a resource read converted as the pipeline would convert it.

use std::collections::BTreeMap;

use hostpipe_core::{ArgumentValue, AttachmentTarget, McpSource as _, ModelProfile, SourceError};
use hostpipe_engine::PinOwner;
use hostpipe_stages::convert::{ConvertLimits, Converted, ResourceMeta, convert};

use crate::App;

pub use hostpipe_stages::attachment::{AttachmentSpec, TargetError};

/// What a pin reads: `target` as a URI, or (when it has a `{`) as an RFC 6570 template
/// with a value or a turn variable for each of its variables, and no others
/// ([`AttachmentSpec::from_target`], checked as every attachment is).
///
/// # Errors
/// [`TargetError`] naming the template and the variable at fault.
pub fn pin_target(
    target: &str,
    arguments: BTreeMap<String, ArgumentValue>,
) -> Result<AttachmentTarget, TargetError> {
    AttachmentTarget::try_from(&AttachmentSpec::from_target("", target, arguments))
}

impl App {
    /// The configured server names, sorted.
    pub fn server_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.host.servers().into_iter().map(|s| s.name).collect();
        names.sort();
        names
    }

    /// Checks that `server` is configured.
    ///
    /// # Errors
    /// [`SourceError::UnknownServer`], listing the configured servers.
    pub fn check_server(&self, server: &str) -> Result<(), SourceError> {
        let known = self.server_names();
        if known.iter().any(|s| s == server) {
            Ok(())
        } else {
            Err(SourceError::UnknownServer {
                server: server.into(),
                known,
            })
        }
    }

    /// Checks that a pin of `server` for `owner` could ever be read
    /// ([`LoadedConfig::check_pin_owner`](crate::config::LoadedConfig::check_pin_owner)).
    ///
    /// # Errors
    /// Naming the pipeline, or the servers it binds.
    pub fn check_pin_owner(&self, owner: &PinOwner, server: &str) -> anyhow::Result<()> {
        self.config.check_pin_owner(owner, server)
    }

    /// Checks that what a pin of `server` reads exists, when the server can tell now: a
    /// template must be one the server lists (`resources/templates/list`), and with
    /// every argument a literal, the URI it makes must exist; a URI must be listed
    /// (`resources/list`) or readable (a `resources/read` the server does not answer with
    /// "not found": the URIs a template makes are seldom listed).
    ///
    /// `Ok(None)`: it exists. `Ok(Some(warning))`: it could not be checked (the server is
    /// disabled, not connected, or failed otherwise); the pin may still be right, and
    /// the warning says so. An embedded target is always fine.
    ///
    /// # Errors
    /// A message naming the target and the server, and what the server has instead.
    pub async fn check_pin_target(
        &self,
        server: &str,
        target: &AttachmentTarget,
    ) -> Result<Option<String>, String> {
        let status = self
            .host
            .servers()
            .into_iter()
            .find(|s| s.name == server)
            .map(|s| s.status);
        match status {
            Some(s) if s.is_connected() => {}
            Some(hostpipe_core::ServerStatus::Disabled) => {
                return Ok(Some(unchecked(server, &"the server is disabled")));
            }
            _ => return Ok(Some(unchecked(server, &"the server is not connected"))),
        }
        match target {
            AttachmentTarget::Embedded { .. } => Ok(None),
            AttachmentTarget::Template {
                template,
                arguments,
            } => {
                let listed = match self.host.list_resource_templates(server).await {
                    Ok(listed) => listed,
                    Err(e) => return Ok(Some(unchecked(server, &e))),
                };
                if !listed.iter().any(|t| &t.uri_template == template) {
                    let names: Vec<&str> = listed.iter().map(|t| t.uri_template.as_str()).collect();
                    return Err(format!(
                        "server `{server}` lists no resource template `{template}`; its templates: {}",
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ));
                }
                // A turn variable makes the URI per turn: only literals can be checked.
                if arguments
                    .values()
                    .any(|a| !matches!(a, ArgumentValue::Literal(_)))
                {
                    return Ok(None);
                }
                match hostpipe_stages::uri_template::expand(
                    template,
                    arguments,
                    &hostpipe_core::Variables::default(),
                ) {
                    Ok((uri, _)) => self.check_uri(server, &uri).await,
                    Err(e) => Err(format!("URI template `{template}`: {e}")),
                }
            }
            AttachmentTarget::Uri { uri } => self.check_uri(server, uri).await,
        }
    }

    /// [`App::check_pin_target`] of a URI.
    async fn check_uri(&self, server: &str, uri: &str) -> Result<Option<String>, String> {
        if let Ok(listed) = self.host.list_resources(server).await
            && listed.iter().any(|r| r.uri == uri)
        {
            return Ok(None);
        }
        match self.host.read_resource(server, uri).await {
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Err(format!(
                "server `{server}` has no resource `{uri}` (it answered: not found)"
            )),
            Err(e) => Ok(Some(unchecked(server, &e))),
        }
    }

    /// Reads `uri` from `server` and converts each item as the pipeline's
    /// `resource_context_injection` would for `model` (MIME rules, image checks, blob
    /// descriptions; no budget, no consent: this is an operator's look). When `uri` was
    /// expanded from `template`, the template's listing describes it, as in a turn.
    ///
    /// # Errors
    /// The server's [`SourceError`] (unknown, unavailable, not found, …).
    pub async fn preview_read(
        &self,
        server: &str,
        uri: &str,
        template: Option<&str>,
        model: &ModelProfile,
    ) -> Result<Vec<PreviewItem>, SourceError> {
        let contents = self.host.read_resource(server, uri).await?.contents;
        // The listing's name, description and MIME type, as the pipeline uses them.
        let meta = match template {
            Some(template) => self
                .host
                .list_resource_templates(server)
                .await
                .ok()
                .and_then(|listed| {
                    listed
                        .iter()
                        .find(|t| t.uri_template == template)
                        .map(ResourceMeta::of_template)
                }),
            None => self
                .host
                .list_resources(server)
                .await
                .ok()
                .and_then(|listed| {
                    listed
                        .iter()
                        .find(|r| r.uri == uri)
                        .map(ResourceMeta::of_resource)
                }),
        }
        .unwrap_or_default();
        Ok(contents
            .iter()
            .cloned()
            .map(|c| {
                let (uri, mime_type, bytes) = (
                    c.uri().to_owned(),
                    c.mime_type().map(str::to_owned),
                    c.byte_len(),
                );
                PreviewItem {
                    uri,
                    mime_type,
                    bytes,
                    converted: convert(c, &meta, model, &ConvertLimits::default()),
                }
            })
            .collect())
    }
}

/// The warning of a pin whose target could not be checked on `server`, and `why`.
fn unchecked(server: &str, why: &dyn std::fmt::Display) -> String {
    format!(
        "could not check that server `{server}` has it ({why}); the pin is kept, and a turn that cannot read it says so in its trace"
    )
}

/// One item of a resource read, converted ([`App::preview_read`]).
#[derive(Debug)]
pub struct PreviewItem {
    /// The item's URI (a read may return items under other URIs).
    pub uri: String,
    /// The MIME type the server gave.
    pub mime_type: Option<String>,
    /// Size of the text, or of the decoded blob, in bytes.
    pub bytes: usize,
    /// What the model would get.
    pub converted: Converted,
}

impl crate::config::LoadedConfig {
    /// Checks that a pin of `server` for `owner` could ever be read: a pipeline owner
    /// must exist and bind the server. Conversations are the platform's; any id goes.
    ///
    /// # Errors
    /// Naming the pipeline, or the servers it binds.
    pub fn check_pin_owner(&self, owner: &PinOwner, server: &str) -> anyhow::Result<()> {
        let PinOwner::Pipeline(id) = owner else {
            return Ok(());
        };
        if !self.pipelines.contains_key(id) {
            anyhow::bail!(
                "{}: no pipeline `{id}`; pipelines: {}",
                self.source,
                self.pipeline_ids().join(", ")
            );
        }
        if let Some(bound) = self.bound_servers(id)
            && !bound.iter().any(|b| b == server)
        {
            anyhow::bail!(
                "pipeline `{id}` does not bind MCP server `{server}` (it binds: {}), so the pin would never be read; bind it in [pipelines.{id}.bind_mcp_servers]",
                if bound.is_empty() {
                    "none".to_owned()
                } else {
                    bound.join(", ")
                }
            );
        }
        Ok(())
    }
}
