//! From attachments to planned reads, before anything is read: every attachment is
//! resolved (a template expanded, its server checked) and de-duplicated, looked up in
//! its server's listing, asked about at the consent gate, judged by the pipeline's
//! policy on what the listing says, and put in rank order.

use hostpipe_core::{
    Attachment, AttachmentTarget, BlockSource, FallbackReason, McpSource, ReadOrigin, ReadOutcome,
    ReadRecord, ResourceContents, Scope, SourceError, TemplateRef, Turn,
};

use super::config::Options;
use super::record::record;
use crate::fit::Strategy;
use crate::reader::{Gate, Listed, ReadPolicy, not_read};
use crate::uri_template;

/// Why an attachment produced no content: what became of it, the full story for the
/// trace, a short note for the model (no paths, commands or stack of errors), and the
/// fallback reason.
pub(super) struct Failure {
    pub(super) outcome: ReadOutcome,
    pub(super) trace: String,
    pub(super) model: &'static str,
    pub(super) reason: FallbackReason,
}

impl Failure {
    /// The attachment could not be resolved: it is not read.
    fn invalid(trace: String, model: &'static str) -> Self {
        Self {
            outcome: ReadOutcome::NotRead,
            reason: FallbackReason::InvalidAttachment {
                error: trace.clone(),
            },
            trace,
            model,
        }
    }

    /// The read failed with `e`.
    pub(super) fn read(e: &SourceError) -> Self {
        let model = if e.is_not_found() {
            "not found"
        } else if e.is_timeout() {
            "the server did not answer in time"
        } else if e.is_unavailable() {
            "the server is unavailable"
        } else {
            match e {
                SourceError::NotSupported { .. } => "the server offers no resources",
                SourceError::InvalidResponse { .. } => "the server sent an invalid response",
                _ => "the server reported an error",
            }
        };
        Self {
            outcome: ReadOutcome::Failed,
            trace: e.to_string(),
            model,
            reason: FallbackReason::ReadFailed {
                error: e.to_string(),
            },
        }
    }
}

/// An attachment with its URI worked out (or why it could not be).
struct Resolved {
    source: BlockSource,
    uri: Result<String, Failure>,
}

fn resolve(turn: &Turn, a: &Attachment) -> Resolved {
    let mut source = BlockSource {
        server: a.server.clone(),
        uri: String::new(),
        template: None,
        scope: a.scope,
        name: None,
    };
    let uri = match &a.target {
        AttachmentTarget::Uri { uri } => Ok(uri.clone()),
        AttachmentTarget::Embedded { contents } => Ok(contents.uri().to_owned()),
        AttachmentTarget::Template {
            template,
            arguments,
        } => match uri_template::expand(template, arguments, &turn.variables) {
            Ok((uri, arguments)) => {
                source.template = Some(TemplateRef {
                    uri_template: template.clone(),
                    arguments,
                });
                Ok(uri)
            }
            Err(e) => {
                source.uri.clone_from(template);
                Err(Failure::invalid(
                    e.to_string(),
                    "its URI template could not be filled in",
                ))
            }
        },
    };
    let uri = uri.and_then(|uri| {
        source.uri.clone_from(&uri);
        if turn.is_bound(&a.server) {
            Ok(uri)
        } else {
            let bound: Vec<_> = turn.bound_servers.iter().map(|b| b.name.as_str()).collect();
            let bound = if bound.is_empty() {
                "none".to_owned()
            } else {
                bound.join(", ")
            };
            Err(Failure::invalid(
                format!(
                    "server `{}` is not bound for this turn (bound: {bound})",
                    a.server
                ),
                "the server is not bound for this turn",
            ))
        }
    });
    Resolved { source, uri }
}

/// One attachment, resolved and looked up, in rank order.
pub(super) struct Planned {
    pub(super) source: BlockSource,
    pub(super) uri: Result<String, Failure>,
    pub(super) listed: Listed,
    pub(super) strategy: Strategy,
    /// Marked `must` in the config (or priority 1.0 in the listing, see [`Planned::must`]).
    pub(super) must: bool,
    /// The widest scope it was marked `must` at: a must the pipeline's config made leaves
    /// room for the user's own attachments even when the user attached it too.
    pub(super) must_scope: Scope,
    /// Contents that came with the attachment (nothing to read).
    pub(super) embedded: Option<ResourceContents>,
    /// The consent decision, when the pipeline has a policy.
    pub(super) consent: Option<String>,
}

/// Resolves, de-duplicates and looks up the pipeline's `configured` attachments and the
/// turn's own; `strategy` is the section's default.
pub(super) async fn plan(
    turn: &mut Turn,
    mcp: &dyn McpSource,
    configured: &[(Attachment, Options)],
    strategy: Strategy,
) -> Vec<Planned> {
    let message_attachments: Vec<(Attachment, Options)> = turn
        .attachments
        .iter()
        .map(|a| (a.clone(), Options::default()))
        .collect();
    let mut planned: Vec<Planned> = Vec::new();
    let mut all: Vec<&(Attachment, Options)> = configured
        .iter()
        .chain(message_attachments.iter())
        .collect();
    // Narrower scope first, so a resource attached twice keeps its narrowest scope.
    all.sort_by_key(|(a, _)| std::cmp::Reverse(a.scope));
    let mut attached: Vec<(String, String, Scope)> = Vec::new();
    for (a, options) in all {
        let Resolved { source, uri } = resolve(turn, a);
        if let Ok(u) = &uri {
            attached.push((source.server.clone(), u.clone(), source.scope));
            if let Some(kept) = planned
                .iter_mut()
                .find(|p| p.source.server == source.server && p.uri.as_ref().is_ok_and(|o| o == u))
            {
                merge_repeat(turn, kept, &source, u, options, &attached);
                continue;
            }
        }
        let embedded = match &a.target {
            AttachmentTarget::Embedded { contents } => Some(contents.clone()),
            _ => None,
        };
        let listed = match &uri {
            Ok(u) if embedded.is_none() => {
                Listed::of(mcp, &source.server, u, source.template.as_ref()).await
            }
            _ => Listed::default(),
        };
        planned.push(Planned {
            must_scope: source.scope,
            source,
            uri,
            listed,
            strategy: options.strategy.unwrap_or(strategy),
            must: options.must,
            embedded,
            consent: None,
        });
    }
    planned
}

/// `uri` from `source` is `kept` already, attached again: read once, a `must` at any
/// scope holding for the one read. `attached` lists every resolved attachment so far.
fn merge_repeat(
    turn: &mut Turn,
    kept: &mut Planned,
    source: &BlockSource,
    uri: &str,
    options: &Options,
    attached: &[(String, String, Scope)],
) {
    // The same resource at two scopes (a pin that repeats the pipeline's config, a
    // mention of a pinned resource) is expected; twice at one scope is a mistake worth a
    // warning.
    let twice_here = attached
        .iter()
        .filter(|(s, o, sc)| s == &source.server && o == uri && *sc == source.scope)
        .count()
        > 1;
    if twice_here {
        turn.trace.warn(format!(
            "{uri} from `{}` is attached more than once at {} scope; read once",
            source.server,
            source.scope.as_str()
        ));
    } else {
        turn.trace.note(format!(
            "{uri} from `{}` is attached at {} and {} scope; read once, at {} scope",
            source.server,
            kept.source.scope.as_str(),
            source.scope.as_str(),
            kept.source.scope.as_str()
        ));
    }
    if options.must {
        kept.must_scope = if kept.must {
            kept.must_scope.min(source.scope)
        } else {
            source.scope
        };
        kept.must = true;
    }
}

/// Consent before any read: a withheld read never reaches the server, and the model is
/// told it was withheld (docs/consent.md).
pub(super) async fn ask_consent(turn: &Turn, planned: &mut [Planned]) {
    let gate = Gate::of_turn(turn, ReadOrigin::Host);
    for p in planned {
        // Embedded contents (a prompt's resources) were sent without a read, but they
        // still only reach the model if the policy allows them.
        let uri = match &p.uri {
            Ok(uri) => uri.clone(),
            _ => continue,
        };
        let reason = if p.embedded.is_some() {
            "embedded in a prompt's messages".to_owned()
        } else {
            format!("attached at {} scope", p.source.scope.as_str())
        };
        let Some(verdict) = gate.ask(&p.source.server, &uri, Some(reason)).await else {
            continue;
        };
        if !verdict.allowed {
            p.uri = Err(Failure {
                outcome: ReadOutcome::Withheld,
                trace: format!("withheld: {}", verdict.how),
                model: "reading it was not allowed",
                reason: FallbackReason::Withheld {
                    decision: verdict.how.clone(),
                },
            });
        }
        p.consent = Some(verdict.how);
    }
}

/// Policy before any read (audience, MIME type, size, from the listing): drops what
/// `policy` refuses from `planned` and returns their records.
pub(super) fn apply_policy(policy: &ReadPolicy, planned: &mut Vec<Planned>) -> Vec<ReadRecord> {
    let mut records = Vec::new();
    planned.retain(|p| match policy.refuse_listed(&p.listed) {
        Some(why) => {
            let mut r = record(&p.source, p.listed.meta.listed_mime.clone(), 0, 0);
            not_read(&mut r, &why);
            records.push(r);
            false
        }
        None => true,
    });
    records
}

/// Rank order: scope (narrower first), then priority, then lastModified (newer first);
/// stable, so attachment order breaks the remaining ties.
pub(super) fn rank(planned: &mut [Planned]) {
    planned.sort_by(|a, b| {
        let p = |x: &Planned| x.listed.priority();
        let t = |x: &Planned| x.listed.last_modified_ms();
        b.source
            .scope
            .cmp(&a.source.scope)
            .then(p(b).total_cmp(&p(a)))
            .then(t(b).cmp(&t(a)))
    });
}
