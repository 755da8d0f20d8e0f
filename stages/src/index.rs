//! Lexical ranking of passages across all the resources of a turn.
//!
//! [`DocIndex`] holds one text's passages ([`crate::passage`]) and, for every term
//! ([`crate::lexical`]), the passages it occurs in and how often. It depends only on the
//! text, its kind, the passage size and the language, so it is built once per content
//! and cached by content hash. A passage's heading path is indexed with it: each
//! distinct term of the headings it sits under counts once more.
//!
//! [`rank`] scores the passages of every text of a turn as one collection with Okapi
//! BM25 (k1 = 1.2, b = 0.75; Robertson and Zaragoza, "The Probabilistic Relevance
//! Framework: BM25 and Beyond", 2009): document frequencies and the average length are
//! taken over all the turn's passages, so a term that is everywhere in the turn counts
//! little wherever it is. Each resource's title and URI are a field of every one of its
//! passages, like the heading path. Query terms carry weights (the message 1, recent
//! history less, see [`Query`]).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::lexical::{Analyzer, Token, camel_parts, scan};
use crate::passage::{BlockKind, Passages, SplitKind, split};

/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalization.
pub const B: f64 = 0.75;

/// One text's passages and their terms.
#[derive(Debug, Default)]
pub struct DocIndex {
    /// The passages.
    pub passages: Passages,
    terms: FxHashMap<Box<str>, u32>,
    /// By term id: (passage, frequency), passages ascending.
    postings: Vec<Vec<(u32, u32)>>,
    /// Terms per passage (heading terms included).
    lengths: Vec<u32>,
}

impl DocIndex {
    /// Splits `text` and indexes its passages.
    pub fn build(text: &str, kind: SplitKind, passage_tokens: usize, analyzer: &Analyzer) -> Self {
        let passages = split(text, kind, passage_tokens);
        let markdown = kind == SplitKind::Markdown;
        let mut index = Self {
            terms: FxHashMap::default(),
            postings: Vec::new(),
            lengths: Vec::with_capacity(passages.passages.len()),
            passages: Passages::default(),
        };
        // Raw word → term id (`u32::MAX`: a stop word): each distinct word is lowercased
        // and stemmed once.
        let mut memo: FxHashMap<&str, u32> = FxHashMap::default();
        let mut memo_parts: FxHashMap<&str, Vec<u32>> = FxHashMap::default();
        let mut ids: Vec<u32> = Vec::new();
        let mut heading_terms: Vec<Vec<u32>> = Vec::with_capacity(passages.headings.len());
        for h in &passages.headings {
            let mut t = Vec::new();
            index.terms_of(
                &text[h.title.clone()],
                true,
                analyzer,
                &mut memo,
                &mut memo_parts,
                &mut t,
            );
            heading_terms.push(t);
        }
        for (pi, p) in passages.passages.iter().enumerate() {
            ids.clear();
            for (range, kind) in &passages.blocks[p.blocks.start as usize..p.blocks.end as usize] {
                // A passage may reach into the next one's first block by a few lines.
                let range = range.start.max(p.range.start)..range.end.min(p.range.end);
                if range.is_empty() {
                    continue;
                }
                let markup = markdown && *kind == BlockKind::Prose;
                index.terms_of(
                    &text[range],
                    markup,
                    analyzer,
                    &mut memo,
                    &mut memo_parts,
                    &mut ids,
                );
            }
            let body = ids.len();
            let mut heads: Vec<u32> = p
                .path
                .iter()
                .filter_map(|&h| heading_terms.get(h as usize))
                .flatten()
                .copied()
                .collect();
            heads.sort_unstable();
            heads.dedup();
            ids.extend_from_slice(&heads);
            index
                .lengths
                .push(u32::try_from(body + heads.len()).unwrap_or(u32::MAX));
            ids.sort_unstable();
            let passage = u32::try_from(pi).unwrap_or(u32::MAX);
            let mut k = 0;
            while k < ids.len() {
                let id = ids[k];
                let run = ids[k..].iter().take_while(|&&x| x == id).count();
                index.postings[id as usize].push((passage, u32::try_from(run).unwrap_or(u32::MAX)));
                k += run;
            }
        }
        index.passages = passages;
        index
    }

    fn intern(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.terms.get(term) {
            return id;
        }
        let id = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
        self.terms.insert(term.into(), id);
        self.postings.push(Vec::new());
        id
    }

    /// Appends the term ids of `text` to `out`.
    fn terms_of<'t>(
        &mut self,
        text: &'t str,
        markup: bool,
        analyzer: &Analyzer,
        memo: &mut FxHashMap<&'t str, u32>,
        memo_parts: &mut FxHashMap<&'t str, Vec<u32>>,
        out: &mut Vec<u32>,
    ) {
        scan(text, markup, &mut |tok, _| match tok {
            Token::Word(w) => {
                if let Some(&id) = memo.get(w) {
                    if id != u32::MAX {
                        out.push(id);
                    }
                    if let Some(parts) = memo_parts.get(w) {
                        out.extend_from_slice(parts);
                    }
                    return;
                }
                let mut buf = String::new();
                let own = analyzer
                    .word_term(w, &mut buf)
                    .map_or(u32::MAX, |t| self.intern(&t));
                memo.insert(w, own);
                if own != u32::MAX {
                    out.push(own);
                }
                let parts = camel_parts(w);
                if parts.len() > 1 {
                    let ids: Vec<u32> = parts
                        .into_iter()
                        .filter_map(|p| analyzer.word_term(p, &mut buf).map(|t| self.intern(&t)))
                        .collect();
                    out.extend_from_slice(&ids);
                    memo_parts.insert(w, ids);
                }
            }
            Token::Cjk(run) => Analyzer::cjk_index_terms(run, &mut |t| out.push(self.intern(t))),
        });
    }

    /// Passages containing `term`, with its frequency in each.
    pub fn postings(&self, term: &str) -> &[(u32, u32)] {
        self.terms
            .get(term)
            .and_then(|&id| self.postings.get(id as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// Terms of passage `i` (its length for BM25).
    pub fn length(&self, i: usize) -> u32 {
        self.lengths.get(i).copied().unwrap_or(0)
    }

    /// Approximate heap size in bytes (for cache weighing).
    pub fn heap_bytes(&self) -> usize {
        let postings: usize = self.postings.iter().map(|p| p.len() * 8 + 24).sum();
        let terms: usize = self.terms.keys().map(|k| k.len() + 32).sum();
        let passages: usize = self
            .passages
            .passages
            .iter()
            .map(|p| 64 + p.path.len() * 4)
            .sum();
        postings + terms + passages + self.passages.blocks.len() * 24 + self.lengths.len() * 4
    }
}

/// A weighted query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    /// (term, weight): the message's terms weigh 1; terms only in recent history less.
    pub terms: Vec<(String, f64)>,
}

impl Query {
    /// The query of a turn: the terms of `message` (weight 1), then those of `history`
    /// (most recent first) not already in it: the most recent at `history_weight`, each
    /// older one at half the weight of the one after it. Only history messages that
    /// have terms count, at most `history_messages` of them: "thanks" or "ok" between a
    /// question and its follow-up do not push the question out.
    pub fn new(
        analyzer: &Analyzer,
        message: &str,
        history: &[&str],
        history_messages: usize,
        history_weight: f64,
    ) -> Self {
        let mut terms: Vec<(String, f64)> = analyzer
            .query_terms(message)
            .into_iter()
            .map(|t| (t, 1.0))
            .collect();
        if history_weight > 0.0 {
            let with_terms = history
                .iter()
                .map(|h| analyzer.query_terms(h))
                .filter(|t| !t.is_empty())
                .take(history_messages);
            // Each older message weighs half the one after it.
            for (age, h) in with_terms.enumerate() {
                let weight = history_weight * 0.5f64.powi(i32::try_from(age).unwrap_or(i32::MAX));
                for t in h {
                    if !terms.iter().any(|(o, _)| *o == t) {
                        terms.push((t, weight));
                    }
                }
            }
        }
        Self { terms }
    }

    /// Whether there is nothing to rank by.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// One text of the turn, as the ranking sees it.
pub struct RankInput<'a> {
    /// Its index.
    pub index: &'a DocIndex,
    /// Terms of its title and URI (a field of each of its passages), distinct.
    pub field_terms: &'a [String],
}

/// The terms of a resource's title and URI (scheme and punctuation dropped), distinct.
pub fn field_terms(analyzer: &Analyzer, name: Option<&str>, uri: &str) -> Vec<String> {
    let path = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let mut out: Vec<String> = Vec::new();
    for part in [name.unwrap_or(""), path] {
        for t in analyzer.query_terms(part) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// BM25 scores of every passage of every input, as one collection (see the module docs).
/// Also returns, per query term, its weighted inverse document frequency (for finding
/// the best-matching span of a passage).
pub fn rank(inputs: &[RankInput<'_>], query: &Query) -> (Vec<Vec<f64>>, Vec<f64>) {
    let n: usize = inputs.iter().map(|i| i.index.passages.passages.len()).sum();
    let mut scores: Vec<Vec<f64>> = inputs
        .iter()
        .map(|i| vec![0.0; i.index.passages.passages.len()])
        .collect();
    if n == 0 || query.is_empty() {
        return (scores, vec![0.0; query.terms.len()]);
    }
    let field_len = |i: &RankInput<'_>| i.field_terms.len() as f64;
    let total_len: f64 = inputs
        .iter()
        .map(|i| {
            i.index.lengths.iter().map(|&l| f64::from(l)).sum::<f64>()
                + field_len(i) * i.index.passages.passages.len() as f64
        })
        .sum();
    let avg = (total_len / n as f64).max(1.0);
    let mut weights = Vec::with_capacity(query.terms.len());
    for (term, weight) in &query.terms {
        let in_field: Vec<bool> = inputs
            .iter()
            .map(|i| i.field_terms.iter().any(|f| f == term))
            .collect();
        let df: usize = inputs
            .iter()
            .zip(&in_field)
            .map(|(i, &f)| {
                if f {
                    i.index.passages.passages.len()
                } else {
                    i.index.postings(term).len()
                }
            })
            .sum();
        let idf = ((n as f64 - df as f64 + 0.5) / (df as f64 + 0.5) + 1.0).ln();
        let w = idf * weight;
        weights.push(w);
        if df == 0 {
            continue;
        }
        for ((input, out), &f) in inputs.iter().zip(&mut scores).zip(&in_field) {
            let extra = u32::from(f);
            let fl = field_len(input);
            let passages = out.len();
            let mut add = |p: usize, tf: u32| {
                let tf = f64::from(tf + extra);
                let dl = f64::from(input.index.length(p)) + fl;
                let norm = K1 * (1.0 - B + B * dl / avg);
                out[p] += w * tf * (K1 + 1.0) / (tf + norm);
            };
            if f {
                let mut tf = vec![0u32; passages];
                for &(p, c) in input.index.postings(term) {
                    tf[p as usize] = c;
                }
                for (p, c) in tf.into_iter().enumerate() {
                    add(p, c);
                }
            } else {
                for &(p, c) in input.index.postings(term) {
                    add(p as usize, c);
                }
            }
        }
    }
    // Each passage's score grows with its resource's score as a whole document.
    let doc = document_scores(inputs, query);
    let top = doc.iter().copied().fold(0.0, f64::max);
    if top > 0.0 {
        for (out, d) in scores.iter_mut().zip(&doc) {
            let factor = 1.0 + DOCUMENT_WEIGHT * d / top;
            out.iter_mut().for_each(|s| *s *= factor);
        }
    }
    (scores, weights)
}

/// How much a resource's relevance as a whole lifts its passages: a passage's score is
/// multiplied by `1 + DOCUMENT_WEIGHT × doc / best_doc`, where `doc` is the BM25 score
/// of its resource as one document among the turn's resources (passage evidence
/// combined with document evidence, as in Callan, "Passage-level evidence in document
/// retrieval", SIGIR 1994). It lifts answer recall on both the English and the Chinese
/// questions of the quality benchmark (docs/benchmarks.md).
pub const DOCUMENT_WEIGHT: f64 = 0.5;

/// BM25 of `query` against each input as one document (term frequencies summed over
/// its passages), the inputs being the collection.
fn document_scores(inputs: &[RankInput<'_>], query: &Query) -> Vec<f64> {
    let n = inputs.len() as f64;
    let lengths: Vec<f64> = inputs
        .iter()
        .map(|i| i.index.lengths.iter().map(|&l| f64::from(l)).sum())
        .collect();
    let avg = (lengths.iter().sum::<f64>() / n.max(1.0)).max(1.0);
    let mut out = vec![0.0; inputs.len()];
    for (term, weight) in &query.terms {
        let tfs: Vec<f64> = inputs
            .iter()
            .map(|i| {
                i.index
                    .postings(term)
                    .iter()
                    .map(|&(_, c)| f64::from(c))
                    .sum()
            })
            .collect();
        let df = tfs.iter().filter(|&&t| t > 0.0).count() as f64;
        if df == 0.0 {
            continue;
        }
        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
        for ((o, tf), dl) in out.iter_mut().zip(&tfs).zip(&lengths) {
            let norm = K1 * (1.0 - B + B * dl / avg);
            *o += weight * idf * tf * (K1 + 1.0) / (tf + norm);
        }
    }
    out
}

/// A shared, immutable index.
pub type SharedIndex = Arc<DocIndex>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexical::Language;

    #[test]
    fn one_collection_the_rare_term_decides_and_headings_count() {
        let a = Analyzer::new(Language::English);
        let d1 = "# Cache\n\nThe cache keeps builds. The cache is big.\n\n## Timeouts\n\nA request waits 30 s.\n";
        let d2 = "# Other\n\nThe cache is mentioned here too, about caching.\n";
        let i1 = DocIndex::build(d1, SplitKind::Markdown, 16, &a);
        let i2 = DocIndex::build(d2, SplitKind::Markdown, 16, &a);
        assert_eq!(i1.passages.passages.len(), 2);
        let q = Query::new(
            &a,
            "How long does the cache request wait before a timeout?",
            &[],
            2,
            0.3,
        );
        let f: Vec<String> = Vec::new();
        let (scores, _) = rank(
            &[
                RankInput {
                    index: &i1,
                    field_terms: &f,
                },
                RankInput {
                    index: &i2,
                    field_terms: &f,
                },
            ],
            &q,
        );
        // The timeouts passage (heading "Timeouts" counts as its field) wins.
        assert!(scores[0][1] > scores[0][0], "{scores:?}");
        assert!(scores[0][1] > scores[1][0], "{scores:?}");
    }

    #[test]
    fn history_terms_weigh_less_than_the_message() {
        let a = Analyzer::new(Language::English);
        // Most recent first: "ok" and "thanks!" have no terms and do not count.
        let q = Query::new(
            &a,
            "and its timeout?",
            &[
                "ok",
                "thanks!",
                "How is the cache configured?",
                "What is a zebra?",
            ],
            1,
            0.3,
        );
        assert_eq!(
            q.terms,
            [
                ("timeout".to_owned(), 1.0),
                ("cach".to_owned(), 0.3),
                ("configur".to_owned(), 0.3)
            ]
        );
    }

    #[test]
    fn title_and_uri_terms_reach_every_passage_of_their_resource() {
        let a = Analyzer::new(Language::English);
        let d = "# A\n\nalpha words here.\n\n# B\n\nbeta words here.\n";
        let i = DocIndex::build(d, SplitKind::Markdown, 8, &a);
        let other = DocIndex::build("# C\n\ngamma words.\n", SplitKind::Markdown, 8, &a);
        let fields = field_terms(&a, None, "kb://docs/workspaces.md");
        assert_eq!(fields, ["doc", "workspac", "md"]);
        let none: Vec<String> = Vec::new();
        let (scores, _) = rank(
            &[
                RankInput {
                    index: &i,
                    field_terms: &fields,
                },
                RankInput {
                    index: &other,
                    field_terms: &none,
                },
            ],
            &Query::new(&a, "workspaces", &[], 0, 0.0),
        );
        assert!(
            scores[0].iter().all(|s| *s > 0.0) && scores[1][0] == 0.0,
            "{scores:?}"
        );
    }
}
