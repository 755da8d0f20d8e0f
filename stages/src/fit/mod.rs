//! Fitting the read contents of a turn into its token budget (docs/configuration.md,
//! "How resources are fitted").
//!
//! 1. When everything fits, everything goes in whole: nothing is cut.
//! 2. Otherwise the texts are ranked in passages (`fit/walk.rs`): every text is cut along its
//!    structure ([`crate::passage`]), all passages of all texts are scored against the
//!    query in one BM25 ranking ([`crate::index`]), optionally fused with dense
//!    retrieval and reranked ([`retrieval`]), and the budget goes to the best
//!    passages, the first that does not fit cut to the sentences around its best match
//!    ([`crate::excerpt`]). Must resources (`priority` 1.0, or `must = true`) come
//!    first; scope and priority break near-ties.
//! 3. What cannot be ranked shares the budget by [`crate::budget::allocate`] with the
//!    ranked pool: images, notes and `whole` texts (whole or nothing), `summarize` and
//!    `truncate` texts, and every text when the message has no terms to rank by
//!    (`fit/shrink.rs`: summarize, then truncate).
//!
//! The injected total never exceeds the budget, and for ranked texts a larger budget
//! never loses a passage a smaller one kept (a property test below).

pub mod passages;
pub mod retrieval;
mod shrink;
mod walk;

pub(crate) use walk::Unit;

use std::sync::Arc;

use hostpipe_core::{
    BlockBody, BlockSource, ContextBlock, PassageRecord, Scope, Summarizer, Tokenizer, Treatment,
    TruncationSide,
};
use rayon::prelude::*;
use serde::Deserialize;

use self::retrieval::Retrieval;
use crate::budget::{Need, allocate};
use crate::convert::{Converted, image_tokens};
use crate::index::{DocIndex, Query};
use crate::lexical::{Analyzer, Language};
use crate::passage::SplitKind;

/// How a text that does not fit is shrunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Whole if everything fits; else ranked in passages with every other text (when the
    /// message has terms to rank by), else summarized (when a summarizer is
    /// configured), else truncated.
    #[default]
    Auto,
    /// Whole or nothing.
    Whole,
    /// Ranked in passages (as `auto`), else truncated.
    Chunk,
    /// Summarize, else truncate.
    Summarize,
    /// Truncate.
    Truncate,
}

/// Settings of the fitting step.
#[derive(Clone)]
pub struct FitOptions {
    /// Which part a truncation keeps.
    pub truncate: TruncationSide,
    /// Passage size in tokens (estimated; see [`crate::passage`]).
    pub passage_tokens: usize,
    /// Below this many tokens a shrunk text (summary, truncation) is not worth sending.
    pub min_block_tokens: usize,
    /// Most passages kept from one text.
    pub max_passages: usize,
    /// How many recent history messages with terms join the query.
    pub history_messages: usize,
    /// Weight of a term that is only in the recent history (the message's weigh 1).
    pub history_weight: f64,
    /// The summarizer, if summaries are allowed.
    pub summarizer: Option<Arc<dyn Summarizer>>,
    /// Text analysis for the lexical ranking.
    pub analyzer: Arc<Analyzer>,
    /// Dense retrieval and reranking, when configured.
    pub retrieval: Option<Arc<Retrieval>>,
    /// Caches of indexes, counts and summaries.
    pub caches: Arc<Caches>,
}

/// Longest line a source-code text may have to be split by its syntax tree, in bytes:
/// text-splitter takes time quadratic in the length of a line without breaks it can use
/// (1 MB: 46 s), so such a text is split as plain text.
pub const MAX_CODE_LINE_BYTES: usize = 16 * 1024;

fn has_long_line(text: &str) -> bool {
    text.len() > MAX_CODE_LINE_BYTES
        && text
            .split('\n')
            .any(|line| line.len() > MAX_CODE_LINE_BYTES)
}

/// Caches of work that depends only on content: passage indexes by content hash,
/// summaries by (server, URI, content hash, target tokens), exact token counts by content
/// hash.
pub struct Caches {
    indexes: moka::sync::Cache<(u64, SplitKind, usize, Language), Arc<DocIndex>>,
    summaries: moka::sync::Cache<(String, String, u64, usize), Arc<str>>,
    counts: moka::sync::Cache<u64, usize>,
    embeddings: moka::sync::Cache<(String, u64), Arc<[f32]>>,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            indexes: moka::sync::Cache::builder()
                .max_capacity(256 * 1024 * 1024)
                .weigher(|_, v: &Arc<DocIndex>| u32::try_from(v.heap_bytes()).unwrap_or(u32::MAX))
                .build(),
            summaries: moka::sync::Cache::builder()
                .max_capacity(16 * 1024 * 1024)
                .weigher(|_, v: &Arc<str>| u32::try_from(v.len()).unwrap_or(u32::MAX))
                .build(),
            counts: moka::sync::Cache::new(100_000),
            embeddings: moka::sync::Cache::builder()
                .max_capacity(256 * 1024 * 1024)
                .weigher(|_, v: &Arc<[f32]>| u32::try_from(v.len() * 4 + 64).unwrap_or(u32::MAX))
                .build(),
        }
    }
}

impl Caches {
    /// The cached embedding of a text, by (embedder, content hash).
    pub(crate) fn embedding(&self, key: &(String, u64)) -> Option<Arc<[f32]>> {
        self.embeddings.get(key)
    }

    /// Caches an embedding.
    pub(crate) fn put_embedding(&self, key: (String, u64), vector: Arc<[f32]>) {
        self.embeddings.insert(key, vector);
    }

    /// The passage index of `text`, built on first use.
    fn index(&self, text: &str, hash: u64, kind: SplitKind, opts: &FitOptions) -> Arc<DocIndex> {
        let kind = match kind {
            SplitKind::Rust | SplitKind::Python | SplitKind::JavaScript if has_long_line(text) => {
                SplitKind::Plain
            }
            k => k,
        };
        let key = (hash, kind, opts.passage_tokens, opts.analyzer.language());
        self.indexes.get_with(key, || {
            Arc::new(DocIndex::build(
                text,
                kind,
                opts.passage_tokens,
                &opts.analyzer,
            ))
        })
    }
}

/// XXH3-64 of the text: a fast content fingerprint for caches and de-duplication (not
/// for security; a collision would only reuse an index, count or summary).
pub fn content_hash(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

fn exact_count(text: &str, hash: u64, tk: &Tokenizer, caches: &Caches) -> usize {
    let key = hash ^ (tk.encoding() as u64).rotate_left(56);
    caches.counts.get_with(key, || tk.count(text))
}

/// One item to fit: its converted content and what ranking needs.
pub struct Item {
    /// Provenance.
    pub source: BlockSource,
    /// MIME type of the content.
    pub mime_type: Option<String>,
    /// The content.
    pub converted: Converted,
    /// Must be included (priority 1.0 or `must = true`): served first.
    pub must: bool,
    /// The widest scope that made it a must (its own scope for priority 1.0): narrower
    /// attachments keep room for a passage.
    pub must_scope: Scope,
    /// MCP `annotations.priority` in [0, 1] (0.5 when absent): breaks near-ties.
    pub priority: f32,
    /// Strategy for this item.
    pub strategy: Strategy,
    /// [`content_hash`] of the text, when the caller has it already (a 4 MiB text costs
    /// about 0.3 ms to hash); computed here otherwise.
    pub text_hash: Option<u64>,
}

/// What fitting did to one item.
pub struct Fitted {
    /// The block, when anything of it goes to the model.
    pub block: Option<ContextBlock>,
    /// Tokens before treatment (see `estimated`).
    pub tokens_before: usize,
    /// Whether `tokens_before` is an estimate.
    pub estimated: bool,
    /// Treatment.
    pub treatment: Treatment,
    /// A problem worth a trace warning.
    pub warning: Option<String>,
    /// The passages kept, for ranked texts.
    pub passages: Vec<PassageRecord>,
    /// Why it was left out or only partly kept.
    pub reason: Option<String>,
}

impl Fitted {
    fn new(cost: usize, estimated: bool) -> Self {
        Self {
            block: None,
            tokens_before: cost,
            estimated,
            treatment: Treatment::Omitted,
            warning: None,
            passages: Vec::new(),
            reason: None,
        }
    }
}

/// The text the ranking is asked about.
#[derive(Debug, Clone, Copy, Default)]
pub struct FitQuery<'a> {
    /// The user's message.
    pub message: &'a str,
    /// Recent earlier user messages of the conversation, most recent first (follow-up
    /// questions: "and its timeout?"); the first `history_messages` that have terms
    /// join the query.
    pub history: &'a [&'a str],
}

/// The result of fitting: one [`Fitted`] per item (same order) and a note on what the
/// ranking did, for the trace.
pub struct FitOutcome {
    /// Per item.
    pub fitted: Vec<Fitted>,
    /// Notes for the trace (each a sentence whose numbers add up).
    pub notes: Vec<String>,
    /// Warnings for the trace (a dense or rerank service that failed, …).
    pub warnings: Vec<String>,
}

/// Above this many bytes per token of budget, a text is taken as too large to fit
/// whole without tokenizing it (no real text averages 6 bytes per token).
const SURELY_TOO_LARGE_BYTES_PER_TOKEN: usize = 6;

/// Whether an item's passages compete in the ranking.
fn ranked(item: &Item, query: &Query) -> bool {
    matches!(item.converted, Converted::Text(_))
        && matches!(item.strategy, Strategy::Auto | Strategy::Chunk)
        && !query.is_empty()
}

/// Fits `items` (in rank order: scope, priority, recency) into `budget` tokens for
/// `query` (see the module docs). The injected total never exceeds `budget`.
pub async fn fit(
    items: Vec<Item>,
    budget: usize,
    query: FitQuery<'_>,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> FitOutcome {
    // Each text's hash, once: it keys the index, count and summary caches.
    let hashes: Vec<u64> = items
        .par_iter()
        .map(|it| match &it.converted {
            Converted::Text(t) => it.text_hash.unwrap_or_else(|| content_hash(t)),
            _ => 0,
        })
        .collect();
    let costs = whole_costs(&items, &hashes, budget, tk, opts);
    let mut outcome = FitOutcome {
        fitted: Vec::with_capacity(items.len()),
        notes: Vec::new(),
        warnings: Vec::new(),
    };
    // 1. Everything fits: everything whole.
    let total: usize = costs.iter().map(|c| c.0).sum();
    if total <= budget && costs.iter().all(|c| !c.1) {
        for (item, (cost, _)) in items.iter().zip(&costs) {
            outcome.fitted.push(shrink::whole(item, *cost));
        }
        return outcome;
    }
    let mut q = Query::new(
        &opts.analyzer,
        query.message,
        query.history,
        opts.history_messages,
        opts.history_weight,
    );
    // A message none of whose terms is in any text (a question in another language than
    // the documents) ranks nothing lexically: without dense retrieval (which finds
    // passages that share no word with the message) the texts are shrunk as for a
    // message without terms, so the model gets their beginnings (or summaries) rather
    // than nothing.
    let dense = opts
        .retrieval
        .as_ref()
        .is_some_and(|r| r.embedder.is_some());
    if !q.is_empty()
        && !dense
        && !items
            .iter()
            .zip(&hashes)
            .any(|(it, &hash)| match &it.converted {
                Converted::Text(t) => mentions(t, hash, it, &q, opts),
                _ => false,
            })
    {
        outcome.notes.push(
            "no term of the message is in any text: the texts were shrunk (summarized or truncated) instead of ranked"
                .to_owned(),
        );
        q = Query::default();
    }
    // 2. What cannot be ranked shares the budget with the ranked pool (musts apart).
    let shares = Shares::plan(&items, &hashes, &costs, &q, budget, opts);
    let mut fitted = shares.left_out;
    let mut used = 0usize;
    for (i, item) in items.iter().enumerate() {
        let Some(allowance) = shares.allowance[i] else {
            continue;
        };
        let (cost, estimated) = costs[i];
        // Summaries may call a model.
        let f = shrink::fit_one(item, cost, estimated, allowance, query.message, tk, opts).await;
        used += f.block.as_ref().map_or(0, |b| b.tokens_after);
        fitted[i] = Some(f);
    }
    // 3. The ranked pool: musts first, within their allowance; then the rest, with what
    // the others left.
    if shares.ranked.iter().any(|&r| r) {
        let members: Vec<usize> = (0..items.len()).filter(|&i| shares.ranked[i]).collect();
        let indexes: Vec<(usize, Arc<DocIndex>)> = members
            .par_iter()
            .map(|&i| {
                let Converted::Text(t) = &items[i].converted else {
                    return (i, Arc::new(DocIndex::default()));
                };
                let kind = SplitKind::detect(items[i].mime_type.as_deref(), &items[i].source.uri);
                (i, opts.caches.index(t, hashes[i], kind, opts))
            })
            .collect();
        let selection = walk::select(
            walk::Input {
                items: &items,
                indexes: &indexes,
                costs: &costs,
                query: &q,
                message: query.message,
                must_cap: shares.must_cap,
                total_cap: budget.saturating_sub(used),
            },
            tk,
            opts,
            &mut outcome,
        )
        .await;
        for (i, f) in selection {
            fitted[i] = Some(f);
        }
    }
    outcome.fitted = fitted
        .into_iter()
        .zip(&costs)
        .map(|(f, &(cost, est))| f.unwrap_or_else(|| Fitted::new(cost, est)))
        .collect();
    outcome
}

/// What each item would cost whole, and whether that is an estimate (a text far larger
/// than the budget is not tokenized whole). Texts are counted in parallel.
fn whole_costs(
    items: &[Item],
    hashes: &[u64],
    budget: usize,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Vec<(usize, bool)> {
    items
        .par_iter()
        .zip(hashes)
        .map(|(it, &hash)| match &it.converted {
            Converted::Text(t)
                if t.len() > budget.saturating_mul(SURELY_TOO_LARGE_BYTES_PER_TOKEN) =>
            {
                (crate::passage::estimate_tokens(t).max(t.len() / 6), true)
            }
            Converted::Text(t) => (exact_count(t, hash, tk, &opts.caches), false),
            Converted::Image { width, height, .. } => (image_tokens(*width, *height), false),
            Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                (tk.count(note), false)
            }
        })
        .collect()
}

/// How the budget is shared between the ranked pool and what is not ranked.
struct Shares {
    /// Per item: whether its passages compete in the ranking.
    ranked: Vec<bool>,
    /// Per item not ranked: its allowance (`None` for ranked items and those left out).
    allowance: Vec<Option<usize>>,
    /// Per item: its result when it is left out before any fitting.
    left_out: Vec<Option<Fitted>>,
    /// Tokens the must resources' passages may use.
    must_cap: usize,
}

impl Shares {
    /// The shares ([`crate::budget::allocate`]): the ranked musts and the other ranked
    /// texts are one need each; every item that is not ranked is one need of its own.
    fn plan(
        items: &[Item],
        hashes: &[u64],
        costs: &[(usize, bool)],
        q: &Query,
        budget: usize,
        opts: &FitOptions,
    ) -> Self {
        let ranked: Vec<bool> = items.iter().map(|it| self::ranked(it, q)).collect();
        let pool_need = |must: bool| -> Option<Need> {
            let members: Vec<usize> = (0..items.len())
                .filter(|&i| ranked[i] && items[i].must == must)
                .collect();
            (!members.is_empty()).then(|| Need {
                cost: members.iter().map(|&i| costs[i].0).sum(),
                must,
                shrinkable: true,
                min_useful: opts.min_block_tokens,
                // The musts' tier is the widest scope that made one a must; the rest's,
                // the narrowest scope among them.
                tier: if must {
                    members
                        .iter()
                        .map(|&i| items[i].must_scope as u8)
                        .min()
                        .unwrap_or(0)
                } else {
                    members
                        .iter()
                        .map(|&i| items[i].source.scope as u8)
                        .max()
                        .unwrap_or(0)
                },
                // A must at a wider scope leaves the passages of a narrower attachment
                // room for one passage (at most half the budget).
                reserve: opts
                    .passage_tokens
                    .min(budget / 2)
                    .max(opts.min_block_tokens),
                yields: false,
            })
        };
        let mut needs: Vec<Need> = Vec::new();
        let mut need_of: Vec<Option<usize>> = vec![None; items.len()];
        let mut left_out: Vec<Option<Fitted>> = (0..items.len()).map(|_| None).collect();
        let must_pool = pool_need(true).map(|n| {
            needs.push(n);
            needs.len() - 1
        });
        for (i, item) in items.iter().enumerate() {
            if ranked[i] {
                continue;
            }
            // Summarize only what is relevant: a text to summarize that shares no term
            // with the message gets no share of a budget too small for everything.
            if let Converted::Text(t) = &item.converted
                && item.strategy == Strategy::Summarize
                && !item.must
                && !q.is_empty()
                && !mentions(t, hashes[i], item, q, opts)
            {
                let mut f = Fitted::new(costs[i].0, costs[i].1);
                f.reason =
                    Some("nothing in it matched the message, so it was not summarized".into());
                left_out[i] = Some(f);
                continue;
            }
            need_of[i] = Some(needs.len());
            needs.push(Need {
                cost: costs[i].0,
                must: item.must,
                shrinkable: matches!(item.converted, Converted::Text(_))
                    && item.strategy != Strategy::Whole,
                min_useful: opts.min_block_tokens,
                tier: item.source.scope as u8,
                reserve: opts.min_block_tokens,
                yields: !item.must && matches!(item.converted, Converted::Image { .. }),
            });
        }
        // The rest of the ranked pool comes last: what the others do not use is its.
        if let Some(n) = pool_need(false) {
            needs.push(n);
        }
        let allowances = allocate(budget, &needs);
        Self {
            allowance: need_of.iter().map(|n| n.map(|n| allowances[n])).collect(),
            must_cap: must_pool.map_or(0, |n| allowances[n]),
            ranked,
            left_out,
        }
    }
}

/// Whether any term of `query` occurs in `text` (or in its resource's title or URI).
fn mentions(text: &str, hash: u64, item: &Item, query: &Query, opts: &FitOptions) -> bool {
    let kind = SplitKind::detect(item.mime_type.as_deref(), &item.source.uri);
    let index = opts.caches.index(text, hash, kind, opts);
    let fields = crate::index::field_terms(
        &opts.analyzer,
        item.source.name.as_deref(),
        &item.source.uri,
    );
    query
        .terms
        .iter()
        .any(|(t, _)| !index.postings(t).is_empty() || fields.contains(t))
}

/// The boost of a scope and an MCP priority, multiplying a passage's relevance: the
/// narrower scope and the higher priority win where relevance is close (message +20%,
/// conversation +10%; priority ±10% around the default 0.5).
pub fn boost(scope: Scope, priority: f32) -> f64 {
    let scope = match scope {
        Scope::Pipeline => 0.0,
        Scope::Conversation => 0.1,
        Scope::Message => 0.2,
    };
    1.0 + scope + 0.2 * (f64::from(priority.clamp(0.0, 1.0)) - 0.5)
}

/// The text of a whole block.
fn text_block(
    item: &Item,
    text: String,
    treatment: Treatment,
    cost: usize,
    after: usize,
) -> ContextBlock {
    ContextBlock {
        source: item.source.clone(),
        mime_type: item.mime_type.clone(),
        body: BlockBody::Text { text },
        treatment,
        tokens_before: cost,
        tokens_after: after,
    }
}

/// Encoding-keyed count cache access for other modules.
fn count_cached(text: &str, tk: &Tokenizer, caches: &Caches) -> usize {
    exact_count(text, content_hash(text), tk, caches)
}

#[cfg(test)]
mod tests;
