//! Items that are not ranked in passages, each with its own allowance: images and notes
//! (whole or a short note), `whole` texts (whole or nothing), and texts that are
//! summarized or truncated (the `summarize` and `truncate` strategies, and every text
//! when the message has no terms to rank by).

use std::sync::Arc;

use hostpipe_core::{BlockBody, ContextBlock, FallbackReason, Tokenizer, Treatment};

use super::{FitOptions, Fitted, Item, Strategy, content_hash};
use crate::convert::Converted;

/// `item` whole, at `cost` tokens.
pub(super) fn whole(item: &Item, cost: usize) -> Fitted {
    let mut f = Fitted::new(cost, false);
    let body = match &item.converted {
        Converted::Text(text) => BlockBody::Text { text: text.clone() },
        Converted::Image {
            mime_type,
            data,
            width,
            height,
        } => BlockBody::Image {
            mime_type: mime_type.clone(),
            data: data.clone(),
            width: *width,
            height: *height,
        },
        Converted::Fallback { reason, note } => BlockBody::Fallback {
            reason: reason.clone(),
            note: note.clone(),
        },
        Converted::Refused { error, note } => {
            f.warning = Some(refusal(item, error));
            BlockBody::Fallback {
                reason: FallbackReason::Binary,
                note: note.clone(),
            }
        }
    };
    f.treatment = match body {
        BlockBody::Fallback { .. } => Treatment::Omitted,
        _ => Treatment::Whole,
    };
    f.block = Some(block(item, body, f.treatment.clone(), cost, cost));
    f
}

fn refusal(item: &Item, error: &str) -> String {
    format!(
        "{} from `{}` refused: {error}",
        item.source.uri, item.source.server
    )
}

fn block(
    item: &Item,
    body: BlockBody,
    treatment: Treatment,
    before: usize,
    after: usize,
) -> ContextBlock {
    ContextBlock {
        source: item.source.clone(),
        mime_type: item.mime_type.clone(),
        body,
        treatment,
        tokens_before: before,
        tokens_after: after,
    }
}

/// Fits one item into `allowance` tokens: whole if it fits, else by its strategy.
pub(super) async fn fit_one(
    item: &Item,
    cost: usize,
    estimated: bool,
    allowance: usize,
    query: &str,
    tk: &Tokenizer,
    opts: &FitOptions,
) -> Fitted {
    let source = &item.source;
    let no_room = |what: &str| {
        format!(
            "{} from `{}` left out: {what} ({cost}{} tokens) and {allowance} tokens were left for it",
            source.uri,
            source.server,
            if estimated { "≈" } else { "" }
        )
    };
    let mut f = Fitted::new(cost, estimated);
    if !estimated && cost <= allowance {
        return whole(item, cost);
    }
    match &item.converted {
        Converted::Text(text) => {
            let plan: &[Strategy] = match item.strategy {
                Strategy::Auto => &[Strategy::Summarize, Strategy::Truncate],
                Strategy::Whole => &[],
                Strategy::Chunk | Strategy::Truncate => &[Strategy::Truncate],
                Strategy::Summarize => &[Strategy::Summarize, Strategy::Truncate],
            };
            let mut problems = Vec::new();
            for step in plan {
                if let Some((text, tokens, treatment, exact)) =
                    shrink(*step, text, item, allowance, query, tk, opts, &mut problems).await
                {
                    if let Some(exact) = exact {
                        // A truncation tokenized the whole text anyway.
                        (f.tokens_before, f.estimated) = (exact, false);
                    }
                    f.block = Some(block(
                        item,
                        BlockBody::Text { text },
                        treatment.clone(),
                        f.tokens_before,
                        tokens,
                    ));
                    f.treatment = treatment;
                    f.warning = (!problems.is_empty()).then(|| problems.join("; "));
                    return f;
                }
            }
            let why = if item.strategy == Strategy::Whole {
                "its strategy is `whole`, and it is too large for what was left"
            } else {
                "too large to shrink into what was left"
            };
            f.reason = Some(why.to_owned());
            f.warning = Some(no_room(why));
            f
        }
        Converted::Image { width, height, .. } => {
            let note = format!(
                "[image resource {} ({width}×{height} px) not shown: no token budget left for it]",
                source.uri
            );
            let n = tk.count(&note);
            f.reason = Some("no room for the image".into());
            f.warning = Some(no_room("an image"));
            if n <= allowance {
                let body = BlockBody::Fallback {
                    reason: FallbackReason::NoBudget,
                    note,
                };
                f.block = Some(block(item, body, Treatment::Omitted, cost, n));
            }
            f
        }
        Converted::Fallback { .. } => {
            f.reason = Some("no room for its note".into());
            f.warning = Some(no_room("its note"));
            f
        }
        Converted::Refused { error, .. } => {
            f.warning = Some(refusal(item, error));
            f
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn shrink(
    step: Strategy,
    text: &str,
    item: &Item,
    allowance: usize,
    query: &str,
    tk: &Tokenizer,
    opts: &FitOptions,
    problems: &mut Vec<String>,
) -> Option<(String, usize, Treatment, Option<usize>)> {
    let source = &item.source;
    match step {
        Strategy::Summarize => {
            let summarizer = opts.summarizer.as_ref()?;
            let key = (
                source.server.clone(),
                source.uri.clone(),
                content_hash(text),
                allowance,
            );
            let summary = match opts.caches.summaries.get(&key) {
                Some(s) => s,
                None => {
                    let s: Arc<str> = match summarizer.summarize(text, query, allowance, tk).await {
                        Ok(s) => s.into(),
                        Err(e) => {
                            problems.push(format!("{} from `{}`: {e}", source.uri, source.server));
                            return None;
                        }
                    };
                    opts.caches.summaries.insert(key, Arc::clone(&s));
                    s
                }
            };
            let tokens = tk.count(&summary);
            (tokens <= allowance)
                .then(|| (summary.to_string(), tokens, Treatment::Summarized, None))
        }
        Strategy::Truncate => {
            let t = tk.truncate(text, allowance, opts.truncate)?;
            let treatment = Treatment::Truncated {
                side: opts.truncate,
                omitted_tokens: t.omitted_tokens,
            };
            Some((t.text, t.tokens, treatment, Some(t.original_tokens)))
        }
        Strategy::Auto | Strategy::Whole | Strategy::Chunk => None,
    }
}
