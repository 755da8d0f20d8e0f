//! The ranked pool: all passages of all ranked texts in one order, and the walk that
//! fills the budget from it.
//!
//! The order: passages of must resources first (best match first, then the unmatched
//! ones in document order), then every other passage that matches the query, by score
//! (BM25 × [`super::boost`]), ties broken by the resources' rank and the passage's
//! position. The walk keeps passages in that order while they fit (each resource's block
//! is re-rendered and counted exactly, so merged passages and locator lines are paid
//! for); the first passage that does not fit whole keeps the sentences around its best
//! match that fit, and the walk ends there. Because the order and each passage's growth
//! order depend on nothing but the texts and the query, a larger budget keeps every
//! passage a smaller one kept.

use std::sync::Arc;

use hostpipe_core::{PassageRecord, Tokenizer, Treatment};
use rustc_hash::FxHashMap;

use super::{FitOptions, FitOutcome, Fitted, Item, boost, count_cached, text_block};
use crate::convert::Converted;
use crate::excerpt::{Kept, Spans, excerpts, render};
use crate::index::{DocIndex, Query, RankInput, field_terms, rank};
use crate::retrieval::Pool;

/// What the walk needs.
pub(super) struct Input<'a> {
    /// All items of the turn.
    pub items: &'a [Item],
    /// The ranked items and their indexes.
    pub indexes: &'a [(usize, Arc<DocIndex>)],
    /// Every item's whole cost (and whether it is an estimate).
    pub costs: &'a [(usize, bool)],
    /// The query.
    pub query: &'a Query,
    /// The message (for rerankers).
    pub message: &'a str,
    /// Tokens the must resources may use.
    pub must_cap: usize,
    /// Tokens the whole pool may use (musts included).
    pub total_cap: usize,
}

/// One passage in the order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unit {
    /// Index into `Input::indexes`.
    pub member: usize,
    /// Passage index.
    pub passage: usize,
    /// Relevance (boosted BM25, or the fused score).
    pub score: f64,
}

/// Per member: what is kept so far.
#[derive(Default)]
struct State {
    kept: Vec<Kept>,
    tokens: usize,
    records: Vec<PassageRecord>,
}

/// The exact cost of `st`'s block with `kept` added.
fn cost_with(
    st: &mut State,
    kept: &Kept,
    text: &str,
    index: &DocIndex,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> usize {
    st.kept.push(kept.clone());
    // Every passage whole: the text goes in whole, without locators.
    let whole =
        st.kept.len() == index.passages.passages.len() && st.kept.iter().all(|k| k.cut.is_none());
    let cost = if whole {
        count_cached(text, tk, &opts.caches)
    } else {
        // Each excerpt's count is cached by its content: a warm turn that keeps passages
        // an earlier turn kept counts nothing again.
        excerpts(text, index, &st.kept)
            .iter()
            .map(|e| count_cached(e, tk, &opts.caches))
            .sum()
    };
    st.kept.pop();
    cost
}

/// Runs the walk; returns each ranked item's result by item index.
pub(super) async fn select(
    input: Input<'_>,
    tk: &Tokenizer,
    opts: &FitOptions,
    outcome: &mut FitOutcome,
) -> Vec<(usize, Fitted)> {
    let Input {
        items,
        indexes,
        costs,
        query,
        message,
        must_cap,
        total_cap,
    } = input;
    let text_of = |m: usize| -> &str {
        match &items[indexes[m].0].converted {
            Converted::Text(t) => t,
            _ => "",
        }
    };
    let fields: Vec<Vec<String>> = indexes
        .iter()
        .map(|(i, _)| {
            let s = &items[*i].source;
            field_terms(&opts.analyzer, s.name.as_deref(), &s.uri)
        })
        .collect();
    let inputs: Vec<RankInput<'_>> = indexes
        .iter()
        .zip(&fields)
        .map(|((_, index), f)| RankInput {
            index,
            field_terms: f,
        })
        .collect();
    let (scores, weights) = rank(&inputs, query);
    let mut units: Vec<Unit> = Vec::new();
    for (m, (i, index)) in indexes.iter().enumerate() {
        let item = &items[*i];
        let b = boost(item.source.scope, item.priority);
        for (p, &s) in scores[m]
            .iter()
            .enumerate()
            .take(index.passages.passages.len())
        {
            if s > 0.0 || item.must {
                units.push(Unit {
                    member: m,
                    passage: p,
                    score: s * b,
                });
            }
        }
    }
    let by_score = |a: &Unit, b: &Unit| {
        b.score
            .total_cmp(&a.score)
            .then(a.member.cmp(&b.member))
            .then(a.passage.cmp(&b.passage))
    };
    let (mut musts, mut rest): (Vec<Unit>, Vec<Unit>) = units
        .into_iter()
        .partition(|u| items[indexes[u.member].0].must);
    musts.sort_by(by_score);
    rest.sort_by(by_score);
    if let Some(retrieval) = &opts.retrieval {
        // Passages no query term matched: dense retrieval may still bring them in.
        let unmatched: Vec<Unit> = scores
            .iter()
            .enumerate()
            .filter(|&(m, _)| !items[indexes[m].0].must)
            .flat_map(|(m, s)| {
                s.iter()
                    .enumerate()
                    .filter(|(_, x)| **x <= 0.0)
                    .map(move |(p, _)| Unit {
                        member: m,
                        passage: p,
                        score: 0.0,
                    })
            })
            .collect();
        let texts: Vec<&str> = (0..indexes.len()).map(text_of).collect();
        let boost_of = |m: usize| {
            let item = &items[indexes[m].0];
            boost(item.source.scope, item.priority)
        };
        let done = retrieval
            .reorder(
                message,
                &mut rest,
                &unmatched,
                &Pool {
                    indexes,
                    texts: &texts,
                    boost: &boost_of,
                },
                &opts.caches,
            )
            .await;
        outcome.notes.extend(done.notes);
        outcome.warnings.extend(done.warnings);
    }
    let matched = musts.iter().chain(&rest).filter(|u| u.score > 0.0).count();

    // The query's terms and their weights, for finding a passage's best span.
    let span_query: FxHashMap<&str, f64> = query
        .terms
        .iter()
        .zip(&weights)
        .map(|((t, _), w)| (t.as_str(), *w))
        .collect();
    let mut state: Vec<State> = (0..indexes.len()).map(|_| State::default()).collect();
    let mut used = 0usize;
    let mut stopped_at: Option<usize> = None;
    let mut offset = 0usize;
    let must_cap = must_cap.min(total_cap);
    for (n, phase) in [&musts, &rest].into_iter().enumerate() {
        // The musts take at most their allowance. When they stop short of it (the first
        // must passage that did not fit was cut at a sentence), the rest do not get the
        // difference: what the rest get must not shrink as the budget grows.
        let cap = match n {
            0 => must_cap,
            _ if stopped_at.is_some() => total_cap - (must_cap - used.min(must_cap)),
            _ => total_cap,
        };
        stopped_at = None;
        for (k, u) in phase.iter().enumerate() {
            let rank_no = offset + k + 1;
            let st = &mut state[u.member];
            if st.kept.len() >= opts.max_passages.max(1) {
                continue;
            }
            let text = text_of(u.member);
            let index = &indexes[u.member].1;
            let others = used - st.tokens;
            let record = |kept: &Kept| {
                let pa = &index.passages.passages[u.passage];
                let (first_line, last_line) = match &kept.cut {
                    None => (pa.first_line, pa.last_line),
                    Some(span) => {
                        let lines = |s: &str| u32::try_from(s.matches('\n').count()).unwrap_or(0);
                        let first = pa.first_line + lines(&text[pa.range.start..span.start]);
                        (first, first + lines(text[span.clone()].trim_end()))
                    }
                };
                PassageRecord {
                    rank: rank_no,
                    score: (u.score * 1000.0).round() / 1000.0,
                    first_line,
                    last_line,
                    heading: index.passages.path_text(text, u.passage),
                    cut: kept.cut.is_some(),
                }
            };
            let whole = Kept {
                passage: u.passage,
                cut: None,
            };
            let cost = cost_with(st, &whole, text, index, tk, opts);
            if others + cost <= cap {
                st.records.push(record(&whole));
                st.kept.push(whole);
                used = others + cost;
                st.tokens = cost;
                continue;
            }
            // The first passage that does not fit whole: the sentences around its best
            // match that fit, and the walk (of this phase) ends.
            let range = index.passages.passages[u.passage].range.clone();
            let spans = Spans::new(text, range, &opts.analyzer, &span_query);
            let mut best: Option<(Kept, usize)> = None;
            for step in 0..spans.steps() {
                let cut = Kept {
                    passage: u.passage,
                    cut: Some(spans.span(step)),
                };
                let cost = cost_with(st, &cut, text, index, tk, opts);
                if others + cost > cap {
                    break;
                }
                best = Some((cut, cost));
            }
            if let Some((cut, cost)) = best {
                st.records.push(record(&cut));
                st.kept.push(cut);
                used = others + cost;
                st.tokens = cost;
            }
            stopped_at = Some(rank_no);
            break;
        }
        offset += phase.len();
    }

    // Results, with why each resource got what it got.
    let mut best_rank: Vec<Option<usize>> = vec![None; indexes.len()];
    for (r, u) in musts.iter().chain(&rest).enumerate() {
        if u.score > 0.0 && best_rank[u.member].is_none() {
            best_rank[u.member] = Some(r + 1);
        }
    }
    let mut out = Vec::with_capacity(indexes.len());
    let (mut kept_passages, mut kept_resources, mut unmatched, mut below) = (0, 0, 0, 0);
    for (m, st) in state.into_iter().enumerate() {
        let (i, index) = (&indexes[m].0, &indexes[m].1);
        let item = &items[*i];
        let (cost, estimated) = costs[*i];
        let mut f = Fitted::new(cost, estimated);
        let total = index.passages.passages.len();
        if st.kept.is_empty() {
            f.reason = Some(match (best_rank[m], stopped_at) {
                (None, _) => {
                    unmatched += 1;
                    "no passage matched the message".to_owned()
                }
                (Some(r), Some(s)) => {
                    below += 1;
                    format!("its best passage ranked {r}; the budget ran out at rank {s}")
                }
                (Some(r), None) => {
                    below += 1;
                    format!(
                        "its best passage ranked {r}, after the most passages a resource may give"
                    )
                }
            });
            out.push((*i, f));
            continue;
        }
        kept_resources += 1;
        kept_passages += st.kept.len();
        let text = text_of(m);
        let all_whole = st.kept.len() == total && st.kept.iter().all(|k| k.cut.is_none());
        let mut records = st.records;
        records.sort_by_key(|r| (r.first_line, r.last_line));
        match all_whole {
            true => {
                let n = st.tokens;
                f.tokens_before = n;
                f.estimated = false;
                f.treatment = Treatment::Whole;
                f.block = Some(text_block(item, text.to_owned(), Treatment::Whole, n, n));
            }
            false => {
                let treatment = Treatment::Chunked {
                    kept: st.kept.len(),
                    total,
                };
                let rendered = render(text, index, &st.kept);
                f.treatment = treatment.clone();
                f.block = Some(text_block(item, rendered, treatment, cost, st.tokens));
                if st.kept.len() < total {
                    f.reason = Some(format!(
                        "{} of {total} passages kept{}",
                        st.kept.len(),
                        if records.iter().any(|r| r.cut) {
                            ", one of them cut to the sentences around its best match"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        f.passages = records;
        out.push((*i, f));
    }
    let resources = indexes.len();
    let passages: usize = indexes.iter().map(|(_, x)| x.passages.passages.len()).sum();
    let mut note = format!(
        "ranked {} of {} against the message, {matched} of them matching; kept {} ({used} \
         tokens) from {}",
        plural(passages, "passage"),
        plural(resources, "resource"),
        plural(kept_passages, "passage"),
        plural(kept_resources, "resource"),
    );
    if let Some(s) = stopped_at {
        note.push_str(&format!("; the budget ran out at rank {s}"));
    }
    if kept_resources < resources {
        note.push_str(&format!(
            "; {} left out: {unmatched} with no passage matching the message, {below} ranked \
             below the cut",
            resources - kept_resources
        ));
    }
    outcome.notes.push(note);
    out
}

/// `1 passage`, `2 passages`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
