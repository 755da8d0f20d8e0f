//! The message catalog: every text hostpipe itself says to an end user (as a turn's reply),
//! in English and Simplified Chinese, chosen per pipeline ([`Locale`]) and overridable
//! message by message ([`Messages::with_override`]).
//!
//! These texts never carry internals: an OS error, a path, a command line, an upstream's
//! address or error body goes to the trace and the log, and the reply names the turn id
//! under which they are found. Texts meant for the model (the notes in its context, such
//! as "withheld: reading it was not allowed") are not in the catalog: the model reads
//! them, and answers in the user's language.
//!
//! A text is a template: `{name}` is replaced by the value of placeholder `name` (each
//! [`MessageKey`] lists its own, [`MessageKey::placeholders`]), `{{` and `}}` are a
//! literal brace.

use std::collections::BTreeMap;
use std::fmt;

/// The language of a pipeline's end-user texts: the built-in catalogs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Locale {
    /// English (`en`).
    #[default]
    En,
    /// Simplified Chinese (`zh-Hans`; `zh`, `zh-CN` and `zh-SG` mean it too).
    ZhHans,
}

impl Locale {
    /// Every built-in locale.
    pub const ALL: [Self; 2] = [Self::En, Self::ZhHans];

    /// The locale a BCP 47 language tag (RFC 5646) names, case-insensitively and with `_`
    /// taken for `-`: `en` and any `en-…`; `zh`, `zh-Hans…`, `zh-CN` and `zh-SG`. `None`
    /// for any other tag, Traditional Chinese (`zh-Hant`, `zh-TW`, `zh-HK`, `zh-MO`)
    /// included: it has no built-in catalog.
    pub fn parse(tag: &str) -> Option<Self> {
        let tag = tag.trim().replace('_', "-").to_ascii_lowercase();
        let mut parts = tag.split('-');
        match parts.next()? {
            "en" => Some(Self::En),
            "zh" => match parts.next() {
                None | Some("hans" | "cn" | "sg") => Some(Self::ZhHans),
                Some(_) => None,
            },
            _ => None,
        }
    }

    /// Its BCP 47 tag: `en`, `zh-Hans`.
    pub fn tag(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::ZhHans => "zh-Hans",
        }
    }
}

impl fmt::Display for Locale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

macro_rules! catalog {
    ($(
        $(#[$doc:meta])*
        $key:ident = $name:literal [$($ph:literal),*]
            en: $en:literal
            zh: $zh:literal
    )*) => {
        /// One text of the catalog. Its name ([`MessageKey::name`]) is the key of an
        /// override in the configuration (`[pipelines.ID.messages]`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum MessageKey {
            $($(#[$doc])* $key,)*
        }

        impl MessageKey {
            /// Every key, in catalog order.
            pub const ALL: &'static [Self] = &[$(Self::$key,)*];

            /// Its name in configuration, e.g. `runner_failed`.
            pub fn name(self) -> &'static str {
                match self { $(Self::$key => $name,)* }
            }

            /// The placeholders its text may use, e.g. `["turn"]`.
            pub fn placeholders(self) -> &'static [&'static str] {
                match self { $(Self::$key => &[$($ph),*],)* }
            }

            /// Its built-in text in `locale`.
            pub fn builtin(self, locale: Locale) -> &'static str {
                match (self, locale) {
                    $(
                        (Self::$key, Locale::En) => $en,
                        (Self::$key, Locale::ZhHans) => $zh,
                    )*
                }
            }
        }
    };
}

catalog! {
    /// A server the pipeline requires (`required = true`) is not connected.
    ServerUnavailable = "server_unavailable" ["server"]
        en: "Sorry, I can't answer right now: the MCP server `{server}` that this pipeline requires is unavailable."
        zh: "抱歉，现在无法回答：本助手所需的 MCP 服务器 `{server}` 暂时不可用。"
    /// The runner failed (the model's endpoint, the remote agent).
    RunnerFailed = "runner_failed" ["turn"]
        en: "Sorry, I could not answer this message: the model behind this assistant failed (turn {turn})."
        zh: "抱歉，无法回答这条消息：本助手背后的模型出错了（请求编号 {turn}）。"
    /// The turn ran past its deadline (`turn_timeout_ms`, or the caller's).
    TurnTimedOut = "turn_timed_out" ["turn"]
        en: "Sorry, answering this message took too long and was stopped (turn {turn})."
        zh: "抱歉，这条消息处理超时，已停止（请求编号 {turn}）。"
    /// A stage failed (returned an error or panicked).
    StageFailed = "stage_failed" ["stage", "turn"]
        en: "Sorry, this message could not be handled: stage `{stage}` failed (turn {turn})."
        zh: "抱歉，无法处理这条消息：处理步骤 `{stage}` 出错了（请求编号 {turn}）。"
    /// A prompt command with a quote left open.
    PromptCommandUnclosedQuote = "prompt_command_unclosed_quote" []
        en: "That looks like a prompt command, but a quote is not closed; put a value with spaces in \"double quotes\"."
        zh: "这看起来是一条提示词命令，但有引号没有闭合；含空格的值请放在 \"双引号\" 里。"
    /// A prompt command with `=value` and no argument name.
    PromptCommandNoName = "prompt_command_no_name" ["word"]
        en: "That looks like a prompt command, but `{word}` has no argument name before `=`."
        zh: "这看起来是一条提示词命令，但 `{word}` 在 `=` 前面没有参数名。"
    /// The prompts of a server could not be listed.
    PromptsUnavailable = "prompts_unavailable" ["server"]
        en: "The prompts of `{server}` are not available right now."
        zh: "`{server}` 的提示词暂时无法获取。"
    /// A prompt command names a prompt the server does not have.
    PromptNotFound = "prompt_not_found" ["server", "prompt", "prompts"]
        en: "`{server}` has no prompt `{prompt}`. Its prompts: {prompts}."
        zh: "`{server}` 没有名为 `{prompt}` 的提示词。可用的提示词：{prompts}。"
    /// A prompt command gives an argument the prompt does not declare.
    PromptArgumentUnknown = "prompt_argument_unknown" ["prompt", "argument", "arguments"]
        en: "Prompt `{prompt}` has no argument `{argument}`; its arguments: {arguments}."
        zh: "提示词 `{prompt}` 没有参数 `{argument}`；它的参数：{arguments}。"
    /// A prompt command gives more values than the prompt has arguments.
    PromptArgumentExtra = "prompt_argument_extra" ["prompt", "count", "value"]
        en: "Prompt `{prompt}` takes {count} argument(s); `{value}` is one too many."
        zh: "提示词 `{prompt}` 只接受 {count} 个参数，`{value}` 是多余的。"
    /// A prompt command misses one required argument: `arguments` is its line
    /// (`- name: description`), `usage` the command with every required argument.
    PromptArgumentMissing = "prompt_argument_missing" ["command", "arguments", "usage"]
        en: "`{command}` needs an argument:\n{arguments}\nWrite: {usage}"
        zh: "`{command}` 还缺一个参数：\n{arguments}\n请这样写：{usage}"
    /// A prompt command misses several required arguments: `arguments` has a line for
    /// each.
    PromptArgumentsMissing = "prompt_arguments_missing" ["command", "arguments", "usage"]
        en: "`{command}` needs arguments:\n{arguments}\nWrite: {usage}"
        zh: "`{command}` 还缺几个参数：\n{arguments}\n请这样写：{usage}"
    /// Values the server offers for a missing argument (MCP completion), after its line.
    PromptArgumentExamples = "prompt_argument_examples" ["values"]
        en: " (for example: {values})"
        zh: "（例如：{values}）"
    /// The server refused a prompt's arguments (`prompts/get` answered JSON-RPC -32602,
    /// invalid params): `reason` is its message, at most 200 bytes.
    PromptArgumentsRefused = "prompt_arguments_refused" ["server", "prompt", "reason"]
        en: "`{server}` refused the arguments of prompt `{prompt}`: {reason}"
        zh: "`{server}` 不接受提示词 `{prompt}` 的参数：{reason}"
    /// The server failed to expand a prompt (`prompts/get`); its error is in the trace.
    PromptExpansionFailed = "prompt_expansion_failed" ["server", "prompt"]
        en: "The prompt `{prompt}` of `{server}` could not be expanded right now."
        zh: "`{server}` 的提示词 `{prompt}` 暂时无法展开。"
    /// An empty list (no prompts, no arguments).
    ListEmpty = "list_empty" []
        en: "none"
        zh: "无"
    /// Between the items of a list.
    ListSeparator = "list_separator" []
        en: ", "
        zh: "、"
}

impl MessageKey {
    /// The key named `name` ([`MessageKey::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }
}

impl fmt::Display for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an override ([`Messages::with_override`]) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// No text of the catalog has this name.
    #[error("no message is named `{name}`; the messages: {}", known())]
    UnknownKey {
        /// The name given.
        name: String,
    },
    /// The text uses a placeholder its message does not have.
    #[error("`{{{placeholder}}}` is not a placeholder of `{key}`; its placeholders: {}", list_placeholders(*key))]
    UnknownPlaceholder {
        /// The message.
        key: MessageKey,
        /// The placeholder used.
        placeholder: String,
    },
    /// A `{` without its `}`, or a `}` without its `{` (a literal brace is `{{` or `}}`).
    #[error(
        "the `{brace}` at byte {at} has no partner (write a literal brace as `{{{{` or `}}}}`)"
    )]
    UnbalancedBrace {
        /// Byte offset of the brace in the text.
        at: usize,
        /// The brace.
        brace: char,
    },
    /// An empty text: the end user would get an empty reply.
    #[error("the text of `{key}` is empty: the end user would get an empty reply")]
    Empty {
        /// The message.
        key: MessageKey,
    },
}

fn known() -> String {
    MessageKey::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn list_placeholders(key: MessageKey) -> String {
    let p = key.placeholders();
    if p.is_empty() {
        "none".to_owned()
    } else {
        p.iter()
            .map(|p| format!("{{{p}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One piece of a template.
enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

/// The pieces of `template`, or where a brace is unbalanced.
fn pieces(template: &str) -> Result<Vec<Piece<'_>>, MessageError> {
    let mut out = Vec::new();
    let bytes = template.as_bytes();
    let (mut i, mut start) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'}' if bytes.get(i + 1) == Some(&bytes[i]) => {
                out.push(Piece::Text(&template[start..=i]));
                i += 2;
                start = i;
            }
            b'{' => {
                let close = template[i..]
                    .find('}')
                    .map(|c| i + c)
                    .ok_or(MessageError::UnbalancedBrace { at: i, brace: '{' })?;
                if template[i + 1..close].contains('{') {
                    return Err(MessageError::UnbalancedBrace { at: i, brace: '{' });
                }
                out.push(Piece::Text(&template[start..i]));
                out.push(Piece::Placeholder(&template[i + 1..close]));
                i = close + 1;
                start = i;
            }
            b'}' => return Err(MessageError::UnbalancedBrace { at: i, brace: '}' }),
            _ => i += 1,
        }
    }
    out.push(Piece::Text(&template[start..]));
    Ok(out)
}

/// A pipeline's end-user texts: the built-in catalog of its [`Locale`], with the
/// configuration's overrides on top. Cheap to share (`Arc`); the default is English with
/// no override.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    locale: Locale,
    overrides: BTreeMap<MessageKey, String>,
}

impl Messages {
    /// The built-in texts of `locale`.
    pub fn new(locale: Locale) -> Self {
        Self {
            locale,
            overrides: BTreeMap::new(),
        }
    }

    /// The locale.
    pub fn locale(&self) -> Locale {
        self.locale
    }

    /// These texts with the one named `name` replaced by `text`.
    ///
    /// # Errors
    /// [`MessageError`] when no message is named `name`, when `text` is empty, uses a
    /// placeholder the message does not have, or has an unbalanced brace.
    pub fn with_override(mut self, name: &str, text: &str) -> Result<Self, MessageError> {
        let key = MessageKey::from_name(name).ok_or_else(|| MessageError::UnknownKey {
            name: name.to_owned(),
        })?;
        // Whitespace is text (a `list_separator` of one space).
        if text.is_empty() {
            return Err(MessageError::Empty { key });
        }
        for piece in pieces(text)? {
            if let Piece::Placeholder(p) = piece
                && !key.placeholders().contains(&p)
            {
                return Err(MessageError::UnknownPlaceholder {
                    key,
                    placeholder: p.to_owned(),
                });
            }
        }
        self.overrides.insert(key, text.to_owned());
        Ok(self)
    }

    /// The template of `key`: the override, else the locale's built-in text.
    pub fn template(&self, key: MessageKey) -> &str {
        self.overrides
            .get(&key)
            .map_or_else(|| key.builtin(self.locale), String::as_str)
    }

    /// The text of `key` with its placeholders filled from `args` (name, value). A
    /// placeholder without a value in `args` is left as written.
    pub fn render(&self, key: MessageKey, args: &[(&str, &str)]) -> String {
        let template = self.template(key);
        // Built-in texts and overrides were checked; a text that fails here anyway is
        // shown as written rather than lost.
        let Ok(pieces) = pieces(template) else {
            return template.to_owned();
        };
        let mut out = String::with_capacity(template.len() + 32);
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Placeholder(p) => match args.iter().find(|(name, _)| *name == p) {
                    Some((_, value)) => out.push_str(value),
                    None => {
                        out.push('{');
                        out.push_str(p);
                        out.push('}');
                    }
                },
            }
        }
        out
    }

    /// `items` joined with the locale's separator, or its word for none.
    pub fn list<S: AsRef<str>>(&self, items: &[S]) -> String {
        if items.is_empty() {
            return self.render(MessageKey::ListEmpty, &[]);
        }
        let sep = self.render(MessageKey::ListSeparator, &[]);
        items
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(&sep)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_text_uses_only_its_placeholders_and_balances_its_braces() {
        for &key in MessageKey::ALL {
            for locale in Locale::ALL {
                let text = key.builtin(locale);
                let used: Vec<&str> = pieces(text)
                    .unwrap_or_else(|e| panic!("{key} ({locale}): {e}"))
                    .into_iter()
                    .filter_map(|p| match p {
                        Piece::Placeholder(p) => Some(p),
                        Piece::Text(_) => None,
                    })
                    .collect();
                for p in &used {
                    assert!(
                        key.placeholders().contains(p),
                        "{key} ({locale}) uses {{{p}}}"
                    );
                }
                // Both languages say the same things: every placeholder is used.
                for p in key.placeholders() {
                    assert!(used.contains(p), "{key} ({locale}) leaves out {{{p}}}");
                }
            }
        }
    }

    #[test]
    fn the_chinese_catalog_is_chinese() {
        let m = Messages::new(Locale::ZhHans);
        let reply = m.render(MessageKey::ServerUnavailable, &[("server", "notes")]);
        assert_eq!(
            reply,
            "抱歉，现在无法回答：本助手所需的 MCP 服务器 `notes` 暂时不可用。"
        );
        assert_eq!(m.list(&["a", "b"]), "a、b");
        assert_eq!(m.list::<&str>(&[]), "无");
        assert_eq!(Messages::default().list(&["a", "b"]), "a, b");
    }

    #[test]
    fn locales_parse_from_language_tags() {
        for tag in ["en", "EN", "en-US", "en_GB"] {
            assert_eq!(Locale::parse(tag), Some(Locale::En), "{tag}");
        }
        for tag in ["zh", "zh-CN", "zh_cn", "zh-Hans", "zh-Hans-CN", "zh-SG"] {
            assert_eq!(Locale::parse(tag), Some(Locale::ZhHans), "{tag}");
        }
        for tag in ["zh-TW", "zh-Hant", "zh-HK", "fr", "", "-"] {
            assert_eq!(Locale::parse(tag), None, "{tag}");
        }
        assert_eq!(Locale::ZhHans.to_string(), "zh-Hans");
    }

    #[test]
    fn an_override_replaces_one_text_and_keeps_the_others() {
        let m = Messages::new(Locale::ZhHans)
            .with_override("runner_failed", "出错了，请稍后再试（{turn}，{{编号}}）")
            .unwrap();
        assert_eq!(
            m.render(MessageKey::RunnerFailed, &[("turn", "t-1")]),
            "出错了，请稍后再试（t-1，{编号}）"
        );
        assert_eq!(
            m.render(MessageKey::TurnTimedOut, &[("turn", "t-1")]),
            "抱歉，这条消息处理超时，已停止（请求编号 t-1）。"
        );
    }

    #[test]
    fn a_bad_override_names_what_is_wrong() {
        let m = Messages::default();
        let e = m.clone().with_override("runner_broke", "x").unwrap_err();
        assert!(e.to_string().starts_with("no message is named `runner_broke`; the messages: server_unavailable, runner_failed"), "{e}");
        let e = m
            .clone()
            .with_override("runner_failed", "failed ({server})")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "`{server}` is not a placeholder of `runner_failed`; its placeholders: {turn}"
        );
        let e = m
            .clone()
            .with_override("runner_failed", "a {turn")
            .unwrap_err();
        assert_eq!(e, MessageError::UnbalancedBrace { at: 2, brace: '{' });
        let e = m.clone().with_override("list_empty", "x } y").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the `}` at byte 2 has no partner (write a literal brace as `{{` or `}}`)"
        );
        let e = m.with_override("runner_failed", "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the text of `runner_failed` is empty: the end user would get an empty reply"
        );
    }

    #[test]
    fn a_value_is_never_read_as_a_template() {
        let m = Messages::default();
        assert_eq!(
            m.render(MessageKey::ServerUnavailable, &[("server", "{turn}}")]),
            "Sorry, I can't answer right now: the MCP server `{turn}}` that this pipeline requires is unavailable."
        );
    }
}
