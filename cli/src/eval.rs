//! `hostpipe eval`: does the context a pipeline builds contain the answer?
//!
//! A platform measures its own documents before it goes live: a questions file (JSON
//! lines), the pipeline's real configuration and servers, and a list of budgets. For
//! each budget, every question runs as a turn of the pipeline up to the runner (the
//! stages only, as the `preview` runner would see it), and the question counts as
//! answered when one of its answer strings is in the context exactly as the model
//! gets it. The report gives answer recall and the tokens used per budget
//! (docs/evaluation.md).
//!
//! One question per line:
//!
//! ```json
//! {"id": "q1", "question": "How long is the refund window?", "answers": ["14 days"],
//!  "attach": [{"server": "kb", "uri": "kb://policies/refunds.md"}],
//!  "history": ["Do you sell gift cards?"]}
//! ```
//!
//! `id` (default: the line number), `attach` (message-scope attachments: `uri`, or
//! `template` with `arguments`; default none: the pipeline's own attachments only) and
//! `history` (earlier user messages, oldest first) are optional.
//!
//! Matching is after [`normalize`]: case, runs of whitespace, markdown emphasis
//! (`` ` ``, `*`, `_` at word edges), blockquote markers and curly quotes do not count;
//! and it is by whole words ([`contains_answer`]): "50 EUR" is not in "150 EUR".

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, HistoryMessage, Role, Scope, Turn,
};
use hostpipe_engine::{Pipeline, Prepared};
use hostpipe_runners::PreviewReport;
use serde::{Deserialize, Serialize};

/// One question of the file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// Its id (default: `line N`).
    #[serde(default)]
    pub id: Option<String>,
    /// The user's message.
    pub question: String,
    /// Strings, any of which in the context means the question is answered.
    pub answers: Vec<String>,
    /// Message-scope attachments.
    #[serde(default)]
    pub attach: Vec<Attach>,
    /// Earlier user messages of the conversation, oldest first.
    #[serde(default)]
    pub history: Vec<String>,
    /// Its line in the file (1-based).
    #[serde(skip)]
    pub line: usize,
}

/// A message-scope attachment of a question.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attach {
    /// MCP server name.
    pub server: String,
    /// A static resource URI.
    #[serde(default)]
    pub uri: Option<String>,
    /// An RFC 6570 URI template.
    #[serde(default)]
    pub template: Option<String>,
    /// The template's arguments.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

/// Reads a questions file.
///
/// # Errors
/// When the file cannot be read, or a line is not a valid question (the error names
/// the file and the line).
pub fn read_questions(path: &Path) -> anyhow::Result<Vec<Question>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the questions file {}", path.display()))?;
    let mut out: Vec<Question> = Vec::new();
    // A byte order mark (some editors write one) is not part of the first question.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let mut q: Question = serde_json::from_str(line).with_context(at)?;
        q.line = n + 1;
        if q.question.trim().is_empty() {
            bail!("{}: `question` is empty", at());
        }
        if q.answers.iter().all(|a| normalize(a).is_empty()) {
            bail!("{}: `answers` has no non-empty answer", at());
        }
        for (i, a) in q.attach.iter().enumerate() {
            if a.uri.is_some() == a.template.is_some() {
                bail!(
                    "{}: attach[{i}]: give exactly one of `uri` and `template`",
                    at()
                );
            }
        }
        q.id.get_or_insert_with(|| format!("line {}", n + 1));
        if let Some(other) = out.iter().find(|o| o.id == q.id) {
            bail!(
                "{}: id `{}` is also the id of line {}",
                at(),
                q.id.as_deref().unwrap_or_default(),
                other.line
            );
        }
        out.push(q);
    }
    if out.is_empty() {
        bail!("{}: no questions", path.display());
    }
    Ok(out)
}

/// Answer matching's normalization: lowercase; blockquote markers, backticks, `*` and
/// `_` at word edges dropped; curly quotes and dashes made plain; whitespace runs made
/// one space.
pub fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for line in s.split('\n') {
        let line = line.trim_start_matches([' ', '\t']);
        let mut line = line;
        while let Some(rest) = line.strip_prefix('>') {
            line = rest
                .strip_prefix(' ')
                .unwrap_or(rest)
                .trim_start_matches([' ', '\t']);
        }
        out.push_str(line);
        out.push('\n');
    }
    let chars: Vec<char> = out.chars().collect();
    let mut cleaned = String::with_capacity(out.len());
    for (i, &c) in chars.iter().enumerate() {
        let mapped = match c {
            '\u{2019}' | '\u{2018}' => '\'',
            '\u{201c}' | '\u{201d}' => '"',
            '\u{2013}' | '\u{2014}' => '-',
            '\u{00a0}' | '\u{3000}' => ' ',
            '`' | '*' => continue,
            '_' => {
                let alnum = |x: Option<&char>| x.is_some_and(|c| c.is_ascii_alphanumeric());
                let prev = i.checked_sub(1).and_then(|j| chars.get(j));
                // `_` inside a word (snake_case) stays; at a word edge it is emphasis.
                if alnum(prev) && alnum(chars.get(i + 1)) {
                    '_'
                } else {
                    continue;
                }
            }
            c => c,
        };
        cleaned.push(mapped);
    }
    cleaned
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether normalized `context` holds normalized `answer` as whole words: where the
/// answer starts (ends) with a letter or digit, the context has none just before (after)
/// it, so "50 EUR" is not found in "150 EUR". CJK characters have no word boundaries to
/// check.
pub fn contains_answer(context: &str, answer: &str) -> bool {
    if answer.is_empty() {
        return false;
    }
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() && !is_cjk(c));
    let (first, last) = (answer.chars().next(), answer.chars().next_back());
    context.match_indices(answer).any(|(at, _)| {
        let before = context[..at].chars().next_back();
        let after = context[at + answer.len()..].chars().next();
        let cut_word_start = word(first) && word(before);
        let cut_word_end = word(last) && word(after);
        !(cut_word_start || cut_word_end)
    })
}

fn is_cjk(c: char) -> bool {
    hostpipe_stages::lexical::is_cjk(c)
}

/// What `hostpipe eval` measured at one budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetResult {
    /// The budget, in tokens.
    pub budget: usize,
    /// Questions run.
    pub questions: usize,
    /// Questions whose context held an answer.
    pub answered: usize,
    /// `answered / questions`.
    pub recall: f64,
    /// Mean tokens injected per turn.
    pub mean_tokens: f64,
    /// Most tokens injected in one turn.
    pub max_tokens: usize,
    /// Ids of the questions not answered.
    pub misses: Vec<String>,
    /// Ids of the questions whose turn ended early (a stage replied), with the reply.
    pub ended: Vec<(String, String)>,
    /// The turns' trace warnings (a dense retrieval service that failed, a server that
    /// did not answer, …): each distinct one, with how many turns had it.
    pub warnings: Vec<(String, usize)>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    /// The pipeline measured.
    pub pipeline: String,
    /// Per budget, in the order given.
    pub budgets: Vec<BudgetResult>,
}

impl EvalReport {
    /// The report as a markdown table (one row per budget).
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| budget | answer recall | answered | mean tokens | max tokens |\n|---|---|---|---|---|\n",
        );
        for b in &self.budgets {
            out.push_str(&format!(
                "| {} | {:.1}% | {}/{} | {:.0} | {} |\n",
                b.budget,
                b.recall * 100.0,
                b.answered,
                b.questions,
                b.mean_tokens,
                b.max_tokens
            ));
        }
        out
    }
}

/// The turn of `q` on pipeline `id`.
fn turn_of(id: &str, q: &Question) -> Turn {
    let mut turn = Turn::new(id, q.question.clone());
    turn.ids.message = format!("eval-{}", q.id.as_deref().unwrap_or(""));
    turn.history = q
        .history
        .iter()
        .map(|text| HistoryMessage {
            role: Role::User,
            text: text.clone(),
        })
        .collect();
    turn.attachments = q
        .attach
        .iter()
        .map(|a| Attachment {
            server: a.server.clone(),
            target: match (&a.uri, &a.template) {
                (Some(uri), _) => AttachmentTarget::Uri { uri: uri.clone() },
                (None, template) => AttachmentTarget::Template {
                    template: template.clone().unwrap_or_default(),
                    arguments: a
                        .arguments
                        .iter()
                        .map(|(k, v)| (k.clone(), ArgumentValue::Literal(v.clone())))
                        .collect(),
                },
            },
            scope: Scope::Message,
        })
        .collect();
    turn
}

/// One question's outcome: (answered, tokens, the reply when a stage ended the turn).
/// One question's outcome.
struct Asked {
    answered: bool,
    tokens: usize,
    /// The reply, when a stage ended the turn.
    ended: Option<String>,
    /// The turn's trace warnings.
    warnings: Vec<String>,
}

async fn ask(pipeline: &Pipeline, q: &Question) -> Asked {
    match pipeline.prepare(turn_of(pipeline.id(), q)).await {
        Prepared::Request(request, trace) => {
            let context = normalize(&PreviewReport::new(&request).fenced_context);
            Asked {
                answered: q
                    .answers
                    .iter()
                    .any(|a| contains_answer(&context, &normalize(a))),
                tokens: request.context_tokens(),
                ended: None,
                warnings: trace.warnings().map(str::to_owned).collect(),
            }
        }
        Prepared::Ended(outcome) => Asked {
            answered: false,
            tokens: 0,
            warnings: outcome.trace.warnings().map(str::to_owned).collect(),
            ended: Some(outcome.reply),
        },
    }
}

/// Runs `questions` through each of `pipelines` (one per budget, in order), `jobs` turns
/// at a time.
pub async fn run(
    pipelines: &[(usize, Pipeline)],
    questions: &[Question],
    jobs: usize,
) -> EvalReport {
    let mut budgets = Vec::with_capacity(pipelines.len());
    for (budget, pipeline) in pipelines {
        let results: Vec<Asked> =
            futures_util::stream::iter(questions.iter().map(|q| ask(pipeline, q)))
                .buffered(jobs.max(1))
                .collect()
                .await;
        let n = questions.len();
        let answered = results.iter().filter(|r| r.answered).count();
        let tokens: usize = results.iter().map(|r| r.tokens).sum();
        let mut warnings: Vec<(String, usize)> = Vec::new();
        for w in results.iter().flat_map(|r| &r.warnings) {
            match warnings.iter_mut().find(|(m, _)| m == w) {
                Some((_, count)) => *count += 1,
                None => warnings.push((w.clone(), 1)),
            }
        }
        budgets.push(BudgetResult {
            budget: *budget,
            questions: n,
            answered,
            recall: answered as f64 / n.max(1) as f64,
            mean_tokens: tokens as f64 / n.max(1) as f64,
            max_tokens: results.iter().map(|r| r.tokens).max().unwrap_or(0),
            misses: questions
                .iter()
                .zip(&results)
                .filter(|(_, r)| !r.answered)
                .map(|(q, _)| q.id.clone().unwrap_or_default())
                .collect(),
            ended: questions
                .iter()
                .zip(&results)
                .filter_map(|(q, r)| {
                    r.ended
                        .clone()
                        .map(|reply| (q.id.clone().unwrap_or_default(), reply))
                })
                .collect(),
            warnings,
        });
    }
    EvalReport {
        pipeline: pipelines
            .first()
            .map(|(_, p)| p.id().to_owned())
            .unwrap_or_default(),
        budgets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_ignores_case_emphasis_quotes_and_spacing() {
        assert_eq!(
            normalize("> **Arrays** will be\n> joined  `together`"),
            "arrays will be joined together"
        );
        assert_eq!(
            normalize("Cargo’s _cache_ in CARGO_HOME"),
            "cargo's cache in cargo_home"
        );
        assert_eq!(normalize("计算属性\u{3000}会缓存"), "计算属性 会缓存");
    }

    #[test]
    fn answers_match_whole_words() {
        assert!(contains_answer("up to 150 eur per year", "150 eur"));
        assert!(!contains_answer("up to 150 eur per year", "50 eur"));
        assert!(!contains_answer(
            "the agent may refund up to 150",
            "refund up to 15"
        ));
        assert!(contains_answer("code: 4417.", "4417"));
        assert!(contains_answer("计算属性会缓存。", "会缓存"));
        assert!(!contains_answer("anything", ""));
    }

    #[test]
    fn a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("q.jsonl");
        std::fs::write(
            &path,
            "{\"question\": \"a?\", \"answers\": [\"b\"]}\n\n{\"question\": \"c?\"}\n",
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        let Err(e) = read_questions(&path) else {
            unreachable!("accepted")
        };
        assert!(
            format!("{e:#}").contains("q.jsonl:3: missing field `answers`"),
            "{e:#}"
        );
        std::fs::write(
            &path,
            "{\"question\": \"a?\", \"answers\": [\"b\"], \"attach\": [{\"server\": \"s\"}]}\n",
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        let Err(e) = read_questions(&path) else {
            unreachable!("accepted")
        };
        assert!(
            format!("{e:#}").contains("q.jsonl:1: attach[0]: give exactly one"),
            "{e:#}"
        );
        std::fs::write(
            &path,
            "\u{feff}{\"id\": \"a\", \"question\": \"a?\", \"answers\": [\"b\"]}\n\
             {\"id\": \"a\", \"question\": \"c?\", \"answers\": [\"d\"]}\n",
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        let Err(e) = read_questions(&path) else {
            unreachable!("accepted")
        };
        assert!(
            format!("{e:#}").contains("q.jsonl:2: id `a` is also the id of line 1"),
            "{e:#}"
        );
    }
}
