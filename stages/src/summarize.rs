//! The default [`Summarizer`]: extractive, needs no model.

use std::collections::HashMap;

use async_trait::async_trait;
use hostpipe_core::{SummarizeError, Summarizer, Tokenizer};

/// Picks the sentences whose words are most frequent in the document (and in the query),
/// in document order, under a `[summary: …]` header. Deterministic; no model.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveSummarizer;

/// The sentences of `text`, without markdown code fence lines (a summary of code shows
/// code lines, not unbalanced fences).
fn sentences(text: &str) -> Vec<String> {
    raw_sentences(text)
        .into_iter()
        .map(|s| {
            s.lines()
                .filter(|l| {
                    let t = l.trim_start();
                    !(t.starts_with("```") || t.starts_with("~~~"))
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| s.trim().len() > 1)
        .collect()
}

fn raw_sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let end_of_sentence = matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace());
        let paragraph = b == b'\n' && bytes.get(i + 1) == Some(&b'\n');
        if end_of_sentence || paragraph {
            let s = text[start..=i].trim();
            if s.len() > 1 {
                out.push(s);
            }
            start = i + 1;
        }
    }
    let rest = text[start..].trim();
    if rest.len() > 1 {
        out.push(rest);
    }
    out
}

fn words(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
}

#[async_trait]
impl Summarizer for ExtractiveSummarizer {
    fn name(&self) -> &str {
        "extractive"
    }

    async fn summarize(
        &self,
        text: &str,
        query: &str,
        max_tokens: usize,
        tk: &Tokenizer,
    ) -> Result<String, SummarizeError> {
        let sents = sentences(text);
        if sents.is_empty() {
            return Err(SummarizeError {
                summarizer: self.name().into(),
                message: "no sentences to pick from".into(),
            });
        }
        let mut freq: HashMap<String, f64> = HashMap::new();
        for w in words(text) {
            *freq.entry(w).or_default() += 1.0;
        }
        for w in words(query) {
            if let Some(f) = freq.get_mut(&w) {
                *f *= 4.0;
            }
        }
        let mut scored: Vec<(usize, f64)> = sents
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let ws: Vec<String> = words(s).collect();
                let score = ws
                    .iter()
                    .map(|w| freq.get(w).copied().unwrap_or(0.0))
                    .sum::<f64>()
                    / (ws.len() as f64 + 4.0);
                (i, score)
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let header =
            |k: usize| format!("[summary: {k} of {} sentences, extractive]\n", sents.len());
        let mut chosen: Vec<usize> = Vec::new();
        let mut used = tk.count(&header(sents.len()));
        for (i, _) in scored.into_iter().take(400) {
            let cost = tk.count(&sents[i]) + 1;
            if used + cost <= max_tokens {
                used += cost;
                chosen.push(i);
            }
        }
        while !chosen.is_empty() {
            let mut ordered = chosen.clone();
            ordered.sort_unstable();
            let mut out = header(ordered.len());
            for i in &ordered {
                out.push_str(&sents[*i]);
                out.push('\n');
            }
            if tk.count(&out) <= max_tokens {
                return Ok(out);
            }
            chosen.pop();
        }
        Err(SummarizeError {
            summarizer: self.name().into(),
            message: format!("no sentence fits {max_tokens} tokens"),
        })
    }
}

#[cfg(test)]
mod tests {
    use hostpipe_core::Encoding;

    use super::*;

    #[tokio::test]
    async fn picks_frequent_sentences_within_the_allowance() {
        let tk = Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"));
        let text =
            "The cache keeps resources. The cache expires after a timeout. Unrelated words here. \
                    Cats sleep. The cache is invalidated on update."
                .repeat(5);
        let s = ExtractiveSummarizer
            .summarize(&text, "cache timeout", 40, &tk)
            .await;
        let s = s.unwrap_or_else(|e| unreachable!("{e}"));
        assert!(tk.count(&s) <= 40, "{s}");
        assert!(s.starts_with("[summary: ") && s.contains("cache"), "{s}");
    }
}
