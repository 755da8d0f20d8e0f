//! The one way a resource reaches the model: what the listing says of it, the pipeline's
//! rules for it, and its conversion. Injection ([`crate::ResourceContextInjection`])
//! and the model's `read_resource` ([`crate::BoundTools`]) both read through here, so
//! one policy covers both:
//!
//! 1. The listing (`resources/list`, or the template a URI was expanded from or matches)
//!    gives the name, description, MIME type, size and annotations ([`Listed`]).
//! 2. Before the read ([`ReadPolicy::refuse_listed`]): a resource whose
//!    `annotations.audience` is only `["user"]` never goes to the model; nor does one
//!    whose listed MIME type the policy refuses or whose listed `size` is over
//!    `max_resource_bytes`.
//! 3. After the read, per content item ([`ReadPolicy::refuse_item`]): the byte limits
//!    and the MIME policy again, on what arrived.
//! 4. Conversion ([`convert_item`]): by the MIME type of the read result, which wins
//!    over the listing's (see [`crate::convert`]). Images are decoded off the async
//!    workers.
//!
//! The consent gate is asked before step 2's read and for every item that comes back
//! under another URI; callers do that with their turn's gate.

use std::sync::Arc;

use hostpipe_core::{McpSource, ModelProfile, ResourceContents, TemplateRef};

use crate::convert::{ConvertLimits, Converted, ResourceMeta, convert};
use crate::uri_template;

/// A pipeline's rules for resources that reach the model, whoever asked for them. The
/// injection stage publishes its own in the turn's extensions; the model's reads use
/// them ([`ReadPolicy::of_turn`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPolicy {
    /// MIME types allowed (`type/subtype` or `type/*`); empty allows all.
    pub mime_allow: Vec<String>,
    /// MIME types refused; wins over `mime_allow`.
    pub mime_deny: Vec<String>,
    /// Largest resource, in bytes.
    pub max_resource_bytes: usize,
    /// Most bytes read in one turn.
    pub max_turn_bytes: usize,
    /// Image decoding limits.
    pub limits: ConvertLimits,
}

impl Default for ReadPolicy {
    fn default() -> Self {
        Self {
            mime_allow: Vec::new(),
            mime_deny: Vec::new(),
            max_resource_bytes: 8 * 1024 * 1024,
            max_turn_bytes: 32 * 1024 * 1024,
            limits: ConvertLimits::default(),
        }
    }
}

fn mime_matches(pattern: &str, mime: &str) -> bool {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let pattern = pattern.to_ascii_lowercase();
    match pattern.strip_suffix("/*") {
        Some(top) => essence.split('/').next() == Some(top),
        None => essence == pattern,
    }
}

impl ReadPolicy {
    /// The policy the turn's injection stage published, else the default one.
    pub fn of_turn(extensions: &hostpipe_core::Extensions) -> Arc<Self> {
        extensions.get::<Arc<Self>>().cloned().unwrap_or_default()
    }

    /// Whether the MIME policy lets `mime` through.
    pub fn mime_allowed(&self, mime: &str) -> bool {
        !self.mime_deny.iter().any(|p| mime_matches(p, mime))
            && (self.mime_allow.is_empty() || self.mime_allow.iter().any(|p| mime_matches(p, mime)))
    }

    /// Why a resource is not read, from what its listing says (audience, MIME type,
    /// size); `None` when it may be read.
    pub fn refuse_listed(&self, listed: &Listed) -> Option<String> {
        if listed.user_only {
            return Some("its audience is the user only".into());
        }
        if let Some(m) = listed
            .meta
            .listed_mime
            .as_deref()
            .filter(|m| !self.mime_allowed(m))
        {
            return Some(format!(
                "MIME type {m} is not allowed by the pipeline's policy"
            ));
        }
        listed
            .size
            .filter(|&s| s > self.max_resource_bytes as u64)
            .map(|s| {
                format!(
                    "{s} bytes is over max_resource_bytes ({})",
                    self.max_resource_bytes
                )
            })
    }

    /// Why a content item of `bytes` bytes and MIME type `mime` is not shown, `turn_bytes`
    /// (this item included) having been read so far; `None` when it may be converted.
    pub fn refuse_item(
        &self,
        bytes: usize,
        turn_bytes: usize,
        mime: Option<&str>,
    ) -> Option<String> {
        if bytes > self.max_resource_bytes {
            Some(format!(
                "{bytes} bytes is over max_resource_bytes ({})",
                self.max_resource_bytes
            ))
        } else if turn_bytes > self.max_turn_bytes {
            Some(format!(
                "the turn has read {turn_bytes} bytes, over max_turn_bytes ({})",
                self.max_turn_bytes
            ))
        } else {
            mime.filter(|m| !self.mime_allowed(m))
                .map(|m| format!("MIME type {m} is not allowed by the pipeline's policy"))
        }
    }
}

/// What the listing says about a resource.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// Name, description and MIME type, to describe it and convert it.
    pub meta: ResourceMeta,
    /// `annotations.priority`.
    pub priority: Option<f32>,
    /// `annotations.lastModified`.
    pub last_modified: Option<String>,
    /// `annotations.audience` is only `["user"]`.
    pub user_only: bool,
    /// `size`, in bytes.
    pub size: Option<u64>,
}

impl Listed {
    /// `annotations.priority` clamped to [0, 1] (MCP spec 2025-11-25, "Annotations"); 0.5
    /// when absent or not a number.
    pub fn priority(&self) -> f32 {
        self.priority
            .filter(|p| p.is_finite())
            .map_or(0.5, |p| p.clamp(0.0, 1.0))
    }

    /// `annotations.lastModified` as milliseconds since the epoch; `None` (older than
    /// any date) when absent or not ISO 8601 / RFC 3339.
    pub fn last_modified_ms(&self) -> Option<i64> {
        let raw = self.last_modified.as_deref()?;
        chrono::DateTime::parse_from_rfc3339(raw.trim())
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// What `server`'s listing says of `uri`: the template it was expanded from when
    /// `template` is given; else the static resource of that URI, else a template the
    /// URI matches ([`uri_template::matches`]). Nothing when the server lists neither.
    pub async fn of(
        mcp: &dyn McpSource,
        server: &str,
        uri: &str,
        template: Option<&TemplateRef>,
    ) -> Self {
        let mut out = Self::default();
        if template.is_none()
            && let Ok(resources) = mcp.list_resources(server).await
            && let Some(r) = resources.iter().find(|r| r.uri == uri)
        {
            out.meta = ResourceMeta::of_resource(r);
            out.size = r.size;
            if let Some(a) = &r.annotations {
                out.priority = a.priority;
                out.last_modified.clone_from(&a.last_modified);
                out.user_only = a.is_user_only();
            }
            return out;
        }
        if let Ok(templates) = mcp.list_resource_templates(server).await
            && let Some(t) = templates.iter().find(|x| match template {
                Some(t) => x.uri_template == t.uri_template,
                None => uri_template::matches(&x.uri_template, uri),
            })
        {
            out.meta = ResourceMeta::of_template(t);
            if let Some(a) = &t.annotations {
                out.priority = a.priority;
                out.last_modified.clone_from(&a.last_modified);
                out.user_only = a.is_user_only();
            }
        }
        out
    }
}

/// Converts one content item for `model` (see [`crate::convert`]); images are decoded
/// on the blocking pool (up to a few hundred ms), not on the async workers.
pub async fn convert_item(
    item: ResourceContents,
    meta: &ResourceMeta,
    model: &Arc<ModelProfile>,
    limits: &ConvertLimits,
) -> Converted {
    let image = item
        .mime_type()
        .or(meta.listed_mime.as_deref())
        .is_some_and(crate::convert::is_image);
    if !image {
        return convert(item, meta, model, limits);
    }
    let (meta, model, limits) = (meta.clone(), Arc::clone(model), limits.clone());
    tokio::task::spawn_blocking(move || convert(item, &meta, &model, &limits))
        .await
        .unwrap_or_else(|e| Converted::Refused {
            error: format!("image conversion failed: {e}"),
            note: "[image resource not shown: conversion failed]".into(),
        })
}
