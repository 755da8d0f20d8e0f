//! `prompt_expansion`: a message `/server:prompt arg=value other="two words"` becomes the
//! messages of that MCP prompt (`prompts/get`, MCP spec 2025-11-25, "Prompts").
//!
//! - Arguments are `name=value` words, split like a shell does (`shlex`): quotes keep
//!   several words one value. A word without `=` fills the next argument the prompt
//!   declares that is not given by name.
//! - A missing required argument, an unknown one or an unknown prompt ends the turn
//!   with a reply that says what to write, listing the server's completions for a
//!   missing argument (`completion/complete`) when it offers them.
//! - The prompt's last user text becomes the message; the messages before it become
//!   history. Embedded resources and images become message-scope attachments with
//!   their contents, and resource links message-scope attachments of their URI, so
//!   `resource_context_injection` (placed after this stage) converts and budgets them
//!   like any resource.
//! - A message whose server is not bound for the turn is left as it is, with a trace
//!   note: it may be plain text that happens to start with `/`.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    Attachment, AttachmentTarget, BuildContext, CompletionRef, ConfigError, HistoryMessage,
    McpSource, MessageKey, Messages, Prompt, ResourceContents, Role, Scope, Stage, StageError,
    StageOutcome, StagePhase, ToolContent, Turn,
};
use serde::Deserialize;

use crate::config::parse_section;

/// Config section `[pipelines.ID.prompt_expansion]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromptConfig {
    /// What starts a prompt command. Default `/`.
    pub prefix: String,
    /// Completions listed per missing argument. Default 10.
    pub max_completions: usize,
}

impl Default for PromptConfig {
    fn default() -> Self {
        Self {
            prefix: "/".into(),
            max_completions: 10,
        }
    }
}

/// A parsed `/server:prompt …` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCommand {
    /// Server name.
    pub server: String,
    /// Prompt name.
    pub prompt: String,
    /// `name=value` arguments, in order.
    pub named: Vec<(String, String)>,
    /// Words without `=`, in order.
    pub positional: Vec<String>,
}

/// Why a message that looks like a command could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A quote was not closed.
    #[error("a quote is not closed; put a value with spaces in \"double quotes\"")]
    UnclosedQuote,
    /// `=value` without a name.
    #[error("`{0}` has no argument name before `=`")]
    NoName(String),
}

impl CommandError {
    /// What the end user is told, in `messages`' language.
    fn reply(&self, messages: &Messages) -> String {
        match self {
            Self::UnclosedQuote => messages.render(MessageKey::PromptCommandUnclosedQuote, &[]),
            Self::NoName(word) => {
                messages.render(MessageKey::PromptCommandNoName, &[("word", word)])
            }
        }
    }
}

/// Parses `text` as `PREFIX server:prompt args…`. `Ok(None)` when it is not a command
/// (no prefix, or no `server:prompt` right after it).
///
/// # Errors
/// [`CommandError`] for a command whose arguments cannot be read.
pub fn parse_command(text: &str, prefix: &str) -> Result<Option<PromptCommand>, CommandError> {
    let Some(rest) = text.trim_start().strip_prefix(prefix) else {
        return Ok(None);
    };
    let (head, args) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(h, a)| (h, a));
    let Some((server, prompt)) = head.split_once(':') else {
        return Ok(None);
    };
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    if !valid(server) || prompt.is_empty() || prompt.contains(char::is_whitespace) {
        return Ok(None);
    }
    let words = shlex::split(args).ok_or(CommandError::UnclosedQuote)?;
    let mut named = Vec::new();
    let mut positional = Vec::new();
    for w in words {
        match w.split_once('=') {
            Some(("", _)) => return Err(CommandError::NoName(w)),
            Some((k, v)) => named.push((k.to_owned(), v.to_owned())),
            None => positional.push(w),
        }
    }
    Ok(Some(PromptCommand {
        server: server.to_owned(),
        prompt: prompt.to_owned(),
        named,
        positional,
    }))
}

/// Expands MCP prompt commands; see the module documentation.
pub struct PromptExpansion {
    config: PromptConfig,
    mcp: Arc<dyn McpSource>,
}

impl PromptExpansion {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "prompt_expansion";

    /// A stage with `config` over `mcp`.
    ///
    /// # Errors
    /// [`ConfigError`] at `prefix` when it is empty.
    pub fn new(config: PromptConfig, mcp: Arc<dyn McpSource>) -> Result<Self, ConfigError> {
        if config.prefix.trim().is_empty() {
            return Err(ConfigError::new("prefix", "must not be empty"));
        }
        Ok(Self { config, mcp })
    }

    /// The reply for missing required arguments: each with its description and, when
    /// the server completes it, the values it offers.
    async fn missing_reply(
        &self,
        cmd: &PromptCommand,
        prompt: &Prompt,
        given: &BTreeMap<String, String>,
        missing: &[&hostpipe_core::PromptArgument],
        messages: &Messages,
    ) -> String {
        let mut lines = String::new();
        let completes = self
            .mcp
            .server(&cmd.server)
            .is_some_and(|s| s.capabilities.completions);
        for arg in missing {
            if !lines.is_empty() {
                lines.push('\n');
            }
            lines.push_str(&format!("- {}", arg.name));
            if let Some(d) = &arg.description {
                lines.push_str(&format!(": {d}"));
            }
            if completes {
                let reference = CompletionRef::Prompt {
                    name: prompt.name.clone(),
                };
                if let Ok(c) = self
                    .mcp
                    .complete(&cmd.server, &reference, &arg.name, "", given)
                    .await
                    && !c.values.is_empty()
                {
                    let shown: Vec<&str> = c
                        .values
                        .iter()
                        .take(self.config.max_completions)
                        .map(String::as_str)
                        .collect();
                    let more = c.has_more || c.values.len() > shown.len();
                    let mut values = messages.list(&shown);
                    if more {
                        values.push_str(&messages.render(MessageKey::ListSeparator, &[]));
                        values.push('…');
                    }
                    lines.push_str(
                        &messages
                            .render(MessageKey::PromptArgumentExamples, &[("values", &values)]),
                    );
                }
            }
        }
        let example: Vec<String> = prompt
            .arguments
            .iter()
            .filter(|a| a.required)
            .map(|a| format!("{}=\"…\"", a.name))
            .collect();
        let command = format!("{}{}:{}", self.config.prefix, cmd.server, cmd.prompt);
        let usage = format!("{command} {}", example.join(" "));
        let key = if missing.len() == 1 {
            MessageKey::PromptArgumentMissing
        } else {
            MessageKey::PromptArgumentsMissing
        };
        messages.render(
            key,
            &[
                ("command", &command),
                ("arguments", &lines),
                ("usage", &usage),
            ],
        )
    }
}

/// The arguments by name: named ones, then positional ones into the declared
/// arguments not yet given, in order.
fn bind_arguments(
    cmd: &PromptCommand,
    prompt: &Prompt,
    messages: &Messages,
) -> Result<BTreeMap<String, String>, String> {
    let declared: Vec<&str> = prompt.arguments.iter().map(|a| a.name.as_str()).collect();
    let mut given = BTreeMap::new();
    for (k, v) in &cmd.named {
        if !declared.contains(&k.as_str()) {
            return Err(messages.render(
                MessageKey::PromptArgumentUnknown,
                &[
                    ("prompt", &prompt.name),
                    ("argument", k),
                    ("arguments", &messages.list(&declared)),
                ],
            ));
        }
        given.insert(k.clone(), v.clone());
    }
    let free: Vec<&str> = declared
        .iter()
        .copied()
        .filter(|d| !given.contains_key(*d))
        .collect();
    let mut free = free.into_iter();
    for v in &cmd.positional {
        let Some(name) = free.next() else {
            return Err(messages.render(
                MessageKey::PromptArgumentExtra,
                &[
                    ("prompt", &prompt.name),
                    ("count", &declared.len().to_string()),
                    ("value", v),
                ],
            ));
        };
        given.insert(name.to_owned(), v.clone());
    }
    Ok(given)
}

#[async_trait]
impl Stage for PromptExpansion {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let cmd = match parse_command(&turn.message.text, &self.config.prefix) {
            Ok(Some(cmd)) => cmd,
            Ok(None) => return Ok(StageOutcome::Continue),
            Err(e) => return Ok(StageOutcome::Reply(e.reply(&turn.messages))),
        };
        if !turn.is_bound(&cmd.server) {
            turn.trace.warn(format!(
                "`{}{}:{}` names server `{}`, which is not bound for this turn; the message is left as it is",
                self.config.prefix, cmd.server, cmd.prompt, cmd.server
            ));
            return Ok(StageOutcome::Continue);
        }
        let prompts = match self.mcp.list_prompts(&cmd.server).await {
            Ok(p) => p,
            Err(e) => {
                turn.trace.warn(format!("prompts of `{}`: {e}", cmd.server));
                return Ok(StageOutcome::Reply(turn.messages.render(
                    MessageKey::PromptsUnavailable,
                    &[("server", &cmd.server)],
                )));
            }
        };
        let Some(prompt) = prompts.iter().find(|p| p.name == cmd.prompt) else {
            let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
            return Ok(StageOutcome::Reply(turn.messages.render(
                MessageKey::PromptNotFound,
                &[
                    ("server", &cmd.server),
                    ("prompt", &cmd.prompt),
                    ("prompts", &turn.messages.list(&names)),
                ],
            )));
        };
        let given = match bind_arguments(&cmd, prompt, &turn.messages) {
            Ok(g) => g,
            Err(reply) => return Ok(StageOutcome::Reply(reply)),
        };
        let missing: Vec<_> = prompt
            .arguments
            .iter()
            .filter(|a| a.required && !given.contains_key(&a.name))
            .collect();
        if !missing.is_empty() {
            let reply = self
                .missing_reply(&cmd, prompt, &given, &missing, &turn.messages)
                .await;
            return Ok(StageOutcome::Reply(reply));
        }
        let result = match self.mcp.get_prompt(&cmd.server, &cmd.prompt, &given).await {
            Ok(r) => r,
            Err(e) => {
                turn.trace.warn(format!(
                    "prompts/get `{}` on `{}`: {e}",
                    cmd.prompt, cmd.server
                ));
                // A refusal of the arguments is about what the user wrote: its message
                // says what to change (`unknown topic`). Any other error stays in the
                // trace: it may quote internals.
                if let hostpipe_core::SourceError::Protocol {
                    code: -32602,
                    message,
                    ..
                } = &e
                {
                    let reason = crate::excerpt::shorten(message, 200);
                    return Ok(StageOutcome::Reply(turn.messages.render(
                        MessageKey::PromptArgumentsRefused,
                        &[
                            ("server", &cmd.server),
                            ("prompt", &cmd.prompt),
                            ("reason", &reason),
                        ],
                    )));
                }
                return Ok(StageOutcome::Reply(turn.messages.render(
                    MessageKey::PromptExpansionFailed,
                    &[("server", &cmd.server), ("prompt", &cmd.prompt)],
                )));
            }
        };
        let (texts, attachments) = split_messages(&cmd, result.messages);
        let last_user = texts.iter().rposition(|(role, _)| *role == Role::User);
        let mut history = Vec::new();
        let mut message = String::new();
        for (i, (role, text)) in texts.into_iter().enumerate() {
            if Some(i) == last_user {
                message = text;
            } else {
                history.push(HistoryMessage { role, text });
            }
        }
        turn.trace.note(format!(
            "expanded `{}{}:{}` into {} message(s) and {} attachment(s)",
            self.config.prefix,
            cmd.server,
            cmd.prompt,
            history.len() + usize::from(last_user.is_some()),
            attachments.len()
        ));
        turn.history.extend(history);
        turn.message.text = message;
        turn.attachments.extend(attachments);
        Ok(StageOutcome::Continue)
    }
}

/// The text of each message (consecutive texts of one role joined), and the non-text
/// content as message-scope attachments.
fn split_messages(
    cmd: &PromptCommand,
    messages: Vec<hostpipe_core::PromptMessage>,
) -> (Vec<(Role, String)>, Vec<Attachment>) {
    let mut texts: Vec<(Role, String)> = Vec::new();
    let mut attachments = Vec::new();
    let synthetic = |i: usize| format!("prompt:{}/{}#{}", cmd.server, cmd.prompt, i + 1);
    for (i, m) in messages.into_iter().enumerate() {
        let embedded = |contents: ResourceContents| Attachment {
            server: cmd.server.clone(),
            target: AttachmentTarget::Embedded { contents },
            scope: Scope::Message,
        };
        match m.content {
            ToolContent::Text { text } => match texts.last_mut() {
                Some((role, t)) if *role == m.role => {
                    t.push_str("\n\n");
                    t.push_str(&text);
                }
                _ => texts.push((m.role, text)),
            },
            ToolContent::Resource { contents } => attachments.push(embedded(contents)),
            ToolContent::ResourceLink { resource } => {
                attachments.push(Attachment::message_uri(cmd.server.clone(), resource.uri));
            }
            ToolContent::Image { mime_type, data } | ToolContent::Audio { mime_type, data } => {
                attachments.push(embedded(ResourceContents::Blob {
                    uri: synthetic(i),
                    mime_type: Some(mime_type),
                    data,
                }));
            }
        }
    }
    (texts, attachments)
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: PromptConfig = parse_section(section)?;
    Ok(Box::new(PromptExpansion::new(
        config,
        Arc::clone(&ctx.mcp),
    )?))
}

hostpipe_core::submit_stage! {
    name: PromptExpansion::NAME,
    phase: StagePhase::Expand,
    priority: 0,
    description: "Expands `/server:prompt arg=value` into the MCP prompt's messages.",
    build: build,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(text: &str) -> Option<PromptCommand> {
        parse_command(text, "/").unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn commands_split_like_a_shell() {
        let c = cmd(r#"/everything:args-prompt city="New York" state=NY"#);
        assert_eq!(
            c,
            Some(PromptCommand {
                server: "everything".into(),
                prompt: "args-prompt".into(),
                named: vec![
                    ("city".into(), "New York".into()),
                    ("state".into(), "NY".into())
                ],
                positional: vec![],
            })
        );
        let c = cmd("/kb:summarize 'two words' three").unwrap_or_else(|| unreachable!());
        assert_eq!(c.positional, ["two words", "three"]);
        assert_eq!(cmd("/help"), None);
        assert_eq!(cmd("no command"), None);
        assert_eq!(cmd("/a b:c"), None);
        assert_eq!(
            parse_command(r#"/kb:x city="New York"#, "/"),
            Err(CommandError::UnclosedQuote)
        );
        assert_eq!(
            parse_command("/kb:x =v", "/"),
            Err(CommandError::NoName("=v".into()))
        );
    }

    #[test]
    fn positional_words_fill_the_arguments_not_named() {
        let prompt = Prompt {
            name: "p".into(),
            title: None,
            description: None,
            arguments: ["a", "b", "c"]
                .iter()
                .map(|n| hostpipe_core::PromptArgument {
                    name: (*n).into(),
                    description: None,
                    required: true,
                })
                .collect(),
        };
        let c = cmd("/s:p b=2 one three").unwrap_or_else(|| unreachable!());
        let en = Messages::default();
        let got = bind_arguments(&c, &prompt, &en).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(got["a"], "one");
        assert_eq!(got["b"], "2");
        assert_eq!(got["c"], "three");
        let c = cmd("/s:p x=1").unwrap_or_else(|| unreachable!());
        let err = bind_arguments(&c, &prompt, &en).err().unwrap_or_default();
        assert_eq!(
            err,
            "Prompt `p` has no argument `x`; its arguments: a, b, c."
        );
        let zh = Messages::new(hostpipe_core::Locale::ZhHans);
        let err = bind_arguments(&c, &prompt, &zh).err().unwrap_or_default();
        assert_eq!(err, "提示词 `p` 没有参数 `x`；它的参数：a、b、c。");
        let c = cmd("/s:p 1 2 3 4").unwrap_or_else(|| unreachable!());
        let err = bind_arguments(&c, &prompt, &en).err().unwrap_or_default();
        assert_eq!(err, "Prompt `p` takes 3 argument(s); `4` is one too many.");
    }
}
