//! Passages: a text cut along its own structure, the same way at every budget.
//!
//! A passage is what the ranking ([`crate::index`]) scores and what selection keeps or
//! cuts. Its boundaries depend only on the text, its kind and the passage size, never on
//! the budget or the query, so a split is cached by content hash and a larger budget
//! can only add passages to what a smaller one kept.
//!
//! - **Markdown** is read block by block (one pass over its lines): ATX and setext
//!   headings, fenced code blocks, and blank-line separated blocks (paragraphs, lists,
//!   tables, HTML, front matter). A section (a heading and what follows it up to the
//!   next heading) starts a new passage; its blocks are grouped up to the passage size;
//!   a block larger than that is cut at sentence boundaries (prose) or line boundaries
//!   (code, lists, tables). A section too small to stand alone (under an eighth of the
//!   passage size) is kept with the subsection that follows it. Each passage knows its
//!   heading path (`Configuration > [build] > jobs`). A text under half the passage
//!   size is one passage.
//! - **Source code** (Rust, Python, JavaScript) is cut along its syntax tree by
//!   text-splitter's `CodeSplitter`.
//! - **Plain text** is read like markdown without headings or code fences.
//!
//! Sizes are estimated without tokenizing: ASCII bytes / 4 + other bytes / 3 (a CJK
//! character is 3 bytes and about one `o200k_base` token; measured within 5% on the
//! English and Chinese documents of the quality benchmark).
//!
//! Why not pulldown-cmark (which text-splitter uses): it parses inline markup too, which
//! passages do not need; this block scan takes a fraction of its time on the 4 MiB a
//! cold turn of the side-by-side benchmark reads (docs/benchmarks.md).

use std::ops::Range;

mod cut;
mod scan;

use cut::cut_block;
pub use cut::{sentences, split_long};
use scan::{Block, scan_blocks};

/// How a text is split: by its structure where it has one we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SplitKind {
    /// Markdown: sections, then blocks, then sentences.
    Markdown,
    /// Rust source, by syntax tree (tree-sitter).
    Rust,
    /// Python source, by syntax tree.
    Python,
    /// JavaScript source, by syntax tree.
    JavaScript,
    /// Plain text: paragraphs, sentences.
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
            Some("text/markdown" | "text/x-markdown" | "text/mdx") => return Self::Markdown,
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
            Some("md" | "markdown" | "mdx") => Self::Markdown,
            Some("rs") => Self::Rust,
            Some("py") => Self::Python,
            Some("js" | "mjs" | "cjs") => Self::JavaScript,
            _ => Self::Plain,
        }
    }
}

/// What a block of a passage is: prose is scored with its markup skipped, code as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// Paragraphs, lists, tables, headings, HTML.
    Prose,
    /// A fenced code block, or source code.
    Code,
}

/// A heading of a markdown text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1 to 6.
    pub level: u8,
    /// The title's byte range (without `#`s, trailing `#`s or a `{#anchor}`).
    pub title: Range<usize>,
}

/// One passage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// Byte range in the text (whole lines).
    pub range: Range<usize>,
    /// First line (1-based).
    pub first_line: u32,
    /// Last line (1-based).
    pub last_line: u32,
    /// The headings it sits under, outermost first (indices into [`Passages::headings`]).
    pub path: Vec<u32>,
    /// Its blocks (a range of [`Passages::blocks`]).
    pub blocks: Range<u32>,
    /// Estimated tokens (see the module docs).
    pub estimated_tokens: u32,
}

/// A text cut into passages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passages {
    /// The passages, in text order, covering the text's non-blank lines.
    pub passages: Vec<Passage>,
    /// Every heading, in text order.
    pub headings: Vec<Heading>,
    /// Every block, in text order: its byte range and kind.
    pub blocks: Vec<(Range<usize>, BlockKind)>,
    /// Lines in the text.
    pub lines: u32,
}

impl Passages {
    /// The heading path of passage `i` as text, outermost first, joined by ` > `.
    pub fn path_text(&self, text: &str, i: usize) -> String {
        let mut out = String::new();
        for (k, &h) in self.passages[i].path.iter().enumerate() {
            if k > 0 {
                out.push_str(" > ");
            }
            if let Some(h) = self.headings.get(h as usize) {
                out.push_str(text[h.title.clone()].trim());
            }
        }
        out
    }
}

/// Estimated `o200k_base` tokens of `s` (see the module docs).
pub fn estimate_tokens(s: &str) -> usize {
    let ascii = s.bytes().filter(u8::is_ascii).count();
    (ascii / 4 + (s.len() - ascii) / 3).max(usize::from(!s.is_empty()))
}

/// Cuts `text` into passages of about `passage_tokens` tokens along its structure.
pub fn split(text: &str, kind: SplitKind, passage_tokens: usize) -> Passages {
    let target = passage_tokens.max(16);
    let mut out = match kind {
        SplitKind::Markdown => Builder::new(text, target).markdown(true),
        SplitKind::Plain => Builder::new(text, target).markdown(false),
        SplitKind::Rust => code(text, target, tree_sitter_rust::LANGUAGE),
        SplitKind::Python => code(text, target, tree_sitter_python::LANGUAGE),
        SplitKind::JavaScript => code(text, target, tree_sitter_javascript::LANGUAGE),
    };
    // A text under half a passage is one passage: it is kept whole or not at all.
    if out.passages.len() > 1 && estimate_tokens(text) <= target / 2 {
        let first = &out.passages[0];
        let last = &out.passages[out.passages.len() - 1];
        let one = Passage {
            range: first.range.start..last.range.end,
            first_line: 0,
            last_line: 0,
            path: first.path.clone(),
            blocks: first.blocks.start..last.blocks.end,
            estimated_tokens: u32::try_from(estimate_tokens(text)).unwrap_or(u32::MAX),
        };
        out.passages = vec![one];
    }
    number_lines(text, &mut out);
    out
}

fn code(text: &str, target: usize, language: tree_sitter_language::LanguageFn) -> Passages {
    let ranges: Vec<Range<usize>> = text_splitter::CodeSplitter::new(language, target * 4)
        .map(|s| s.chunk_indices(text).map(|(o, c)| o..o + c.len()).collect())
        .unwrap_or_default();
    if ranges.is_empty() {
        // A grammar that fails to load (a version mismatch) falls back to plain text.
        return Builder::new(text, target).markdown(false);
    }
    let mut out = Passages::default();
    for r in ranges {
        let b = u32::try_from(out.blocks.len()).unwrap_or(u32::MAX);
        out.blocks.push((r.clone(), BlockKind::Code));
        out.passages.push(Passage {
            estimated_tokens: u32::try_from(estimate_tokens(&text[r.clone()])).unwrap_or(u32::MAX),
            range: r,
            first_line: 0,
            last_line: 0,
            path: Vec::new(),
            blocks: b..b + 1,
        });
    }
    out
}

/// Fills in line numbers: passages start and end in increasing order (they may overlap),
/// so one pass over the newlines for the starts and one for the ends.
fn number_lines(text: &str, out: &mut Passages) {
    let line_counter = || {
        let mut line = 1u32;
        let mut newlines = text.match_indices('\n').map(|(i, _)| i).peekable();
        move |offset: usize| {
            while newlines.next_if(|&n| n < offset).is_some() {
                line += 1;
            }
            line
        }
    };
    let mut first = line_counter();
    let mut last = line_counter();
    for p in &mut out.passages {
        p.first_line = first(p.range.start);
        p.last_line = last(p.range.end.saturating_sub(1).max(p.range.start));
    }
    out.lines = u32::try_from(text.matches('\n').count() + usize::from(!text.ends_with('\n')))
        .unwrap_or(u32::MAX);
}

struct Builder<'a> {
    text: &'a str,
    target: usize,
    out: Passages,
    /// The open headings, outermost first: (level, heading index).
    stack: Vec<(u8, u32)>,
    /// The passage being built: its first block, its start, its estimate, its path.
    open: Option<Open>,
}

struct Open {
    first_block: usize,
    start: usize,
    end: usize,
    tokens: usize,
    path: Vec<u32>,
    /// Tokens of its content apart from headings.
    content_tokens: usize,
}

impl<'a> Builder<'a> {
    fn new(text: &'a str, target: usize) -> Self {
        Self {
            text,
            target,
            out: Passages::default(),
            stack: Vec::new(),
            open: None,
        }
    }

    fn markdown(mut self, markdown: bool) -> Passages {
        let blocks = scan_blocks(self.text, markdown, &mut self.out.headings);
        for b in blocks {
            self.add(b);
        }
        self.flush();
        self.overlap();
        self.out
    }

    /// A passage that a long section continues after reaches into the next one by a few
    /// lines (at most an eighth of the passage size), so that a sentence just past a cut
    /// is still with what leads up to it.
    fn overlap(&mut self) {
        let limit = self.target as f64 / 8.0;
        for i in 1..self.out.passages.len() {
            let (p, q) = (&self.out.passages[i - 1], &self.out.passages[i]);
            if p.path != q.path || p.range.end > q.range.start || self.starts_section(q) {
                continue;
            }
            let mut end = q.range.start;
            let mut tokens = 0.0;
            for line in self.text[q.range.clone()].split_inclusive('\n') {
                let ascii = line.bytes().filter(u8::is_ascii).count();
                let t = ascii as f64 / 4.0 + (line.len() - ascii) as f64 / 3.0;
                if line.trim().is_empty() || tokens + t > limit {
                    break;
                }
                tokens += t;
                end += line.len();
            }
            if end > q.range.start {
                let first_of_q = q.blocks.start + 1;
                let p = &mut self.out.passages[i - 1];
                p.range.end = end;
                p.blocks.end = p.blocks.end.max(first_of_q);
                p.estimated_tokens += tokens as u32;
            }
        }
    }

    /// Whether `q` starts with a heading (a new section, not a continuation).
    fn starts_section(&self, q: &Passage) -> bool {
        let start = q.range.start;
        let at = self.out.headings.partition_point(|h| h.title.start < start);
        self.out.headings.get(at).is_some_and(|h| {
            // An ATX title is preceded by its `#`s on its line; a setext title starts it.
            h.title.start <= q.range.end
                && !self.text[start..h.title.start].contains('\n')
                && self.text[start..h.title.start]
                    .trim_start_matches([' ', '#'])
                    .is_empty()
        })
    }

    fn path(&self) -> Vec<u32> {
        self.stack.iter().map(|&(_, h)| h).collect()
    }

    fn flush(&mut self) {
        if let Some(o) = self.open.take() {
            let blocks = u32::try_from(o.first_block).unwrap_or(u32::MAX)
                ..u32::try_from(self.out.blocks.len()).unwrap_or(u32::MAX);
            self.out.passages.push(Passage {
                range: o.start..o.end,
                first_line: 0,
                last_line: 0,
                path: o.path,
                blocks,
                estimated_tokens: u32::try_from(o.tokens).unwrap_or(u32::MAX),
            });
        }
    }

    fn push_block(&mut self, range: Range<usize>, kind: BlockKind, tokens: usize, heading: bool) {
        if self.open.is_none() {
            self.open = Some(Open {
                first_block: self.out.blocks.len(),
                start: range.start,
                end: range.end,
                tokens: 0,
                path: self.path(),
                content_tokens: 0,
            });
        }
        if let Some(o) = &mut self.open {
            o.end = range.end;
            o.tokens += tokens;
            if !heading {
                o.content_tokens += tokens;
            }
        }
        self.out.blocks.push((range, kind));
    }

    fn add(&mut self, b: Block) {
        let tokens = estimate_tokens(&self.text[b.range.clone()]);
        if let Some(h) = b.heading {
            let level = self.out.headings[h as usize].level;
            // A section too small to stand alone stays with the subsection that follows.
            let small = self
                .open
                .as_ref()
                .is_some_and(|o| o.content_tokens < self.target / 8 && o.tokens < self.target);
            let deeper = self.stack.last().is_some_and(|&(l, _)| level > l);
            let merge = small && deeper;
            if !merge {
                self.flush();
            }
            while self.stack.last().is_some_and(|&(l, _)| l >= level) {
                self.stack.pop();
            }
            self.stack.push((level, h));
            // A passage that took in a subsection is mostly that subsection: it sits
            // under the deepest heading.
            let path = self.path();
            self.push_block(b.range, b.kind, tokens, true);
            if merge && let Some(o) = &mut self.open {
                o.path = path;
            }
            return;
        }
        let open_tokens = self.open.as_ref().map_or(0, |o| o.tokens);
        if open_tokens + tokens <= self.target {
            self.push_block(b.range, b.kind, tokens, false);
            return;
        }
        // Over the size: a passage with content of its own ends here.
        if self.open.as_ref().is_some_and(|o| o.content_tokens > 0) {
            self.flush();
        }
        if tokens <= self.target {
            self.push_block(b.range, b.kind, tokens, false);
            return;
        }
        // One block larger than a passage: cut it into pieces.
        let room = self
            .target
            .saturating_sub(self.open.as_ref().map_or(0, |o| o.tokens));
        let mut first = true;
        for piece in cut_block(self.text, b.range.clone(), b.kind, self.target, room) {
            if !first {
                self.flush();
            }
            first = false;
            let t = estimate_tokens(&self.text[piece.clone()]);
            self.push_block(piece, b.kind, t, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    fn texts<'a>(text: &'a str, p: &Passages) -> Vec<&'a str> {
        p.passages
            .iter()
            .map(|x| text[x.range.clone()].trim_end())
            .collect()
    }

    #[test]
    fn sections_start_passages_and_know_their_heading_path() {
        let text = "# Config\n\nIntro line that is long enough to stand alone as a passage of its own here, \
                    with more words so that it is over an eighth of the size.\n\n\
                    ## [build]\n\n```toml\n# not a heading\njobs = 4\n```\n\n\
                    ### jobs\n\nSets the number of parallel jobs.\n\n\
                    Setext title\n------------\n\nBody.\n";
        let p = split(text, SplitKind::Markdown, 128);
        let t = texts(text, &p);
        assert_eq!(t.len(), 3, "{t:#?}");
        assert!(t[0].starts_with("# Config"));
        // `## [build]` holds only code too small to stand alone: it stays with `### jobs`.
        assert!(
            t[1].starts_with("## [build]") && t[1].contains("parallel jobs"),
            "{t:#?}"
        );
        assert_eq!(p.path_text(text, 1), "Config > [build] > jobs");
        assert!(t[2].starts_with("Setext title"));
        assert_eq!(p.path_text(text, 2), "Config > Setext title");
        let titles: Vec<&str> = p.headings.iter().map(|h| &text[h.title.clone()]).collect();
        assert_eq!(titles, ["Config", "[build]", "jobs", "Setext title"]);
        assert_eq!((p.passages[0].first_line, p.passages[2].last_line), (1, 19));
    }

    #[test]
    fn anchors_and_closing_hashes_are_not_titles() {
        let text = "## 计算属性 {#computed-properties}\n\nx\n\n### Done ###\n\ny\n";
        let p = split(text, SplitKind::Markdown, 512);
        let titles: Vec<&str> = p.headings.iter().map(|h| &text[h.title.clone()]).collect();
        assert_eq!(titles, ["计算属性", "Done"]);
    }

    #[test]
    fn large_blocks_are_cut_at_sentences_or_lines_and_passages_stay_near_the_size() {
        let mut text = String::from("# Big\n\n");
        for i in 0..200 {
            let _ = write!(text, "Sentence number {i} says something about caching. ");
        }
        text.push_str("\n\n```rust\n");
        for i in 0..300 {
            let _ = writeln!(text, "let x{i} = compute({i});");
        }
        text.push_str("```\n");
        let p = split(&text, SplitKind::Markdown, 100);
        assert!(p.passages.len() > 10);
        for (i, x) in p.passages.iter().enumerate() {
            // The size, and an eighth more where a passage reaches into the next.
            assert!(
                x.estimated_tokens <= 100 + 100 / 8,
                "{i}: {}",
                x.estimated_tokens
            );
            let s = &text[x.range.clone()];
            assert!(
                s.ends_with(". ") || s.ends_with('\n') || s.ends_with('.'),
                "{i}: {s:?}"
            );
        }
        // Passages follow each other in order; a long section's passages overlap by a
        // few lines, never more than an eighth of the size.
        for w in p.passages.windows(2) {
            assert!(w[0].range.start < w[1].range.start && w[0].range.end <= w[1].range.end);
            if w[0].range.end > w[1].range.start {
                assert!(estimate_tokens(&text[w[1].range.start..w[0].range.end]) <= 100 / 8);
            }
        }
        assert!(
            p.passages
                .windows(2)
                .any(|w| w[0].range.end > w[1].range.start)
        );
    }

    #[test]
    fn the_split_does_not_depend_on_anything_but_text_kind_and_size() {
        let text = "# A\n\npara one.\n\npara two.\n\n## B\n\npara three.\n";
        assert_eq!(
            split(text, SplitKind::Markdown, 64),
            split(text, SplitKind::Markdown, 64)
        );
        let plain = split("one\n\ntwo\n\n# not a heading\n", SplitKind::Plain, 64);
        assert!(plain.headings.is_empty());
        assert_eq!(plain.passages.len(), 1);
    }

    #[test]
    fn front_matter_is_a_block_and_an_unclosed_fence_runs_to_the_end() {
        let text = "---\ntitle: X\n---\n\n# H\n\n```\ncode\n# still code\n";
        let p = split(text, SplitKind::Markdown, 512);
        assert_eq!(p.headings.len(), 1);
        assert_eq!(p.blocks.last().map(|b| b.1), Some(BlockKind::Code));
    }

    #[test]
    fn a_line_without_sentence_ends_is_still_cut_into_passages() {
        let mut json = String::from("{\"items\":[");
        for i in 0..4000 {
            let _ = write!(
                json,
                "{{\"id\":{i},\"name\":\"item {i}\",\"tags\":[\"a\",\"b\"]}},"
            );
        }
        json.push_str("{}]}");
        let p = split(&json, SplitKind::Plain, 128);
        assert!(p.passages.len() > 100, "{}", p.passages.len());
        for x in &p.passages {
            assert!(estimate_tokens(&json[x.range.clone()]) <= 128 + 128 / 8);
            // Cut after a comma, a brace or a space, not inside a word.
            let end = json[..x.range.end].chars().next_back();
            assert!(
                x.range.end == json.len() || matches!(end, Some(',' | '}' | ']' | ' ')),
                "{end:?}"
            );
        }
        let words = "lowercase words with no end ".repeat(8000);
        let p = split(&words, SplitKind::Markdown, 128);
        assert!(p.passages.len() > 100);
        assert!(
            p.passages
                .iter()
                .all(|x| words[..x.range.end].ends_with(' ') || x.range.end == words.len())
        );
    }

    #[test]
    fn estimates_follow_the_script() {
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("计算属性"), 4);
        assert_eq!(estimate_tokens(""), 0);
    }
}
