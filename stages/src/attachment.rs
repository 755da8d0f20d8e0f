//! [`AttachmentSpec`]: an attachment as every front end names it (a server, and a URI or
//! an RFC 6570 template with its arguments), checked one way for all of them: the
//! config's `attachments`, the command line's `--attach` and `attach`, and the HTTP API's
//! turn and pin bodies.

use std::collections::BTreeMap;

use hostpipe_core::{ArgumentValue, Attachment, AttachmentTarget, Scope};
use serde::Deserialize;

use crate::uri_template;

/// An attachment as a caller names it. Exactly one of `uri` and `template`; `arguments`
/// only with a template, one for each of its variables (a literal, or
/// `{ var = "NAME", default = "…" }` to take a turn variable).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentSpec {
    /// The MCP server.
    pub server: String,
    /// A resource URI.
    #[serde(default)]
    pub uri: Option<String>,
    /// An RFC 6570 URI template.
    #[serde(default)]
    pub template: Option<String>,
    /// The template's arguments.
    #[serde(default)]
    pub arguments: BTreeMap<String, ArgumentValue>,
}

/// Why an [`AttachmentSpec`] was refused. The messages name no front end's flags or
/// keys beyond `uri`, `template` and `arguments`; [`TargetError::key`] says which of them
/// is at fault, and front ends add their own hints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Both `uri` and `template`, or neither.
    #[error("give exactly one of `uri` and `template`")]
    NotExactlyOne,
    /// A `uri` holding `{`: a template given as a URI.
    #[error("a `uri` with `{{` is a template: give it as `template`, with `arguments`")]
    UriWithBrace(String),
    /// The target has no `{` (not a template) and no scheme.
    #[error("`{0}` is not a URI (no scheme, e.g. demo://docs/handbook.md)")]
    NotAUri(String),
    /// A `template` without any `{variable}`.
    #[error("`{0}` is not a URI template (no {{variable}}); give it as `uri`")]
    NotATemplate(String),
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

impl TargetError {
    /// The key at fault: `uri`, `template`, `arguments`, or `""` for the attachment as a
    /// whole.
    pub fn key(&self) -> &'static str {
        match self {
            Self::NotExactlyOne => "",
            Self::UriWithBrace(_) | Self::NotAUri(_) => "uri",
            Self::NotATemplate(_) | Self::Template { .. } => "template",
            Self::ArgumentsWithoutTemplate(_)
            | Self::UnknownVariable { .. }
            | Self::MissingVariable { .. } => "arguments",
        }
    }
}

impl AttachmentSpec {
    /// `server` and one `target` as the command line takes it: a template when it has a
    /// `{`, else a URI.
    pub fn from_target(
        server: impl Into<String>,
        target: &str,
        arguments: BTreeMap<String, ArgumentValue>,
    ) -> Self {
        let (uri, template) = if target.contains('{') {
            (None, Some(target.to_owned()))
        } else {
            (Some(target.to_owned()), None)
        };
        Self {
            server: server.into(),
            uri,
            template,
            arguments,
        }
    }

    /// The checked attachment, at `scope`.
    ///
    /// # Errors
    /// [`TargetError`], as [`AttachmentTarget::try_from`] gives it.
    pub fn attachment(&self, scope: Scope) -> Result<Attachment, TargetError> {
        Ok(Attachment {
            server: self.server.clone(),
            target: AttachmentTarget::try_from(self)?,
            scope,
        })
    }
}

impl TryFrom<&AttachmentSpec> for AttachmentTarget {
    type Error = TargetError;

    /// A URI (with a scheme, no `{`, no arguments), or a template that parses (RFC 6570)
    /// with no argument it lacks a variable for, and one for each of its variables.
    fn try_from(spec: &AttachmentSpec) -> Result<Self, TargetError> {
        match (&spec.uri, &spec.template) {
            (Some(uri), None) if uri.contains('{') => Err(TargetError::UriWithBrace(uri.clone())),
            (Some(uri), None) if !spec.arguments.is_empty() => {
                Err(TargetError::ArgumentsWithoutTemplate(uri.clone()))
            }
            (Some(uri), None) if !uri.contains(':') => Err(TargetError::NotAUri(uri.clone())),
            (Some(uri), None) => Ok(Self::Uri { uri: uri.clone() }),
            (None, Some(template)) if !template.contains('{') => {
                Err(TargetError::NotATemplate(template.clone()))
            }
            (None, Some(template)) => template_target(template, &spec.arguments),
            _ => Err(TargetError::NotExactlyOne),
        }
    }
}

fn template_target(
    template: &str,
    arguments: &BTreeMap<String, ArgumentValue>,
) -> Result<AttachmentTarget, TargetError> {
    let variables = uri_template::variables(template).map_err(|e| TargetError::Template {
        template: template.into(),
        message: e.to_string(),
    })?;
    if let Some(unknown) = arguments.keys().find(|k| !variables.contains(k)) {
        return Err(TargetError::UnknownVariable {
            template: template.into(),
            name: unknown.clone(),
            variables,
        });
    }
    if let Some(missing) = variables.iter().find(|v| !arguments.contains_key(*v)) {
        return Err(TargetError::MissingVariable {
            template: template.into(),
            name: missing.clone(),
        });
    }
    Ok(AttachmentTarget::Template {
        template: template.into(),
        arguments: arguments.clone(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(uri: Option<&str>, template: Option<&str>, args: &[(&str, &str)]) -> AttachmentSpec {
        AttachmentSpec {
            server: "kb".into(),
            uri: uri.map(str::to_owned),
            template: template.map(str::to_owned),
            arguments: args
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ArgumentValue::Literal((*v).to_owned())))
                .collect(),
        }
    }

    #[test]
    fn one_check_for_every_front_end() {
        let ok = AttachmentTarget::try_from(&spec(Some("kb://a"), None, &[])).unwrap();
        assert_eq!(
            ok,
            AttachmentTarget::Uri {
                uri: "kb://a".into()
            }
        );
        let t = AttachmentTarget::try_from(&spec(None, Some("kb://t/{id}"), &[("id", "7")]));
        assert!(matches!(t, Ok(AttachmentTarget::Template { .. })));
        let cases = [
            (
                spec(Some("kb://a"), Some("kb://{x}"), &[]),
                TargetError::NotExactlyOne,
                "",
            ),
            (spec(None, None, &[]), TargetError::NotExactlyOne, ""),
            (
                spec(Some("kb://{x}"), None, &[]),
                TargetError::UriWithBrace("kb://{x}".into()),
                "uri",
            ),
            (
                spec(Some("handbook"), None, &[]),
                TargetError::NotAUri("handbook".into()),
                "uri",
            ),
            (
                spec(Some("kb://a"), None, &[("id", "7")]),
                TargetError::ArgumentsWithoutTemplate("kb://a".into()),
                "arguments",
            ),
            (
                spec(None, Some("kb://a"), &[]),
                TargetError::NotATemplate("kb://a".into()),
                "template",
            ),
            (
                spec(None, Some("kb://t/{id}"), &[]),
                TargetError::MissingVariable {
                    template: "kb://t/{id}".into(),
                    name: "id".into(),
                },
                "arguments",
            ),
            (
                spec(None, Some("kb://t/{id}"), &[("id", "7"), ("x", "1")]),
                TargetError::UnknownVariable {
                    template: "kb://t/{id}".into(),
                    name: "x".into(),
                    variables: vec!["id".into()],
                },
                "arguments",
            ),
        ];
        for (spec, want, key) in cases {
            let got = AttachmentTarget::try_from(&spec).unwrap_err();
            assert_eq!((&got, got.key()), (&want, key), "{spec:?}");
        }
        assert_eq!(
            AttachmentSpec::from_target("kb", "kb://t/{id}", BTreeMap::new())
                .template
                .as_deref(),
            Some("kb://t/{id}")
        );
    }
}
