//! Fitting read contents into the budget: ranking, allocation, and the strategies
//! (whole, chunk, summarize, truncate) that shrink a text to its allowance.

use std::sync::Arc;

use rayon::prelude::*;

use hostpipe_core::{
    BlockBody, BlockSource, ContextBlock, Encoding, FallbackReason, Tokenizer, Treatment,
    TruncationSide,
};
use serde::Deserialize;

use crate::budget::{Need, allocate};
use crate::chunk::{self, Chunked};
use crate::convert::{Converted, image_tokens};
use hostpipe_core::Summarizer;

/// How a text that does not fit is shrunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Whole if it fits, else chunk and select (when the message has words to rank by),
    /// else summarize (when a summarizer is configured), else truncate.
    #[default]
    Auto,
    /// Whole or nothing.
    Whole,
    /// Chunk and select, else truncate.
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
    /// Largest chunk size in tokens (approximate; chunks are cut in characters). A chunk
    /// is at most half the allowance of its text, so that several can be kept.
    pub chunk_tokens: usize,
    /// Below this many tokens a shrunk text is not worth sending: the lowest-ranked
    /// texts are left out instead.
    pub min_block_tokens: usize,
    /// Most chunks kept from one text.
    pub max_chunks: usize,
    /// The summarizer, if summaries are allowed.
    pub summarizer: Option<Arc<dyn Summarizer>>,
    /// Caches of splits and summaries.
    pub caches: Arc<Caches>,
}

/// Longest line the chunker is given, in bytes. text-splitter takes time quadratic in
/// the length of a line without sentence or word breaks it can use (1 MB: 46 s); a text
/// with a longer line is not chunked (`auto` goes on to summarize or truncate).
pub const MAX_CHUNKED_LINE_BYTES: usize = 16 * 1024;

fn has_long_line(text: &str) -> bool {
    text.len() > MAX_CHUNKED_LINE_BYTES
        && text
            .split('\n')
            .any(|line| line.len() > MAX_CHUNKED_LINE_BYTES)
}

/// Caches of work that depends only on content: chunk splits by content hash, summaries
/// by (server, URI, content hash, target tokens), exact token counts by content hash.
pub struct Caches {
    splits: moka::sync::Cache<(u64, chunk::SplitKind, usize, Encoding), Arc<Chunked>>,
    summaries: moka::sync::Cache<(String, String, u64, usize), Arc<str>>,
    counts: moka::sync::Cache<u64, usize>,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            splits: moka::sync::Cache::builder()
                .max_capacity(64 * 1024 * 1024)
                .weigher(|_, v: &Arc<Chunked>| {
                    u32::try_from(v.chunks.len() * 48).unwrap_or(u32::MAX)
                })
                .build(),
            summaries: moka::sync::Cache::builder()
                .max_capacity(16 * 1024 * 1024)
                .weigher(|_, v: &Arc<str>| u32::try_from(v.len()).unwrap_or(u32::MAX))
                .build(),
            counts: moka::sync::Cache::new(100_000),
        }
    }
}

/// XXH3-64 of the text: a fast content fingerprint for caches and de-duplication (not
/// for security; a collision would only reuse a split, count or summary).
pub fn content_hash(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// One item to fit: its converted content and what ranking needs.
pub struct Item {
    /// Provenance.
    pub source: BlockSource,
    /// MIME type of the content.
    pub mime_type: Option<String>,
    /// The content.
    pub converted: Converted,
    /// Priority 1.0: served first.
    pub must: bool,
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
}

/// Above this many bytes per token of allowance, a text is taken as too large to fit
/// whole without tokenizing it (no real text averages 6 bytes per token).
const SURELY_TOO_LARGE_BYTES_PER_TOKEN: usize = 6;

fn exact_count(text: &str, hash: u64, tk: &Tokenizer, caches: &Caches) -> usize {
    let key = hash ^ (tk.encoding() as u64).rotate_left(56);
    caches.counts.get_with(key, || tk.count(text))
}

/// Fits `items` (in rank order) into `budget` tokens with `query` as the relevance hint.
/// The injected total never exceeds `budget`.
pub async fn fit(
    items: Vec<Item>,
    budget: usize,
    query: &str,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Vec<Fitted> {
    // Each text's hash, once: it keys the count, split and summary caches.
    let hashes: Vec<u64> = items
        .par_iter()
        .map(|it| match &it.converted {
            Converted::Text(t) => it.text_hash.unwrap_or_else(|| content_hash(t)),
            _ => 0,
        })
        .collect();
    // What each item would cost whole; texts are counted in parallel.
    let costs: Vec<(usize, bool)> = items
        .par_iter()
        .zip(&hashes)
        .map(|(it, &hash)| match &it.converted {
            Converted::Text(t)
                if t.len() > budget.saturating_mul(SURELY_TOO_LARGE_BYTES_PER_TOKEN) =>
            {
                (t.len().div_ceil(4), true)
            }
            Converted::Text(t) => (exact_count(t, hash, tk, &opts.caches), false),
            Converted::Image { width, height, .. } => (image_tokens(*width, *height), false),
            Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                (tk.count(note), false)
            }
        })
        .collect();
    let needs: Vec<Need> = items
        .iter()
        .zip(&costs)
        .map(|(it, (cost, _))| Need {
            cost: *cost,
            must: it.must,
            shrinkable: matches!(it.converted, Converted::Text(_))
                && it.strategy != Strategy::Whole,
            min_useful: opts.min_block_tokens,
            tier: it.source.scope as u8,
        })
        .collect();
    let allowances = allocate(budget, &needs);
    // Chunk splits and BM25 scores depend only on the text, the query and the chunk size:
    // prepare them for every text that will not fit whole, on all cores, before the
    // sequential pass. Chunks are at most half the allowance, so several can be kept.
    let terms = chunk::query_terms(query);
    // The allowance, at most `chunk_tokens`, at least 64 (below that a markdown split
    // yields scraps). The 4-characters-a-token estimate can make the best chunk larger
    // than the allowance: selection then keeps its head, cut to fit.
    let chunk_size = |allowance: usize| allowance.clamp(64, opts.chunk_tokens.max(64));
    let prepared: Vec<Option<Scored>> = items
        .par_iter()
        .zip(&costs)
        .zip(&allowances)
        .zip(&hashes)
        .map(
            |(((it, (cost, estimated)), allowance), &hash)| match &it.converted {
                Converted::Text(t)
                    if !terms.is_empty()
                        && (*estimated || cost > allowance)
                        && matches!(it.strategy, Strategy::Auto | Strategy::Chunk) =>
                {
                    Some(score(
                        it,
                        t,
                        hash,
                        &terms,
                        chunk_size(budget.min(*allowance).max(1)),
                        tk,
                        opts,
                    ))
                }
                _ => None,
            },
        )
        .collect();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let (cost, estimated) = costs[i];
        out.push(
            fit_one(
                item,
                cost,
                estimated,
                allowances[i],
                prepared[i].as_ref(),
                query,
                tk,
                opts,
            )
            .await,
        );
    }
    // What the first pass did not use (a summary shorter than its share, a chunk
    // selection that found little) is offered again, in rank order, to the texts that
    // were shrunk or left out.
    let mut left = budget.saturating_sub(
        out.iter()
            .map(|f| f.block.as_ref().map_or(0, |b| b.tokens_after))
            .sum(),
    );
    for (i, item) in items.iter().enumerate() {
        if left < opts.min_block_tokens.min(costs[i].0)
            || !needs[i].shrinkable
            || out[i].treatment == Treatment::Whole
        {
            continue;
        }
        let used = out[i].block.as_ref().map_or(0, |b| b.tokens_after);
        let allowance = used + left;
        let (cost, estimated) = costs[i];
        // The first pass's split is reused (no second split of a large text); a text
        // that had none gets one sized to its new allowance.
        let fresh = match (&prepared[i], &item.converted) {
            (None, Converted::Text(t))
                if !terms.is_empty()
                    && matches!(item.strategy, Strategy::Auto | Strategy::Chunk) =>
            {
                Some(score(
                    item,
                    t,
                    hashes[i],
                    &terms,
                    chunk_size(allowance),
                    tk,
                    opts,
                ))
            }
            _ => None,
        };
        let again = fit_one(
            item,
            cost,
            estimated,
            allowance,
            prepared[i].as_ref().or(fresh.as_ref()),
            query,
            tk,
            opts,
        )
        .await;
        let now = again.block.as_ref().map_or(0, |b| b.tokens_after);
        if now > used {
            left -= now - used;
            out[i] = again;
        }
    }
    out
}

/// A text split into chunks and scored against the query.
struct Scored {
    chunked: Arc<Chunked>,
    scores: Vec<f64>,
}

/// Splits `text` along its structure ([`chunk::SplitKind`]; the split is cached by content
/// hash) and scores its chunks with BM25 against `terms`.
fn score(
    item: &Item,
    text: &str,
    hash: u64,
    terms: &[String],
    chunk_tokens: usize,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Scored {
    let kind = chunk::SplitKind::detect(item.mime_type.as_deref(), &item.source.uri);
    let key = (hash, kind, chunk_tokens, tk.encoding());
    let entry = opts.caches.splits.entry(key).or_insert_with(|| {
        // Checked once per content (the split is cached): a text with a line the
        // splitter cannot break well gets no chunks, so `chunk` steps aside.
        let text = if has_long_line(text) { "" } else { text };
        Arc::new(chunk::split(text, kind, chunk_tokens))
    });
    let reused = !entry.is_fresh();
    let chunked = entry.into_value();
    // A text scored a second time is likely to be scored again (an attached resource,
    // turn after turn): index its words once, and look them up from then on.
    if reused {
        chunked.term_index(text);
    }
    let scores = chunk::bm25(text, &chunked, terms);
    Scored { chunked, scores }
}

#[allow(clippy::too_many_arguments)]
async fn fit_one(
    item: &Item,
    cost: usize,
    estimated: bool,
    allowance: usize,
    scored: Option<&Scored>,
    query: &str,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Fitted {
    let Item {
        source,
        mime_type,
        converted,
        strategy,
        ..
    } = item;
    let block = |body: BlockBody, treatment: Treatment, after: usize| ContextBlock {
        source: source.clone(),
        mime_type: mime_type.clone(),
        body,
        treatment,
        tokens_before: cost,
        tokens_after: after,
    };
    let done =
        |block: Option<ContextBlock>, treatment: Treatment, warning: Option<String>| Fitted {
            block,
            tokens_before: cost,
            estimated,
            treatment,
            warning,
        };
    let no_room = |what: &str| {
        Some(format!(
            "{} from `{}` left out: {what} ({cost}{} tokens) and {allowance} tokens were left for it",
            source.uri,
            source.server,
            if estimated { "≈" } else { "" }
        ))
    };
    match converted {
        Converted::Text(text) => {
            if !estimated && cost <= allowance {
                return done(
                    Some(block(
                        BlockBody::Text { text: text.clone() },
                        Treatment::Whole,
                        cost,
                    )),
                    Treatment::Whole,
                    None,
                );
            }
            let plan: &[Strategy] = match strategy {
                Strategy::Auto => &[Strategy::Chunk, Strategy::Summarize, Strategy::Truncate],
                Strategy::Whole => &[],
                Strategy::Chunk => &[Strategy::Chunk, Strategy::Truncate],
                Strategy::Summarize => &[Strategy::Summarize, Strategy::Truncate],
                Strategy::Truncate => &[Strategy::Truncate],
            };
            let mut problems = Vec::new();
            for step in plan {
                if let Some((text, tokens, treatment, exact)) = shrink(
                    *step,
                    text,
                    source,
                    scored,
                    allowance,
                    query,
                    tk,
                    opts,
                    &mut problems,
                )
                .await
                {
                    let mut b = block(BlockBody::Text { text }, treatment.clone(), tokens);
                    let warning = (!problems.is_empty()).then(|| problems.join("; "));
                    let mut f = done(None, treatment, warning);
                    if let Some(exact) = exact {
                        // A truncation tokenized the whole text anyway.
                        (b.tokens_before, f.tokens_before, f.estimated) = (exact, exact, false);
                    }
                    f.block = Some(b);
                    return f;
                }
            }
            done(
                None,
                Treatment::Omitted,
                no_room("too large to shrink into what was left"),
            )
        }
        Converted::Image {
            mime_type: m,
            data,
            width,
            height,
        } => {
            if cost <= allowance {
                return done(
                    Some(block(
                        BlockBody::Image {
                            mime_type: m.clone(),
                            data: data.clone(),
                            width: *width,
                            height: *height,
                        },
                        Treatment::Whole,
                        cost,
                    )),
                    Treatment::Whole,
                    None,
                );
            }
            let note = format!(
                "[image resource {} ({width}×{height} px) not shown: no token budget left for it]",
                source.uri
            );
            let n = tk.count(&note);
            if n <= allowance {
                let body = BlockBody::Fallback {
                    reason: FallbackReason::NoBudget,
                    note,
                };
                return done(
                    Some(block(body, Treatment::Omitted, n)),
                    Treatment::Omitted,
                    no_room("an image"),
                );
            }
            done(None, Treatment::Omitted, no_room("an image"))
        }
        Converted::Fallback { reason, note } => {
            if cost <= allowance {
                return done(
                    Some(block(
                        BlockBody::Fallback {
                            reason: reason.clone(),
                            note: note.clone(),
                        },
                        Treatment::Omitted,
                        cost,
                    )),
                    Treatment::Omitted,
                    None,
                );
            }
            done(None, Treatment::Omitted, no_room("its note"))
        }
        Converted::Refused { error, note } => {
            let warning = Some(format!(
                "{} from `{}` refused: {error}",
                source.uri, source.server
            ));
            if cost <= allowance {
                let body = BlockBody::Fallback {
                    reason: FallbackReason::Binary,
                    note: note.clone(),
                };
                return done(
                    Some(block(body, Treatment::Omitted, cost)),
                    Treatment::Omitted,
                    warning,
                );
            }
            done(None, Treatment::Omitted, warning)
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn shrink(
    step: Strategy,
    text: &str,
    source: &BlockSource,
    scored: Option<&Scored>,
    allowance: usize,
    query: &str,
    tk: &Tokenizer,
    opts: &FitOptions,
    problems: &mut Vec<String>,
) -> Option<(String, usize, Treatment, Option<usize>)> {
    match step {
        Strategy::Chunk => {
            let scored = scored?;
            // The rendered selection's count is cached by its hash like any text's.
            let count = |s: &str| exact_count(s, content_hash(s), tk, &opts.caches);
            let sel = chunk::select_at_most(
                text,
                &scored.chunked,
                &scored.scores,
                allowance,
                opts.max_chunks,
                tk,
                &count,
            )?;
            Some((
                sel.text,
                sel.tokens,
                Treatment::Chunked {
                    kept: sel.kept,
                    total: sel.total,
                },
                None,
            ))
        }
        Strategy::Summarize => {
            let summarizer = opts.summarizer.as_ref()?;
            let key = (
                source.server.clone(),
                source.uri.clone(),
                content_hash(text),
                allowance,
            );
            let summary = match opts.caches.summaries.get(&key) {
                Some(s) => s,
                None => {
                    let s: Arc<str> = match summarizer.summarize(text, query, allowance, tk).await {
                        Ok(s) => s.into(),
                        Err(e) => {
                            problems.push(format!("{} from `{}`: {e}", source.uri, source.server));
                            return None;
                        }
                    };
                    opts.caches.summaries.insert(key, Arc::clone(&s));
                    s
                }
            };
            let tokens = tk.count(&summary);
            (tokens <= allowance)
                .then(|| (summary.to_string(), tokens, Treatment::Summarized, None))
        }
        Strategy::Truncate => {
            let t = tk.truncate(text, allowance, opts.truncate)?;
            let treatment = Treatment::Truncated {
                side: opts.truncate,
                omitted_tokens: t.omitted_tokens,
            };
            Some((t.text, t.tokens, treatment, Some(t.original_tokens)))
        }
        Strategy::Auto | Strategy::Whole => None,
    }
}

#[cfg(test)]
mod tests {
    use hostpipe_core::{Encoding, Scope};
    use proptest::prelude::{ProptestConfig, any, prop_assert, prop_assert_eq, proptest};

    use super::*;
    use crate::summarize::ExtractiveSummarizer;

    fn source(i: usize) -> BlockSource {
        BlockSource {
            server: "s".into(),
            uri: format!("x://{i}"),
            template: None,
            scope: Scope::Pipeline,
            name: None,
        }
    }

    fn opts() -> FitOptions {
        FitOptions {
            truncate: TruncationSide::Head,
            chunk_tokens: 64,
            max_chunks: usize::MAX,
            min_block_tokens: 16,
            summarizer: Some(Arc::new(ExtractiveSummarizer)),
            caches: Arc::new(Caches::default()),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn the_injected_total_never_exceeds_the_budget(
            budget in 0usize..3000,
            docs in proptest::collection::vec(("[a-z ]{0,40}(\n\n## [a-z]{1,8}\n)?[a-zé .,]{0,3000}", 0usize..5, any::<bool>()), 0..8),
            query in "[a-z ]{0,30}",
        ) {
            let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
            let strategies = [Strategy::Auto, Strategy::Whole, Strategy::Chunk, Strategy::Summarize, Strategy::Truncate];
            let items: Vec<Item> = docs
                .into_iter()
                .enumerate()
                .map(|(i, (text, s, must))| Item {
                    source: source(i),
                    mime_type: Some(if i % 2 == 0 { "text/markdown" } else { "text/plain" }.into()),
                    converted: if i % 5 == 4 {
                        Converted::Fallback { reason: FallbackReason::Binary, note: format!("[binary {text:.20}]") }
                    } else {
                        Converted::Text(text)
                    },
                    must,
                    text_hash: None,
                    strategy: strategies[s],
                })
                .collect();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| unreachable!("{e}"));
            let fitted = rt.block_on(fit(items, budget, &query, &tk, &opts()));
            let mut total = 0;
            for f in &fitted {
                if let Some(b) = &f.block {
                    prop_assert_eq!(b.tokens_after, tk.count(b.text().unwrap_or("")));
                    total += b.tokens_after;
                }
            }
            prop_assert!(total <= budget, "{} > {}", total, budget);
        }
    }
}
