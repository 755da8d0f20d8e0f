//! `resource_mentions`: `@server:uri` in the user's message attaches that resource for
//! this turn (message scope), like a structured attachment from the platform.
//!
//! - A mention is `@` + a configured server name + `:` + a URI up to the next
//!   whitespace; closing punctuation (`.,;:!?` and an unbalanced `)`) after it is not
//!   part of the URI.
//! - Only servers bound for the turn may be mentioned. A mention of any other server
//!   is left as plain text, with a trace note.
//! - The mention is removed from the text the model sees (`keep_in_text = true` keeps
//!   it); `resource_context_injection`, placed after this stage, reads the resource.

use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    Attachment, BuildContext, ConfigError, McpSource, Stage, StageError, StageOutcome, StagePhase,
    Turn, parse_section,
};
use serde::Deserialize;

/// Config section `[pipelines.ID.resource_mentions]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MentionsConfig {
    /// Keep the `@server:uri` text in the message. Default false (removed).
    pub keep_in_text: bool,
}

/// One mention found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// Byte range of the whole mention in the text.
    pub range: std::ops::Range<usize>,
    /// Server name.
    pub server: String,
    /// Resource URI.
    pub uri: String,
}

/// The `@server:uri` mentions of `text`, for the server names in `servers`.
pub fn find_mentions(text: &str, servers: &[String]) -> Vec<Mention> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('@') {
        // A mention starts a word: not inside an e-mail address.
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| !c.is_whitespace() && c != '(')
        {
            continue;
        }
        let rest = &text[at + 1..];
        let Some(server) = servers
            .iter()
            .filter(|s| rest.starts_with(s.as_str()) && rest[s.len()..].starts_with(':'))
            .max_by_key(|s| s.len())
        else {
            continue;
        };
        let uri_start = at + 1 + server.len() + 1;
        let uri_end = text[uri_start..]
            .find(char::is_whitespace)
            .map_or(text.len(), |i| uri_start + i);
        let mut uri = &text[uri_start..uri_end];
        loop {
            let trimmed = uri.trim_end_matches(['.', ',', ';', ':', '!', '?']);
            let trimmed = if trimmed.ends_with(')')
                && trimmed.matches('(').count() < trimmed.matches(')').count()
            {
                &trimmed[..trimmed.len() - 1]
            } else {
                trimmed
            };
            if trimmed.len() == uri.len() {
                break;
            }
            uri = trimmed;
        }
        // `scheme:` at least: a mention needs a URI.
        if !uri.contains(':') {
            continue;
        }
        out.push(Mention {
            range: at..uri_start + uri.len(),
            server: server.clone(),
            uri: uri.to_owned(),
        });
    }
    out
}

/// See the module documentation.
pub struct ResourceMentions {
    config: MentionsConfig,
    mcp: Arc<dyn McpSource>,
}

impl ResourceMentions {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "resource_mentions";

    /// A stage with `config` over the servers of `mcp`.
    pub fn new(config: MentionsConfig, mcp: Arc<dyn McpSource>) -> Self {
        Self { config, mcp }
    }
}

#[async_trait]
impl Stage for ResourceMentions {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let servers: Vec<String> = self.mcp.servers().into_iter().map(|s| s.name).collect();
        let mentions = find_mentions(&turn.message.text, &servers);
        if mentions.is_empty() {
            return Ok(StageOutcome::Continue);
        }
        let mut text = String::with_capacity(turn.message.text.len());
        let mut last = 0;
        for m in mentions {
            if !turn.is_bound(&m.server) {
                turn.trace.note(format!(
                    "@{}:{} mentions server `{}`, which is not bound for this turn; left as text",
                    m.server, m.uri, m.server
                ));
                continue;
            }
            turn.attachments
                .push(Attachment::message_uri(m.server.clone(), m.uri.clone()));
            turn.trace
                .note(format!("@{}:{} attached for this turn", m.server, m.uri));
            if !self.config.keep_in_text {
                text.push_str(&turn.message.text[last..m.range.start]);
                last = m.range.end;
            }
        }
        if !self.config.keep_in_text {
            text.push_str(&turn.message.text[last..]);
            // Removing a mention leaves doubled spaces and a space before punctuation.
            let mut tidy = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for p in [",", ".", ";", ":", "!", "?"] {
                tidy = tidy.replace(&format!(" {p}"), p);
            }
            turn.message.text = tidy;
        }
        Ok(StageOutcome::Continue)
    }
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: MentionsConfig = parse_section(section)?;
    Ok(Box::new(ResourceMentions::new(
        config,
        Arc::clone(&ctx.mcp),
    )))
}

hostpipe_core::submit_stage! {
    name: ResourceMentions::NAME,
    phase: StagePhase::Expand,
    priority: 10,
    description: "Attaches resources the message mentions as @server:uri.",
    build: build,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers() -> Vec<String> {
        vec!["kb".into(), "kb-eu".into(), "demo".into()]
    }

    #[test]
    fn mentions_are_found_with_their_uri_and_without_closing_punctuation() {
        let m = find_mentions(
            "see @kb:kb://medical/terminology/common, and (@kb-eu:kb://x/y). Mail a@kb:foo.",
            &servers(),
        );
        let got: Vec<(&str, &str)> = m
            .iter()
            .map(|m| (m.server.as_str(), m.uri.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("kb", "kb://medical/terminology/common"),
                ("kb-eu", "kb://x/y")
            ]
        );
        assert!(find_mentions("@unknown:x://y @demo:nouri", &servers()).is_empty());
    }
}
