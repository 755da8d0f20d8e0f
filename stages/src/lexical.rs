//! Text analysis for lexical ranking: which terms a text is made of.
//!
//! A term is what BM25 counts ([`crate::index`]). The [`Analyzer`] turns text into terms
//! the same way for documents and queries:
//!
//! - **Words** (runs of letters and digits outside CJK scripts) are lowercased, stop
//!   words are dropped (the NLTK list of the configured [`Language`], from the
//!   `stop-words` crate, plus [`QUESTION_WORDS`] for English), and the rest are stemmed
//!   with the language's Snowball stemmer (`rust-stemmers`), so "caching", "cached" and
//!   "caches" are one term. `camelCase` and `snake_case` identifiers give their parts as
//!   well as the whole.
//! - **CJK text** (Han, Hiragana, Katakana, Hangul) has no spaces between words: a run
//!   gives its overlapping character bigrams (Lucene's `CJKBigramFilter` rule, the
//!   classic baseline for Chinese retrieval; measured against word segmentation in
//!   `docs/benchmarks.md`), and a lone character gives itself. Documents index every
//!   bigram and every character (`outputUnigrams`, so that a one-character word of a
//!   question, 装 or 包, can match); a query first drops the Chinese function words it contains
//!   ([`CHINESE_STOP_WORDS`]: 什么, 怎么, 的, …), so it asks only for the bigrams of its
//!   content.
//! - **Markup** is skipped when `markup` is set (prose in markdown): HTML and component
//!   tags (`<div class="…">`, `<VueSchoolLink …/>`), HTML comments, link targets
//!   (`](…)`), heading anchors (`{#id}`) and bare URLs. Skipping is for scoring only:
//!   the text the model gets is never changed.

use std::borrow::Cow;

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

/// The language of the Snowball stemmer and the stop words. Text in CJK scripts is
/// handled by bigrams whatever the language.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// Arabic.
    Arabic,
    /// Danish.
    Danish,
    /// Dutch.
    Dutch,
    /// English (the default).
    #[default]
    English,
    /// Finnish.
    Finnish,
    /// French.
    French,
    /// German.
    German,
    /// Greek.
    Greek,
    /// Hungarian.
    Hungarian,
    /// Italian.
    Italian,
    /// Norwegian.
    Norwegian,
    /// Portuguese.
    Portuguese,
    /// Romanian.
    Romanian,
    /// Russian.
    Russian,
    /// Spanish.
    Spanish,
    /// Swedish.
    Swedish,
    /// Tamil.
    Tamil,
    /// Turkish.
    Turkish,
}

impl Language {
    fn algorithm(self) -> rust_stemmers::Algorithm {
        use rust_stemmers::Algorithm as A;
        match self {
            Self::Arabic => A::Arabic,
            Self::Danish => A::Danish,
            Self::Dutch => A::Dutch,
            Self::English => A::English,
            Self::Finnish => A::Finnish,
            Self::French => A::French,
            Self::German => A::German,
            Self::Greek => A::Greek,
            Self::Hungarian => A::Hungarian,
            Self::Italian => A::Italian,
            Self::Norwegian => A::Norwegian,
            Self::Portuguese => A::Portuguese,
            Self::Romanian => A::Romanian,
            Self::Russian => A::Russian,
            Self::Spanish => A::Spanish,
            Self::Swedish => A::Swedish,
            Self::Tamil => A::Tamil,
            Self::Turkish => A::Turkish,
        }
    }

    /// ISO 639-1 code of the stop-word list.
    fn code(self) -> &'static str {
        match self {
            Self::Arabic => "ar",
            Self::Danish => "da",
            Self::Dutch => "nl",
            Self::English => "en",
            Self::Finnish => "fi",
            Self::French => "fr",
            Self::German => "de",
            Self::Greek => "el",
            Self::Hungarian => "hu",
            Self::Italian => "it",
            Self::Norwegian => "no",
            Self::Portuguese => "pt",
            Self::Romanian => "ro",
            Self::Russian => "ru",
            Self::Spanish => "es",
            Self::Swedish => "sv",
            Self::Tamil => "ta",
            Self::Turkish => "tr",
        }
    }
}

/// English words that phrase a question rather than name its subject ("How **may** I
/// **get** …", "Is there **any way** to …"), quantifiers and conjunctions NLTK's list
/// lacks, and the acknowledgements of a chat ("ok", "thanks"), added to NLTK's list for
/// English. They match almost every passage of a technical document, so counting them
/// only adds noise to the ranking.
pub const QUESTION_WORDS: &[&str] = &[
    "may",
    "might",
    "must",
    "shall",
    "could",
    "would",
    "can",
    "get",
    "gets",
    "got",
    "want",
    "wants",
    "wanted",
    "need",
    "needs",
    "needed",
    "way",
    "ways",
    "also",
    "ever",
    "please",
    "tell",
    "know",
    "let",
    "lets",
    "like",
    "something",
    "anything",
    "thing",
    "things",
    "happen",
    "happens",
    "happened",
    "exactly",
    "actually",
    "really",
    "still",
    "simply",
    "instead",
    "else",
    "one",
    "ones",
    "us",
    "many",
    "much",
    "every",
    "either",
    "neither",
    "whether",
    "though",
    "although",
    "yet",
    "upon",
    "onto",
    "cannot",
    "ok",
    "okay",
    "thanks",
    "thank",
    "yes",
    "sure",
    "great",
    "hi",
    "hello",
    "hey",
    "cool",
];

/// Chinese function words, dropped from queries: particles, pronouns, interrogatives,
/// the copula and common auxiliaries, conjunctions, prepositions and degree adverbs
/// (the closed word classes of Mandarin grammar), and a chat's greetings and courtesies. NLTK's Chinese list is not used: it
/// also holds content words of technical text (安全 "security", 数据 "data", 基本
/// "basic"), which a question about them must be able to match.
pub const CHINESE_STOP_WORDS: &[&str] = &[
    // Particles.
    "的",
    "地",
    "得",
    "了",
    "着",
    "过",
    "吗",
    "呢",
    "吧",
    "啊",
    "呀",
    "嘛",
    "哦",
    "么",
    "之",
    // Pronouns and demonstratives.
    "我",
    "你",
    "您",
    "他",
    "她",
    "它",
    "我们",
    "你们",
    "他们",
    "她们",
    "它们",
    "咱们",
    "自己",
    "这",
    "那",
    "这个",
    "那个",
    "这些",
    "那些",
    "这里",
    "那里",
    "这样",
    "那样",
    "这么",
    "那么",
    "此",
    "其",
    // Interrogatives.
    "什么",
    "怎么",
    "怎样",
    "怎么样",
    "如何",
    "为什么",
    "为何",
    "哪",
    "哪个",
    "哪些",
    "哪里",
    "哪儿",
    "多少",
    "几",
    "谁",
    "是否",
    "是不是",
    "能不能",
    "会不会",
    "有没有",
    "可不可以",
    "要不要",
    "多大",
    "多久",
    "多长",
    "多远",
    // Copula and auxiliaries.
    "是",
    "有",
    "在",
    "会",
    "能",
    "能够",
    "可以",
    "可",
    "要",
    "想",
    "应该",
    "应当",
    "需要",
    // Conjunctions and prepositions.
    "和",
    "与",
    "及",
    "以及",
    "或",
    "或者",
    "还是",
    "但",
    "但是",
    "而",
    "而且",
    "并",
    "并且",
    "如果",
    "因为",
    "所以",
    "虽然",
    "对",
    "对于",
    "把",
    "被",
    "让",
    "给",
    "从",
    "到",
    "向",
    "跟",
    "比",
    "用",
    "时",
    "时候",
    // Adverbs of degree, scope and negation; numerals as articles.
    "也",
    "都",
    "就",
    "还",
    "又",
    "再",
    "才",
    "只",
    "很",
    "太",
    "最",
    "更",
    "不",
    "没",
    "别",
    "一",
    "一个",
    "一些",
    "一下",
    // Greetings and courtesies of a chat.
    "你好",
    "您好",
    "谢谢",
    "好的",
    "请",
    "请问",
    "嗯",
];

/// Chinese, Japanese and Korean characters: written without spaces between words.
pub fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30FF}'      // Hiragana, Katakana
        | '\u{3400}'..='\u{4DBF}'    // CJK Extension A
        | '\u{4E00}'..='\u{9FFF}'    // CJK Unified Ideographs
        | '\u{F900}'..='\u{FAFF}'    // CJK Compatibility Ideographs
        | '\u{AC00}'..='\u{D7AF}'    // Hangul syllables
        | '\u{20000}'..='\u{2FA1F}') // CJK Extensions B–F, supplement
}

/// Turns text into terms (see the module docs). Cheap to share: build one per
/// language and keep it.
pub struct Analyzer {
    language: Language,
    stemmer: rust_stemmers::Stemmer,
    stop: FxHashSet<&'static str>,
    /// Chinese stop words, longest first, for queries.
    cjk_stop: Vec<&'static str>,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("language", &self.language)
            .finish_non_exhaustive()
    }
}

/// One piece of text as the scanner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// A word (letters and digits), as written.
    Word(&'a str),
    /// A run of CJK characters.
    Cjk(&'a str),
}

impl Analyzer {
    /// The analyzer for `language`.
    pub fn new(language: Language) -> Self {
        let mut stop: FxHashSet<&'static str> = stop_words::lookup(language.code())
            .unwrap_or_default()
            .iter()
            .copied()
            .collect();
        if language == Language::English {
            stop.extend(QUESTION_WORDS.iter().copied());
        }
        let mut cjk_stop: Vec<&'static str> = CHINESE_STOP_WORDS.to_vec();
        cjk_stop.sort_by_key(|w| std::cmp::Reverse(w.len()));
        Self {
            language,
            stemmer: rust_stemmers::Stemmer::create(language.algorithm()),
            stop,
            cjk_stop,
        }
    }

    /// The language.
    pub fn language(&self) -> Language {
        self.language
    }

    /// The term of one word as written (`Word` of [`scan`]), or `None` for a stop word.
    /// `buf` is scratch space.
    pub fn word_term<'b>(&self, word: &str, buf: &'b mut String) -> Option<Cow<'b, str>> {
        buf.clear();
        if word.is_ascii() {
            buf.push_str(word);
            buf.make_ascii_lowercase();
        } else {
            buf.extend(word.chars().flat_map(char::to_lowercase));
        }
        if self.stop.contains(buf.as_str()) {
            return None;
        }
        Some(self.stemmer.stem(buf))
    }

    /// Calls `visit` with each term of `word` (a `Word` of [`scan`]): the word's own term,
    /// then, for a `camelCase` identifier, the term of each part.
    pub fn word_terms(&self, word: &str, visit: &mut dyn FnMut(&str)) {
        let mut buf = String::new();
        if let Some(t) = self.word_term(word, &mut buf) {
            visit(&t);
        }
        let parts = camel_parts(word);
        if parts.len() > 1 {
            let mut buf = String::new();
            for p in parts {
                if let Some(t) = self.word_term(p, &mut buf) {
                    visit(&t);
                }
            }
        }
    }

    /// Calls `visit` with the terms of a CJK run: its bigrams, or the character itself
    /// when it is alone. Documents index every bigram.
    pub fn cjk_terms(run: &str, visit: &mut dyn FnMut(&str)) {
        let mut it = run.char_indices().peekable();
        let Some(&(_, first)) = it.peek() else { return };
        if run.len() == first.len_utf8() {
            visit(run);
            return;
        }
        let starts: Vec<usize> = run
            .char_indices()
            .map(|(i, _)| i)
            .chain([run.len()])
            .collect();
        for w in starts.windows(3) {
            visit(&run[w[0]..w[2]]);
        }
    }

    /// The terms a document's CJK run is indexed under: its bigrams and, so that a
    /// one-character query word (装, 包) can match, its characters.
    pub fn cjk_index_terms(run: &str, visit: &mut dyn FnMut(&str)) {
        Self::cjk_terms(run, visit);
        if run.chars().count() > 1 {
            for (i, c) in run.char_indices() {
                visit(&run[i..i + c.len_utf8()]);
            }
        }
    }

    /// The terms of a query's CJK run: its stop words (longest first) cut it into
    /// segments, each giving its bigrams (or itself when one character long).
    pub fn cjk_query_terms(&self, run: &str, visit: &mut dyn FnMut(&str)) {
        let mut segment_start = 0;
        let mut i = 0;
        while i < run.len() {
            let rest = &run[i..];
            if let Some(stop) = self.cjk_stop.iter().find(|s| rest.starts_with(**s)) {
                if segment_start < i {
                    Self::cjk_terms(&run[segment_start..i], visit);
                }
                i += stop.len();
                segment_start = i;
            } else {
                i += rest.chars().next().map_or(1, char::len_utf8);
            }
        }
        if segment_start < run.len() {
            Self::cjk_terms(&run[segment_start..], visit);
        }
    }

    /// The distinct terms of a query, in order of first appearance.
    pub fn query_terms(&self, query: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |t: &str| {
            if !out.iter().any(|o| o == t) {
                out.push(t.to_owned());
            }
        };
        scan(query, false, &mut |tok, _| match tok {
            Token::Word(w) => self.word_terms(w, &mut push),
            Token::Cjk(run) => self.cjk_query_terms(run, &mut push),
        });
        out
    }
}

/// The parts of a `camelCase` or `PascalCase` identifier (`publishedBooksMessage` →
/// `published`, `Books`, `Message`); the word itself when it has no inner capital.
pub fn camel_parts(word: &str) -> Vec<&str> {
    let b = word.as_bytes();
    if !word.is_ascii() || b.len() < 4 {
        return vec![word];
    }
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..b.len() {
        if b[i].is_ascii_uppercase() && b[i - 1].is_ascii_lowercase() {
            parts.push(&word[start..i]);
            start = i;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// Calls `visit(token, byte offset)` for each word and CJK run of `text`. With `markup`,
/// HTML and component tags, HTML comments, link targets, heading anchors and bare URLs
/// are skipped (see the module docs).
pub fn scan<'t>(text: &'t str, markup: bool, visit: &mut dyn FnMut(Token<'t>, usize)) {
    let b = text.as_bytes();
    let n = b.len();
    let mut i = 0;
    while i < n {
        let c = b[i];
        if c.is_ascii_alphanumeric() {
            let start = i;
            // A bare URL: `scheme://…` up to the next space.
            if markup
                && (c == b'h' || c == b'f')
                && let Some(end) = url_end(b, i)
            {
                i = end;
                continue;
            }
            while i < n && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            // A word may go on in non-ASCII letters (`café`).
            if i < n && b[i] >= 0x80 {
                let end = word_end(text, i);
                if end > i {
                    i = end;
                }
            }
            visit(Token::Word(&text[start..i]), start);
            continue;
        }
        if c < 0x80 {
            if markup && let Some(end) = markup_end(b, i) {
                i = end;
                continue;
            }
            i += 1;
            continue;
        }
        // Non-ASCII: decode one character.
        let ch = text[i..].chars().next().unwrap_or(' ');
        if is_cjk(ch) {
            let start = i;
            let mut j = i;
            for (k, ch) in text[i..].char_indices() {
                if !is_cjk(ch) {
                    break;
                }
                j = i + k + ch.len_utf8();
            }
            visit(Token::Cjk(&text[start..j]), start);
            i = j;
        } else if ch.is_alphanumeric() {
            let start = i;
            i = word_end(text, i);
            visit(Token::Word(&text[start..i]), start);
        } else {
            i += ch.len_utf8();
        }
    }
}

/// The end of a word that continues at `i` (letters and digits, not CJK).
fn word_end(text: &str, i: usize) -> usize {
    let mut end = i;
    for (k, ch) in text[i..].char_indices() {
        if ch.is_alphanumeric() && !is_cjk(ch) {
            end = i + k + ch.len_utf8();
        } else {
            break;
        }
    }
    end
}

/// Longest stretch of markup skipped in one piece, in bytes: a `<` or `](` without its
/// end this close is text, not markup.
const MAX_MARKUP_BYTES: usize = 1024;

/// Where the markup starting at `i` ends (exclusive), if markup starts there.
fn markup_end(b: &[u8], i: usize) -> Option<usize> {
    let find = |from: usize, pat: &[u8]| -> Option<usize> {
        let limit = (from + MAX_MARKUP_BYTES).min(b.len());
        b[from..limit]
            .windows(pat.len())
            .position(|w| w == pat)
            .map(|p| from + p + pat.len())
    };
    match b[i] {
        b'<' => {
            let next = *b.get(i + 1)?;
            if b[i + 1..].starts_with(b"!--") {
                find(i + 4, b"-->")
            } else if next.is_ascii_alphabetic() || next == b'/' || next == b'!' {
                // A tag ends at `>` on the same line or, for a tag whose attributes wrap,
                // within a few lines.
                find(i + 1, b">")
            } else {
                None
            }
        }
        b']' if b.get(i + 1) == Some(&b'(') => find(i + 2, b")"),
        b'{' if b.get(i + 1) == Some(&b'#') => find(i + 2, b"}"),
        _ => None,
    }
}

/// Where a URL starting at `i` ends, if `http://`, `https://` or `ftp://` starts there
/// (at a word start).
fn url_end(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && b[i - 1].is_ascii_alphanumeric() {
        return None;
    }
    let rest = &b[i..];
    let skip = [&b"https://"[..], b"http://", b"ftp://"]
        .iter()
        .find(|p| rest.starts_with(p))?
        .len();
    let mut j = i + skip;
    while j < b.len() && !b[j].is_ascii_whitespace() && !matches!(b[j], b')' | b'>' | b'"' | b'\'')
    {
        j += 1;
    }
    Some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str, markup: bool) -> Vec<String> {
        let mut out = Vec::new();
        scan(text, markup, &mut |t, _| {
            out.push(match t {
                Token::Word(w) => w.to_owned(),
                Token::Cjk(r) => format!("cjk:{r}"),
            });
        });
        out
    }

    #[test]
    fn markup_is_skipped_for_scoring_only_where_asked() {
        let text = r#"<div class="options-api"><VueSchoolLink href="https://x.io/a" title="课程"/></div>
See [the guide](https://doc.rust-lang.org/cargo/guide.html) and <!-- hidden note --> café.
## Build cache {#build-cache}
Visit https://crates.io/crates/serde now."#;
        assert_eq!(
            tokens(text, true),
            [
                "See", "the", "guide", "and", "café", "Build", "cache", "Visit", "now"
            ]
        );
        let raw = tokens(text, false);
        assert!(raw.contains(&"div".to_owned()) && raw.contains(&"rust".to_owned()));
    }

    #[test]
    fn a_lone_angle_bracket_is_text() {
        assert_eq!(
            tokens("if a < b then 3 > 2", true),
            ["if", "a", "b", "then", "3", "2"]
        );
    }

    #[test]
    fn english_terms_are_stemmed_without_stop_words() {
        let a = Analyzer::new(Language::English);
        assert_eq!(
            a.query_terms("How may I get the Caching to work when builds are cached?"),
            ["cach", "work", "build"]
        );
        assert_eq!(
            a.query_terms("publishedBooksMessage"),
            ["publishedbooksmessag", "publish", "book", "messag"]
        );
    }

    #[test]
    fn cjk_runs_give_bigrams_and_queries_drop_stop_words() {
        let mut doc = Vec::new();
        Analyzer::cjk_terms("计算属性", &mut |t| doc.push(t.to_owned()));
        assert_eq!(doc, ["计算", "算属", "属性"]);
        let a = Analyzer::new(Language::English);
        // 什么 and 的 are stop words: the query asks for the bigrams of 计算属性 and 缓存.
        assert_eq!(
            a.query_terms("什么是计算属性的缓存？"),
            ["计算", "算属", "属性", "缓存"]
        );
        assert_eq!(
            tokens("用 lodash-es，体积更小", false),
            ["cjk:用", "lodash", "es", "cjk:体积更小"]
        );
    }
}
