//! Operations shared by the command line and the HTTP service ([`crate::serve`]): what a
//! pin may point at, and a resource read converted as the pipeline would convert it.

use std::collections::BTreeMap;

use hostpipe_core::{
    ArgumentValue, AttachmentTarget, McpSource as _, ModelProfile, PinOwner, SourceError,
};
use hostpipe_stages::convert::{ConvertLimits, Converted, ResourceMeta, convert};

use crate::App;

/// Why a pin target was refused. The messages name no front end's flags; the CLI and the
/// HTTP API add their own hints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The target has no `{` (not a template) and no scheme.
    #[error("`{0}` is not a URI (no scheme, e.g. demo://docs/handbook.md)")]
    NotAUri(String),
    /// Arguments were given for a plain URI.
    #[error("template arguments are for a URI template (`{0}` has no {{variable}})")]
    ArgumentsWithoutTemplate(String),
    /// The template does not parse (RFC 6570).
    #[error("URI template `{template}`: {message}")]
    Template {
        /// The template.
        template: String,
        /// What is wrong with it.
        message: String,
    },
    /// An argument names no variable of the template.
    #[error("URI template `{template}` has no variable `{name}`; its variables: {}", variables.join(", "))]
    UnknownVariable {
        /// The template.
        template: String,
        /// The argument's name.
        name: String,
        /// The template's variables.
        variables: Vec<String>,
    },
    /// A variable of the template has no argument.
    #[error("URI template `{template}` needs `{name}`")]
    MissingVariable {
        /// The template.
        template: String,
        /// The variable without a value.
        name: String,
    },
}

/// What a pin reads: `target` as a URI, or (when it has a `{`) as an RFC 6570 template
/// with a value or a turn variable for each of its variables, and no others.
///
/// # Errors
/// [`TargetError`] naming the template and the variable at fault.
pub fn pin_target(
    target: &str,
    arguments: BTreeMap<String, ArgumentValue>,
) -> Result<AttachmentTarget, TargetError> {
    if !target.contains('{') {
        if !arguments.is_empty() {
            return Err(TargetError::ArgumentsWithoutTemplate(target.into()));
        }
        if !target.contains(':') {
            return Err(TargetError::NotAUri(target.into()));
        }
        return Ok(AttachmentTarget::Uri { uri: target.into() });
    }
    let variables =
        hostpipe_stages::uri_template::variables(target).map_err(|e| TargetError::Template {
            template: target.into(),
            message: e.to_string(),
        })?;
    if let Some(unknown) = arguments.keys().find(|k| !variables.contains(k)) {
        return Err(TargetError::UnknownVariable {
            template: target.into(),
            name: unknown.clone(),
            variables,
        });
    }
    if let Some(missing) = variables.iter().find(|v| !arguments.contains_key(*v)) {
        return Err(TargetError::MissingVariable {
            template: target.into(),
            name: missing.clone(),
        });
    }
    Ok(AttachmentTarget::Template {
        template: target.into(),
        arguments,
    })
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

    /// Checks that a pin of `server` for `owner` could ever be read: a pipeline owner
    /// must exist and bind the server. Conversations are the platform's; any id goes.
    ///
    /// # Errors
    /// Naming the pipeline, or the servers it binds.
    pub fn check_pin_owner(&self, owner: &PinOwner, server: &str) -> anyhow::Result<()> {
        let PinOwner::Pipeline(id) = owner else {
            return Ok(());
        };
        self.pipeline(id)?;
        if let Some(bound) = self.config.bound_servers(id)
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
