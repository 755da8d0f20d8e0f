//! Cutting a block larger than a passage: at sentences (prose), at lines (code, lists,
//! tables), and a sentence or line larger than that at spaces or punctuation.

use std::ops::Range;

use unicode_segmentation::UnicodeSegmentation as _;

use super::{BlockKind, estimate_tokens};

/// Cuts one large block into pieces of at most `target` tokens (the first at most
/// `first_room` when that is enough for a sentence): at sentence ends in prose, at line
/// ends in code, lists and tables. A single sentence or line larger than `target` is a
/// piece of its own.
pub(super) fn cut_block(
    text: &str,
    range: Range<usize>,
    kind: BlockKind,
    target: usize,
    first_room: usize,
) -> Vec<Range<usize>> {
    let body = &text[range.clone()];
    let lines_like = kind == BlockKind::Code
        || body
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(3)
            .count()
            > 2;
    let units: Vec<Range<usize>> = if lines_like {
        body.split_inclusive('\n')
            .scan(range.start, |at, l| {
                let r = *at..*at + l.len();
                *at += l.len();
                Some(r)
            })
            .flat_map(|r| split_long(text, r, target))
            .collect()
    } else {
        sentences(text, range.clone(), target)
    };
    let mut out: Vec<Range<usize>> = Vec::new();
    // Estimates are summed unrounded, so that a piece's estimate as a whole is never
    // over its limit.
    let mut cur: Option<(Range<usize>, f64)> = None;
    let (target, first_room) = (target as f64, first_room as f64);
    let mut limit = if first_room >= target / 4.0 {
        first_room
    } else {
        target
    };
    for u in units {
        let piece = &text[u.clone()];
        let ascii = piece.bytes().filter(u8::is_ascii).count();
        let t = ascii as f64 / 4.0 + (piece.len() - ascii) as f64 / 3.0;
        match &mut cur {
            Some((r, n)) if *n + t <= limit => {
                r.end = u.end;
                *n += t;
            }
            Some(_) => {
                if let Some((r, _)) = cur.take() {
                    out.push(r);
                }
                limit = target;
                cur = Some((u, t));
            }
            None => cur = Some((u, t)),
        }
    }
    out.extend(cur.map(|(r, _)| r));
    out
}

/// The sentences of `text[range]` by UAX #29 (which knows `。！？` as well as `.!?`),
/// each at most `max_tokens` estimated tokens (a longer one is cut by [`split_long`]).
/// UAX #29 ends a sentence at every line break; a paragraph wrapped at 80 columns is one
/// run of sentences, so its line breaks are read as spaces (one byte for one byte: the
/// offsets stay those of the text). The units tile the range.
pub fn sentences(text: &str, range: Range<usize>, max_tokens: usize) -> Vec<Range<usize>> {
    let unwrapped = text[range.clone()].replace('\n', " ");
    unwrapped
        .split_sentence_bound_indices()
        .map(|(o, s)| range.start + o..range.start + o + s.len())
        .flat_map(|r| split_long(text, r, max_tokens))
        .collect()
}

/// `text[range]` cut into pieces of at most `max_tokens` estimated tokens: after the last
/// whitespace or punctuation (`,;)]}>` and CJK `，、；。`) before the limit when one is in
/// the second half of the piece, else at the character where the limit is reached. A
/// line of minified JSON or a paragraph without sentence ends is thus still cut into
/// passages a budget can take.
pub fn split_long(text: &str, range: Range<usize>, max_tokens: usize) -> Vec<Range<usize>> {
    let max = max_tokens.max(1) as f64;
    if estimate_tokens(&text[range.clone()]) as f64 <= max {
        return vec![range];
    }
    let mut out = Vec::new();
    let mut start = range.start;
    let mut tokens = 0.0;
    // The last break: (offset after it, tokens up to it).
    let mut last_break: Option<(usize, f64)> = None;
    for (i, c) in text[range.clone()].char_indices() {
        let at = range.start + i;
        let t = if c.is_ascii() {
            0.25
        } else {
            c.len_utf8() as f64 / 3.0
        };
        if tokens + t > max && at > start {
            let cut = match last_break {
                Some((b, bt)) if bt >= max / 2.0 => (b, tokens - bt),
                _ => (at, 0.0),
            };
            out.push(start..cut.0);
            start = cut.0;
            tokens = cut.1;
            last_break = None;
        }
        tokens += t;
        if c.is_whitespace()
            || matches!(
                c,
                ',' | ';' | ')' | ']' | '}' | '>' | '，' | '、' | '；' | '。'
            )
        {
            last_break = Some((at + c.len_utf8(), tokens));
        }
    }
    if start < range.end {
        out.push(start..range.end);
    }
    out
}
