//! `resource_context_injection`: reads the attached resources and fits them into the
//! turn's token budget.
//!
//! 1. Attachments at pipeline scope (config) and message or conversation scope (on the
//!    [`Turn`]), static URIs or RFC 6570 templates, are resolved and de-duplicated.
//! 2. The listing supplies each resource's annotations, size and MIME type. Resources
//!    whose `annotations.audience` is only `["user"]` never go to the model; MIME types
//!    outside the policy and resources over the byte limit are not read.
//! 3. Attachments are put in order: scope (message > conversation > pipeline), then
//!    `annotations.priority` (1.0 or `must = true`: must include), then `lastModified`
//!    (newer first), then attachment order. The order breaks ties; relevance decides.
//! 4. All reads run concurrently; contents are converted by MIME type ([`convert`]).
//! 5. [`crate::fit`] fits them into the budget: whole when everything fits, else the
//!    passages of all texts in one ranking against the message (and recent history).
//!    The injected total never exceeds the budget.
//!
//! [`convert`]: crate::convert

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, BlockSource, BuildContext, ConfigError,
    FallbackReason, McpSource, ReadOrigin, ReadRecord, ResourceContents, ResourceRead, Role, Scope,
    SourceError, Stage, StageError, StageOutcome, StagePhase, TemplateRef, Tokenizer, TraceEvent,
    TruncationSide, Turn,
};
use serde::Deserialize;

use crate::config::parse_section;
use crate::convert::{ConvertLimits, Converted};
use crate::fit::{Caches, FitOptions, FitQuery, Item, Strategy, content_hash, fit};
use crate::lexical::{Analyzer, Language};
use crate::reader::{Listed, ReadPolicy, convert_item};
use crate::retrieval::Retrieval;
use crate::summarize::ExtractiveSummarizer;
use crate::uri_template;
use hostpipe_core::Summarizer;

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
    /// How to shrink it when it does not fit; default: the section's `strategy`.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// Served before every other attachment, as MCP `annotations.priority` 1.0 is: whole
    /// if it fits, else its best passages first. Default false.
    #[serde(default)]
    pub must: bool,
}

/// Config section `[pipelines.ID.resource_context_injection]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InjectConfig {
    /// The budget in tokens. Never more than the model has left for input (context
    /// window minus reserved output, system prompt, history, message and the bound
    /// servers' tool definitions): a larger value is lowered to that, with a trace
    /// warning.
    pub budget_tokens: Option<usize>,
    /// Instead of `budget_tokens`: this share, in (0, 1], of what the model has left for
    /// input. Default (when neither is given) 0.5.
    pub budget_share: Option<f64>,
    /// Default strategy for texts that do not fit whole. Default `auto`.
    pub strategy: Strategy,
    /// Which part a truncation keeps. Default `head`.
    pub truncate: TruncationSide,
    /// Largest passage a text is cut into for ranking, in tokens (estimated from bytes,
    /// see docs/configuration.md, "How resources are fitted"): a section larger than
    /// this is cut at block, then sentence boundaries. Passages are the same at every
    /// budget. Default 384.
    pub passage_tokens: Option<usize>,
    /// The old name of `passage_tokens` (before passages were cut from structure).
    pub chunk_tokens: Option<usize>,
    /// Below this many tokens a summary or truncation is not worth sending: lower-ranked
    /// texts are left out instead of cut to scraps. Default 64.
    pub min_block_tokens: usize,
    /// Language of the lexical ranking's stemmer and stop words (Snowball: `english`,
    /// `french`, `german`, `spanish`, `russian`, …). CJK text is ranked by character
    /// bigrams whatever the language. Default `english`.
    pub language: Language,
    /// How many recent user messages of the history join the query (for follow-ups
    /// such as "and its timeout?"); messages without terms ("thanks", "ok") do not count
    /// (among the last 10). Default 2; 0 ranks by the message alone.
    pub history_messages: usize,
    /// Weight of a term of the most recent history message against a message term (1);
    /// each older message weighs half the one after it. Default 0.3.
    pub history_weight: f64,
    /// Dense retrieval: the name of an `[embedders.NAME]` whose similarity order is fused
    /// with the lexical one (reciprocal rank fusion). Default none.
    pub embedder: Option<String>,
    /// Reranking: the name of a `[rerankers.NAME]` that reorders the first
    /// `rerank_top` passages. Default none.
    pub reranker: Option<String>,
    /// How many of the first passages the reranker reorders. Default 20.
    pub rerank_top: usize,
    /// Most passages embedded in one turn (the lexically best first). Default 2048.
    pub max_embedded_passages: usize,
    /// Summarizer: `extractive` (the default; picks sentences, needs no model), `none`
    /// (`auto` goes from chunk straight to truncate), or the name of a configured one
    /// (e.g. an OpenAI-compatible model).
    pub summarizer: String,
    /// Largest resource read, in bytes (the listing's `size` is checked before the read,
    /// the content after). Default 8 MiB.
    pub max_resource_bytes: usize,
    /// Most bytes read in one turn. Default 32 MiB.
    pub max_turn_bytes: usize,
    /// MIME types allowed (`type/subtype` or `type/*`); empty allows all.
    pub mime_allow: Vec<String>,
    /// MIME types refused (`type/subtype` or `type/*`); wins over `mime_allow`.
    pub mime_deny: Vec<String>,
    /// Largest image decoded, in pixels (width × height). Default 40 000 000.
    pub max_image_pixels: u64,
    /// Most passages kept from one resource. Default 32.
    pub max_passages_per_resource: Option<usize>,
    /// The old name of `max_passages_per_resource`.
    pub max_chunks_per_resource: Option<usize>,
    /// Pipeline-scope attachments.
    pub attachments: Vec<AttachmentConfig>,
}

impl Default for InjectConfig {
    fn default() -> Self {
        Self {
            budget_tokens: None,
            budget_share: None,
            strategy: Strategy::Auto,
            truncate: TruncationSide::Head,
            passage_tokens: None,
            chunk_tokens: None,
            min_block_tokens: 64,
            language: Language::English,
            history_messages: 2,
            history_weight: 0.3,
            embedder: None,
            reranker: None,
            rerank_top: 20,
            max_embedded_passages: 2048,
            summarizer: "extractive".into(),
            max_resource_bytes: 8 * 1024 * 1024,
            max_turn_bytes: 32 * 1024 * 1024,
            mime_allow: Vec::new(),
            mime_deny: Vec::new(),
            max_image_pixels: ConvertLimits::default().max_image_pixels,
            max_passages_per_resource: None,
            max_chunks_per_resource: None,
            attachments: Vec::new(),
        }
    }
}

impl InjectConfig {
    /// The rules for resources that reach the model ([`ReadPolicy`]): they hold for the
    /// model's own reads too.
    pub fn read_policy(&self) -> ReadPolicy {
        ReadPolicy {
            mime_allow: self.mime_allow.clone(),
            mime_deny: self.mime_deny.clone(),
            max_resource_bytes: self.max_resource_bytes,
            max_turn_bytes: self.max_turn_bytes,
            limits: ConvertLimits {
                max_image_pixels: self.max_image_pixels,
                ..ConvertLimits::default()
            },
        }
    }

    /// Whether the MIME policy lets `mime` through.
    pub fn mime_allowed(&self, mime: &str) -> bool {
        self.read_policy().mime_allowed(mime)
    }
}

/// How many recent user messages are looked at for the `history_messages` with terms.
const HISTORY_LOOKBACK: usize = 10;

/// What a configured attachment adds to its target.
#[derive(Debug, Clone, Copy, Default)]
struct Options {
    strategy: Option<Strategy>,
    must: bool,
}

/// Reads attached resources into [`hostpipe_core::ContextBlock`]s within a token budget.
pub struct ResourceContextInjection {
    config: InjectConfig,
    attachments: Vec<(Attachment, Options)>,
    mcp: Arc<dyn McpSource>,
    fit: FitOptions,
    /// Published in every turn's extensions, for the model's own reads.
    policy: Arc<ReadPolicy>,
}

impl ResourceContextInjection {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "resource_context_injection";

    /// The default `passage_tokens`.
    pub const PASSAGE_TOKENS: usize = 384;

    /// The default `max_passages_per_resource`.
    pub const MAX_PASSAGES: usize = 32;

    /// Checks `config` against the configured servers.
    ///
    /// # Errors
    /// [`ConfigError`] at `attachments[i]…` for an unknown server, neither or both of
    /// `uri` and `template`, an invalid template, a template variable without an
    /// argument or an argument the template does not have; at `budget_share` for a
    /// share outside (0, 1] or given with `budget_tokens`; at `passage_tokens` under 16;
    /// at `history_weight` outside [0, 1]; at `summarizer`, `embedder` or `reranker` for
    /// a name `ctx` does not have (the error lists the names it has).
    pub fn new(config: InjectConfig, ctx: &BuildContext) -> Result<Self, ConfigError> {
        let mcp = Arc::clone(&ctx.mcp);
        let summarizers = &ctx.summarizers;
        if let Some(share) = config.budget_share {
            if config.budget_tokens.is_some() {
                return Err(ConfigError::new(
                    "budget_share",
                    "give `budget_tokens` or `budget_share`, not both",
                ));
            }
            if !(share.is_finite() && share > 0.0 && share <= 1.0) {
                return Err(ConfigError::new(
                    "budget_share",
                    format!("{share} is not in (0, 1]"),
                ));
            }
        }
        fn renamed(
            new: &'static str,
            value: Option<usize>,
            old: &'static str,
            old_value: Option<usize>,
        ) -> Result<(Option<usize>, &'static str), ConfigError> {
            match (value, old_value) {
                (Some(_), Some(_)) => Err(ConfigError::new(
                    old,
                    format!("`{old}` is the old name of `{new}`: give `{new}` only"),
                )),
                (v, o) => Ok((v.or(o), if o.is_some() { old } else { new })),
            }
        }
        let (passage_tokens, key) = renamed(
            "passage_tokens",
            config.passage_tokens,
            "chunk_tokens",
            config.chunk_tokens,
        )?;
        let passage_tokens = passage_tokens.unwrap_or(Self::PASSAGE_TOKENS);
        if passage_tokens < 16 {
            return Err(ConfigError::new(
                key,
                format!("{passage_tokens} is too small: at least 16"),
            ));
        }
        let (max_passages, key) = renamed(
            "max_passages_per_resource",
            config.max_passages_per_resource,
            "max_chunks_per_resource",
            config.max_chunks_per_resource,
        )?;
        let max_passages = max_passages.unwrap_or(Self::MAX_PASSAGES);
        if max_passages == 0 {
            return Err(ConfigError::new(key, "must be at least 1"));
        }
        if !(config.history_weight.is_finite() && (0.0..=1.0).contains(&config.history_weight)) {
            return Err(ConfigError::new(
                "history_weight",
                format!("{} is not in [0, 1]", config.history_weight),
            ));
        }
        let known: Vec<String> = mcp.servers().into_iter().map(|s| s.name).collect();
        let mut attachments = Vec::with_capacity(config.attachments.len());
        for (i, a) in config.attachments.iter().enumerate() {
            let at =
                |k: &str| format!("attachments[{i}]{}{k}", if k.is_empty() { "" } else { "." });
            if !known.contains(&a.server) {
                let e = SourceError::UnknownServer {
                    server: a.server.clone(),
                    known: known.clone(),
                };
                return Err(ConfigError::new(at("server"), e.to_string()));
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
            attachments.push((
                Attachment {
                    server: a.server.clone(),
                    target,
                    scope: Scope::Pipeline,
                },
                Options {
                    strategy: a.strategy,
                    must: a.must,
                },
            ));
        }
        let summarizer: Option<Arc<dyn Summarizer>> = match config.summarizer.as_str() {
            "extractive" => Some(Arc::new(ExtractiveSummarizer)),
            "none" => None,
            name => match summarizers.get(name) {
                Some(s) => Some(Arc::clone(s)),
                None => {
                    let mut known = vec!["extractive", "none"];
                    known.extend(summarizers.keys().map(String::as_str));
                    return Err(ConfigError::new(
                        "summarizer",
                        format!("unknown summarizer `{name}`; known: {}", known.join(", ")),
                    ));
                }
            },
        };
        let named = |key: &str, name: &str, known: Vec<&String>| {
            let known: Vec<&str> = known.into_iter().map(String::as_str).collect();
            ConfigError::new(
                key,
                format!(
                    "unknown {key} `{name}`; configured: {} (see [{key}s.NAME])",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        };
        let embedder = match &config.embedder {
            None => None,
            Some(name) => {
                Some(Arc::clone(ctx.embedders.get(name).ok_or_else(|| {
                    named("embedder", name, ctx.embedders.keys().collect())
                })?))
            }
        };
        let reranker = match &config.reranker {
            None => None,
            Some(name) => {
                Some(Arc::clone(ctx.rerankers.get(name).ok_or_else(|| {
                    named("reranker", name, ctx.rerankers.keys().collect())
                })?))
            }
        };
        if config.rerank_top == 0 {
            return Err(ConfigError::new("rerank_top", "must be at least 1"));
        }
        let retrieval = (embedder.is_some() || reranker.is_some()).then(|| {
            Arc::new(Retrieval {
                embedder,
                reranker,
                rerank_top: config.rerank_top,
                max_embedded: config.max_embedded_passages,
                failed_at: Default::default(),
            })
        });
        let fit = FitOptions {
            truncate: config.truncate,
            passage_tokens,
            min_block_tokens: config.min_block_tokens,
            max_passages,
            history_messages: config.history_messages,
            history_weight: config.history_weight,
            summarizer,
            analyzer: Arc::new(Analyzer::new(config.language)),
            retrieval,
            caches: Arc::new(Caches::default()),
        };
        Ok(Self {
            policy: Arc::new(config.read_policy()),
            config,
            attachments,
            mcp,
            fit,
        })
    }

    /// The turn's budget in tokens: `budget_tokens`, or `budget_share` (default 0.5) of
    /// what the model has left for input; never more than what it has left.
    async fn budget(&self, turn: &mut Turn, tk: &Tokenizer) -> usize {
        let mut used = turn.system_prompt.as_deref().map_or(0, |s| tk.count(s))
            + turn
                .history
                .iter()
                .map(|m| tk.count(&m.text))
                .sum::<usize>()
            + tk.count(&turn.message.text);
        // The tool definitions of the bound servers will be sent too.
        let connected: Vec<String> = turn.connected_servers().map(str::to_owned).collect();
        for server in connected {
            if let Ok(tools) = self.mcp.list_tools(&server).await {
                for t in tools.iter() {
                    used += tk.count(&t.name)
                        + t.description.as_deref().map_or(0, |d| tk.count(d))
                        + tk.count(&t.input_schema.to_string());
                }
            }
        }
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
struct Planned {
    source: BlockSource,
    uri: Result<String, Failure>,
    listed: Listed,
    strategy: Strategy,
    /// Marked `must` in the config (or priority 1.0 in the listing, see [`Planned::must`]).
    must: bool,
    /// The widest scope it was marked `must` at: a must the pipeline's config made leaves
    /// room for the user's own attachments even when the user attached it too.
    must_scope: Scope,
    /// Contents that came with the attachment (nothing to read).
    embedded: Option<ResourceContents>,
    /// The consent decision, when the pipeline has a policy.
    consent: Option<String>,
}

/// One attachment after reading.
struct Fetched {
    planned: Planned,
    result: Result<ResourceRead, Failure>,
    elapsed_ms: u64,
}

/// Reads one planned attachment, giving up at the turn's `deadline` (dropping the read
/// cancels the MCP request).
async fn read(mcp: &dyn McpSource, planned: Planned, deadline: Option<Instant>) -> Fetched {
    let uri = match &planned.uri {
        Ok(uri) => uri.clone(),
        Err(_) => {
            return Fetched {
                planned,
                result: Ok(ResourceRead::fresh(Vec::new())),
                elapsed_ms: 0,
            };
        }
    };
    if let Some(contents) = &planned.embedded {
        let read = ResourceRead::fresh(vec![contents.clone()]);
        return Fetched {
            planned,
            result: Ok(read),
            elapsed_ms: 0,
        };
    }
    let started = Instant::now();
    let reading = mcp.read_resource(&planned.source.server, &uri);
    let result = match deadline {
        Some(d) => match tokio::time::timeout_at(d.into(), reading).await {
            Ok(r) => r.map_err(|e| Failure::read(&e)),
            Err(_) => Err(Failure {
                trace: format!(
                    "dropped: the turn's deadline passed after {} ms, before resources/read answered (the request was cancelled)",
                    started.elapsed().as_millis()
                ),
                model: "the server did not answer in time",
                reason: FallbackReason::ReadFailed {
                    error: "the turn's deadline passed".into(),
                },
            }),
        },
        None => reading.await.map_err(|e| Failure::read(&e)),
    };
    Fetched {
        planned,
        result,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

fn record(
    source: &BlockSource,
    mime: Option<String>,
    bytes: usize,
    elapsed_ms: u64,
    error: Option<String>,
) -> ReadRecord {
    ReadRecord {
        server: source.server.clone(),
        uri: source.uri.clone(),
        mime_type: mime,
        scope: source.scope,
        bytes,
        tokens_before: 0,
        tokens_estimated: false,
        tokens_after: 0,
        treatment: hostpipe_core::Treatment::Omitted,
        elapsed_ms,
        cache_hit: false,
        error,
        origin: hostpipe_core::ReadOrigin::Host,
        consent: None,
        passages: Vec::new(),
        reason: None,
    }
}

#[async_trait]
impl Stage for ResourceContextInjection {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        // The model's own reads (`read_resource`) follow the same rules.
        turn.extensions.insert(Arc::clone(&self.policy));
        // A turn that only calls a tool has no message to answer: nothing is read.
        if turn.extensions.get::<hostpipe_core::ToolsOnly>().is_some() {
            return Ok(StageOutcome::Continue);
        }
        let tk = Tokenizer::new(turn.model.encoding).map_err(|e| StageError::msg(e.to_string()))?;
        let budget = self.budget(turn, &tk).await;
        turn.context_budget = Some(budget);

        // Resolve, de-duplicate and look up every attachment.
        let message_attachments: Vec<(Attachment, Options)> = turn
            .attachments
            .iter()
            .map(|a| (a.clone(), Options::default()))
            .collect();
        let mut planned: Vec<Planned> = Vec::new();
        let mut all: Vec<&(Attachment, Options)> = self
            .attachments
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
            }
            if let Ok(u) = &uri
                && let Some(kept) = planned.iter_mut().find(|p| {
                    p.source.server == source.server && p.uri.as_ref().is_ok_and(|o| o == u)
                })
            {
                // The same resource at two scopes (a pin that repeats the pipeline's
                // config, a mention of a pinned resource) is expected; twice at one
                // scope is a mistake worth a warning.
                let twice_here = attached
                    .iter()
                    .filter(|(s, o, sc)| s == &source.server && o == u && *sc == source.scope)
                    .count()
                    > 1;
                if twice_here {
                    turn.trace.warn(format!(
                        "{u} from `{}` is attached more than once at {} scope; read once",
                        source.server,
                        source.scope.as_str()
                    ));
                } else {
                    turn.trace.note(format!(
                        "{u} from `{}` is attached at {} and {} scope; read once, at {} scope",
                        source.server,
                        kept.source.scope.as_str(),
                        source.scope.as_str(),
                        kept.source.scope.as_str()
                    ));
                }
                // A `must` at any scope holds for the one read.
                if options.must {
                    kept.must_scope = if kept.must {
                        kept.must_scope.min(source.scope)
                    } else {
                        source.scope
                    };
                    kept.must = true;
                }
                continue;
            }
            let embedded = match &a.target {
                AttachmentTarget::Embedded { contents } => Some(contents.clone()),
                _ => None,
            };
            let listed = match &uri {
                Ok(u) if embedded.is_none() => {
                    Listed::of(
                        self.mcp.as_ref(),
                        &source.server,
                        u,
                        source.template.as_ref(),
                    )
                    .await
                }
                _ => Listed::default(),
            };
            planned.push(Planned {
                must_scope: source.scope,
                source,
                uri,
                listed,
                strategy: options.strategy.unwrap_or(self.config.strategy),
                must: options.must,
                embedded,
                consent: None,
            });
        }
        // Consent before any read: a withheld read never reaches the server, and the
        // model is told it was withheld (docs/consent.md).
        if turn.consent.is_some() {
            for p in &mut planned {
                // Embedded contents (a prompt's resources) were sent without a read, but
                // they still only reach the model if the policy allows them.
                let uri = match &p.uri {
                    Ok(uri) => uri.clone(),
                    _ => continue,
                };
                let reason = if p.embedded.is_some() {
                    "embedded in a prompt's messages".to_owned()
                } else {
                    format!("attached at {} scope", p.source.scope.as_str())
                };
                let Some(verdict) = turn
                    .consent_for(&p.source.server, &uri, ReadOrigin::Host, reason)
                    .await
                else {
                    continue;
                };
                if !verdict.allowed {
                    p.uri = Err(Failure {
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
        // Policy before any read: audience, MIME type, size.
        let mut records = Vec::new();
        planned.retain(|p| match self.policy.refuse_listed(&p.listed) {
            Some(why) => {
                records.push(record(
                    &p.source,
                    p.listed.meta.listed_mime.clone(),
                    0,
                    0,
                    Some(format!("not read: {why}")),
                ));
                false
            }
            None => true,
        });
        // Rank: scope, then priority, then lastModified (newer first); stable.
        planned.sort_by(|a, b| {
            let p = |x: &Planned| x.listed.priority();
            let t = |x: &Planned| x.listed.last_modified_ms();
            b.source
                .scope
                .cmp(&a.source.scope)
                .then(p(b).total_cmp(&p(a)))
                .then(t(b).cmp(&t(a)))
        });
        let fetched = if budget == 0 {
            turn.trace
                .warn("the resource budget is 0 tokens: nothing was read");
            Vec::new()
        } else {
            let deadline = turn.deadline;
            futures_util::future::join_all(
                planned
                    .into_iter()
                    .map(|p| read(self.mcp.as_ref(), p, deadline)),
            )
            .await
        };

        // Convert.
        let model = Arc::clone(&turn.model);
        let mut items = Vec::new();
        let mut item_records = Vec::new();
        let mut turn_bytes = 0usize;
        let mut seen: Vec<(u64, String)> = Vec::new();
        for f in fetched {
            let Fetched {
                planned: p,
                result,
                elapsed_ms,
            } = f;
            let must = p.must || p.listed.priority() >= 1.0;
            let must_scope = if p.must { p.must_scope } else { p.source.scope };
            let priority = p.listed.priority();
            let failure = match (&p.uri, result) {
                (Err(failure), _) => Err(Failure {
                    trace: failure.trace.clone(),
                    model: failure.model,
                    reason: failure.reason.clone(),
                }),
                (Ok(_), Err(failure)) => Err(failure),
                (Ok(_), Ok(contents)) => Ok(contents),
            };
            let (contents, cache_hit) = match failure {
                Ok(read) => (read.contents, read.cache_hit),
                Err(failure) => {
                    let note = match failure.reason {
                        // Not "not included": the model must not conclude it does not exist.
                        FallbackReason::Withheld { .. } => format!(
                            "[resource {} from `{}` withheld: reading it was not allowed]",
                            p.source.uri, p.source.server
                        ),
                        _ => format!(
                            "[resource {} from `{}` not included: {}]",
                            p.source.uri, p.source.server, failure.model
                        ),
                    };
                    let mut r = record(&p.source, None, 0, elapsed_ms, Some(failure.trace));
                    r.consent.clone_from(&p.consent);
                    item_records.push(r);
                    items.push(Item {
                        source: p.source,
                        mime_type: None,
                        converted: Converted::Fallback {
                            reason: failure.reason,
                            note,
                        },
                        must,
                        must_scope,
                        priority,
                        strategy: p.strategy,
                        text_hash: None,
                    });
                    continue;
                }
            };
            if contents.is_empty() {
                turn.trace.warn(format!(
                    "resources/read of {} on `{}` returned no contents",
                    p.source.uri, p.source.server
                ));
            }
            for item in contents.iter().cloned() {
                let mut source = p.source.clone();
                item.uri().clone_into(&mut source.uri);
                // A server may answer with items under other URIs: each is judged on its
                // own, so an item labelled with a denied URI never reaches the model.
                let other_uri = p.uri.as_deref().is_ok_and(|u| u != item.uri());
                let item_consent = if other_uri {
                    turn.consent_for(
                        &source.server,
                        item.uri(),
                        ReadOrigin::Host,
                        format!("returned by the read of {}", p.source.uri),
                    )
                    .await
                } else {
                    None
                };
                if let Some(v) = item_consent.as_ref().filter(|v| !v.allowed) {
                    let mut r = record(
                        &source,
                        item.mime_type().map(str::to_owned),
                        0,
                        elapsed_ms,
                        Some(format!("withheld: {}", v.how)),
                    );
                    r.consent = Some(v.how.clone());
                    item_records.push(r);
                    let note = format!(
                        "[resource {} from `{}` withheld: reading it was not allowed]",
                        source.uri, source.server
                    );
                    items.push(Item {
                        source,
                        mime_type: None,
                        converted: Converted::Fallback {
                            reason: FallbackReason::Withheld {
                                decision: v.how.clone(),
                            },
                            note,
                        },
                        must,
                        must_scope,
                        priority,
                        strategy: p.strategy,
                        text_hash: None,
                    });
                    continue;
                }
                source.name.clone_from(&p.listed.meta.name);
                let bytes = item.byte_len();
                let mime = item
                    .mime_type()
                    .map(str::to_owned)
                    .or_else(|| p.listed.meta.listed_mime.clone());
                turn_bytes += bytes;
                let refused = self.policy.refuse_item(bytes, turn_bytes, mime.as_deref());
                let converted = match refused {
                    Some(error) => {
                        let note = format!(
                            "[resource {} from `{}` not included: too large or not allowed]",
                            source.uri, source.server
                        );
                        Converted::Refused { error, note }
                    }
                    None => convert_item(item, &p.listed.meta, &model, &self.policy.limits).await,
                };
                let mut text_hash = None;
                if let Converted::Text(text) = &converted {
                    let h = content_hash(text);
                    text_hash = Some(h);
                    if let Some((_, first)) = seen.iter().find(|(x, _)| *x == h) {
                        turn.trace.warn(format!(
                            "{} from `{}` has the same text as {first}; injected once",
                            source.uri, source.server
                        ));
                        continue;
                    }
                    seen.push((h, source.uri.clone()));
                }
                let mut r = record(&source, mime.clone(), bytes, elapsed_ms, None);
                r.cache_hit = cache_hit;
                r.consent.clone_from(&p.consent);
                item_records.push(r);
                items.push(Item {
                    source,
                    mime_type: mime,
                    converted,
                    must,
                    must_scope,
                    priority,
                    strategy: p.strategy,
                    text_hash,
                });
            }
        }

        // Fit.
        // Recent user messages join the query of a follow-up, most recent first.
        let history: Vec<&str> = turn
            .history
            .iter()
            .rev()
            .filter(|m| m.role == Role::User)
            .take(HISTORY_LOOKBACK)
            .map(|m| m.text.as_str())
            .collect();
        let query = FitQuery {
            message: &turn.message.text,
            history: &history,
        };
        let outcome = fit(items, budget, query, &tk, &self.fit).await;
        for (f, mut r) in outcome.fitted.into_iter().zip(item_records) {
            r.tokens_before = f.tokens_before;
            r.tokens_estimated = f.estimated;
            r.tokens_after = f.block.as_ref().map_or(0, |b| b.tokens_after);
            r.treatment = f.treatment;
            r.passages = f.passages;
            r.reason = f.reason;
            if let Some(w) = f.warning {
                if r.error.is_none() && f.refused {
                    r.error = Some(w.clone());
                }
                turn.trace.warn(w);
            }
            records.push(r);
            turn.context.extend(f.block);
        }
        for w in outcome.warnings {
            turn.trace.warn(w);
        }
        for n in outcome.notes {
            turn.trace.note(n);
        }
        for r in records {
            turn.trace.record(TraceEvent::ResourceRead(r));
        }
        Ok(StageOutcome::Continue)
    }
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: InjectConfig = parse_section(section)?;
    Ok(Box::new(ResourceContextInjection::new(config, ctx)?))
}

hostpipe_core::submit_stage! {
    name: ResourceContextInjection::NAME,
    phase: StagePhase::Context,
    priority: 0,
    description: "Reads attached MCP resources and fits them into the token budget.",
    build: build,
}
