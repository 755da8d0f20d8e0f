//! `resource_context_injection`: reads the attached resources and fits them into the
//! turn's token budget.
//!
//! First version: attachments at pipeline scope (config) and at message or conversation
//! scope (on the [`Turn`]), static URIs or RFC 6570 templates; all reads run
//! concurrently; blocks are fitted in scope order (message, conversation, pipeline),
//! then attachment order, each whole if it fits what is left of the budget, else
//! truncated token-exactly with a visible marker, else left out. The injected total never
//! exceeds the budget.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, BlockBody, BlockSource, BuildContext, ConfigError,
    ContextBlock, FallbackReason, McpSource, ModelProfile, ReadRecord, ResourceContents, Scope,
    SourceError, Stage, StageError, StageOutcome, StagePhase, TemplateRef, Tokenizer, TraceEvent,
    Treatment, TruncationSide, Turn,
};
use serde::Deserialize;

use crate::config::parse_section;
use crate::convert::{Converted, convert, image_tokens};
use crate::uri_template;

/// One attachment in the config: a static `uri`, or a `template` with `arguments`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentConfig {
    /// Server name.
    pub server: String,
    /// A static resource URI.
    pub uri: Option<String>,
    /// An RFC 6570 URI template.
    pub template: Option<String>,
    /// Template arguments: a string, or `{ var = "NAME", default = "…" }` to take a turn
    /// variable.
    #[serde(default)]
    pub arguments: BTreeMap<String, ArgumentValue>,
}

/// Config section `[pipelines.ID.resource_context_injection]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InjectConfig {
    /// The budget in tokens. Never more than the model has left for input (context
    /// window minus reserved output, system prompt, history and message): a larger value
    /// is lowered to that, with a trace warning.
    pub budget_tokens: Option<usize>,
    /// Instead of `budget_tokens`: this share, in (0, 1], of what the model has left for
    /// input. Default (when neither is given) 0.5.
    pub budget_share: Option<f64>,
    /// Which part a truncation keeps. Default `head`.
    pub truncate: TruncationSide,
    /// Pipeline-scope attachments.
    pub attachments: Vec<AttachmentConfig>,
}

impl Default for InjectConfig {
    fn default() -> Self {
        Self {
            budget_tokens: None,
            budget_share: None,
            truncate: TruncationSide::Head,
            attachments: Vec::new(),
        }
    }
}

/// Reads attached resources into [`ContextBlock`]s within a token budget.
pub struct ResourceContextInjection {
    config: InjectConfig,
    attachments: Vec<Attachment>,
    mcp: Arc<dyn McpSource>,
}

impl ResourceContextInjection {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "resource_context_injection";

    /// Checks `config` against the configured servers.
    ///
    /// # Errors
    /// [`ConfigError`] at `attachments[i]…` for an unknown server, neither or both of
    /// `uri` and `template`, an invalid template, a template variable without an
    /// argument or an argument the template does not have; at `budget_share` for a
    /// share outside (0, 1].
    pub fn new(config: InjectConfig, mcp: Arc<dyn McpSource>) -> Result<Self, ConfigError> {
        if let Some(share) = config.budget_share {
            if config.budget_tokens.is_some() {
                return Err(ConfigError::new(
                    "budget_share",
                    "give `budget_tokens` or `budget_share`, not both",
                ));
            }
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::new(
                    "budget_share",
                    format!("{share} is not in (0, 1]"),
                ));
            }
        }
        let known: Vec<String> = mcp.servers().into_iter().map(|s| s.name).collect();
        let mut attachments = Vec::with_capacity(config.attachments.len());
        for (i, a) in config.attachments.iter().enumerate() {
            let at =
                |k: &str| format!("attachments[{i}]{}{k}", if k.is_empty() { "" } else { "." });
            if !known.contains(&a.server) {
                let list = if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                };
                return Err(ConfigError::new(
                    at("server"),
                    format!(
                        "unknown MCP server `{}`; configured servers: {list}",
                        a.server
                    ),
                ));
            }
            let target = match (&a.uri, &a.template) {
                (Some(uri), None) => {
                    if !a.arguments.is_empty() {
                        return Err(ConfigError::new(
                            at("arguments"),
                            "arguments need a `template`, not a `uri`",
                        ));
                    }
                    AttachmentTarget::Uri { uri: uri.clone() }
                }
                (None, Some(template)) => {
                    let vars = uri_template::variables(template)
                        .map_err(|e| ConfigError::new(at("template"), e.to_string()))?;
                    if let Some(missing) = vars.iter().find(|v| !a.arguments.contains_key(*v)) {
                        return Err(ConfigError::new(
                            at("arguments"),
                            format!("template `{template}` needs argument `{missing}`"),
                        ));
                    }
                    if let Some(extra) = a.arguments.keys().find(|k| !vars.contains(k)) {
                        return Err(ConfigError::new(
                            at("arguments"),
                            format!(
                                "template `{template}` has no variable `{extra}`; its variables: {}",
                                vars.join(", ")
                            ),
                        ));
                    }
                    AttachmentTarget::Template {
                        template: template.clone(),
                        arguments: a.arguments.clone(),
                    }
                }
                _ => {
                    return Err(ConfigError::new(
                        at(""),
                        "give exactly one of `uri` and `template`",
                    ));
                }
            };
            attachments.push(Attachment {
                server: a.server.clone(),
                target,
                scope: Scope::Pipeline,
            });
        }
        Ok(Self {
            config,
            attachments,
            mcp,
        })
    }

    /// The turn's budget in tokens: `budget_tokens`, or `budget_share` (default 0.5) of
    /// what the model has left for input; never more than what it has left.
    fn budget(&self, turn: &mut Turn, tk: &Tokenizer) -> usize {
        let used = turn.system_prompt.as_deref().map_or(0, |s| tk.count(s))
            + turn
                .history
                .iter()
                .map(|m| tk.count(&m.text))
                .sum::<usize>()
            + tk.count(&turn.message.text);
        let left = turn.model.input_tokens().saturating_sub(used);
        match self.config.budget_tokens {
            Some(b) if b > left => {
                turn.trace.warn(format!(
                    "budget_tokens = {b} is more than the {left} input tokens model `{}` has left; using {left}",
                    turn.model.name
                ));
                left
            }
            Some(b) => b,
            // Float maths on token counts (< 2^53) is exact enough; floor keeps the bound.
            None => (left as f64 * self.config.budget_share.unwrap_or(0.5)).floor() as usize,
        }
    }
}

/// Why an attachment produced no content: the full story for the trace, a short note
/// for the model (no paths, commands or stack of errors), and the fallback reason.
struct Failure {
    trace: String,
    model: &'static str,
    reason: FallbackReason,
}

impl Failure {
    fn invalid(trace: String, model: &'static str) -> Self {
        Self {
            reason: FallbackReason::InvalidAttachment {
                error: trace.clone(),
            },
            trace,
            model,
        }
    }

    fn read(e: &SourceError) -> Self {
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

/// One attachment after reading.
struct Fetched {
    source: BlockSource,
    result: Result<Vec<ResourceContents>, Failure>,
    elapsed_ms: u64,
}

async fn read(mcp: &dyn McpSource, r: Resolved) -> Fetched {
    let Resolved { mut source, uri } = r;
    let uri = match uri {
        Ok(uri) => uri,
        Err(f) => {
            return Fetched {
                source,
                result: Err(f),
                elapsed_ms: 0,
            };
        }
    };
    if let Ok(listed) = mcp.list_resources(&source.server).await
        && let Some(r) = listed.iter().find(|r| r.uri == uri)
    {
        source.name = Some(r.title.clone().unwrap_or_else(|| r.name.clone()));
    }
    let started = Instant::now();
    let result = mcp
        .read_resource(&source.server, &uri)
        .await
        .map_err(|e| Failure::read(&e));
    Fetched {
        source,
        result,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Fits one converted item into what is left of the budget. Returns the block (if any
/// part of it is injected), its tokens before treatment and its treatment.
fn fit(
    converted: Converted,
    source: BlockSource,
    mime_type: Option<String>,
    remaining: &mut usize,
    tk: &Tokenizer,
    side: TruncationSide,
) -> (Option<ContextBlock>, usize, Treatment) {
    let block = |body, treatment: Treatment, before, after| ContextBlock {
        source: source.clone(),
        mime_type: mime_type.clone(),
        body,
        treatment,
        tokens_before: before,
        tokens_after: after,
    };
    match converted {
        Converted::Text(text) => {
            let tokens = tk.count(&text);
            if tokens <= *remaining {
                *remaining -= tokens;
                return (
                    Some(block(
                        BlockBody::Text { text },
                        Treatment::Whole,
                        tokens,
                        tokens,
                    )),
                    tokens,
                    Treatment::Whole,
                );
            }
            match tk.truncate(&text, *remaining, side) {
                Some(t) => {
                    *remaining -= t.tokens;
                    let treatment = Treatment::Truncated {
                        side,
                        omitted_tokens: t.omitted_tokens,
                    };
                    (
                        Some(block(
                            BlockBody::Text { text: t.text },
                            treatment.clone(),
                            tokens,
                            t.tokens,
                        )),
                        tokens,
                        treatment,
                    )
                }
                None => (None, tokens, Treatment::Omitted),
            }
        }
        Converted::Image {
            mime_type: m,
            data,
            width,
            height,
        } => {
            let cost = image_tokens(width, height);
            if cost <= *remaining {
                *remaining -= cost;
                let body = BlockBody::Image {
                    mime_type: m,
                    data,
                    width,
                    height,
                };
                (
                    Some(block(body, Treatment::Whole, cost, cost)),
                    cost,
                    Treatment::Whole,
                )
            } else {
                let note = format!(
                    "[image resource {} ({width}×{height} px) not shown: no token budget left]",
                    source.uri
                );
                fit_note(note, FallbackReason::NoBudget, cost, remaining, tk, &block)
            }
        }
        Converted::Fallback { reason, note } => fit_note(note, reason, 0, remaining, tk, &block),
    }
}

fn fit_note(
    note: String,
    reason: FallbackReason,
    before: usize,
    remaining: &mut usize,
    tk: &Tokenizer,
    block: &dyn Fn(BlockBody, Treatment, usize, usize) -> ContextBlock,
) -> (Option<ContextBlock>, usize, Treatment) {
    let cost = tk.count(&note);
    if cost > *remaining {
        return (None, before, Treatment::Omitted);
    }
    *remaining -= cost;
    (
        Some(block(
            BlockBody::Fallback { reason, note },
            Treatment::Omitted,
            before,
            cost,
        )),
        before,
        Treatment::Omitted,
    )
}

#[async_trait]
impl Stage for ResourceContextInjection {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let tk = Tokenizer::new(turn.model.encoding).map_err(|e| StageError::msg(e.to_string()))?;
        let budget = self.budget(turn, &tk);
        let mut attachments: Vec<&Attachment> = self
            .attachments
            .iter()
            .chain(turn.attachments.iter())
            .collect();
        // Narrower scope first; stable, so attachment order holds within a scope.
        attachments.sort_by_key(|a| std::cmp::Reverse(a.scope));
        let mut resolved: Vec<Resolved> = Vec::with_capacity(attachments.len());
        for a in attachments {
            let r = resolve(turn, a);
            if let Ok(uri) = &r.uri
                && resolved.iter().any(|o| {
                    o.source.server == r.source.server && o.uri.as_ref().is_ok_and(|u| u == uri)
                })
            {
                turn.trace.warn(format!(
                    "{uri} from `{}` is attached more than once; read once",
                    r.source.server
                ));
                continue;
            }
            resolved.push(r);
        }
        let fetched = futures_util::future::join_all(
            resolved.into_iter().map(|r| read(self.mcp.as_ref(), r)),
        )
        .await;
        let model: Arc<ModelProfile> = Arc::clone(&turn.model);
        let side = self.config.truncate;
        let mut remaining = budget;
        let mut blocks: Vec<ContextBlock> = Vec::new();
        let mut records = Vec::new();
        let mut warnings = Vec::new();
        let mut seen_text: Vec<(String, u64)> = Vec::new();
        for f in fetched {
            let items = match f.result {
                Ok(items) => items,
                Err(failure) => {
                    let note = format!(
                        "[resource {} from `{}` not included: {}]",
                        f.source.uri, f.source.server, failure.model
                    );
                    let converted = Converted::Fallback {
                        reason: failure.reason,
                        note,
                    };
                    let (block, _, treatment) =
                        fit(converted, f.source.clone(), None, &mut remaining, &tk, side);
                    records.push(ReadRecord {
                        server: f.source.server.clone(),
                        uri: f.source.uri.clone(),
                        scope: f.source.scope,
                        bytes: 0,
                        tokens_before: 0,
                        tokens_after: block.as_ref().map_or(0, |b| b.tokens_after),
                        treatment,
                        elapsed_ms: f.elapsed_ms,
                        error: Some(failure.trace),
                    });
                    blocks.extend(block);
                    continue;
                }
            };
            if items.is_empty() {
                warnings.push(format!(
                    "resources/read of {} on `{}` returned no contents",
                    f.source.uri, f.source.server
                ));
            }
            for item in items {
                let mut source = f.source.clone();
                item.uri().clone_into(&mut source.uri);
                let bytes = item.byte_len();
                let mime = item.mime_type().map(str::to_owned);
                let converted = convert(item, &model);
                if let Converted::Text(text) = &converted {
                    let hash = content_hash(text);
                    if let Some((first, _)) = seen_text.iter().find(|(_, h)| *h == hash) {
                        warnings.push(format!(
                            "{} from `{}` has the same text as {first}; injected once",
                            source.uri, source.server
                        ));
                        continue;
                    }
                    seen_text.push((source.uri.clone(), hash));
                }
                let (block, before, treatment) =
                    fit(converted, source.clone(), mime, &mut remaining, &tk, side);
                if block.is_none() {
                    let size = if before > 0 {
                        format!(" ({before} tokens)")
                    } else {
                        String::new()
                    };
                    warnings.push(format!(
                        "{} from `{}` left out{size}: nothing of the {budget}-token budget was left for it",
                        source.uri, source.server
                    ));
                }
                records.push(ReadRecord {
                    server: source.server.clone(),
                    uri: source.uri.clone(),
                    scope: source.scope,
                    bytes,
                    tokens_before: before,
                    tokens_after: block.as_ref().map_or(0, |b| b.tokens_after),
                    treatment,
                    elapsed_ms: f.elapsed_ms,
                    error: None,
                });
                blocks.extend(block);
            }
        }
        for r in records {
            turn.trace.record(TraceEvent::ResourceRead(r));
        }
        for w in warnings {
            turn.trace.warn(w);
        }
        turn.context.extend(blocks);
        turn.context_budget = Some(budget);
        Ok(StageOutcome::Continue)
    }
}

/// FNV-1a over the text: a cheap fingerprint to spot the same document under two URIs.
fn content_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: InjectConfig = parse_section(section)?;
    Ok(Box::new(ResourceContextInjection::new(
        config,
        Arc::clone(&ctx.mcp),
    )?))
}

hostpipe_core::submit_stage! {
    name: ResourceContextInjection::NAME,
    phase: StagePhase::Context,
    priority: 0,
    description: "Reads attached MCP resources and fits them into the token budget.",
    build: build,
}
