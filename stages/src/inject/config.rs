//! The config section `[pipelines.ID.resource_context_injection]`, checked once against
//! what the pipeline is built with ([`InjectConfig::check`]) into what the stage runs on.

use std::collections::BTreeMap;
use std::sync::Arc;

use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, BuildContext, ConfigError, Scope, SourceError,
    Summarizer, TruncationSide,
};
use serde::Deserialize;

use crate::attachment::AttachmentSpec;
use crate::convert::ConvertLimits;
use crate::fit::retrieval::Retrieval;
use crate::fit::{Caches, FitOptions, Strategy};
use crate::lexical::{Analyzer, Language};
use crate::reader::ReadPolicy;
use crate::summarize::ExtractiveSummarizer;

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

impl AttachmentConfig {
    /// The server and target, as every front end names an attachment (checked by
    /// [`AttachmentTarget::try_from`]).
    pub fn spec(&self) -> AttachmentSpec {
        AttachmentSpec {
            server: self.server.clone(),
            uri: self.uri.clone(),
            template: self.template.clone(),
            arguments: self.arguments.clone(),
        }
    }
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

/// The default `passage_tokens`.
pub(super) const PASSAGE_TOKENS: usize = 384;

/// The default `max_passages_per_resource`.
pub(super) const MAX_PASSAGES: usize = 32;

/// What a configured attachment adds to its target.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Options {
    pub(super) strategy: Option<Strategy>,
    pub(super) must: bool,
}

/// The config, checked: the pipeline-scope attachments and the fitting options.
pub(super) struct Checked {
    pub(super) attachments: Vec<(Attachment, Options)>,
    pub(super) fit: FitOptions,
}

impl InjectConfig {
    /// Checks the section against what `ctx` has (servers, summarizers, embedders,
    /// rerankers); see [`crate::ResourceContextInjection::new`] for the errors.
    pub(super) fn check(&self, ctx: &BuildContext) -> Result<Checked, ConfigError> {
        self.check_budget()?;
        let (passage_tokens, key) = renamed(
            "passage_tokens",
            self.passage_tokens,
            "chunk_tokens",
            self.chunk_tokens,
        )?;
        let passage_tokens = passage_tokens.unwrap_or(PASSAGE_TOKENS);
        if passage_tokens < 16 {
            return Err(ConfigError::new(
                key,
                format!("{passage_tokens} is too small: at least 16"),
            ));
        }
        let (max_passages, key) = renamed(
            "max_passages_per_resource",
            self.max_passages_per_resource,
            "max_chunks_per_resource",
            self.max_chunks_per_resource,
        )?;
        let max_passages = max_passages.unwrap_or(MAX_PASSAGES);
        if max_passages == 0 {
            return Err(ConfigError::new(key, "must be at least 1"));
        }
        if !(self.history_weight.is_finite() && (0.0..=1.0).contains(&self.history_weight)) {
            return Err(ConfigError::new(
                "history_weight",
                format!("{} is not in [0, 1]", self.history_weight),
            ));
        }
        let known: Vec<String> = ctx.mcp.servers().into_iter().map(|s| s.name).collect();
        let attachments = self
            .attachments
            .iter()
            .enumerate()
            .map(|(i, a)| attachment(i, a, &known))
            .collect::<Result<Vec<_>, _>>()?;
        let summarizer = summarizer(&self.summarizer, &ctx.summarizers)?;
        let retrieval = self.retrieval(ctx)?;
        Ok(Checked {
            attachments,
            fit: FitOptions {
                truncate: self.truncate,
                passage_tokens,
                min_block_tokens: self.min_block_tokens,
                max_passages,
                history_messages: self.history_messages,
                history_weight: self.history_weight,
                summarizer,
                analyzer: Arc::new(Analyzer::new(self.language)),
                retrieval,
                caches: Arc::new(Caches::default()),
            },
        })
    }

    /// `budget_share` in (0, 1], and not with `budget_tokens`.
    fn check_budget(&self) -> Result<(), ConfigError> {
        let Some(share) = self.budget_share else {
            return Ok(());
        };
        if self.budget_tokens.is_some() {
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
        Ok(())
    }

    /// The embedder and reranker by name, when either is configured.
    fn retrieval(&self, ctx: &BuildContext) -> Result<Option<Arc<Retrieval>>, ConfigError> {
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
        let embedder = match &self.embedder {
            None => None,
            Some(name) => {
                Some(Arc::clone(ctx.embedders.get(name).ok_or_else(|| {
                    named("embedder", name, ctx.embedders.keys().collect())
                })?))
            }
        };
        let reranker = match &self.reranker {
            None => None,
            Some(name) => {
                Some(Arc::clone(ctx.rerankers.get(name).ok_or_else(|| {
                    named("reranker", name, ctx.rerankers.keys().collect())
                })?))
            }
        };
        if self.rerank_top == 0 {
            return Err(ConfigError::new("rerank_top", "must be at least 1"));
        }
        Ok((embedder.is_some() || reranker.is_some()).then(|| {
            Arc::new(Retrieval {
                embedder,
                reranker,
                rerank_top: self.rerank_top,
                max_embedded: self.max_embedded_passages,
                failed_at: Default::default(),
            })
        }))
    }
}

/// `value` or its old name's `old_value` (not both), and the key it was given under.
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

/// `summarizer`: `extractive`, `none` or one of `configured`.
fn summarizer(
    name: &str,
    configured: &BTreeMap<String, Arc<dyn Summarizer>>,
) -> Result<Option<Arc<dyn Summarizer>>, ConfigError> {
    match name {
        "extractive" => Ok(Some(Arc::new(ExtractiveSummarizer))),
        "none" => Ok(None),
        name => match configured.get(name) {
            Some(s) => Ok(Some(Arc::clone(s))),
            None => {
                let mut known = vec!["extractive", "none"];
                known.extend(configured.keys().map(String::as_str));
                Err(ConfigError::new(
                    "summarizer",
                    format!("unknown summarizer `{name}`; known: {}", known.join(", ")),
                ))
            }
        },
    }
}

/// `attachments[i]`, checked against the `known` servers.
fn attachment(
    i: usize,
    a: &AttachmentConfig,
    known: &[String],
) -> Result<(Attachment, Options), ConfigError> {
    let at = |k: &str| format!("attachments[{i}]{}{k}", if k.is_empty() { "" } else { "." });
    if !known.contains(&a.server) {
        let e = SourceError::UnknownServer {
            server: a.server.clone(),
            known: known.to_vec(),
        };
        return Err(ConfigError::new(at("server"), e.to_string()));
    }
    let spec = a.spec();
    let target = AttachmentTarget::try_from(&spec)
        .map_err(|e| ConfigError::new(at(e.key()), e.to_string()))?;
    Ok((
        Attachment {
            server: a.server.clone(),
            target,
            scope: Scope::Pipeline,
        },
        Options {
            strategy: a.strategy,
            must: a.must,
        },
    ))
}
