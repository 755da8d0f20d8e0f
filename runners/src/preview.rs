//! The preview runner: renders the request as the model would receive it.

use std::fmt::Write as _;

use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

use crate::render::treatment_label;
use async_trait::async_trait;
use hostpipe_core::{
    BlockBody, BuildContext, ConfigError, ContextBlock, EventSink, ReadRecord, RunError, RunEvent,
    RunRequest, Runner, Treatment,
};
use serde::{Deserialize, Serialize};

/// Output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviewFormat {
    /// Readable text.
    #[default]
    Text,
    /// One JSON document ([`PreviewReport`]).
    Json,
}

/// Config section `[pipelines.ID.runner_config]` for `preview`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreviewConfig {
    /// Output format.
    pub format: PreviewFormat,
}

/// One context block in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewBlock {
    /// Server.
    pub server: String,
    /// URI.
    pub uri: String,
    /// Template, if the block came from one.
    pub template: Option<String>,
    /// `pipeline`, `conversation` or `message`.
    pub scope: String,
    /// MIME type.
    pub mime_type: Option<String>,
    /// Treatment.
    pub treatment: Treatment,
    /// Tokens before treatment.
    pub tokens_before: usize,
    /// Tokens injected.
    pub tokens_after: usize,
    /// The text the model sees (text or fallback note); absent for images.
    pub text: Option<String>,
    /// For images: `WIDTHxHEIGHT` pixels and bytes.
    pub image: Option<(u32, u32, usize)>,
}

/// One tool in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewTool {
    /// Name offered to the model.
    pub name: String,
    /// Description.
    pub description: String,
}

/// Token totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewBudget {
    /// The context budget, if one was set.
    pub budget_tokens: Option<usize>,
    /// Tokens injected by context blocks.
    pub used_tokens: usize,
}

/// What the preview shows, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewReport {
    /// Model name.
    pub model: String,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Context blocks in order.
    pub context: Vec<PreviewBlock>,
    /// Tools.
    pub tools: Vec<PreviewTool>,
    /// The user's message.
    pub message: String,
    /// Budget totals.
    pub budget: PreviewBudget,
    /// Every resource read of the turn, with what was done to it.
    pub reads: Vec<ReadRecord>,
    /// The context exactly as a model gets it: each block in the turn's fence
    /// (`<resource-NONCE …>`), after the preamble.
    pub fenced_context: String,
}

impl PreviewReport {
    /// The report for `request`.
    pub fn new(request: &RunRequest) -> Self {
        Self {
            model: request.model.name.clone(),
            system_prompt: request.system_prompt.clone(),
            context: request.context.iter().map(block).collect(),
            tools: request
                .tools
                .iter()
                .map(|t| PreviewTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                })
                .collect(),
            message: request.message.text.clone(),
            budget: PreviewBudget {
                budget_tokens: request.context_budget,
                used_tokens: request.context_tokens(),
            },
            reads: request.reads.clone(),
            fenced_context: crate::render::context_text(
                &request.context,
                request.model.vision,
                &request.fence,
            ),
        }
    }

    /// The readable rendering: system prompt, the context exactly as the model gets it
    /// (each block in the turn's `<resource-NONCE …>` fence with its provenance), tools,
    /// the user message, then a budget table.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "== model: {}", self.model);
        if let Some(s) = &self.system_prompt {
            let _ = writeln!(out, "\n== system\n{s}");
        }
        // The same bytes the model gets (the local and dify runners put them after the
        // system prompt).
        let _ = writeln!(out, "\n== context ({} blocks)", self.context.len());
        out.push_str(&self.fenced_context);
        let _ = writeln!(out, "\n== tools ({})", self.tools.len());
        for t in &self.tools {
            let _ = writeln!(out, "- {}: {}", t.name, first_line(&t.description));
        }
        let _ = writeln!(out, "\n== user\n{}", self.message);
        let _ = writeln!(out, "\n== resource reads");
        let width = self
            .reads
            .iter()
            .map(|r| r.uri.width())
            .max()
            .unwrap_or(0)
            .clamp(8, 48);
        // Two servers can share a URI scheme: each read names its server.
        let server_width = self
            .reads
            .iter()
            .map(|r| r.server.width())
            .max()
            .unwrap_or(0)
            .clamp(6, 20);
        let _ = writeln!(
            out,
            "{}  {}  {:<22}  {:>9}  {:<22}  {:>7}  {:>7}  {:>5}",
            pad("server", server_width),
            pad("resource", width),
            "mime",
            "bytes",
            "treatment",
            "before",
            "after",
            "ms"
        );
        // The notes under a read start below its resource column.
        let indent = server_width + 2 + width;
        for r in &self.reads {
            // Padded by display width: a CJK character takes two columns.
            let server = pad(&r.server, server_width);
            let uri = pad(&r.uri, width);
            let mime: String = r
                .mime_type
                .as_deref()
                .unwrap_or("-")
                .chars()
                .take(22)
                .collect();
            let before = format!(
                "{}{}",
                if r.tokens_estimated { "≈" } else { "" },
                r.tokens_before
            );
            let treatment = match (r.outcome.is_read(), r.tokens_after, &r.treatment) {
                (false, 0, _) => "not included".to_owned(),
                (true, 0, Treatment::Omitted) => "left out".to_owned(),
                _ => treatment_label(&r.treatment),
            };
            let _ = writeln!(
                out,
                "{server}  {uri}  {mime:<22}  {:>9}  {treatment:<22}  {before:>7}  {:>7}  {:>5}",
                r.bytes, r.tokens_after, r.elapsed_ms
            );
            if let Some(e) = &r.error {
                let _ = writeln!(out, "{:<indent$}    ↳ {e}", "");
            }
            if !r.passages.is_empty() {
                let kept: Vec<String> = r
                    .passages
                    .iter()
                    .map(|p| {
                        format!(
                            "#{} lines {}-{}{}",
                            p.rank,
                            p.first_line,
                            p.last_line,
                            if p.cut { " (excerpt)" } else { "" }
                        )
                    })
                    .collect();
                let _ = writeln!(out, "{:<indent$}    ↳ kept {}", "", kept.join(", "));
            }
            if let (Some(why), None) = (&r.reason, &r.error) {
                let _ = writeln!(out, "{:<indent$}    ↳ {why}", "");
            }
        }
        let budget = self
            .budget
            .budget_tokens
            .map_or_else(|| "no budget".to_owned(), |b| format!("{b} tokens"));
        let _ = writeln!(
            out,
            "total: {} of {budget} injected",
            self.budget.used_tokens
        );
        out
    }
}

/// `s` cut or padded with spaces to `width` display columns (a CJK character takes two).
fn pad(s: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push_str(&" ".repeat(width - used));
    out
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn block(b: &ContextBlock) -> PreviewBlock {
    PreviewBlock {
        server: b.source.server.clone(),
        uri: b.source.uri.clone(),
        template: b.source.template.as_ref().map(|t| t.uri_template.clone()),
        scope: b.source.scope.as_str().into(),
        mime_type: b.mime_type.clone(),
        treatment: b.treatment.clone(),
        tokens_before: b.tokens_before,
        tokens_after: b.tokens_after,
        text: b.text().map(str::to_owned),
        image: match &b.body {
            BlockBody::Image {
                data,
                width,
                height,
                ..
            } => Some((*width, *height, data.len())),
            _ => None,
        },
    }
}

/// Shows the request instead of calling a model.
#[derive(Debug, Clone, Default)]
pub struct PreviewRunner {
    config: PreviewConfig,
}

impl PreviewRunner {
    /// The name this runner is registered under.
    pub const NAME: &'static str = "preview";

    /// A preview runner with `config`.
    pub fn new(config: PreviewConfig) -> Self {
        Self { config }
    }
}

#[async_trait]
impl Runner for PreviewRunner {
    async fn run(&self, request: &RunRequest, events: &EventSink) -> Result<(), RunError> {
        let report = PreviewReport::new(request);
        let text = match self.config.format {
            PreviewFormat::Text => report.render_text(),
            PreviewFormat::Json => {
                serde_json::to_string_pretty(&report).map_err(|e| RunError::Backend {
                    message: "cannot serialize the preview".into(),
                    source: Some(Box::new(e)),
                })?
            }
        };
        events.emit(RunEvent::MessageCompleted { text }).await;
        events.emit(RunEvent::RunCompleted { usage: None }).await;
        Ok(())
    }
}

fn build(section: &serde_json::Value, _: &BuildContext) -> Result<Box<dyn Runner>, ConfigError> {
    let config = if section.is_null() {
        PreviewConfig::default()
    } else {
        PreviewConfig::deserialize(section).map_err(|e| ConfigError::new("", e.to_string()))?
    };
    Ok(Box::new(PreviewRunner::new(config)))
}

hostpipe_core::submit_runner! {
    name: PreviewRunner::NAME,
    description: "Shows the request as the model would receive it, with a budget report.",
    build: build,
}

#[cfg(test)]
mod tests {
    use hostpipe_core::{ReadOrigin, ReadOutcome, ReadRecord, Scope, Treatment};
    use unicode_width::UnicodeWidthStr as _;

    use super::*;

    fn read(server: &str, uri: &str) -> ReadRecord {
        ReadRecord {
            server: server.into(),
            uri: uri.into(),
            mime_type: Some("text/markdown".into()),
            scope: Scope::Pipeline,
            bytes: 100,
            tokens_before: 20,
            tokens_estimated: false,
            tokens_after: 20,
            treatment: Treatment::Whole,
            elapsed_ms: 1,
            cache_hit: false,
            outcome: ReadOutcome::Read,
            error: None,
            origin: ReadOrigin::Host,
            consent: None,
            passages: Vec::new(),
            reason: None,
        }
    }

    /// Two servers sharing a URI scheme are told apart, and a CJK URI keeps the columns
    /// aligned (it is padded by display width).
    #[test]
    fn the_read_table_names_each_server_and_keeps_its_columns_with_cjk() {
        let report = PreviewReport {
            model: "m".into(),
            system_prompt: None,
            context: Vec::new(),
            tools: Vec::new(),
            message: "q".into(),
            budget: PreviewBudget {
                budget_tokens: Some(100),
                used_tokens: 40,
            },
            reads: vec![
                read("kb", "file:///a.md"),
                read("kb-eu", "file:///手册/组件.md"),
            ],
            fenced_context: String::new(),
        };
        let text = report.render_text();
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "== resource reads")
            .skip(1)
            .take(3)
            .collect();
        assert!(table[0].starts_with("server  resource"), "{text}");
        assert!(table[1].starts_with("kb      file:///a.md"), "{text}");
        assert!(
            table[2].starts_with("kb-eu   file:///手册/组件.md"),
            "{text}"
        );
        // "text/markdown" starts at the same display column on both rows.
        let column = |row: &str| row[..row.find("text/markdown").unwrap_or(0)].width();
        assert_eq!(column(table[1]), column(table[2]), "{text}");
        assert_eq!(
            column(table[0].replace("mime", "text/markdown").as_str()),
            column(table[1])
        );
    }
}
