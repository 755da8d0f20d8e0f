//! What the model sees of a resource that is not kept whole: its kept passages, in
//! document order, adjacent ones merged, each excerpt under a locator line that gives
//! its lines and heading path:
//!
//! ```text
//! [lines 120-164 of 920 · Configuration > [build] > build.jobs]
//! …the passages' text, exactly as read…
//! [lines 301-309 of 920, excerpt · Configuration > [http] > http.timeout]
//! …the sentences around the best match of a passage that did not fit whole…
//! ```
//!
//! A passage that does not fit whole keeps the sentences around its best-matching span
//! ([`Spans`]), not its head: the span is the sentence (or line, in code, lists and
//! tables) whose query terms weigh most; it grows by one sentence after, then one
//! before, and so on. The growth order does not depend on the room, so more room only
//! ever adds sentences.

use std::fmt::Write as _;
use std::ops::Range;

use rustc_hash::FxHashMap;

use crate::index::DocIndex;
use crate::lexical::{Analyzer, Token, scan};
use crate::passage::{sentences, split_long};

/// Longest unit a passage is cut into for an excerpt, in estimated tokens: a longer
/// sentence or line is cut into pieces this size.
const MAX_UNIT_TOKENS: usize = 64;

/// The sentences (or lines) of one passage and the order they are added in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spans {
    /// The units, in text order, as byte ranges of the document.
    units: Vec<Range<usize>>,
    /// The best-matching unit.
    best: usize,
}

impl Spans {
    /// The units of `range` in `text` and the best of them for the weighted `query`
    /// terms (term → weight).
    pub fn new(
        text: &str,
        range: Range<usize>,
        analyzer: &Analyzer,
        query: &FxHashMap<&str, f64>,
    ) -> Self {
        let body = &text[range.clone()];
        // Lines where the text is made of lines (code, lists, tables, quotes, headings);
        // paragraphs elsewhere. Blank lines go with the unit before them, so the units
        // tile the passage.
        let mut lines: Vec<Range<usize>> = Vec::new();
        let mut para: Option<Range<usize>> = None;
        let mut in_fence = false;
        let mut at = range.start;
        for line in body.split_inclusive('\n') {
            let r = at..at + line.len();
            at += line.len();
            let t = line.trim_start();
            let fence = t.starts_with("```") || t.starts_with("~~~");
            let structured = in_fence
                || fence
                || t.starts_with(['-', '*', '+', '|', '>', '#'])
                || ordered_item(t)
                || line.starts_with("    ")
                || line.starts_with('\t');
            in_fence ^= fence;
            if t.trim().is_empty() {
                match (&mut para, lines.last_mut()) {
                    (Some(p), _) => p.end = r.end,
                    (None, Some(last)) => last.end = r.end,
                    (None, None) => lines.push(r),
                }
                lines.extend(para.take());
            } else if structured {
                lines.extend(para.take());
                lines.push(r);
            } else {
                match &mut para {
                    Some(p) => p.end = r.end,
                    None => para = Some(r),
                }
            }
        }
        lines.extend(para.take());
        // Long paragraphs are cut into sentences, and any unit longer than
        // `MAX_UNIT_TOKENS` into pieces, so that some of a passage fits a small room.
        let mut split: Vec<Range<usize>> = Vec::with_capacity(lines.len());
        for u in lines {
            let s = &text[u.clone()];
            if s.trim_start().starts_with(['|', '`']) || s.len() < 160 {
                split.extend(split_long(text, u, MAX_UNIT_TOKENS));
                continue;
            }
            let body = s.trim_end_matches('\n').len();
            let mut sentences = sentences(text, u.start..u.start + body, MAX_UNIT_TOKENS);
            // The paragraph's trailing newlines go with its last sentence.
            if let Some(last) = sentences.last_mut() {
                last.end = u.end;
            }
            split.extend(sentences);
        }
        let units: Vec<Range<usize>> = split.into_iter().filter(|u| !u.is_empty()).collect();
        let mut best = 0;
        let mut best_score = 0.0;
        for (i, u) in units.iter().enumerate() {
            let mut seen: Vec<&str> = Vec::new();
            let mut score = 0.0;
            let mut visit = |t: &str| {
                if let Some((k, w)) = query.get_key_value(t)
                    && !seen.contains(k)
                {
                    seen.push(k);
                    score += w;
                }
            };
            scan(&text[u.clone()], true, &mut |tok, _| match tok {
                Token::Word(w) => analyzer.word_terms(w, &mut visit),
                Token::Cjk(run) => Analyzer::cjk_index_terms(run, &mut visit),
            });
            if score > best_score {
                best_score = score;
                best = i;
            }
        }
        Self { units, best }
    }

    /// Steps of growth: step 0 is the best unit alone; each step adds one unit.
    pub fn steps(&self) -> usize {
        self.units.len()
    }

    /// The byte range of growth step `k` (see the module docs): alternately the next
    /// unit after, then the one before.
    pub fn span(&self, k: usize) -> Range<usize> {
        let n = self.units.len();
        if n == 0 {
            return 0..0;
        }
        let (mut lo, mut hi) = (self.best, self.best);
        let mut added = 0;
        let mut after = true;
        while added < k && (lo > 0 || hi + 1 < n) {
            if after && hi + 1 < n {
                hi += 1;
                added += 1;
            } else if !after && lo > 0 {
                lo -= 1;
                added += 1;
            }
            after = !after;
        }
        self.units[lo].start..self.units[hi].end
    }
}

/// Whether `t` starts with an ordered list marker (`1.` or `1)`).
fn ordered_item(t: &str) -> bool {
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    (1..=9).contains(&digits) && matches!(t.as_bytes().get(digits), Some(b'.' | b')'))
}

/// One kept piece of a passage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The passage.
    pub passage: usize,
    /// A cut: the byte range kept; `None`: the whole passage.
    pub cut: Option<Range<usize>>,
}

/// Renders the kept pieces of `text` (any order; rendered in document order, adjacent
/// whole passages merged) under locator lines (see the module docs).
pub fn render(text: &str, index: &DocIndex, kept: &[Kept]) -> String {
    excerpts(text, index, kept).concat()
}

/// The excerpts [`render`] joins, each its locator line, its text and a newline.
///
/// Each excerpt ends with one newline after a character that is not whitespace, and the
/// next starts with `[`: `o200k_base` and `cl100k_base` split pre-tokens there (their
/// patterns end a token at a newline and start a new one at `[`), so the rendered
/// text's token count is the sum of its excerpts' counts, and each excerpt's count can
/// be cached by content.
pub fn excerpts(text: &str, index: &DocIndex, kept: &[Kept]) -> Vec<String> {
    let mut sorted: Vec<&Kept> = kept.iter().collect();
    sorted.sort_by_key(|k| (k.passage, k.cut.as_ref().map_or(0, |c| c.start)));
    let p = &index.passages;
    let mut pieces = Vec::new();
    let mut i = 0;
    // Where the previous excerpt ended: passages may overlap by a few lines, which are
    // shown once.
    let mut shown_to = 0;
    while i < sorted.len() {
        let first = sorted[i];
        let (range, excerpt, last_passage) = match &first.cut {
            Some(c) => (c.clone(), true, first.passage),
            None => {
                // Merge the whole passages that follow without a gap.
                let mut last = first.passage;
                while let Some(next) = sorted.get(i + 1)
                    && next.cut.is_none()
                    && next.passage == last + 1
                {
                    last += 1;
                    i += 1;
                }
                (
                    p.passages[first.passage].range.start..p.passages[last].range.end,
                    false,
                    last,
                )
            }
        };
        let range = range.start.max(shown_to).min(range.end)..range.end;
        let body = text[range.clone()].trim_matches('\n').trim_end();
        if body.is_empty() {
            i += 1;
            continue;
        }
        shown_to = range.end;
        let mut out = String::with_capacity(body.len() + 64);
        let pa = &p.passages[first.passage];
        let before = text[pa.range.start..range.start].matches('\n').count();
        let inside = text[range.clone()].trim_end().matches('\n').count();
        let first_line = pa.first_line as usize + before;
        let last_line = first_line + inside;
        let _ = last_passage;
        let _ = write!(out, "[lines {first_line}-{last_line} of {}", p.lines);
        if excerpt {
            out.push_str(", excerpt");
        }
        let path = p.path_text(text, first.passage);
        if !path.is_empty() {
            let _ = write!(out, " · {}", shorten(&path, 160));
        }
        out.push_str("]\n");
        out.push_str(body);
        out.push('\n');
        pieces.push(out);
        i += 1;
    }
    pieces
}

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    format!("{}…", &s[..s.floor_char_boundary(max)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexical::Language;
    use crate::passage::SplitKind;

    fn q<'a>(terms: &'a [(&'a str, f64)]) -> FxHashMap<&'a str, f64> {
        terms.iter().copied().collect()
    }

    #[test]
    fn the_span_grows_around_the_best_sentence_after_first() {
        let a = Analyzer::new(Language::English);
        let text = "Alpha one is here and this sentence is long enough to matter for the test. \
                    Beta two follows it with some more words so that the paragraph is long. \
                    The zebra gate code is 4417 and visitors park in lot Q7 behind the barn. \
                    Delta four closes the paragraph with a few more words of no interest. \
                    Epsilon five is the last sentence of this long paragraph in the test.";
        let s = Spans::new(
            text,
            0..text.len(),
            &a,
            &q(&[("zebra", 2.0), ("park", 1.0)]),
        );
        assert_eq!(s.steps(), 5);
        assert!(text[s.span(0)].starts_with("The zebra gate"));
        assert!(text[s.span(1)].starts_with("The zebra") && text[s.span(1)].contains("Delta"));
        assert!(text[s.span(2)].starts_with("Beta two"));
        assert_eq!(s.span(4), 0..text.len());
        assert_eq!(s.span(99), 0..text.len());
    }

    #[test]
    fn a_wrapped_paragraph_is_cut_at_sentences_not_lines() {
        let a = Analyzer::new(Language::English);
        let text = "The first sentence of this paragraph is wrapped at a narrow width so\n\
                    that it runs over two lines. The zebra gate code is 4417, and it too\n\
                    is wrapped. The last sentence closes the paragraph without a word of\n\
                    interest in it.\n";
        let s = Spans::new(text, 0..text.len(), &a, &q(&[("zebra", 1.0)]));
        assert_eq!(s.steps(), 3);
        assert_eq!(
            &text[s.span(0)],
            "The zebra gate code is 4417, and it too\nis wrapped. "
        );
        assert_eq!(s.span(2), 0..text.len());
    }

    #[test]
    fn adjacent_whole_passages_merge_and_cuts_say_excerpt() {
        let a = Analyzer::new(Language::English);
        let text = "# Top\n\nFirst para.\n\n## A\n\nAlpha text.\n\n## B\n\nBeta text. More beta.\n\n## C\n\nGamma.\n";
        let index = DocIndex::build(text, SplitKind::Markdown, 4, &a);
        assert_eq!(index.passages.passages.len(), 4);
        let b = &index.passages.passages[2];
        let cut_start = text[b.range.clone()].find("More").unwrap_or(0) + b.range.start;
        let out = render(
            text,
            &index,
            &[
                Kept {
                    passage: 1,
                    cut: None,
                },
                Kept {
                    passage: 0,
                    cut: None,
                },
                Kept {
                    passage: 2,
                    cut: Some(cut_start..b.range.end),
                },
            ],
        );
        assert_eq!(
            out,
            "[lines 1-7 of 15 · Top]\n# Top\n\nFirst para.\n\n## A\n\nAlpha text.\n\
             [lines 11-11 of 15, excerpt · Top > B]\nMore beta.\n"
        );
    }
}
