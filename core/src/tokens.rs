//! Token counting and token-exact truncation with tiktoken-rs.

use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use tiktoken_rs::CoreBPE;

use crate::context::TruncationSide;

/// A tiktoken encoding, as named by OpenAI's `tiktoken`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-5, o-series. The default.
    #[default]
    O200kBase,
    /// `o200k_harmony`: gpt-oss models.
    O200kHarmony,
    /// `cl100k_base`: GPT-4, GPT-3.5-turbo, text-embedding-ada-002.
    Cl100kBase,
    /// `p50k_base`: Codex-era models.
    P50kBase,
    /// `r50k_base` (`gpt2`).
    R50kBase,
}

impl Encoding {
    /// The tiktoken name, e.g. `o200k_base`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::O200kHarmony => "o200k_harmony",
            Self::Cl100kBase => "cl100k_base",
            Self::P50kBase => "p50k_base",
            Self::R50kBase => "r50k_base",
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tokenizer could not be loaded (its BPE table, shipped inside tiktoken-rs, failed
/// to parse).
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot load the {encoding} tokenizer: {message}")]
pub struct TokenizerError {
    /// The encoding.
    pub encoding: Encoding,
    /// The loader's message.
    pub message: String,
}

/// Counts and cuts text in tokens of one encoding. Cheap to copy: the BPE tables are
/// loaded once per process and shared.
#[derive(Clone, Copy)]
pub struct Tokenizer {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("encoding", &self.encoding)
            .finish()
    }
}

/// The result of [`Tokenizer::truncate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The kept text with the visible marker `[… N tokens omitted …]`.
    pub text: String,
    /// Tokens of `text`, marker included; never more than the limit asked for.
    pub tokens: usize,
    /// Tokens of the original text that were left out (counted on the omitted text).
    pub omitted_tokens: usize,
    /// Tokens of the original text.
    pub original_tokens: usize,
}

type Slot = OnceLock<Result<CoreBPE, String>>;

/// The last grapheme cluster boundary at or before byte `i` of `text`.
fn floor_grapheme(text: &str, i: usize) -> usize {
    let i = text.floor_char_boundary(i);
    let mut cursor = unicode_segmentation::GraphemeCursor::new(i, text.len(), true);
    match cursor.is_boundary(text, 0) {
        Ok(true) => i,
        _ => cursor.prev_boundary(text, 0).ok().flatten().unwrap_or(0),
    }
}

/// The first grapheme cluster boundary at or after byte `i` of `text`.
fn ceil_grapheme(text: &str, i: usize) -> usize {
    let i = text.ceil_char_boundary(i);
    let mut cursor = unicode_segmentation::GraphemeCursor::new(i, text.len(), true);
    match cursor.is_boundary(text, 0) {
        Ok(true) => i,
        _ => cursor
            .next_boundary(text, 0)
            .ok()
            .flatten()
            .unwrap_or(text.len()),
    }
}

fn slot(encoding: Encoding) -> &'static Slot {
    static O200K: Slot = OnceLock::new();
    static O200K_HARMONY: Slot = OnceLock::new();
    static CL100K: Slot = OnceLock::new();
    static P50K: Slot = OnceLock::new();
    static R50K: Slot = OnceLock::new();
    match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::O200kHarmony => &O200K_HARMONY,
        Encoding::Cl100kBase => &CL100K,
        Encoding::P50kBase => &P50K,
        Encoding::R50kBase => &R50K,
    }
}

impl Tokenizer {
    /// The tokenizer for `encoding`. The first call per encoding loads its BPE table
    /// (about 100 ms for `o200k_base`); later calls are free.
    ///
    /// # Errors
    /// [`TokenizerError`] if the table shipped with tiktoken-rs fails to load.
    pub fn new(encoding: Encoding) -> Result<Self, TokenizerError> {
        let loaded = slot(encoding).get_or_init(|| {
            let r = match encoding {
                Encoding::O200kBase => tiktoken_rs::o200k_base(),
                Encoding::O200kHarmony => tiktoken_rs::o200k_harmony(),
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
                Encoding::P50kBase => tiktoken_rs::p50k_base(),
                Encoding::R50kBase => tiktoken_rs::r50k_base(),
            };
            r.map_err(|e| e.to_string())
        });
        match loaded {
            Ok(bpe) => Ok(Self { encoding, bpe }),
            Err(message) => Err(TokenizerError {
                encoding,
                message: message.clone(),
            }),
        }
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Tokens in `text`. Special-token text such as `<|endoftext|>` counts as ordinary
    /// text: resource content is data, never control tokens.
    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }

    /// The omission marker for `omitted` tokens: `[… N tokens omitted …]`.
    pub fn marker(omitted: usize) -> String {
        format!("[… {omitted} tokens omitted …]")
    }

    /// Cuts `text` to at most `max_tokens` tokens, marker included, keeping the `side`
    /// asked for. Cuts fall on token boundaries moved to the nearest character boundary
    /// inside the kept part, so no character is ever split.
    ///
    /// Returns `None` when `text` already fits (nothing to do) or when `max_tokens` is
    /// too small to hold the marker and at least one token of text.
    pub fn truncate(
        &self,
        text: &str,
        max_tokens: usize,
        side: TruncationSide,
    ) -> Option<Truncation> {
        let tokens = self.bpe.encode_ordinary(text);
        let total = tokens.len();
        if total <= max_tokens {
            return None;
        }
        // The marker for the largest possible count bounds every marker's size.
        let marker_cost = self.count(&Self::marker(total)) + 1; // + the newline
        let mut avail = max_tokens.checked_sub(marker_cost)?;
        if side == TruncationSide::HeadTail {
            avail = avail.checked_sub(1)?; // a second newline
        }
        // Token byte lengths let us map a token count to a byte offset in `text`.
        let byte_len = |ts: &[tiktoken_rs::Rank]| -> usize {
            self.bpe.decode_bytes(ts).map_or(0, |b| b.len())
        };
        while avail > 0 {
            let (head_k, tail_k) = match side {
                TruncationSide::Head => (avail, 0),
                TruncationSide::Tail => (0, avail),
                TruncationSide::HeadTail => (avail.div_ceil(2), avail / 2),
            };
            // Cut on grapheme cluster boundaries (UAX #29): no half emoji sequence, no
            // accent without its letter.
            let head_end = floor_grapheme(text, byte_len(&tokens[..head_k]));
            let tail_start = ceil_grapheme(text, text.len() - byte_len(&tokens[total - tail_k..]));
            let (head, tail) = (&text[..head_end], &text[tail_start.max(head_end)..]);
            let omitted_tokens = self.count(&text[head_end..tail_start.max(head_end)]);
            let marker = Self::marker(omitted_tokens);
            let out = match side {
                TruncationSide::Head => format!("{head}\n{marker}"),
                TruncationSide::Tail => format!("{marker}\n{tail}"),
                TruncationSide::HeadTail => format!("{head}\n{marker}\n{tail}"),
            };
            let n = self.count(&out);
            if n <= max_tokens {
                return Some(Truncation {
                    text: out,
                    tokens: n,
                    omitted_tokens,
                    original_tokens: total,
                });
            }
            avail = avail.saturating_sub(n - max_tokens);
        }
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tk() -> Tokenizer {
        Tokenizer::new(Encoding::O200kBase).unwrap()
    }

    #[test]
    fn counts_known_text() {
        // "hello world" is two tokens in o200k_base (and in cl100k_base).
        assert_eq!(tk().count("hello world"), 2);
        assert_eq!(
            Tokenizer::new(Encoding::Cl100kBase)
                .unwrap()
                .count("hello world"),
            2
        );
        assert_eq!(tk().count(""), 0);
    }

    #[test]
    fn special_token_text_is_ordinary() {
        assert!(tk().count("<|endoftext|>") > 1);
    }

    #[test]
    fn fitting_text_is_left_alone() {
        assert_eq!(tk().truncate("short text", 100, TruncationSide::Head), None);
    }

    #[test]
    fn truncation_holds_the_limit_on_every_side_and_never_splits_a_character() {
        let text = "Zürich çà 東京 — ünïcödé ".repeat(200) + "THE END";
        let tk = tk();
        let total = tk.count(&text);
        for side in [
            TruncationSide::Head,
            TruncationSide::Tail,
            TruncationSide::HeadTail,
        ] {
            for max in [12, 13, 50, 199, 200, 777] {
                let t = tk.truncate(&text, max, side).unwrap();
                assert!(t.tokens <= max, "{side:?} {max}: {} tokens", t.tokens);
                assert_eq!(t.tokens, tk.count(&t.text));
                assert!(t.text.contains(&Tokenizer::marker(t.omitted_tokens)));
                assert!(t.omitted_tokens > 0 && t.omitted_tokens < total);
                let marker = Tokenizer::marker(t.omitted_tokens);
                let (head, tail) = t.text.split_once(&marker).unwrap();
                assert!(text.starts_with(head.trim_end_matches('\n')));
                assert!(text.ends_with(tail.trim_start_matches('\n')));
                match side {
                    TruncationSide::Head => assert!(tail.is_empty() && !head.is_empty()),
                    TruncationSide::Tail => assert!(head.is_empty() && !tail.is_empty()),
                    TruncationSide::HeadTail => assert!(!head.is_empty() && !tail.is_empty()),
                }
            }
        }
    }

    #[test]
    fn cuts_fall_between_grapheme_clusters() {
        use unicode_segmentation::UnicodeSegmentation as _;
        let text = "👨\u{200d}👩\u{200d}👧 🇩🇪 e\u{301}\u{302} ".repeat(50);
        let tk = tk();
        let clusters: Vec<&str> = text.graphemes(true).collect();
        for side in [
            TruncationSide::Head,
            TruncationSide::Tail,
            TruncationSide::HeadTail,
        ] {
            for max in 10..60 {
                let Some(t) = tk.truncate(&text, max, side) else {
                    continue;
                };
                let marker = Tokenizer::marker(t.omitted_tokens);
                let (head, tail) = t.text.split_once(&marker).unwrap();
                for part in [head.trim_end_matches('\n'), tail.trim_start_matches('\n')] {
                    for g in part.graphemes(true) {
                        assert!(clusters.contains(&g), "{side:?} {max}: split cluster {g:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn too_small_a_limit_gives_none() {
        let text = "word ".repeat(100);
        assert_eq!(tk().truncate(&text, 3, TruncationSide::Head), None);
    }
}
