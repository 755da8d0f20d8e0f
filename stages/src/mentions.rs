//! `resource_mentions`: `@server:uri` in the user's message attaches that resource for
//! this turn (message scope), like a structured attachment from the platform.
//!
//! - A mention is `@` + a configured server name + `:` + a URI up to the next
//!   whitespace (ASCII or ideographic) or CJK punctuation (`，。、；：！？「」（）…`);
//!   closing ASCII punctuation (`.,;:!?` and an unbalanced `)`) after it is not part of
//!   the URI. It starts a word: after a space, punctuation or a CJK character, never
//!   inside an e-mail address (`a@kb:x` is not one).
//! - Only servers bound for the turn may be mentioned. A mention of any other server
//!   is left as plain text, with a trace note.
//! - In the text the model sees, the mention is replaced by the resource's name: its
//!   listed title or name, else the last segment of its URI (`what does
//!   @notes:notes://faq.md say?` becomes `what does faq.md say?`), so the sentence
//!   still reads; `keep_in_text = true` keeps the mention as written.
//!   `resource_context_injection`, placed after this stage, reads the resource.

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

/// Whether `c` ends a mention's URI: whitespace (U+3000 too) or CJK punctuation (the
/// CJK Symbols and Punctuation block, fullwidth punctuation, CJK quotes, dashes and the
/// ellipsis), which never occur in a URI but always follow one in Chinese text.
pub fn ends_uri(c: char) -> bool {
    c.is_whitespace()
        || matches!(c,
            '\u{3000}'..='\u{303F}'
            | '\u{FF01}'..='\u{FF0F}'
            | '\u{FF1A}'..='\u{FF20}'
            | '\u{FF3B}'..='\u{FF40}'
            | '\u{FF5B}'..='\u{FF65}'
            | '\u{2010}'..='\u{2027}'
            | '\u{FE10}'..='\u{FE1F}'
            | '\u{FE30}'..='\u{FE4F}')
}

/// The `@server:uri` mentions of `text`, for the server names in `servers`.
pub fn find_mentions(text: &str, servers: &[String]) -> Vec<Mention> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices('@') {
        // A mention starts a word: not inside an e-mail address (`a@kb:x`).
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '%' | '+' | '-'))
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
            .find(ends_uri)
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

/// What a removed mention of `uri` leaves in the text: `listed` (the resource's title
/// or name, when the server lists it), else the last segment of the URI's path, else
/// the URI.
pub fn placeholder(uri: &str, listed: Option<&str>) -> String {
    if let Some(name) = listed.map(str::trim).filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    let path = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let path = path.split(['?', '#']).next().unwrap_or(path);
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(uri)
        .to_owned()
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
        let mut listings: std::collections::HashMap<String, Arc<[hostpipe_core::Resource]>> =
            std::collections::HashMap::new();
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
                if !listings.contains_key(&m.server)
                    && let Ok(listed) = self.mcp.list_resources(&m.server).await
                {
                    listings.insert(m.server.clone(), listed);
                }
                let listed = listings.get(&m.server).and_then(|l| {
                    l.iter()
                        .find(|r| r.uri == m.uri)
                        .map(|r| r.title.as_deref().unwrap_or(&r.name))
                });
                text.push_str(&turn.message.text[last..m.range.start]);
                text.push_str(&placeholder(&m.uri, listed));
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

    #[test]
    fn a_mention_ends_at_cjk_punctuation_and_may_follow_cjk_text() {
        let uris = |text: &str| -> Vec<String> {
            find_mentions(text, &servers())
                .into_iter()
                .map(|m| m.uri)
                .collect()
        };
        assert_eq!(
            uris("@demo:demo://config/app.json，配置里写了什么？"),
            ["demo://config/app.json"]
        );
        assert_eq!(
            uris("请看@kb:kb://手册/组件.md。还有「@demo:demo://docs/faq.md」呢"),
            ["kb://手册/组件.md", "demo://docs/faq.md"]
        );
        // The ideographic space, and CJK text inside the URI stays.
        assert_eq!(
            uris("读@kb:kb://a/计算属性\u{3000}然后"),
            ["kb://a/计算属性"]
        );
        // Still not inside an e-mail address.
        assert!(uris("mail ann.lee@kb:foo://x").is_empty());
    }

    #[test]
    fn a_removed_mention_leaves_the_resources_name() {
        assert_eq!(placeholder("notes://faq.md", None), "faq.md");
        assert_eq!(
            placeholder("demo://config/app.json", Some("App config")),
            "App config"
        );
        assert_eq!(placeholder("kb://docs/", None), "docs");
        assert_eq!(placeholder("kb://a/b.md?v=2#top", None), "b.md");
        assert_eq!(placeholder("urn:isbn:123", None), "urn:isbn:123");
    }
}
