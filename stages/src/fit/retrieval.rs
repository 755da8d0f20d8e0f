//! Optional dense retrieval and reranking, fused with the lexical ranking of passages.
//!
//! Both are off unless a pipeline names an embedder or a reranker
//! (`resource_context_injection.embedder`, `.reranker`; the services are configured in
//! `[embedders.NAME]` and `[rerankers.NAME]`).
//!
//! - **Dense retrieval**: every candidate passage (the lexical order first, then the
//!   passages no query term matched, at most `max_embedded` in all) and the message are
//!   embedded; passages are ordered by cosine similarity to the message; that order and
//!   the lexical one (every passage a query term matches, and the dense order's first
//!   [`DENSE_TOP`]) are fused by reciprocal rank fusion (RRF, k = 60: Cormack, Clarke
//!   and Büttcher, SIGIR 2009), so a passage that shares no word with the message can
//!   still come first. Passage vectors are cached by embedder and content hash: a warm
//!   turn embeds only its message.
//! - **Reranking**: the first `rerank_top` passages of that order go to the reranker
//!   with the message; they are put in its order, the rest follow unchanged.
//!
//! A service that fails or times out leaves the order as it was, and the trace says why;
//! it is then left alone for [`BACKOFF`] (30 s), so a service that is down costs one turn
//! its timeout, not every turn. Vectors that are all zeros are ignored, with a warning.

use std::sync::Arc;

use hostpipe_core::{Embedder, Reranker};

use super::{Caches, Unit, content_hash};
use crate::index::DocIndex;

/// The RRF constant.
pub const RRF_K: f64 = 60.0;

/// Longest text sent for one passage, in bytes (embedding and rerank models read a few
/// hundred tokens; a passage is rarely longer).
const MAX_INPUT_BYTES: usize = 8 * 1024;

/// Dense retrieval and reranking settings of a pipeline.
pub struct Retrieval {
    /// Dense retrieval, when configured.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Reranking, when configured.
    pub reranker: Option<Arc<dyn Reranker>>,
    /// How many of the first passages the reranker reorders. Default 20.
    pub rerank_top: usize,
    /// Most passages embedded in one turn (the lexical order first). Default 2048.
    pub max_embedded: usize,
    /// When each service last failed: it is not asked again for [`BACKOFF`], so a service
    /// that is down does not cost every turn its timeout.
    pub failed_at: [std::sync::Mutex<Option<std::time::Instant>>; 2],
}

/// How long a service that failed is left alone (the lexical order is used meanwhile).
pub const BACKOFF: std::time::Duration = std::time::Duration::from_secs(30);

/// How many of the dense order's first passages join the fusion (a passage no query term
/// matched must be among them to come in at all).
pub const DENSE_TOP: usize = 50;

/// What the reordering did, for the trace.
#[derive(Debug, Default)]
pub(crate) struct Reordered {
    /// Notes: what was used.
    pub notes: Vec<String>,
    /// Warnings: what failed (the order is then the one before it).
    pub warnings: Vec<String>,
    /// How many passages at the head of the order carry the reranker's relevance as
    /// their score (0 when nothing was reranked).
    pub reranked: usize,
}

/// The ranked texts the units point into.
pub(crate) struct Pool<'a> {
    /// (item, index) of each member.
    pub indexes: &'a [(usize, Arc<DocIndex>)],
    /// Each member's text.
    pub texts: &'a [&'a str],
    /// Each member's scope and priority factor.
    pub boost: &'a (dyn Fn(usize) -> f64 + Sync),
}

/// A passage's text as the services see it: its heading path, then its text.
fn input_of(index: &DocIndex, text: &str, passage: usize) -> String {
    let p = &index.passages.passages[passage];
    let path = index.passages.path_text(text, passage);
    let body = &text[p.range.clone()];
    let mut end = body.len().min(MAX_INPUT_BYTES);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    if path.is_empty() {
        body[..end].to_owned()
    } else {
        format!("{path}\n\n{}", &body[..end])
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 || a.len() != b.len() {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

impl Retrieval {
    /// Reorders `order` (the lexical order of the passages that match the query);
    /// `unmatched` are the other candidate passages, which dense retrieval may bring in.
    /// `boost` gives each member's scope and priority factor.
    pub(crate) async fn reorder(
        &self,
        message: &str,
        order: &mut Vec<Unit>,
        unmatched: &[Unit],
        pool: &Pool<'_>,
        caches: &Caches,
    ) -> Reordered {
        let (indexes, texts) = (pool.indexes, pool.texts);
        let mut out = Reordered::default();
        if let Some(embedder) = &self.embedder
            && self.available(0, "embedder", embedder.name(), &mut out)
        {
            match self
                .dense(embedder.as_ref(), message, order, unmatched, pool, caches)
                .await
            {
                Ok(Some(fused)) => {
                    out.notes.push(format!(
                        "passages ranked by BM25 fused with dense retrieval by `{}` (reciprocal rank fusion of {} passages)",
                        embedder.name(),
                        fused.len()
                    ));
                    *order = fused;
                }
                Ok(None) => out.warnings.push(format!(
                    "embedder `{}` gave vectors with no direction (all zeros): the lexical ranking was used",
                    embedder.name()
                )),
                Err(e) => {
                    self.failed(0);
                    out.warnings.push(format!(
                        "dense retrieval failed, the lexical ranking was used: {e}"
                    ));
                }
            }
        }
        if let Some(reranker) = &self.reranker
            && !order.is_empty()
            && self.available(1, "reranker", reranker.name(), &mut out)
        {
            let n = self.rerank_top.min(order.len());
            let inputs: Vec<String> = order[..n]
                .iter()
                .map(|u| input_of(&indexes[u.member].1, texts[u.member], u.passage))
                .collect();
            let documents: Vec<&str> = inputs.iter().map(String::as_str).collect();
            match reranker.rerank(message, &documents).await {
                Ok(scored) => {
                    let mut top: Vec<(usize, f64)> = scored
                        .into_iter()
                        .filter(|(i, s)| *i < n && s.is_finite())
                        .collect();
                    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    top.dedup_by_key(|x| x.0);
                    let mut head: Vec<Unit> = top
                        .iter()
                        .map(|&(i, s)| Unit {
                            score: s,
                            ..order[i]
                        })
                        .collect();
                    // Passages the reranker did not score keep their order after it.
                    head.extend(
                        (0..n)
                            .filter(|i| !top.iter().any(|(j, _)| j == i))
                            .map(|i| order[i]),
                    );
                    out.reranked = top.len();
                    order.splice(..n, head);
                    out.notes.push(format!(
                        "the first {n} passages reranked by `{}`",
                        reranker.name()
                    ));
                }
                Err(e) => {
                    self.failed(1);
                    out.warnings.push(format!(
                        "reranking failed, the order before it was used: {e}"
                    ));
                }
            }
        }
        out
    }

    /// Whether service `i` may be asked: not when it failed less than [`BACKOFF`] ago
    /// (then the trace says so).
    fn available(&self, i: usize, kind: &str, name: &str, out: &mut Reordered) -> bool {
        let failed = self.failed_at[i]
            .lock()
            .map(|at| *at)
            .unwrap_or_else(|e| *e.into_inner());
        match failed.map(|at| at.elapsed()) {
            Some(ago) if ago < BACKOFF => {
                out.warnings.push(format!(
                    "{kind} `{name}` was not asked: it failed {} s ago (asked again after {} s); the order before it was used",
                    ago.as_secs(),
                    BACKOFF.as_secs()
                ));
                false
            }
            _ => true,
        }
    }

    /// Notes that service `i` failed now.
    fn failed(&self, i: usize) {
        let now = Some(std::time::Instant::now());
        match self.failed_at[i].lock() {
            Ok(mut at) => *at = now,
            Err(e) => *e.into_inner() = now,
        }
    }

    /// The lexical order fused with the first [`DENSE_TOP`] of the dense one; `None` when
    /// the vectors say nothing (all zeros).
    async fn dense(
        &self,
        embedder: &dyn Embedder,
        message: &str,
        order: &[Unit],
        unmatched: &[Unit],
        pool: &Pool<'_>,
        caches: &Caches,
    ) -> Result<Option<Vec<Unit>>, hostpipe_core::RetrievalError> {
        let (indexes, texts, boost) = (pool.indexes, pool.texts, pool.boost);
        let candidates: Vec<Unit> = order
            .iter()
            .chain(unmatched)
            .take(self.max_embedded)
            .copied()
            .collect();
        let inputs: Vec<String> = candidates
            .iter()
            .map(|u| input_of(&indexes[u.member].1, texts[u.member], u.passage))
            .collect();
        let name = embedder.name().to_owned();
        let key = |s: &str| (name.clone(), content_hash(s));
        // What the cache does not have, the message first.
        let mut missing: Vec<&str> = Vec::new();
        if caches.embedding(&key(message)).is_none() {
            missing.push(message);
        }
        for s in &inputs {
            if caches.embedding(&key(s)).is_none() && !missing.contains(&s.as_str()) {
                missing.push(s);
            }
        }
        if !missing.is_empty() {
            let vectors = embedder.embed(&missing).await?;
            for (s, v) in missing.iter().zip(vectors) {
                caches.put_embedding(key(s), v.into());
            }
        }
        let q = caches.embedding(&key(message)).unwrap_or_default();
        let mut dense: Vec<(usize, f64)> = inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let v = caches.embedding(&key(s)).unwrap_or_default();
                (i, cosine(&q, &v))
            })
            .collect();
        if dense.iter().all(|(_, s)| *s == 0.0) {
            return Ok(None);
        }
        dense.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // The lexical matches, and the dense order's first DENSE_TOP.
        let lexical = order.len().min(candidates.len());
        let mut fused: Vec<(usize, f64)> = (0..lexical).map(|i| (i, 0.0)).collect();
        for (rank, &(i, _)) in dense.iter().take(DENSE_TOP).enumerate() {
            if i >= lexical {
                fused.push((i, 0.0));
            }
            if let Some(f) = fused.iter_mut().find(|f| f.0 == i) {
                f.1 += 1.0 / (RRF_K + rank as f64 + 1.0);
            }
        }
        for f in &mut fused {
            if f.0 < lexical {
                f.1 += 1.0 / (RRF_K + f.0 as f64 + 1.0);
            }
            f.1 *= boost(candidates[f.0].member);
        }
        fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut out: Vec<Unit> = fused
            .into_iter()
            .map(|(i, s)| Unit {
                score: s,
                ..candidates[i]
            })
            .collect();
        // Matching passages past what was embedded follow in their lexical order.
        out.extend(
            order
                .iter()
                .skip(candidates.len())
                .map(|u| Unit { score: 0.0, ..*u }),
        );
        Ok(Some(out))
    }
}
