//! Chunk and select: split a text into chunks sized in characters (cheap), rank them
//! against the user's message with BM25, and keep the best that fit a token allowance,
//! in document order, each with its locator.
//!
//! Only the chunks considered for the context are tokenized, so a 2 MB document costs
//! one character-level split and one word scan, not a full tokenization.

use hostpipe_core::Tokenizer;
use text_splitter::{MarkdownSplitter, TextSplitter};

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Byte range in the document.
    pub range: std::ops::Range<usize>,
    /// First line (1-based).
    pub first_line: usize,
    /// Last line (1-based).
    pub last_line: usize,
    /// Words in the chunk (BM25 length).
    pub words: usize,
}

/// A document split into chunks. Depends only on the text, the splitter kind and the
/// chunk size, so it can be cached by content hash.
#[derive(Debug, Clone)]
pub struct Chunked {
    /// The chunks, in document order.
    pub chunks: Vec<Chunk>,
    /// Each chunk's rendered cost in tokens (locator line, text, newline), counted the
    /// first time it is needed: a cached split makes a warm turn count nothing again.
    /// Counts are for one encoding; a split is cached per encoding.
    costs: Vec<std::sync::OnceLock<usize>>,
    /// The word index, built the second time the split is used (see
    /// [`Chunked::term_index`]).
    index: std::sync::OnceLock<TermIndex>,
}

/// Where each word occurs: the postings (chunk, count) of every whole word of the text,
/// ASCII-lowercased. It makes scoring a lookup per query word instead of a scan of the
/// text; it depends only on the text and the split, so it is cached with the split.
#[derive(Debug, Clone, Default)]
pub struct TermIndex {
    postings: std::collections::HashMap<Box<str>, Vec<(u32, u32)>>,
}

impl TermIndex {
    /// Indexes the words of `text` (runs of alphanumeric, non-CJK characters: the same
    /// whole words the scan counts), each in the chunk where it starts.
    fn build(text: &str, chunks: &[Chunk]) -> Self {
        let mut postings: std::collections::HashMap<Box<str>, Vec<(u32, u32)>> =
            std::collections::HashMap::new();
        let mut chunk = 0usize;
        let mut key = String::new();
        let mut record = |word: &str, at: usize| {
            while chunk < chunks.len() && chunks[chunk].range.end <= at {
                chunk += 1;
            }
            if chunks.get(chunk).is_none_or(|c| c.range.start > at) {
                return;
            }
            let Ok(ci) = u32::try_from(chunk) else { return };
            key.clear();
            key.push_str(word);
            key.make_ascii_lowercase();
            let list = match postings.get_mut(key.as_str()) {
                Some(list) => list,
                None => postings.entry(key.as_str().into()).or_default(),
            };
            match list.last_mut() {
                Some((last, n)) if *last == ci => *n += 1,
                _ => list.push((ci, 1)),
            }
        };
        let mut start: Option<usize> = None;
        for (i, c) in text.char_indices() {
            let in_word = c.is_alphanumeric() && !is_cjk(c);
            match (in_word, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    record(&text[s..i], s);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            record(&text[s..], s);
        }
        Self { postings }
    }
}

impl Chunked {
    /// The word index of `text` (which must be the text this split was made from),
    /// built on first use. [`bm25`] uses it once it exists; callers build it when a
    /// split is reused, so a text scored once never pays for an index.
    pub fn term_index(&self, text: &str) -> &TermIndex {
        self.index
            .get_or_init(|| TermIndex::build(text, &self.chunks))
    }

    /// The rendered cost of chunk `i` of `text`.
    fn cost(&self, text: &str, i: usize, tk: &Tokenizer) -> usize {
        let n = self.chunks.len();
        let c = &self.chunks[i];
        *self.costs[i]
            .get_or_init(|| tk.count(&locator(i, n, c)) + tk.count(&text[c.range.clone()]) + 1)
    }
}

/// How a text is split: by its structure where text-splitter understands it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SplitKind {
    /// Markdown: headings, then paragraphs, then sentences.
    Markdown,
    /// Rust source, by syntax tree (tree-sitter).
    Rust,
    /// Python source, by syntax tree.
    Python,
    /// JavaScript source, by syntax tree.
    JavaScript,
    /// Plain text: paragraphs, sentences, words.
    Plain,
}

impl SplitKind {
    /// The kind for a MIME type, falling back to the URI's file extension when the MIME
    /// type is missing or generic (`text/plain`).
    pub fn detect(mime: Option<&str>, uri: &str) -> Self {
        let essence = mime.map(|m| {
            m.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        match essence.as_deref() {
            Some("text/markdown" | "text/x-markdown") => return Self::Markdown,
            Some("text/x-rust" | "text/rust") => return Self::Rust,
            Some(
                "text/x-python" | "text/python" | "application/x-python" | "text/x-script.python",
            ) => return Self::Python,
            Some(
                "text/javascript"
                | "application/javascript"
                | "text/ecmascript"
                | "application/ecmascript",
            ) => {
                return Self::JavaScript;
            }
            None | Some("text/plain" | "application/octet-stream") => {}
            Some(_) => return Self::Plain,
        }
        let path = uri.split(['?', '#']).next().unwrap_or(uri);
        match path
            .rsplit_once('.')
            .map(|(_, ext)| ext.to_ascii_lowercase())
            .as_deref()
        {
            Some("md" | "markdown") => Self::Markdown,
            Some("rs") => Self::Rust,
            Some("py") => Self::Python,
            Some("js" | "mjs" | "cjs") => Self::JavaScript,
            _ => Self::Plain,
        }
    }
}

/// Splits `text` into chunks of about `chunk_tokens` tokens (sized as `4 × chunk_tokens`
/// characters: the usual English ratio; the exact count is taken later, only for what is
/// kept), along the structure `kind` knows.
pub fn split(text: &str, kind: SplitKind, chunk_tokens: usize) -> Chunked {
    let chars = chunk_tokens.max(16) * 4;
    let collect = |it: &mut dyn Iterator<Item = (usize, &str)>| {
        it.map(|(o, c)| (o, c.len())).collect::<Vec<_>>()
    };
    let code = |language: tree_sitter_language::LanguageFn| {
        text_splitter::CodeSplitter::new(language, chars)
            .map(|s| collect(&mut s.chunk_indices(text)))
    };
    let ranges: Vec<(usize, usize)> = match kind {
        SplitKind::Markdown => collect(&mut MarkdownSplitter::new(chars).chunk_indices(text)),
        SplitKind::Rust => code(tree_sitter_rust::LANGUAGE).unwrap_or_default(),
        SplitKind::Python => code(tree_sitter_python::LANGUAGE).unwrap_or_default(),
        SplitKind::JavaScript => code(tree_sitter_javascript::LANGUAGE).unwrap_or_default(),
        SplitKind::Plain => Vec::new(),
    };
    // A grammar that fails to load (a version mismatch) falls back to plain splitting.
    let ranges = if ranges.is_empty() && !text.is_empty() {
        collect(&mut TextSplitter::new(chars).chunk_indices(text))
    } else {
        ranges
    };
    // A heading alone says nothing: it goes with the text under it.
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    let mut carry: Option<(usize, usize)> = None; // (start, end) of pending headings
    for (s0, len) in ranges {
        let end = s0 + len;
        let start = carry.take().map_or(s0, |(s, _)| s);
        let piece = text[s0..end].trim();
        if kind == SplitKind::Markdown && piece.starts_with('#') && !piece.contains('\n') {
            carry = Some((start, end));
            continue;
        }
        merged.push((start, end - start));
    }
    if let Some((start, end)) = carry {
        merged.push((start, end - start));
    }
    let ranges = merged;
    let newlines: Vec<usize> = text.match_indices('\n').map(|(i, _)| i).collect();
    let line_of = |offset: usize| newlines.partition_point(|&n| n < offset) + 1;
    let chunks: Vec<Chunk> = ranges
        .into_iter()
        .map(|(start, len)| {
            let end = start + len;
            Chunk {
                range: start..end,
                first_line: line_of(start),
                last_line: line_of(end.saturating_sub(1).max(start)),
                words: words(&text[start..end]).count(),
            }
        })
        .collect();
    let costs = chunks.iter().map(|_| std::sync::OnceLock::new()).collect();
    Chunked {
        chunks,
        costs,
        index: std::sync::OnceLock::new(),
    }
}

/// Lowercase-insensitive word iterator: runs of alphanumeric characters.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "say", "says", "tell", "that", "the",
    "this", "to", "was", "what", "when", "where", "which", "who", "why", "will", "with", "you",
];

/// Chinese, Japanese and Korean characters: written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30FF}' | '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}' | '\u{AC00}'..='\u{D7AF}')
}

/// The words of `query` worth ranking by: lowercase, deduplicated, without stop words.
/// A run of CJK characters has no spaces to split on, so it gives its character bigrams
/// (its single character when alone).
pub fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut push = |t: String| {
        if !STOPWORDS.contains(&t.as_str()) && !terms.contains(&t) {
            terms.push(t);
        }
    };
    for w in words(query) {
        let w = w.to_lowercase();
        if w.chars().any(is_cjk) {
            let chars: Vec<char> = w.chars().collect();
            if chars.len() == 1 {
                push(w);
            }
            for pair in chars.windows(2) {
                push(pair.iter().collect());
            }
        } else {
            push(w);
        }
    }
    terms
}

/// Surface forms of an English term that BM25 should count as the term: a light
/// suffix strip (`-s`, `-es`, `-ed`, `-ing`, `-ly`) and the common endings back on,
/// so "visitors park" finds "visitor parking".
fn variants(term: &str) -> Vec<String> {
    if !term.chars().all(|c| c.is_ascii_alphabetic()) || term.len() < 4 {
        return vec![term.to_owned()];
    }
    let stem = ["ing", "ed", "es", "s", "ly"]
        .iter()
        .find_map(|suf| term.strip_suffix(suf).filter(|s| s.len() >= 3))
        .unwrap_or(term);
    let mut out = vec![term.to_owned()];
    for v in [
        stem.to_owned(),
        format!("{stem}s"),
        format!("{stem}es"),
        format!("{stem}ed"),
        format!("{stem}ing"),
    ] {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Each variant counts for the first term that has it, as in the scan (where the
/// first of two equal patterns wins).
fn owned_variants(terms: &[String]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        for v in variants(t) {
            if !out.iter().any(|(o, _)| *o == v) {
                out.push((v, i));
            }
        }
    }
    out
}

/// Term frequencies from the word index: one lookup per variant.
fn count_indexed(index: &TermIndex, terms: &[String], tf: &mut [Vec<u32>]) {
    for (variant, term) in owned_variants(terms) {
        for &(chunk, count) in index.postings.get(variant.as_str()).into_iter().flatten() {
            if let Some(row) = usize::try_from(chunk).ok().and_then(|c| tf.get_mut(c)) {
                row[term] += count;
            }
        }
    }
}

/// Term frequencies by one pass of an Aho-Corasick automaton over the whole text
/// (ASCII case-insensitive; a non-ASCII term matches as written in lowercase), keeping
/// whole-word matches.
fn count_scanned(text: &str, chunked: &Chunked, terms: &[String], tf: &mut [Vec<u32>]) {
    let (patterns, term_of): (Vec<String>, Vec<usize>) = owned_variants(terms).into_iter().unzip();
    let Ok(ac) = aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(&patterns)
    else {
        return;
    };
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() && !is_cjk(c));
    for m in ac.find_iter(text) {
        // Whole words only (CJK text has no word boundaries to check).
        if is_word(text[..m.start()].chars().next_back()) || is_word(text[m.end()..].chars().next())
        {
            continue;
        }
        let i = chunked.chunks.partition_point(|c| c.range.end <= m.start());
        if let Some(c) = chunked.chunks.get(i)
            && c.range.start <= m.start()
        {
            tf[i][term_of[m.pattern().as_usize()]] += 1;
        }
    }
}

/// BM25 scores (k1 = 1.2, b = 0.75; Robertson and Zaragoza, "The Probabilistic
/// Relevance Framework: BM25 and Beyond", 2009) of each chunk for `terms`, treating the
/// chunks of the document as the corpus.
pub fn bm25(text: &str, chunked: &Chunked, terms: &[String]) -> Vec<f64> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let n = chunked.chunks.len();
    if n == 0 || terms.is_empty() {
        return vec![0.0; n];
    }
    let mut tf: Vec<Vec<u32>> = vec![vec![0u32; terms.len()]; n];
    match chunked.index.get() {
        // CJK terms match inside runs of CJK text, which the index does not split.
        Some(index) if !terms.iter().any(|t| t.chars().any(is_cjk)) => {
            count_indexed(index, terms, &mut tf);
        }
        _ => count_scanned(text, chunked, terms, &mut tf),
    }
    let avg = chunked.chunks.iter().map(|c| c.words).sum::<usize>() as f64 / n as f64;
    let idf: Vec<f64> = (0..terms.len())
        .map(|i| {
            let df = tf.iter().filter(|c| c[i] > 0).count() as f64;
            ((n as f64 - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    chunked
        .chunks
        .iter()
        .zip(&tf)
        .map(|(c, counts)| {
            let norm = K1 * (1.0 - B + B * c.words as f64 / avg.max(1.0));
            counts
                .iter()
                .zip(&idf)
                .map(|(&f, idf)| {
                    let f = f64::from(f);
                    idf * f * (K1 + 1.0) / (f + norm)
                })
                .sum()
        })
        .collect()
}

/// The selected chunks, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The rendered text: each kept chunk under its locator line, in document order.
    pub text: String,
    /// Exact tokens of `text`.
    pub tokens: usize,
    /// Chunks kept.
    pub kept: usize,
    /// Chunks in all.
    pub total: usize,
}

fn locator(i: usize, n: usize, c: &Chunk) -> String {
    format!(
        "[chunk {} of {n}, lines {}–{}]\n",
        i + 1,
        c.first_line,
        c.last_line
    )
}

/// Keeps the best-scoring chunks that fit `allowance` tokens, locators included, then,
/// while room is left, unscored chunks from the top; rendered in document order. `None`
/// when no chunk scores above zero or none fits. Chunk costs are counted with `tk` (and
/// memoized in the split); the rendered result with `count`, which must give `tk`'s
/// exact count (a caller may cache it).
pub fn select(
    text: &str,
    chunked: &Chunked,
    scores: &[f64],
    allowance: usize,
    tk: &Tokenizer,
    count: &dyn Fn(&str) -> usize,
) -> Option<Selection> {
    select_at_most(text, chunked, scores, allowance, usize::MAX, tk, count)
}

/// [`select`], keeping at most `max_chunks` chunks (at least one).
pub fn select_at_most(
    text: &str,
    chunked: &Chunked,
    scores: &[f64],
    allowance: usize,
    max_chunks: usize,
    tk: &Tokenizer,
    count: &dyn Fn(&str) -> usize,
) -> Option<Selection> {
    let max_chunks = max_chunks.max(1);
    let n = chunked.chunks.len();
    let mut order: Vec<usize> = (0..n).filter(|&i| scores[i] > 0.0).collect();
    if order.is_empty() {
        return None;
    }
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    // When the relevant chunks leave room, the rest follow in document order (the
    // beginning of a document usually says what it is about).
    order.extend((0..n).filter(|&i| scores[i] <= 0.0));
    let mut kept: Vec<(usize, usize)> = Vec::new(); // (chunk index, tokens)
    // The best chunk, cut to fit, when it is larger than the whole allowance.
    let mut cut: Option<(usize, String)> = None;
    let mut used = 0;
    let mut misses = 0;
    for (rank, i) in order.into_iter().enumerate() {
        if kept.len() >= max_chunks {
            break;
        }
        let cost = chunked.cost(text, i, tk);
        if used + cost <= allowance {
            used += cost;
            kept.push((i, cost));
            misses = 0;
        } else if rank == 0 {
            // The most relevant chunk alone is over the allowance: its head, cut
            // token-exactly with a marker, beats any other chunk.
            let c = &chunked.chunks[i];
            let room = allowance.saturating_sub(tk.count(&locator(i, n, c)) + 1);
            if let Some(t) = tk.truncate(
                text[c.range.clone()].trim_end(),
                room,
                hostpipe_core::TruncationSide::Head,
            ) {
                used += t.tokens + tk.count(&locator(i, n, c)) + 1;
                kept.push((i, t.tokens));
                cut = Some((i, t.text));
            }
        } else {
            misses += 1;
            // The best chunks are considered first; after a run of misses the rest are
            // at least as unlikely to help, and each try costs a tokenization.
            if misses >= 8 {
                break;
            }
        }
    }
    loop {
        if kept.is_empty() {
            return None;
        }
        let mut in_order = kept.clone();
        in_order.sort_unstable();
        let mut out = String::new();
        for (i, _) in &in_order {
            let c = &chunked.chunks[*i];
            out.push_str(&locator(*i, n, c));
            match &cut {
                Some((ci, t)) if ci == i => out.push_str(t),
                _ => out.push_str(text[c.range.clone()].trim_end()),
            }
            out.push('\n');
        }
        let tokens = count(&out);
        if tokens <= allowance {
            return Some(Selection {
                text: out,
                tokens,
                kept: in_order.len(),
                total: n,
            });
        }
        // Joining can merge tokens differently; drop the weakest kept chunk and retry.
        kept.pop();
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use hostpipe_core::Encoding;

    use super::*;

    fn scan_and_index(doc: &str, query: &str) -> (Vec<f64>, Vec<f64>) {
        let chunked = split(doc, SplitKind::Markdown, 16);
        let terms = query_terms(query);
        let scanned = bm25(doc, &chunked, &terms);
        chunked.term_index(doc);
        (scanned, bm25(doc, &chunked, &terms))
    }

    #[test]
    fn the_word_index_scores_exactly_as_the_scan() {
        let doc = "# Caches\n\nThe CACHE caches; caching cached x-cache xcache cachecache.\n\n\
                   ## Émile\n\nÉmile émile subscription-timeout timeouts.\n\n\
                   Plain words about nothing in particular, then cache again at the end.";
        for q in [
            "how does the cache handle subscription timeout",
            "cache caching caches",
            "émile",
            "nothing",
        ] {
            let (scanned, indexed) = scan_and_index(doc, q);
            assert_eq!(scanned, indexed, "{q}");
            assert!(scanned.iter().any(|s| *s > 0.0), "{q}");
        }
    }

    proptest::proptest! {
        #[test]
        fn index_and_scan_agree_on_any_text(
            doc in "[a-dA-D ,.\\-\n#é]{0,400}",
            query in "[a-dA-D ]{0,20}",
        ) {
            let (scanned, indexed) = scan_and_index(&doc, &query);
            proptest::prop_assert_eq!(scanned, indexed);
        }
    }

    #[test]
    fn a_best_chunk_over_the_allowance_is_kept_cut_and_headings_go_with_their_text() {
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let mut doc = String::from("# Intro\n\nNothing here.\n\n## Zebras\n\n");
        for i in 0..60 {
            let _ = write!(doc, "Zebra fact {i}: zebras are striped and fast. ");
        }
        doc.push_str("\n\n## Other\n\nUnrelated text.\n");
        let chunked = split(&doc, SplitKind::Markdown, 64);
        for c in &chunked.chunks {
            let piece = doc[c.range.clone()].trim();
            assert!(
                !piece.starts_with('#') || piece.contains('\n'),
                "bare heading: {piece}"
            );
        }
        let scores = bm25(&doc, &chunked, &query_terms("zebras"));
        let sel = select(&doc, &chunked, &scores, 60, &tk, &|s| tk.count(s))
            .unwrap_or_else(|| unreachable!("a selection"));
        assert!(sel.tokens <= 60, "{}", sel.tokens);
        assert!(sel.text.contains("Zebra fact 0"), "{}", sel.text);
        assert!(sel.text.contains("tokens omitted"), "{}", sel.text);
    }

    #[test]
    fn the_chunk_with_the_answer_is_selected() {
        let mut doc = String::new();
        for i in 0..200 {
            let _ = writeln!(
                doc,
                "## Section {i}\n\nGeneral text about pipelines and budgets, paragraph {i}.\n"
            );
        }
        let needle =
            "## Refunds\n\nA refund of the zebra subscription is granted within 14 days.\n";
        let at = doc.len() / 2;
        let at = doc.floor_char_boundary(at);
        doc.insert_str(at, needle);
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let chunked = split(&doc, SplitKind::Markdown, 64);
        assert!(chunked.chunks.len() > 20);
        let terms = query_terms("How long do I have to get a zebra refund?");
        assert_eq!(terms, ["long", "have", "get", "zebra", "refund"]);
        let scores = bm25(&doc, &chunked, &terms);
        let sel = select(&doc, &chunked, &scores, 120, &tk, &|s| tk.count(s))
            .unwrap_or_else(|| unreachable!("a selection"));
        assert!(sel.text.contains("zebra subscription"), "{}", sel.text);
        assert!(sel.tokens <= 120 && sel.tokens == tk.count(&sel.text));
        assert!(sel.text.starts_with("[chunk "), "{}", sel.text);
    }

    #[test]
    fn at_most_max_chunks_are_kept() {
        let mut doc = String::new();
        for i in 0..50 {
            let _ = writeln!(doc, "## Zebra {i}\n\nZebra fact number {i}.\n");
        }
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let chunked = split(&doc, SplitKind::Markdown, 16);
        let scores = bm25(&doc, &chunked, &query_terms("zebra fact"));
        let all = select(&doc, &chunked, &scores, 4000, &tk, &|s| tk.count(s))
            .unwrap_or_else(|| unreachable!("a selection"));
        assert!(all.kept > 3, "{}", all.kept);
        let three = select_at_most(&doc, &chunked, &scores, 4000, 3, &tk, &|s| tk.count(s))
            .unwrap_or_else(|| unreachable!("a selection"));
        assert_eq!(three.kept, 3);
        assert_eq!(three.text.matches("[chunk ").count(), 3);
    }

    #[test]
    fn variants_and_cjk_bigrams_match() {
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let mut doc = String::new();
        for i in 0..60 {
            let _ = writeln!(doc, "## Part {i}\n\nNothing to see in part {i}.\n");
        }
        doc.push_str(
            "## Parking\n\nVisitor parking is in lot Q7.\n\n## 停车\n\n访客停车场在温室后面。\n",
        );
        let chunked = split(&doc, SplitKind::Markdown, 32);
        for (q, needle) in [
            ("Where do visitors park?", "lot Q7"),
            ("停车场在哪里", "温室后面"),
        ] {
            let scores = bm25(&doc, &chunked, &query_terms(q));
            let sel = select(&doc, &chunked, &scores, 200, &tk, &|s| tk.count(s))
                .unwrap_or_else(|| unreachable!("{q}"));
            assert!(sel.text.contains(needle), "{q}: {}", sel.text);
        }
    }

    #[test]
    fn no_matching_term_means_no_selection() {
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let doc = "alpha beta gamma\n".repeat(100);
        let chunked = split(&doc, SplitKind::Plain, 32);
        let scores = bm25(&doc, &chunked, &query_terms("delta"));
        assert_eq!(
            select(&doc, &chunked, &scores, 500, &tk, &|s| tk.count(s)),
            None
        );
    }

    #[test]
    fn source_files_split_along_their_syntax() {
        assert_eq!(
            SplitKind::detect(Some("text/x-rust"), "x://a"),
            SplitKind::Rust
        );
        assert_eq!(
            SplitKind::detect(Some("text/plain"), "file:///src/app.py"),
            SplitKind::Python
        );
        assert_eq!(
            SplitKind::detect(None, "file:///web/app.js?v=2"),
            SplitKind::JavaScript
        );
        assert_eq!(
            SplitKind::detect(Some("application/json"), "x://a.rs"),
            SplitKind::Plain
        );
        let mut src = String::new();
        for i in 0..40 {
            let _ = writeln!(
                src,
                "fn f{i}(x: u32) -> u32 {{\n    let y = x + {i};\n    y * 2\n}}\n"
            );
        }
        let chunked = split(&src, SplitKind::Rust, 32);
        assert!(chunked.chunks.len() > 5);
        // Syntax-aware chunks start at item boundaries, never inside a function body.
        for c in &chunked.chunks {
            assert!(
                src[c.range.clone()].starts_with("fn f"),
                "{:?}",
                &src[c.range.clone()]
            );
        }
    }

    #[test]
    fn locators_give_line_ranges() {
        let doc = "one\ntwo\nthree\nfour\n";
        let chunked = split(doc, SplitKind::Plain, 16);
        assert_eq!(chunked.chunks[0].first_line, 1);
        assert_eq!(chunked.chunks.last().map(|c| c.last_line), Some(4));
    }
}
