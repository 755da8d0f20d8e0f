//! The line scan of markdown: blocks (ATX and setext headings, fenced code, blank-line
//! separated paragraphs, lists, tables, HTML, front matter) in one pass over the lines.

use std::ops::Range;

use super::{BlockKind, Heading};

/// One block found by the line scan.
pub(super) struct Block {
    pub(super) range: Range<usize>,
    pub(super) kind: BlockKind,
    /// A heading block: its index in `headings`.
    pub(super) heading: Option<u32>,
}

/// The lines of `text`: (start, end without the newline, next line's start).
fn lines(text: &str) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= text.len() {
            return None;
        }
        let start = at;
        let (end, next) = match memchr_newline(&text.as_bytes()[start..]) {
            Some(i) => (start + i, start + i + 1),
            None => (text.len(), text.len()),
        };
        at = next;
        Some((start, end, next))
    })
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// A fence opening line: its character and length.
fn fence_open(line: &str) -> Option<(u8, usize)> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let c = *t.as_bytes().first()?;
    if c != b'`' && c != b'~' {
        return None;
    }
    let n = t.bytes().take_while(|&b| b == c).count();
    // A backtick fence's info string has no backtick (CommonMark 4.5).
    (n >= 3 && !(c == b'`' && t[n..].contains('`'))).then_some((c, n))
}

fn fence_close(line: &str, c: u8, n: usize) -> bool {
    let t = line.trim();
    t.len() >= n && t.bytes().all(|b| b == c)
}

/// An ATX heading line: its level and title range (relative to the line).
fn atx_heading(line: &str) -> Option<(u8, Range<usize>)> {
    let t = line.trim_start_matches(' ');
    let indent = line.len() - t.len();
    if indent > 3 {
        return None;
    }
    let level = t.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &t[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let mut title = rest.trim();
    // A trailing `{#anchor}` (VitePress, Pandoc) and closing `#`s are not the title.
    if title.ends_with('}')
        && let Some(at) = title.rfind("{#")
    {
        title = title[..at].trim_end();
    }
    let stripped = title.trim_end_matches('#');
    if stripped.len() < title.len() && (stripped.is_empty() || stripped.ends_with(' ')) {
        title = stripped.trim_end();
    }
    let start = if title.is_empty() {
        line.len()
    } else {
        title.as_ptr() as usize - line.as_ptr() as usize
    };
    Some((u8::try_from(level).unwrap_or(6), start..start + title.len()))
}

/// A setext underline: `=` (level 1) or `-` (level 2).
fn setext_underline(line: &str) -> Option<u8> {
    let t = line.trim();
    if t.len() < 2 || line.len() - line.trim_start().len() > 3 {
        return None;
    }
    if t.bytes().all(|b| b == b'=') {
        Some(1)
    } else if t.bytes().all(|b| b == b'-') {
        Some(2)
    } else {
        None
    }
}

/// The blocks of `text`, in order; headings are added to `headings`.
pub(super) fn scan_blocks(text: &str, markdown: bool, headings: &mut Vec<Heading>) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    // The open block: start, end (after its last line's newline), kind, lines.
    let mut open: Option<(usize, usize, BlockKind, usize)> = None;
    let mut fence: Option<(u8, usize)> = None;
    let close = |open: &mut Option<(usize, usize, BlockKind, usize)>, blocks: &mut Vec<Block>| {
        if let Some((s, e, kind, _)) = open.take() {
            blocks.push(Block {
                range: s..e,
                kind,
                heading: None,
            });
        }
    };
    let mut it = lines(text).peekable();
    // Front matter: `---` on the first line up to the next `---` is one block.
    if markdown && text.starts_with("---") {
        let mut end = None;
        for (k, (s, e, next)) in lines(text).enumerate() {
            if k > 0 && text[s..e].trim_end() == "---" {
                end = Some(next);
                break;
            }
        }
        if let Some(end) = end {
            blocks.push(Block {
                range: 0..end,
                kind: BlockKind::Prose,
                heading: None,
            });
            while it.peek().is_some_and(|&(s, _, _)| s < end) {
                it.next();
            }
        }
    }
    for (s, e, next) in it {
        let line = &text[s..e];
        if let Some((c, n)) = fence {
            if let Some(o) = &mut open {
                o.1 = next;
            }
            if fence_close(line, c, n) {
                fence = None;
                close(&mut open, &mut blocks);
            }
            continue;
        }
        if line.trim().is_empty() {
            close(&mut open, &mut blocks);
            continue;
        }
        if markdown {
            if let Some(f) = fence_open(line) {
                close(&mut open, &mut blocks);
                fence = Some(f);
                open = Some((s, next, BlockKind::Code, 1));
                continue;
            }
            if let Some((level, title)) = atx_heading(line) {
                close(&mut open, &mut blocks);
                let h = u32::try_from(headings.len()).unwrap_or(u32::MAX);
                headings.push(Heading {
                    level,
                    title: s + title.start..s + title.end,
                });
                blocks.push(Block {
                    range: s..next,
                    kind: BlockKind::Prose,
                    heading: Some(h),
                });
                continue;
            }
            // A one-line paragraph over `===` or `---` is a setext heading.
            if let Some((os, _, BlockKind::Prose, 1)) = open
                && let Some(level) = setext_underline(line)
            {
                let title_line = text[os..s].trim_end();
                let lead = title_line.len() - title_line.trim_start().len();
                let h = u32::try_from(headings.len()).unwrap_or(u32::MAX);
                headings.push(Heading {
                    level,
                    title: os + lead..os + title_line.len(),
                });
                open = None;
                blocks.push(Block {
                    range: os..next,
                    kind: BlockKind::Prose,
                    heading: Some(h),
                });
                continue;
            }
        }
        match &mut open {
            Some(o) => {
                o.1 = next;
                o.3 += 1;
            }
            None => open = Some((s, next, BlockKind::Prose, 1)),
        }
    }
    close(&mut open, &mut blocks);
    blocks
}
