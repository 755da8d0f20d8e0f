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
//! 3. After the read, per content item ([`ItemReader`]): the consent gate again for an
//!    item under another URI, then the byte limits and the MIME policy on what arrived
//!    ([`ReadPolicy::refuse_item`]).
//! 4. Conversion ([`convert_item`]): by the MIME type of the read result, which wins
//!    over the listing's (see [`crate::convert`]). Images are decoded off the async
//!    workers.
//!
//! The consent gate ([`Gate`]) is asked before the read and, by [`ItemReader`], for
//! every item that comes back under another URI than the one read. What the model is
//! told of a resource it does not get is written here too ([`withheld_note`],
//! [`refused_note`]), and so is what the read's record says ([`withhold`],
//! [`not_read`]).

use std::sync::Arc;
use std::time::Instant;

use hostpipe_core::{
    ConsentGate, ConsentRequest, McpSource, ModelProfile, ReadOrigin, ReadOutcome, ReadRecord,
    ResourceContents, TemplateRef, Treatment, Turn, Verdict,
};

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

/// What the model is told of `uri` from `server` when the consent gate withheld it: not
/// that it does not exist.
pub fn withheld_note(uri: &str, server: &str) -> String {
    format!("[resource {uri} from `{server}` withheld: reading it was not allowed]")
}

/// What the model is told of a content item `uri` from `server` that the byte or MIME
/// limits refused after the read.
pub fn refused_note(uri: &str, server: &str) -> String {
    format!("[resource {uri} from `{server}` not included: too large or not allowed]")
}

/// Marks `record` as withheld by the consent gate, which decided `how`
/// ([`Verdict::how`]): nothing of it reached the model.
pub fn withhold(record: &mut ReadRecord, how: &str) {
    record.outcome = ReadOutcome::Withheld;
    record.error = Some(format!("withheld: {how}"));
    record.consent = Some(how.to_owned());
    record.treatment = Treatment::Omitted;
}

/// Marks `record` as not read, for `why` ([`ReadPolicy::refuse_listed`]): it never
/// reached the server.
pub fn not_read(record: &mut ReadRecord, why: &str) {
    record.outcome = ReadOutcome::NotRead;
    record.error = Some(format!("not read: {why}"));
    record.treatment = Treatment::Omitted;
}

/// The consent gate as a reader asks it: the pipeline's gate (none when it has no
/// policy), the turn's ids and who reads, and when to stop waiting for an approver.
#[derive(Clone)]
pub struct Gate {
    consent: Option<Arc<dyn ConsentGate>>,
    /// The request, its server, URI and (when given) reason filled in per question.
    request: ConsentRequest,
    deadline: Option<Instant>,
}

impl Gate {
    /// `consent` asked with `request`'s ids, origin and default reason, never past
    /// `deadline`.
    pub fn new(
        consent: Option<Arc<dyn ConsentGate>>,
        request: ConsentRequest,
        deadline: Option<Instant>,
    ) -> Self {
        Self {
            consent,
            request,
            deadline,
        }
    }

    /// The gate of `turn`, for reads by `origin`, until the turn's deadline.
    pub fn of_turn(turn: &Turn, origin: ReadOrigin) -> Self {
        Self::new(
            turn.consent.clone(),
            turn.consent_request("", "", origin, ""),
            turn.deadline,
        )
    }

    /// Whether `uri` of `server` may be read, for `reason` (else the request's own);
    /// `None` when the pipeline has no consent policy (every read is allowed). An
    /// approver that has not answered by the deadline is a denial. Cancel-safe.
    pub async fn ask(&self, server: &str, uri: &str, reason: Option<String>) -> Option<Verdict> {
        let gate = self.consent.as_ref()?;
        let mut request = self.request.clone();
        server.clone_into(&mut request.server);
        uri.clone_into(&mut request.uri);
        if let Some(reason) = reason {
            request.reason = reason;
        }
        Some(hostpipe_core::consent::check_until(gate.as_ref(), &request, self.deadline).await)
    }
}

/// Why one content item does not reach the model as it came ([`ReadItem::problem`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemProblem {
    /// The consent gate denied its URI (an item under another URI than the one read);
    /// `how` is [`Verdict::how`].
    Withheld {
        /// How the gate decided.
        how: String,
    },
    /// The byte or MIME limits refused it after the read.
    Refused {
        /// Which limit, with the numbers.
        error: String,
    },
    /// Its conversion failed (e.g. an image that is not decodable or too large to decode).
    ConversionFailed {
        /// Why.
        error: String,
    },
}

impl ItemProblem {
    /// The read's outcome when this is its problem: withheld by the policy (consent, or
    /// the byte and MIME limits), or failed (the conversion).
    pub fn outcome(&self) -> ReadOutcome {
        match self {
            Self::Withheld { .. } | Self::Refused { .. } => ReadOutcome::Withheld,
            Self::ConversionFailed { .. } => ReadOutcome::Failed,
        }
    }
}

/// One content item of a read, judged and converted ([`ItemReader::judge`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadItem {
    /// The item's URI (which may differ from the one read).
    pub uri: String,
    /// The item's own MIME type.
    pub item_mime: Option<String>,
    /// The MIME type it was judged and converted by: the item's, else the listing's.
    pub mime_type: Option<String>,
    /// Its bytes (text as UTF-8, blobs decoded); 0 when withheld (not counted).
    pub bytes: usize,
    /// What the model gets: the content, or a note saying why not.
    pub converted: Converted,
    /// Why the model does not get it as it came; `None` when it does.
    pub problem: Option<ItemProblem>,
}

/// Judges the content items of the reads of one turn under one policy, in order: the
/// consent gate for an item under another URI than the one read, then the byte limits
/// (counting the bytes of every item judged by this reader) and the MIME policy, then
/// the conversion.
pub struct ItemReader<'a> {
    policy: &'a ReadPolicy,
    model: &'a Arc<ModelProfile>,
    gate: &'a Gate,
    /// Bytes of the items judged so far (withheld ones aside).
    turn_bytes: usize,
}

impl<'a> ItemReader<'a> {
    /// A reader under `policy`, converting for `model`, asking `gate`.
    pub fn new(policy: &'a ReadPolicy, model: &'a Arc<ModelProfile>, gate: &'a Gate) -> Self {
        Self {
            policy,
            model,
            gate,
            turn_bytes: 0,
        }
    }

    /// Judges `item`, which came back from reading `read_uri` on `server` (`listed`
    /// describes that resource); `reason` is what the approver is told when the item is
    /// under another URI (e.g. `returned by the read of kb://a`).
    pub async fn judge(
        &mut self,
        server: &str,
        read_uri: &str,
        listed: &Listed,
        reason: impl FnOnce() -> String,
        item: ResourceContents,
    ) -> ReadItem {
        let uri = item.uri().to_owned();
        let item_mime = item.mime_type().map(str::to_owned);
        if uri != read_uri
            && let Some(v) = self.gate.ask(server, &uri, Some(reason())).await
            && !v.allowed
        {
            return ReadItem {
                converted: Converted::Fallback {
                    reason: hostpipe_core::FallbackReason::Withheld {
                        decision: v.how.clone(),
                    },
                    note: withheld_note(&uri, server),
                },
                problem: Some(ItemProblem::Withheld { how: v.how }),
                uri,
                item_mime,
                mime_type: None,
                bytes: 0,
            };
        }
        let bytes = item.byte_len();
        self.turn_bytes += bytes;
        let mime_type = item_mime
            .clone()
            .or_else(|| listed.meta.listed_mime.clone());
        let (converted, problem) =
            match self
                .policy
                .refuse_item(bytes, self.turn_bytes, mime_type.as_deref())
            {
                Some(error) => (
                    Converted::Refused {
                        error: error.clone(),
                        note: refused_note(&uri, server),
                    },
                    Some(ItemProblem::Refused { error }),
                ),
                None => {
                    let converted =
                        convert_item(item, &listed.meta, self.model, &self.policy.limits).await;
                    let problem = match &converted {
                        Converted::Refused { error, .. } => Some(ItemProblem::ConversionFailed {
                            error: error.clone(),
                        }),
                        _ => None,
                    };
                    (converted, problem)
                }
            };
        ReadItem {
            uri,
            item_mime,
            mime_type,
            bytes,
            converted,
            problem,
        }
    }
}
