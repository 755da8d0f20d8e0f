//! Passages instead of a fitted context ([`hostpipe_core::PassageRequest`]): the same
//! ranking as a turn's fitting (`fit/walk.rs`: BM25 over every passage of every text,
//! boosted by scope and priority, then dense retrieval and reranking when configured),
//! cut at `top_k` and `score_threshold` instead of at a token budget.
//!
//! Differences from fitting, each because a retrieval caller (Dify's External Knowledge
//! API) asks for relevance and nothing else:
//! - every text is ranked in passages, whatever its strategy (`whole`, `summarize` and
//!   `truncate` are budget treatments); images and notes are not passages;
//! - no resource is a must (a must is a claim on the budget, not a relevance);
//! - `max_passages_per_resource` does not apply; `top_k` bounds the answer;
//! - a passage's score is on a [0, 1] scale ([`RetrievedPassage::score`]), so a
//!   passage that only dense retrieval found (no query term in it) scores 0 and is not
//!   in the answer unless it was reranked.

use std::sync::Arc;

use hostpipe_core::{PassageRecord, PassageRequest, RetrievedPassage, Treatment};

use super::walk::{Input, order};
use super::{FitOptions, FitOutcome, FitQuery, Fitted, Item, content_hash};
use crate::convert::Converted;
use crate::index::{DocIndex, Query};
use crate::passage::SplitKind;

/// How fast a lexical score approaches 1: a passage at the scale (every query term the
/// resources hold, once, at average length) scores 1 − e^−1.5 ≈ 0.78, one at half of it
/// 0.53, one at twice 0.95.
pub const LEXICAL_SATURATION: f64 = 1.5;

/// What [`retrieve`] found: the passages (best first) and, per item (same order as the
/// items), what it gave, for the read records.
pub struct Retrieved {
    /// The passages, best first, at most `top_k`, none under `score_threshold`.
    pub passages: Vec<RetrievedPassage>,
    /// Per item: its passages in the answer (treatment `chunked`) or why none.
    pub outcome: FitOutcome,
}

/// Ranks the passages of `items`' texts against `query` and keeps the best
/// `request.top_k` that score at least `request.score_threshold` (see the module docs
/// and [`RetrievedPassage::score`] for the scale).
pub async fn retrieve(
    mut items: Vec<Item>,
    query: FitQuery<'_>,
    request: &PassageRequest,
    opts: &FitOptions,
) -> Retrieved {
    let mut outcome = FitOutcome {
        fitted: items.iter().map(|_| Fitted::new(0, false)).collect(),
        notes: Vec::new(),
        warnings: Vec::new(),
    };
    let q = Query::new(
        &opts.analyzer,
        query.message,
        query.history,
        opts.history_messages,
        opts.history_weight,
    );
    for it in &mut items {
        it.must = false;
    }
    let members: Vec<usize> = (0..items.len())
        .filter(|&i| matches!(items[i].converted, Converted::Text(_)))
        .collect();
    for (i, f) in outcome.fitted.iter_mut().enumerate() {
        if !members.contains(&i) {
            f.reason = Some("not text: it has no passages to rank".into());
        }
    }
    if q.is_empty() || members.is_empty() || request.top_k == 0 {
        outcome.notes.push(if q.is_empty() {
            "the query has no terms to rank passages by: no passage was retrieved".to_owned()
        } else {
            "nothing to rank: no passage was retrieved".to_owned()
        });
        return Retrieved {
            passages: Vec::new(),
            outcome,
        };
    }
    let indexes: Vec<(usize, Arc<DocIndex>)> = members
        .iter()
        .map(|&i| {
            let Converted::Text(t) = &items[i].converted else {
                unreachable!("members are texts");
            };
            let hash = items[i].text_hash.unwrap_or_else(|| content_hash(t));
            let kind = SplitKind::detect(items[i].mime_type.as_deref(), &items[i].source.uri);
            (i, opts.caches.index(t, hash, kind, opts))
        })
        .collect();
    let texts: Vec<&str> = indexes
        .iter()
        .map(|(i, _)| match &items[*i].converted {
            Converted::Text(t) => t.as_str(),
            _ => "",
        })
        .collect();
    let costs = vec![(0, false); items.len()];
    let input = Input {
        items: &items,
        indexes: &indexes,
        costs: &costs,
        query: &q,
        message: query.message,
        must_cap: 0,
        total_cap: 0,
    };
    let order = order(&input, &texts, opts, &mut outcome).await;
    // The lexical scale: what a passage of average length holding once each query term
    // that some passage (or title) holds scores, the sum of those terms' weights.
    let fields: Vec<Vec<String>> = indexes
        .iter()
        .map(|(i, _)| {
            let s = &items[*i].source;
            crate::index::field_terms(&opts.analyzer, s.name.as_deref(), &s.uri)
        })
        .collect();
    let ceiling: f64 = q
        .terms
        .iter()
        .zip(&order.weights)
        .filter(|((t, _), _)| {
            indexes
                .iter()
                .zip(&fields)
                .any(|((_, x), f)| !x.postings(t).is_empty() || f.contains(t))
        })
        .map(|(_, w)| w)
        .sum();
    // Every unit's score on the [0, 1] scale, in the ranking's order: the reranker's
    // relevance, else the lexical score over the scale, saturated (so that passages
    // past the scale keep their order instead of tying at 1).
    let scale = |k: usize, u: &super::Unit| -> f64 {
        let s = if k < order.reranked {
            u.score
        } else if ceiling > 0.0 {
            let item = &items[indexes[u.member].0];
            let x = order.scores[u.member][u.passage]
                * super::boost(item.source.scope, item.priority)
                / ceiling;
            1.0 - (-LEXICAL_SATURATION * x).exp()
        } else {
            0.0
        };
        if s.is_finite() {
            s.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let mut scored: Vec<(usize, f64, &super::Unit)> = order
        .rest
        .iter()
        .enumerate()
        .map(|(k, u)| (k + 1, scale(k, u), u))
        .filter(|(_, s, _)| *s > 0.0 && *s >= request.score_threshold)
        .collect();
    // Stable: equal scores keep the ranking's order.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.truncate(request.top_k);
    let mut passages = Vec::with_capacity(scored.len());
    let mut per_member: Vec<Vec<PassageRecord>> = vec![Vec::new(); indexes.len()];
    for (rank, score, u) in scored {
        let (i, index) = (indexes[u.member].0, &indexes[u.member].1);
        let text = texts[u.member];
        let p = &index.passages.passages[u.passage];
        let heading = index.passages.path_text(text, u.passage);
        let source = &items[i].source;
        passages.push(RetrievedPassage {
            server: source.server.clone(),
            uri: source.uri.clone(),
            title: source.name.clone(),
            mime_type: items[i].mime_type.clone(),
            text: text[p.range.clone()].trim().to_owned(),
            score: (score * 10_000.0).round() / 10_000.0,
            rank,
            first_line: p.first_line,
            last_line: p.last_line,
            heading: heading.clone(),
        });
        per_member[u.member].push(PassageRecord {
            rank,
            score: (score * 1000.0).round() / 1000.0,
            first_line: p.first_line,
            last_line: p.last_line,
            heading,
            cut: false,
        });
    }
    for (m, mut records) in per_member.into_iter().enumerate() {
        let (i, index) = (indexes[m].0, &indexes[m].1);
        let total = index.passages.passages.len();
        let f = &mut outcome.fitted[i];
        if records.is_empty() {
            f.reason = Some("no passage of it was among the best".into());
            continue;
        }
        records.sort_by_key(|r| (r.first_line, r.last_line));
        f.treatment = Treatment::Chunked {
            kept: records.len(),
            total,
        };
        f.reason = Some(format!("{} of {total} passages retrieved", records.len()));
        f.passages = records;
    }
    let total: usize = indexes.iter().map(|(_, x)| x.passages.passages.len()).sum();
    outcome.notes.push(format!(
        "retrieved {} of {total} passages (top_k {}, score_threshold {})",
        passages.len(),
        request.top_k,
        request.score_threshold
    ));
    Retrieved { passages, outcome }
}
