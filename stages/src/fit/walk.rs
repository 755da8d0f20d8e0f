//! The ranked pool: all passages of all ranked texts in one order, and the walk that
//! fills the budget from it.
//!
//! The order: passages of must resources first (the musts take turns, each its best
//! match first, then its unmatched passages in document order), then every other
//! passage that matches the query, by score
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

use super::retrieval::Pool;
use super::{FitOptions, FitOutcome, Fitted, Item, boost, count_cached, text_block};
use crate::convert::Converted;
use crate::excerpt::{Kept, Spans, excerpts, render};
use crate::index::{DocIndex, Query, RankInput, field_terms, rank};

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

/// The order of the ranked pool.
pub(super) struct Order {
    /// Passages of must resources: matching ones by score, then the others in document
    /// order.
    pub musts: Vec<Unit>,
    /// Every other passage that matches, by score (or as retrieval reordered them).
    pub rest: Vec<Unit>,
    /// Each query term's weighted IDF (for best spans).
    pub weights: Vec<f64>,
    /// How many passages a query term matched (before any dense retrieval).
    matched: usize,
    /// Per member and passage: the BM25 score, before the boost.
    pub scores: Vec<Vec<f64>>,
    /// How many units at the head of `rest` carry a reranker's relevance as their score.
    pub reranked: usize,
}

impl Order {
    /// All units in walk order, with their rank (from 1).
    fn ranked(&self) -> impl Iterator<Item = (usize, &Unit)> {
        self.musts
            .iter()
            .chain(&self.rest)
            .enumerate()
            .map(|(r, u)| (r + 1, u))
    }
}

/// What the walk kept.
struct Walked {
    state: Vec<State>,
    used: usize,
    /// Where each phase (musts, rest) stopped, if it ran out of room.
    stopped_at: [Option<usize>; 2],
}

/// Runs the walk; returns each ranked item's result by item index.
pub(super) async fn select(
    input: Input<'_>,
    tk: &Tokenizer,
    opts: &FitOptions,
    outcome: &mut FitOutcome,
) -> Vec<(usize, Fitted)> {
    let texts: Vec<&str> = input
        .indexes
        .iter()
        .map(|(i, _)| match &input.items[*i].converted {
            Converted::Text(t) => t.as_str(),
            _ => "",
        })
        .collect();
    let order = order(&input, &texts, opts, outcome).await;
    let walked = walk(&input, &texts, &order, tk, opts);
    results(&input, &texts, &order, walked, outcome)
}

/// The ranking: BM25 over all passages, boosted by scope and priority, musts first,
/// then dense retrieval and reranking when configured.
pub(super) async fn order(
    input: &Input<'_>,
    texts: &[&str],
    opts: &FitOptions,
    outcome: &mut FitOutcome,
) -> Order {
    let (items, indexes) = (input.items, input.indexes);
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
    let (scores, weights) = rank(&inputs, input.query);
    let boost_of = |m: usize| {
        let item = &items[indexes[m].0];
        boost(item.source.scope, item.priority)
    };
    let is_must = |m: usize| items[indexes[m].0].must;
    let mut musts = Vec::new();
    let mut rest = Vec::new();
    // Passages no query term matched: dense retrieval may still bring them in.
    let mut unmatched = Vec::new();
    for (m, s) in scores.iter().enumerate() {
        let b = boost_of(m);
        for (p, &x) in s.iter().enumerate() {
            let unit = Unit {
                member: m,
                passage: p,
                score: x * b,
            };
            match (is_must(m), x > 0.0) {
                (true, _) => musts.push(unit),
                (false, true) => rest.push(unit),
                (false, false) => unmatched.push(unit),
            }
        }
    }
    let by_score = |a: &Unit, b: &Unit| {
        b.score
            .total_cmp(&a.score)
            .then(a.member.cmp(&b.member))
            .then(a.passage.cmp(&b.passage))
    };
    musts.sort_by(by_score);
    rest.sort_by(by_score);
    let matched = musts.iter().chain(&rest).filter(|u| u.score > 0.0).count();
    // Several must resources take turns, each its best passage first: every one of them
    // gets something before any gets a second passage.
    let mut turn = vec![0usize; indexes.len()];
    let mut keyed: Vec<((usize, usize), Unit)> = musts
        .into_iter()
        .map(|u| {
            let k = turn[u.member];
            turn[u.member] += 1;
            ((k, indexes[u.member].0), u)
        })
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    let musts: Vec<Unit> = keyed.into_iter().map(|(_, u)| u).collect();
    let mut reranked = 0;
    if let Some(retrieval) = &opts.retrieval {
        let pool = Pool {
            indexes,
            texts,
            boost: &boost_of,
        };
        let done = retrieval
            .reorder(input.message, &mut rest, &unmatched, &pool, &opts.caches)
            .await;
        outcome.notes.extend(done.notes);
        outcome.warnings.extend(done.warnings);
        reranked = done.reranked;
    }
    Order {
        musts,
        rest,
        weights,
        matched,
        scores,
        reranked,
    }
}

/// Keeps passages in order while they fit; the first that does not fit keeps the
/// sentences around its best match that fit, and its phase ends.
fn walk(
    input: &Input<'_>,
    texts: &[&str],
    order: &Order,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Walked {
    let indexes = input.indexes;
    // The query's terms and their weights, for finding a passage's best span.
    let span_query: FxHashMap<&str, f64> = input
        .query
        .terms
        .iter()
        .zip(&order.weights)
        .map(|((t, _), w)| (t.as_str(), *w))
        .collect();
    let mut state: Vec<State> = (0..indexes.len()).map(|_| State::default()).collect();
    let mut used = 0usize;
    let mut stopped_at = [None, None];
    let must_cap = input.must_cap.min(input.total_cap);
    let mut offset = 0usize;
    for (n, phase) in [&order.musts, &order.rest].into_iter().enumerate() {
        // The musts take at most their allowance. When they stop short of it (the first
        // must passage that did not fit was cut at a sentence), the rest do not get the
        // difference: what the rest get must not shrink as the budget grows.
        let cap = match n {
            0 => must_cap,
            _ if stopped_at[0].is_some() => input.total_cap - (must_cap - used.min(must_cap)),
            _ => input.total_cap,
        };
        for (k, u) in phase.iter().enumerate() {
            let rank_no = offset + k + 1;
            let st = &mut state[u.member];
            if st.kept.len() >= opts.max_passages.max(1) {
                continue;
            }
            let (text, index) = (texts[u.member], &indexes[u.member].1);
            let others = used - st.tokens;
            let whole = Kept {
                passage: u.passage,
                cut: None,
            };
            let cost = cost_with(st, &whole, text, index, tk, opts);
            let kept = if others + cost <= cap {
                Some((whole, cost))
            } else {
                // The first passage that does not fit whole.
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
                stopped_at[n] = Some(rank_no);
                best
            };
            if let Some((kept, cost)) = kept {
                st.records.push(record(text, index, u, rank_no, &kept));
                st.kept.push(kept);
                used = others + cost;
                st.tokens = cost;
            }
            if stopped_at[n].is_some() {
                break;
            }
        }
        offset += phase.len();
    }
    Walked {
        state,
        used,
        stopped_at,
    }
}

/// The trace record of a kept passage (or of the part of it that was kept).
fn record(text: &str, index: &DocIndex, u: &Unit, rank: usize, kept: &Kept) -> PassageRecord {
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
        rank,
        score: (u.score * 1000.0).round() / 1000.0,
        first_line,
        last_line,
        heading: index.passages.path_text(text, u.passage),
        cut: kept.cut.is_some(),
    }
}

/// Each ranked item's block and records, with why each resource got what it got, and
/// the note that sums it up.
fn results(
    input: &Input<'_>,
    texts: &[&str],
    order: &Order,
    walked: Walked,
    outcome: &mut FitOutcome,
) -> Vec<(usize, Fitted)> {
    let (items, indexes) = (input.items, input.indexes);
    let must_count = order.musts.len();
    // Each resource's best rank: any passage of a must, a matching one otherwise.
    let mut best_rank: Vec<Option<usize>> = vec![None; indexes.len()];
    for (r, u) in order.ranked() {
        if (r <= must_count || u.score > 0.0) && best_rank[u.member].is_none() {
            best_rank[u.member] = Some(r);
        }
    }
    let mut out = Vec::with_capacity(indexes.len());
    let (mut kept_passages, mut kept_resources, mut unmatched, mut below) = (0, 0, 0, 0);
    for (m, st) in walked.state.into_iter().enumerate() {
        let (i, index) = (indexes[m].0, &indexes[m].1);
        let item = &items[i];
        let (cost, estimated) = input.costs[i];
        let mut f = Fitted::new(cost, estimated);
        let total = index.passages.passages.len();
        if st.kept.is_empty() {
            let phase = usize::from(!item.must);
            f.reason = Some(match (best_rank[m], walked.stopped_at[phase]) {
                (None, _) => {
                    unmatched += 1;
                    "no passage matched the message".to_owned()
                }
                (Some(r), Some(s)) => {
                    below += 1;
                    format!("its best passage ranked {r}; the budget ran out at rank {s}")
                }
                (Some(r), None) => {
                    // Only a resource over `max_passages_per_resource` is skipped so.
                    below += 1;
                    format!("its best passage ranked {r}, and it was not reached")
                }
            });
            out.push((i, f));
            continue;
        }
        kept_resources += 1;
        kept_passages += st.kept.len();
        let text = texts[m];
        let mut records = st.records;
        records.sort_by_key(|r| (r.first_line, r.last_line));
        if st.kept.len() == total && st.kept.iter().all(|k| k.cut.is_none()) {
            let n = st.tokens;
            f.tokens_before = n;
            f.estimated = false;
            f.treatment = Treatment::Whole;
            f.block = Some(text_block(item, text.to_owned(), Treatment::Whole, n, n));
        } else {
            let treatment = Treatment::Chunked {
                kept: st.kept.len(),
                total,
            };
            let rendered = render(text, index, &st.kept);
            f.treatment = treatment.clone();
            f.block = Some(text_block(item, rendered, treatment, cost, st.tokens));
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
        f.passages = records;
        out.push((i, f));
    }
    let resources = indexes.len();
    let passages: usize = indexes.iter().map(|(_, x)| x.passages.passages.len()).sum();
    let matched = order.matched;
    let mut note = format!(
        "ranked {} of {} against the message, {matched} of them matching; kept {} ({} \
         tokens) from {}",
        plural(passages, "passage"),
        plural(resources, "resource"),
        plural(kept_passages, "passage"),
        walked.used,
        plural(kept_resources, "resource"),
    );
    if let Some(s) = walked.stopped_at[1].or(walked.stopped_at[0]) {
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
