//! `[pipelines.ID]`, typed: [`PipelineSpec`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hostpipe_core::{ConfigError, Locale, Messages};
use hostpipe_engine::Pipeline;
use hostpipe_stages::{AttachmentConfig, BindConfig, InjectConfig};

use super::DEFAULT_STAGES;

/// The stage that binds servers, and the one that injects resources: the sections
/// hostpipe itself reads besides building them.
const BIND: &str = "bind_mcp_servers";
const INJECT: &str = "resource_context_injection";

/// One pipeline's configuration, read once from its `[pipelines.ID]` table.
///
/// The keys every pipeline has are typed fields; each stage's and the runner's own
/// section stays JSON here, for the registered stage or runner to parse when the
/// pipeline is built (their keys are theirs: `Registry` builders own them).
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSpec {
    /// The stages, in order (default [`DEFAULT_STAGES`]).
    pub stages: Vec<String>,
    /// The runner's registered name (default `preview`).
    pub runner: String,
    /// The system prompt, when the config gives one.
    pub system_prompt: Option<String>,
    /// The whole turn's deadline (default [`Pipeline::DEFAULT_TURN_TIMEOUT`]; `None` for
    /// `turn_timeout_ms = 0`).
    pub turn_timeout: Option<Duration>,
    /// `[pipelines.ID.consent]`, as JSON (parsed when the pipeline is built, against
    /// the configured servers).
    pub consent: Option<serde_json::Value>,
    /// `[pipelines.ID.elicitation]`: whether its MCP servers may ask the turn's user.
    pub elicitation: ElicitationSpec,
    /// What its turns say to the end user: `locale` (a BCP 47 tag, default `en`) and the
    /// overrides of `[pipelines.ID.messages]` ([`hostpipe_core::messages`]).
    pub messages: Arc<Messages>,
    /// The stages' and runners' sections by name, as JSON.
    sections: BTreeMap<String, serde_json::Value>,
}

/// `[pipelines.ID.elicitation]`: MCP elicitation (a server asking the turn's user a
/// question, docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElicitationSpec {
    /// `enabled` (default true): the pipeline's servers may ask when the command has an
    /// elicitor (`hostpipe serve`: its callers; `run`: the terminal, when there is one).
    pub enabled: bool,
    /// `timeout_ms` (default 120 000) and `url_mode` (default true).
    pub settings: hostpipe_core::ElicitationSettings,
}

impl Default for ElicitationSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            settings: hostpipe_core::ElicitationSettings::default(),
        }
    }
}

impl ElicitationSpec {
    /// Reads the section. Errors name the key within it.
    fn from_toml(value: toml::Value) -> Result<Self, ConfigError> {
        let toml::Value::Table(table) = value else {
            return Err(ConfigError::new("", "expected a table"));
        };
        let mut spec = Self::default();
        for (key, v) in table {
            match (key.as_str(), v) {
                ("enabled", toml::Value::Boolean(b)) => spec.enabled = b,
                ("url_mode", toml::Value::Boolean(b)) => spec.settings.url_mode = b,
                ("timeout_ms", toml::Value::Integer(ms)) if ms > 0 => {
                    spec.settings.timeout = Duration::from_millis(ms.unsigned_abs());
                }
                ("timeout_ms", _) => {
                    return Err(ConfigError::new(
                        "timeout_ms",
                        "expected milliseconds (a positive integer)",
                    ));
                }
                ("enabled" | "url_mode", _) => {
                    return Err(ConfigError::new(key, "expected true or false"));
                }
                _ => {
                    return Err(ConfigError::new(
                        key,
                        "unknown key; known keys: enabled, timeout_ms, url_mode",
                    ));
                }
            }
        }
        Ok(spec)
    }
}

impl Default for PipelineSpec {
    /// The plain pipeline: the default stages, the preview runner, no sections.
    fn default() -> Self {
        Self {
            stages: DEFAULT_STAGES.iter().map(|s| (*s).to_owned()).collect(),
            runner: "preview".into(),
            system_prompt: None,
            turn_timeout: Some(Pipeline::DEFAULT_TURN_TIMEOUT),
            consent: None,
            elicitation: ElicitationSpec::default(),
            messages: Arc::default(),
            sections: BTreeMap::new(),
        }
    }
}

impl TryFrom<toml::Table> for PipelineSpec {
    type Error = ConfigError;

    /// Reads a `[pipelines.ID]` table. Errors name the key relative to the table
    /// (`stages[2]`, `turn_timeout_ms`); the caller puts them under `pipelines.ID`.
    fn try_from(mut table: toml::Table) -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let stages: Vec<String> = match table.remove("stages") {
            None => defaults.stages,
            Some(v) => v.try_into().map_err(|e: toml::de::Error| {
                ConfigError::new(
                    "stages",
                    format!("expected a list of stage names: {}", e.message()),
                )
            })?,
        };
        if let Some(i) = (1..stages.len()).find(|&i| stages[..i].contains(&stages[i])) {
            return Err(ConfigError::new(
                format!("stages[{i}]"),
                format!("`{}` is listed twice", stages[i]),
            ));
        }
        let runner = match table.remove("runner") {
            None => defaults.runner,
            Some(toml::Value::String(s)) => s,
            Some(_) => return Err(ConfigError::new("runner", "expected a runner name")),
        };
        let system_prompt = match table.remove("system_prompt") {
            None => None,
            Some(toml::Value::String(s)) => Some(s),
            Some(_) => return Err(ConfigError::new("system_prompt", "expected a string")),
        };
        let turn_timeout = match table.remove("turn_timeout_ms") {
            None => defaults.turn_timeout,
            Some(toml::Value::Integer(0)) => None,
            Some(toml::Value::Integer(ms)) if ms > 0 => {
                Some(Duration::from_millis(ms.unsigned_abs()))
            }
            Some(_) => {
                return Err(ConfigError::new(
                    "turn_timeout_ms",
                    "expected milliseconds (a positive integer; 0 for no deadline)",
                ));
            }
        };
        let json = |key: &str, v: toml::Value| {
            serde_json::to_value(v).map_err(|e| ConfigError::new(key, e.to_string()))
        };
        let consent = table
            .remove("consent")
            .map(|v| json("consent", v))
            .transpose()?;
        let elicitation = match table.remove("elicitation") {
            None => ElicitationSpec::default(),
            Some(v) => ElicitationSpec::from_toml(v).map_err(|e| e.under("elicitation"))?,
        };
        let messages = Arc::new(messages_of(
            table.remove("locale"),
            table.remove("messages"),
        )?);
        let mut sections = BTreeMap::new();
        for (key, value) in table {
            let value = json(&key, value)?;
            sections.insert(key, value);
        }
        Ok(Self {
            stages,
            runner,
            system_prompt,
            turn_timeout,
            consent,
            elicitation,
            messages,
            sections,
        })
    }
}

/// `locale` and `[pipelines.ID.messages]`: the catalog of the locale with the overrides
/// on top. Errors name the key (`locale`, `messages.runner_failed`).
fn messages_of(
    locale: Option<toml::Value>,
    overrides: Option<toml::Value>,
) -> Result<Messages, ConfigError> {
    let locale = match locale {
        None => Locale::default(),
        Some(toml::Value::String(tag)) => Locale::parse(&tag).ok_or_else(|| {
            ConfigError::new(
                "locale",
                format!(
                    "`{tag}` has no built-in messages; the locales: {} (write the texts of another language in [messages])",
                    Locale::ALL.map(Locale::tag).join(", ")
                ),
            )
        })?,
        Some(_) => return Err(ConfigError::new("locale", "expected a language tag such as \"zh-Hans\"")),
    };
    let mut messages = Messages::new(locale);
    match overrides {
        None => {}
        Some(toml::Value::Table(table)) => {
            for (name, text) in table {
                let at = format!("messages.{name}");
                let toml::Value::String(text) = text else {
                    return Err(ConfigError::new(at, "expected a string"));
                };
                messages = messages
                    .with_override(&name, &text)
                    .map_err(|e| ConfigError::new(at, e.to_string()))?;
            }
        }
        Some(_) => {
            return Err(ConfigError::new(
                "messages",
                "expected a table of texts by name, e.g. [pipelines.default.messages] runner_failed = \"…\"",
            ));
        }
    }
    Ok(messages)
}

impl PipelineSpec {
    /// A plain pipeline (the default stages, the preview runner) binding `servers`:
    /// what `--mcp-config` alone runs.
    pub fn binding(servers: impl IntoIterator<Item = String>) -> Self {
        let mut spec = Self::default();
        for s in servers {
            spec.bind(s);
        }
        spec
    }

    /// The section of stage or runner `name` (`null` when the config has none).
    pub fn section(&self, name: &str) -> &serde_json::Value {
        self.sections.get(name).unwrap_or(&serde_json::Value::Null)
    }

    /// Names of the sections that are neither a stage this pipeline lists nor one of
    /// `runners`: config the pipeline would silently ignore.
    pub fn stray_sections<'a>(&'a self, runners: &'a [&str]) -> impl Iterator<Item = &'a str> {
        self.sections
            .keys()
            .map(String::as_str)
            .filter(|k| !self.stages.iter().any(|s| s == k) && !runners.contains(k))
    }

    /// Whether the pipeline runs stage `name`.
    pub fn runs(&self, name: &str) -> bool {
        self.stages.iter().any(|s| s == name)
    }

    /// The servers `[bind_mcp_servers] servers` names, in order; `None` when that
    /// section cannot be read (its stage reports why when the pipeline is built).
    pub fn bound_servers(&self) -> Option<Vec<String>> {
        let config: BindConfig = match self.section(BIND) {
            serde_json::Value::Null => BindConfig::default(),
            v => serde_json::from_value(v.clone()).ok()?,
        };
        Some(config.servers.iter().map(|b| b.name().to_owned()).collect())
    }

    /// Adds `server` to `[bind_mcp_servers] servers` (not required).
    pub fn bind(&mut self, server: String) {
        let section = self
            .sections
            .entry(BIND.to_owned())
            .or_insert_with(|| serde_json::json!({}));
        if !section.is_object() {
            *section = serde_json::json!({});
        }
        if let Some(map) = section.as_object_mut() {
            let list = map
                .entry("servers")
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            if let Some(list) = list.as_array_mut() {
                list.push(serde_json::Value::String(server));
            }
        }
    }

    /// The attachments of `[resource_context_injection]`, as configured; empty when the
    /// section has none or cannot be read (its stage reports why when built).
    pub fn attachments(&self) -> Vec<AttachmentConfig> {
        match self.section(INJECT) {
            serde_json::Value::Null => Vec::new(),
            v => serde_json::from_value::<InjectConfig>(v.clone())
                .map(|c| c.attachments)
                .unwrap_or_default(),
        }
    }

    /// Sets the resource budget to `tokens` (`budget_tokens`, dropping a
    /// `budget_share`): `hostpipe eval` builds one pipeline per budget.
    pub fn set_budget(&mut self, tokens: usize) {
        let section = self
            .sections
            .entry(INJECT.to_owned())
            .or_insert_with(|| serde_json::json!({}));
        if !section.is_object() {
            *section = serde_json::json!({});
        }
        if let Some(map) = section.as_object_mut() {
            map.remove("budget_share");
            map.insert("budget_tokens".into(), tokens.into());
        }
    }

    /// A pipeline that binds servers and injects resources may only attach resources of
    /// servers it binds: anything else could never be read. Errors are relative to the
    /// pipeline's table.
    ///
    /// # Errors
    /// The first attachment whose server the pipeline does not bind.
    pub fn check_attachments_bound(&self) -> Result<(), ConfigError> {
        if !self.runs(BIND) || !self.runs(INJECT) {
            return Ok(());
        }
        let bound = self.bound_servers().unwrap_or_default();
        let attachments = self
            .section(INJECT)
            .get("attachments")
            .and_then(serde_json::Value::as_array);
        for (i, a) in attachments.into_iter().flatten().enumerate() {
            if let Some(server) = a.get("server").and_then(serde_json::Value::as_str)
                && !bound.iter().any(|b| b == server)
            {
                let list = if bound.is_empty() {
                    "none".to_owned()
                } else {
                    bound.join(", ")
                };
                return Err(ConfigError::new(
                    format!("{INJECT}.attachments[{i}].server"),
                    format!(
                        "`{server}` is not bound by this pipeline's bind_mcp_servers (bound: {list})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn spec(toml: &str) -> Result<PipelineSpec, ConfigError> {
        PipelineSpec::try_from(toml.parse::<toml::Table>().unwrap())
    }

    #[test]
    fn an_empty_table_is_the_plain_pipeline() {
        let s = spec("").unwrap();
        assert_eq!(s, PipelineSpec::default());
        assert_eq!(s.stages, DEFAULT_STAGES);
        assert_eq!(s.runner, "preview");
        assert_eq!(s.turn_timeout, Some(Pipeline::DEFAULT_TURN_TIMEOUT));
        assert_eq!(s.bound_servers(), Some(Vec::new()));
        assert!(s.attachments().is_empty());
    }

    #[test]
    fn locale_and_messages_choose_and_override_the_end_users_texts() {
        let s = spec(
            r#"
locale = "zh-CN"
[messages]
runner_failed = "模型暂时不可用，请稍后再试（{turn}）"
"#,
        )
        .unwrap();
        assert_eq!(s.messages.locale(), Locale::ZhHans);
        assert_eq!(
            s.messages
                .render(hostpipe_core::MessageKey::RunnerFailed, &[("turn", "t1")]),
            "模型暂时不可用，请稍后再试（t1）"
        );
        assert!(s.sections.is_empty(), "locale and messages are no sections");

        let e = spec(r#"locale = "zh-TW""#).unwrap_err();
        assert_eq!(e.key, "locale");
        assert!(
            e.to_string()
                .contains("`zh-TW` has no built-in messages; the locales: en, zh-Hans"),
            "{e}"
        );
        let e = spec("[messages]\nstage_failed = \"{stage} {server}\"").unwrap_err();
        assert_eq!(e.key, "messages.stage_failed");
        assert!(e.to_string().contains("`{server}` is not a placeholder of `stage_failed`; its placeholders: {stage}, {turn}"), "{e}");
        let e = spec("[messages]\nrunner_failled = \"x\"").unwrap_err();
        assert_eq!(e.key, "messages.runner_failled");
        let e = spec("messages = \"x\"").unwrap_err();
        assert_eq!(e.key, "messages");
    }

    #[test]
    fn the_configuration_guide_lists_every_message_with_its_placeholders() {
        let guide = include_str!("../../../docs/configuration.md");
        for &key in hostpipe_core::MessageKey::ALL {
            let row = guide
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", key.name())))
                .unwrap_or_else(|| panic!("docs/configuration.md has no row for `{key}`"));
            let cell = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
            let listed: Vec<&str> = cell
                .split(',')
                .map(|p| p.trim().trim_matches('`').trim_matches(['{', '}']))
                .filter(|p| !p.is_empty())
                .collect();
            assert_eq!(listed, key.placeholders(), "{row}");
        }
    }

    #[test]
    fn the_common_keys_are_typed_and_the_sections_kept_for_their_builders() {
        let s = spec(
            r#"
stages = ["bind_mcp_servers", "resource_context_injection"]
runner = "local"
system_prompt = "Be brief."
turn_timeout_ms = 0
[bind_mcp_servers]
servers = ["kb", { name = "crm", required = true }]
[resource_context_injection]
budget_share = 0.5
attachments = [{ server = "kb", uri = "kb://a" }]
[local]
model = "m"
[consent]
default_host = "allow"
"#,
        )
        .unwrap();
        assert_eq!(s.runner, "local");
        assert_eq!(s.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(s.turn_timeout, None);
        assert_eq!(s.bound_servers().unwrap(), ["kb", "crm"]);
        assert_eq!(s.section("local")["model"], "m");
        assert_eq!(s.section("tool_assembly"), &serde_json::Value::Null);
        assert_eq!(s.consent.as_ref().unwrap()["default_host"], "allow");
        assert_eq!(s.attachments()[0].uri.as_deref(), Some("kb://a"));
        assert_eq!(s.stray_sections(&["local"]).count(), 0);
        assert_eq!(
            s.stray_sections(&["preview"]).collect::<Vec<_>>(),
            ["local"]
        );
        s.check_attachments_bound().unwrap();

        let mut s = s;
        s.set_budget(1000);
        let inject = s.section("resource_context_injection");
        assert_eq!(inject["budget_tokens"], 1000);
        assert!(inject.get("budget_share").is_none());
        s.bind("docs".into());
        assert_eq!(s.bound_servers().unwrap(), ["kb", "crm", "docs"]);
    }

    #[test]
    fn errors_name_the_key_in_the_table() {
        let cases = [
            ("stages = \"bind\"", "stages"),
            ("stages = [\"a\", \"b\", \"a\"]", "stages[2]"),
            ("runner = 1", "runner"),
            ("system_prompt = []", "system_prompt"),
            ("turn_timeout_ms = -5", "turn_timeout_ms"),
        ];
        for (toml, key) in cases {
            let e = spec(toml).unwrap_err();
            assert_eq!(e.key, key, "{toml}: {e}");
        }
        let s = spec(
            r#"
[bind_mcp_servers]
servers = ["kb"]
[resource_context_injection]
attachments = [{ server = "kb", uri = "kb://a" }, { server = "crm", uri = "crm://b" }]
"#,
        )
        .unwrap();
        let e = s.check_attachments_bound().unwrap_err();
        assert_eq!(e.key, "resource_context_injection.attachments[1].server");
        assert!(e.message.contains("`crm` is not bound"), "{e}");
    }
}
