//! Tests of the allocator on crafted documents, and its two properties: the injected
//! total never exceeds the budget, and a larger budget never loses a passage a smaller
//! one kept.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use hostpipe_core::{Encoding, FallbackReason, Scope};
use proptest::prelude::{ProptestConfig, any, prop_assert, prop_assert_eq, proptest};

use super::*;
use crate::summarize::ExtractiveSummarizer;

fn tk() -> Tokenizer {
    Tokenizer::new(Encoding::O200kBase).unwrap_or_else(|e| unreachable!("{e}"))
}

fn source(i: usize, scope: Scope) -> BlockSource {
    BlockSource {
        server: "s".into(),
        uri: format!("kb://doc{i}.md"),
        template: None,
        scope,
        name: None,
    }
}

fn opts() -> FitOptions {
    FitOptions {
        truncate: TruncationSide::Head,
        passage_tokens: 96,
        max_passages: usize::MAX,
        min_block_tokens: 16,
        history_messages: 2,
        history_weight: 0.3,
        summarizer: Some(Arc::new(ExtractiveSummarizer)),
        analyzer: Arc::new(Analyzer::new(Language::English)),
        retrieval: None,
        caches: Arc::new(Caches::default()),
    }
}

fn text_item(i: usize, text: String) -> Item {
    Item {
        source: source(i, Scope::Pipeline),
        mime_type: Some("text/markdown".into()),
        converted: Converted::Text(text),
        must: false,
        must_scope: Scope::Pipeline,
        priority: 0.5,
        strategy: Strategy::Auto,
        text_hash: None,
    }
}

fn run(items: Vec<Item>, budget: usize, message: &str, history: &[&str]) -> FitOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    let tk = tk();
    rt.block_on(fit(
        items,
        budget,
        FitQuery { message, history },
        &tk,
        &opts(),
    ))
}

fn context(outcome: &FitOutcome) -> String {
    outcome
        .fitted
        .iter()
        .filter_map(|f| f.block.as_ref().and_then(|b| b.text()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn total(outcome: &FitOutcome) -> usize {
    outcome
        .fitted
        .iter()
        .map(|f| f.block.as_ref().map_or(0, |b| b.tokens_after))
        .sum()
}

/// A handbook-like document: `sections` sections of filler about `topic`.
fn filler(topic: &str, sections: usize, seed: usize) -> String {
    let mut s = format!("# {topic} handbook\n\nThis handbook covers {topic}.\n\n");
    for k in 0..sections {
        let _ = write!(
            s,
            "## {topic} part {k}\n\nThe {topic} team reviews item {} every week. Reports about \
             {topic} go to the shared folder, and questions go to the channel of the team. \
             Meetings about {topic} take place on floor {}.\n\n",
            seed * 31 + k,
            k % 7
        );
    }
    s
}

#[test]
fn everything_that_fits_goes_in_whole() {
    let items = vec![
        text_item(0, "# A\n\nalpha.\n".into()),
        text_item(1, "# B\n\nbeta.\n".into()),
    ];
    let out = run(items, 1000, "alpha", &[]);
    assert!(
        out.fitted
            .iter()
            .all(|f| f.treatment == Treatment::Whole && f.passages.is_empty())
    );
    assert_eq!(context(&out), "# A\n\nalpha.\n\n# B\n\nbeta.\n");
}

#[test]
fn the_answer_in_the_last_section_of_the_largest_of_16_resources_is_kept_at_1000() {
    let topics = [
        "billing",
        "travel",
        "hiring",
        "security",
        "payroll",
        "facilities",
        "legal",
        "sales",
        "support",
        "marketing",
        "design",
        "research",
        "finance",
        "training",
        "audit",
        "parking",
    ];
    let mut items: Vec<Item> = topics
        .iter()
        .enumerate()
        .map(|(i, t)| text_item(i, filler(t, 6 + i % 5, i)))
        .collect();
    // The largest resource, its answer in its last section.
    let mut largest = filler("parking", 60, 99);
    largest.push_str(
        "## Visitor parking\n\nVisitors park in lot Q7 behind the greenhouse; the gate code \
         is 4417.\n",
    );
    items[15] = text_item(15, largest);
    let out = run(
        items,
        1000,
        "Where do visitors park, and what is the gate code?",
        &[],
    );
    let ctx = context(&out);
    assert!(ctx.contains("the gate code is 4417"), "{ctx}");
    assert!(total(&out) <= 1000);
    // The kept passage shows where it came from.
    assert!(
        ctx.contains("· parking handbook > Visitor parking]"),
        "{ctx}"
    );
    let kept = &out.fitted[15];
    assert!(matches!(kept.treatment, Treatment::Chunked { .. }));
    let answer = kept
        .passages
        .iter()
        .find(|p| p.heading.ends_with("Visitor parking"))
        .unwrap_or_else(|| unreachable!("{:?}", kept.passages));
    assert!(answer.rank <= 3 && !answer.cut, "{answer:?}");
    // The numbers of the note add up: kept + left out = 16.
    let note = out.notes.join(" ");
    let kept_resources = out.fitted.iter().filter(|f| f.block.is_some()).count();
    let unmatched = out
        .fitted
        .iter()
        .filter(|f| f.reason.as_deref() == Some("no passage matched the message"))
        .count();
    let left = 16 - kept_resources;
    assert!(
        note.contains(&format!("from {kept_resources} resource"))
            && note.ends_with(&format!(
                "; {left} left out: {unmatched} with no passage matching the message, {} ranked below the cut",
                left - unmatched
            )),
        "{note}"
    );
    // A resource left out says why.
    for f in out.fitted.iter().filter(|f| f.block.is_none()) {
        let reason = f.reason.as_deref().unwrap_or("");
        assert!(
            reason == "no passage matched the message"
                || reason.contains("the budget ran out at rank"),
            "{reason}"
        );
    }
}

#[test]
fn a_must_resource_comes_first_and_scope_breaks_near_ties() {
    let must_text = filler("policy", 12, 1);
    let mut must = text_item(0, must_text);
    must.must = true;
    let mut message = text_item(1, "# Notes\n\nThe parking gate code is 4417.\n".into());
    message.source.scope = Scope::Message;
    let pipeline = text_item(2, "# Other\n\nThe parking gate code is 1234.\n".into());
    let filler_item = text_item(3, filler("travel", 20, 3));
    let out = run(
        vec![must, message, pipeline, filler_item],
        400,
        "parking gate code",
        &[],
    );
    // The must resource has no matching passage and is still served first.
    assert!(out.fitted[0].block.is_some(), "must kept");
    assert!(out.fitted[0].passages.iter().all(|p| p.score == 0.0));
    let ctx = context(&out);
    assert!(ctx.starts_with("[lines 1-"), "{ctx}");
    // The same sentence at message scope ranks above the one at pipeline scope.
    let message_rank = out.fitted[1].passages.first().map(|p| p.rank);
    let pipeline_rank = out.fitted[2].passages.first().map(|p| p.rank);
    assert!(message_rank.is_some());
    assert!(
        pipeline_rank.is_none() || message_rank < pipeline_rank,
        "{message_rank:?} {pipeline_rank:?}"
    );
    assert!(total(&out) <= 400);
}

#[test]
fn a_small_must_goes_in_whole_and_a_large_one_leaves_room_for_the_message() {
    let mut faq = text_item(
        0,
        "# FAQ\n\n## What is Quokka?\n\nA queue.\n\n## Who runs it?\n\nOps.\n".into(),
    );
    faq.must = true;
    let mut ops = text_item(1, filler("operations", 40, 1));
    ops.must = true;
    let mut handbook = text_item(2, filler("travel", 30, 2));
    handbook.source.scope = Scope::Message;
    if let Converted::Text(t) = &mut handbook.converted {
        t.push_str("## Cache timeout\n\nThe cache timeout is 250 milliseconds.\n");
    }
    let out = run(
        vec![faq, ops, handbook],
        300,
        "What is the cache timeout?",
        &[],
    );
    assert_eq!(
        out.fitted[0].treatment,
        Treatment::Whole,
        "the small must, whole"
    );
    assert!(out.fitted[1].block.is_some(), "the large must, in part");
    let ctx = context(&out);
    assert!(
        ctx.contains("The cache timeout is 250 milliseconds."),
        "{ctx}"
    );
    assert!(total(&out) <= 300);
}

#[test]
fn a_must_of_the_pipeline_the_user_also_attached_leaves_room_for_the_users_others() {
    // The pipeline makes `ops` a must; the user attached it too, and a handbook.
    let mut ops = text_item(0, filler("operations", 40, 1));
    ops.must = true;
    ops.source.scope = Scope::Message;
    ops.must_scope = Scope::Pipeline;
    let mut handbook = text_item(1, filler("travel", 30, 2));
    handbook.source.scope = Scope::Message;
    if let Converted::Text(t) = &mut handbook.converted {
        t.push_str("## Refunds\n\nSupport staff may refund up to 100 EUR on their own.\n");
    }
    let out = run(
        vec![ops, handbook],
        600,
        "How much may support staff refund?",
        &[],
    );
    assert!(out.fitted[0].block.is_some());
    assert!(
        context(&out).contains("refund up to 100 EUR"),
        "{}",
        context(&out)
    );
}

#[test]
fn chinese_questions_find_chinese_passages() {
    let mut doc = String::from("# 指南\n\n本文介绍组件的用法。\n\n");
    for k in 0..40 {
        let _ = write!(
            doc,
            "## 第{k}节\n\n这一节讲的是模板语法和事件处理的一些细节，第{k}条规则适用于大多数组件。\n\n"
        );
    }
    doc.push_str(
        "## 计算属性缓存\n\n计算属性值会基于其响应式依赖被缓存，只在依赖更新时才重新计算。\n\n",
    );
    for k in 40..60 {
        let _ = write!(doc, "## 第{k}节\n\n更多关于渲染函数的说明。\n\n");
    }
    let out = run(
        vec![text_item(0, doc), text_item(1, filler("其他", 30, 2))],
        200,
        "计算属性为什么会缓存？",
        &[],
    );
    let ctx = context(&out);
    assert!(ctx.contains("只在依赖更新时才重新计算"), "{ctx}");
    assert!(ctx.contains("· 指南 > 计算属性缓存]"), "{ctx}");
    assert!(total(&out) <= 200);
}

#[test]
fn a_follow_up_question_uses_the_recent_history() {
    let detail = "Details about the settings, their defaults and how they interact are \
                  given here at some length, so that each section is a passage of its own. "
        .repeat(3);
    let doc = format!(
        "# Settings\n\n## Cache\n\nThe cache keeps read resources. Its timeout is 30 \
         seconds. {detail}\n\n## Network\n\nA network request has a timeout of 10 seconds, \
         and retries twice. {detail}\n"
    );
    let items = vec![text_item(0, doc), text_item(1, filler("travel", 30, 1))];
    // Alone, "and its timeout?" ranks both timeouts; the history's "cache" decides.
    let out = run(items, 60, "and its timeout?", &["How does the cache work?"]);
    let first = out.fitted[0].passages.first().map(|p| p.heading.clone());
    assert_eq!(
        first.as_deref(),
        Some("Settings > Cache"),
        "{}",
        context(&out)
    );
}

#[test]
fn a_resource_that_matches_nothing_is_left_out_not_summarized() {
    let items = vec![
        text_item(0, filler("zebra", 20, 1)),
        text_item(1, filler("travel", 20, 2)),
    ];
    let out = run(items, 300, "zebra", &[]);
    assert_eq!(out.fitted[1].treatment, Treatment::Omitted);
    assert_eq!(
        out.fitted[1].reason.as_deref(),
        Some("no passage matched the message")
    );
    assert!(!context(&out).contains("[summary"));
}

#[test]
fn only_relevant_texts_are_summarized() {
    let mut zebra = text_item(0, filler("zebra", 20, 1));
    zebra.strategy = Strategy::Summarize;
    let mut travel = text_item(1, filler("travel", 20, 2));
    travel.strategy = Strategy::Summarize;
    let out = run(vec![zebra, travel], 300, "zebra", &[]);
    assert_eq!(out.fitted[0].treatment, Treatment::Summarized);
    assert_eq!(out.fitted[1].treatment, Treatment::Omitted);
    assert_eq!(
        out.fitted[1].reason.as_deref(),
        Some("nothing in it matched the message, so it was not summarized")
    );
    assert!(total(&out) <= 300);
}

#[test]
fn a_message_without_terms_falls_back_to_summaries_and_truncation() {
    let items = vec![
        text_item(0, filler("zebra", 20, 1)),
        text_item(1, filler("travel", 20, 2)),
    ];
    let out = run(items, 300, "?", &[]);
    for f in &out.fitted {
        assert!(
            matches!(
                f.treatment,
                Treatment::Summarized | Treatment::Truncated { .. }
            ),
            "{:?}",
            f.treatment
        );
    }
    assert!(total(&out) <= 300);
}

#[test]
fn a_passage_that_does_not_fit_keeps_the_sentences_around_its_best_match() {
    let mut doc = String::from("# Guide\n\n## Parking\n\n");
    for k in 0..30 {
        let _ = write!(doc, "Sentence {k} is about the weather and nothing else. ");
    }
    doc.push_str("Visitors park in lot Q7 and the gate code is 4417. ");
    for k in 30..60 {
        let _ = write!(doc, "Sentence {k} is about lunch and nothing else. ");
    }
    doc.push('\n');
    let mut o = opts();
    o.passage_tokens = 4000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    let tk = tk();
    let items = vec![text_item(0, doc), text_item(1, filler("travel", 40, 2))];
    let out = rt.block_on(fit(
        items,
        80,
        FitQuery {
            message: "gate code for visitors",
            history: &[],
        },
        &tk,
        &o,
    ));
    let ctx = context(&out);
    assert!(ctx.contains("gate code is 4417"), "{ctx}");
    assert!(!ctx.contains("Sentence 0 "), "not the head: {ctx}");
    assert!(out.fitted[0].passages.iter().any(|p| p.cut));
    assert!(ctx.contains(", excerpt · Guide > Parking]"), "{ctx}");
}

#[test]
fn a_one_line_document_still_gives_its_answer() {
    let mut line = "alpha beta gamma delta epsilon zeta eta theta iota kappa ".repeat(2000);
    line.push_str("the launch code is 7731 ");
    line.push_str(&"lambda mu nu xi omicron pi rho sigma tau upsilon ".repeat(2000));
    let items = vec![
        Item {
            mime_type: Some("text/plain".into()),
            ..text_item(0, line)
        },
        text_item(1, filler("travel", 20, 2)),
    ];
    let out = run(items, 120, "What is the launch code?", &[]);
    assert!(
        context(&out).contains("launch code is 7731"),
        "{}",
        context(&out)
    );
    assert!(total(&out) <= 120);
}

#[test]
fn images_and_notes_are_whole_or_nothing() {
    let note = Item {
        converted: Converted::Fallback {
            reason: FallbackReason::Binary,
            note: "[binary resource kb://x not shown]".into(),
        },
        ..text_item(9, String::new())
    };
    let items = vec![note, text_item(0, filler("zebra", 40, 1))];
    let out = run(items, 200, "zebra", &[]);
    assert_eq!(
        out.fitted[0].block.as_ref().and_then(|b| b.text()),
        Some("[binary resource kb://x not shown]")
    );
    assert!(total(&out) <= 200);
}

/// The lines each item has in the context (all of them for a whole text).
fn kept_lines(out: &FitOutcome, items_lines: &[usize]) -> Vec<BTreeSet<u32>> {
    out.fitted
        .iter()
        .zip(items_lines)
        .map(|(f, &n)| match f.treatment {
            Treatment::Whole => (1..=u32::try_from(n).unwrap_or(0)).collect(),
            _ => f
                .passages
                .iter()
                .flat_map(|p| p.first_line..=p.last_line)
                .collect(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_injected_total_never_exceeds_the_budget(
        budget in 0usize..3000,
        docs in proptest::collection::vec(("[a-z ]{0,40}(\n\n## [a-z]{1,8}\n)?[a-zé .,\n]{0,3000}", 0usize..5, any::<bool>()), 0..8),
        query in "[a-z ]{0,30}",
    ) {
        let tk = tk();
        let strategies = [Strategy::Auto, Strategy::Whole, Strategy::Chunk, Strategy::Summarize, Strategy::Truncate];
        let items: Vec<Item> = docs
            .into_iter()
            .enumerate()
            .map(|(i, (text, s, must))| Item {
                source: source(i, Scope::Pipeline),
                mime_type: Some(if i % 2 == 0 { "text/markdown" } else { "text/plain" }.into()),
                converted: if i % 5 == 4 {
                    Converted::Fallback { reason: FallbackReason::Binary, note: format!("[binary {text:.20}]") }
                } else {
                    Converted::Text(text)
                },
                must,
                must_scope: Scope::Pipeline,
                priority: 0.5,
                text_hash: None,
                strategy: strategies[s],
            })
            .collect();
        let out = run(items, budget, &query, &[]);
        let mut sum = 0;
        for f in &out.fitted {
            if let Some(b) = &f.block {
                prop_assert_eq!(b.tokens_after, tk.count(b.text().unwrap_or("")));
                sum += b.tokens_after;
            }
        }
        prop_assert!(sum <= budget, "{} > {}", sum, budget);
    }

    #[test]
    fn a_larger_budget_never_loses_a_passage_a_smaller_one_kept(
        small in 20usize..1500,
        more in 1usize..2000,
        docs in proptest::collection::vec(("(## [a-d]{1,6}\n\n([a-d]{1,7}[ .]){5,60}\n\n){1,12}", any::<bool>(), 0u8..3), 1..6),
        query in "[a-d]{1,5}( [a-d]{1,5}){0,3}",
    ) {
        let make = || -> Vec<Item> {
            docs.iter()
                .enumerate()
                .map(|(i, (text, must, scope))| Item {
                    source: source(i, match scope { 0 => Scope::Pipeline, 1 => Scope::Conversation, _ => Scope::Message }),
                    must: *must,
                    ..text_item(i, text.clone())
                })
                .collect()
        };
        let lines: Vec<usize> = docs.iter().map(|(t, _, _)| t.lines().count()).collect();
        let a = run(make(), small, &query, &[]);
        let b = run(make(), small + more, &query, &[]);
        prop_assert!(total(&a) <= small && total(&b) <= small + more);
        for (i, (la, lb)) in kept_lines(&a, &lines).iter().zip(kept_lines(&b, &lines)).enumerate() {
            prop_assert!(la.is_subset(&lb), "resource {}: {:?} at {} not within {:?} at {}", i, la, small, lb, small + more);
        }
    }
}

fn retrieve_run(
    items: Vec<Item>,
    message: &str,
    top_k: usize,
    threshold: f64,
) -> passages::Retrieved {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| unreachable!("{e}"));
    let request = hostpipe_core::PassageRequest::new(top_k, threshold);
    rt.block_on(passages::retrieve(
        items,
        FitQuery {
            message,
            history: &[],
        },
        &request,
        &opts(),
    ))
}

/// Retrieval ranks like fitting: the passage holding the answer comes first, scores are
/// in [0, 1] and never rise along the answer, and `top_k` and `score_threshold` cut it.
#[test]
fn retrieval_finds_the_answer_first_with_scores_in_the_unit_interval() {
    let mut doc = filler("networking", 12, 1);
    doc.push_str("\n## Proxy\n\nThe proxy timeout is 42 seconds for the gateway.\n");
    let items = vec![
        text_item(0, filler("cooking", 10, 2)),
        text_item(1, doc),
        Item {
            must: true,
            ..text_item(2, filler("gardening", 6, 3))
        },
    ];
    let got = retrieve_run(
        items,
        "What proxy timeout does the gateway team use?",
        3,
        0.0,
    );
    assert!(!got.passages.is_empty());
    let first = &got.passages[0];
    assert_eq!(first.uri, "kb://doc1.md");
    assert!(first.text.contains("42 seconds"), "{}", first.text);
    assert_eq!(first.heading, "networking handbook > Proxy");
    assert!(got.passages.len() <= 3);
    for p in &got.passages {
        assert!((0.0..=1.0).contains(&p.score), "{}", p.score);
    }
    for w in got.passages.windows(2) {
        assert!(w[0].score >= w[1].score);
    }
    // The must resource is not forced in: nothing in it matches.
    assert!(got.passages.iter().all(|p| p.uri != "kb://doc2.md"));
    // Per item: the answer's resource records its passages, the others say why not.
    assert!(matches!(
        got.outcome.fitted[1].treatment,
        Treatment::Chunked { .. }
    ));
    assert_eq!(
        got.outcome.fitted[1].passages.len(),
        got.passages
            .iter()
            .filter(|p| p.uri == "kb://doc1.md")
            .count()
    );
    // The threshold cuts at a score: just above the last passage's score drops it (and
    // whatever ties with it), and nothing else.
    let scores: Vec<f64> = got.passages.iter().map(|p| p.score).collect();
    assert_eq!(got.passages.len(), 3, "{scores:?}");
    assert!(scores[2] < scores[0], "{scores:?}");
    let items = || {
        let mut doc = filler("networking", 12, 1);
        doc.push_str("\n## Proxy\n\nThe proxy timeout is 42 seconds for the gateway.\n");
        vec![
            text_item(0, filler("cooking", 10, 2)),
            text_item(1, doc),
            Item {
                must: true,
                ..text_item(2, filler("gardening", 6, 3))
            },
        ]
    };
    let message = "What proxy timeout does the gateway team use?";
    let cut = retrieve_run(items(), message, 3, scores[2] + 1e-4);
    let kept = scores.iter().filter(|s| **s >= scores[2] + 1e-4).count();
    assert_eq!(cut.passages.len(), kept, "{scores:?}");
    let one = retrieve_run(items(), message, 1, 0.0);
    assert_eq!(one.passages.len(), 1);
    assert!(one.passages[0].text.contains("42 seconds"));
}

/// A query without terms retrieves nothing, and says so.
#[test]
fn retrieval_without_query_terms_retrieves_nothing() {
    let got = retrieve_run(
        vec![text_item(0, filler("cooking", 3, 2))],
        "the of and",
        5,
        0.0,
    );
    assert!(got.passages.is_empty());
    assert!(
        got.outcome.notes[0].contains("no terms"),
        "{:?}",
        got.outcome.notes
    );
}

/// A message none of whose terms is in any text (another language) still gets the texts,
/// summarized (or truncated without a summarizer), not nothing; the trace says why.
#[test]
fn a_message_that_matches_no_text_still_gets_the_texts() {
    let items = vec![
        text_item(0, filler("travel", 20, 1)),
        text_item(1, filler("payroll", 20, 2)),
    ];
    let out = run(items, 400, "配置里写了什么？", &[]);
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("no term of the message is in any text")),
        "{:?}",
        out.notes
    );
    let ctx = context(&out);
    assert!(
        ctx.contains("travel part") && ctx.contains("payroll part"),
        "{ctx}"
    );
    assert!(out.fitted.iter().all(|f| f.block.is_some()));
    assert!(total(&out) <= 400);
}
