//! An example hostpipe plugin, written as a plugin author outside the project would:
//! it depends on `hostpipe-core` only, and registers one stage, `redact_pii`, with
//! [`hostpipe_core::submit_stage!`].
//!
//! `redact_pii` masks e-mail addresses and phone numbers in the text of the turn's
//! context blocks (the resources `resource_context_injection` read), so they never
//! reach the model. Place it after `resource_context_injection`: before it, there is
//! no resource text yet (see `docs/writing-a-stage.md`).
//!
//! ```toml
//! [pipelines.default]
//! stages = ["bind_mcp_servers", "resource_context_injection", "redact_pii", "tool_assembly"]
//! [pipelines.default.redact_pii]     # every key optional; defaults shown
//! emails = true
//! phones = true
//! email_replacement = "[email]"
//! phone_replacement = "[phone]"
//! ```
//!
//! The patterns are simple and err on the side of masking: they are an example, not a
//! data-protection guarantee. Only the context blocks are masked: what the model pulls
//! later through tools (`read_resource`, a server's own tools) comes back inside the
//! runner's tool loop, after every stage has run.

use async_trait::async_trait;
use hostpipe_core::{
    BlockBody, BuildContext, ConfigError, Stage, StageError, StageOutcome, StagePhase, Tokenizer,
    TruncationSide, Turn, parse_section,
};
use regex::Regex;
use serde::Deserialize;

#[doc = include_str!("../../../docs/writing-a-stage.md")]
pub mod guide {}

#[doc = include_str!("../../../docs/writing-a-runner.md")]
pub mod runner_guide {}

/// Config section `[pipelines.ID.redact_pii]`. Unknown keys are an error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactConfig {
    /// Mask e-mail addresses. Default true.
    pub emails: bool,
    /// Mask phone numbers (7 to 15 digits, with `+`, spaces, dots, dashes or
    /// parentheses between them). Default true.
    pub phones: bool,
    /// What an e-mail address becomes. Default `[email]`.
    pub email_replacement: String,
    /// What a phone number becomes. Default `[phone]`.
    pub phone_replacement: String,
}

impl Default for RedactConfig {
    fn default() -> Self {
        Self {
            emails: true,
            phones: true,
            email_replacement: "[email]".into(),
            phone_replacement: "[phone]".into(),
        }
    }
}

/// The `redact_pii` stage.
pub struct RedactPii {
    config: RedactConfig,
    email: Regex,
    phone: Regex,
}

impl RedactPii {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "redact_pii";

    /// A stage with `config`.
    ///
    /// # Errors
    /// [`ConfigError`] at `email_replacement` / `phone_replacement` when a replacement
    /// would itself be masked again (it contains `@` or digits).
    pub fn new(config: RedactConfig) -> Result<Self, ConfigError> {
        for (key, value) in [
            ("email_replacement", &config.email_replacement),
            ("phone_replacement", &config.phone_replacement),
        ] {
            if value.contains('@') || value.chars().any(|c| c.is_ascii_digit()) {
                return Err(ConfigError::new(
                    key,
                    format!("`{value}` contains `@` or digits, which would be masked again"),
                ));
            }
        }
        let email = Regex::new(r"(?i)\b[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b");
        let phone = Regex::new(r"\+?\(?\d[\d\s().-]{5,}\d");
        match (email, phone) {
            (Ok(email), Ok(phone)) => Ok(Self {
                config,
                email,
                phone,
            }),
            (Err(e), _) | (_, Err(e)) => Err(ConfigError::new("", e.to_string())),
        }
    }

    /// `text` with e-mail addresses and phone numbers masked, and how many were.
    pub fn redact(&self, text: &str) -> (String, usize) {
        let mut count = 0;
        let mut out = text.to_owned();
        if self.config.emails {
            out = self
                .email
                .replace_all(&out, |_: &regex::Captures<'_>| {
                    count += 1;
                    self.config.email_replacement.clone()
                })
                .into_owned();
        }
        if self.config.phones {
            out = self
                .phone
                .replace_all(&out, |c: &regex::Captures<'_>| {
                    let m = &c[0];
                    if is_phone(m) {
                        count += 1;
                        self.config.phone_replacement.clone()
                    } else {
                        m.to_owned()
                    }
                })
                .into_owned();
        }
        (out, count)
    }
}

/// 7 to 15 digits (ITU-T E.164 allows at most 15), and not an ISO date or a plain
/// number with dots (a version, an amount).
fn is_phone(m: &str) -> bool {
    let digits = m.chars().filter(char::is_ascii_digit).count();
    let iso_date = m.len() == 10 && m.as_bytes()[4] == b'-' && m.as_bytes()[7] == b'-';
    let separators = m.chars().filter(|c| !c.is_ascii_digit()).count();
    (7..=15).contains(&digits) && !iso_date && (separators > 0 || m.starts_with('+'))
}

#[async_trait]
impl Stage for RedactPii {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let tk = Tokenizer::new(turn.model.encoding).map_err(|e| StageError::msg(e.to_string()))?;
        let (mut masked, mut blocks) = (0, 0);
        for block in &mut turn.context {
            let BlockBody::Text { text } = &mut block.body else {
                continue;
            };
            let (redacted, n) = self.redact(text);
            if n == 0 {
                continue;
            }
            // A replacement may cost more tokens than what it replaced; the block must
            // stay within what the budget gave it.
            let mut tokens = tk.count(&redacted);
            let mut redacted = redacted;
            if tokens > block.tokens_after {
                match tk.truncate(&redacted, block.tokens_after, TruncationSide::Head) {
                    Some(t) => {
                        redacted = t.text;
                        tokens = t.tokens;
                    }
                    None => {
                        redacted = String::new();
                        tokens = 0;
                    }
                }
            }
            *text = redacted;
            block.tokens_after = tokens;
            masked += n;
            blocks += 1;
        }
        if masked > 0 {
            turn.trace.note(format!(
                "redact_pii: masked {masked} e-mail address(es) and phone number(s) in {blocks} block(s)"
            ));
        }
        Ok(StageOutcome::Continue)
    }
}

fn build(section: &serde_json::Value, _: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: RedactConfig = parse_section(section)?;
    Ok(Box::new(RedactPii::new(config)?))
}

hostpipe_core::submit_stage! {
    name: RedactPii::NAME,
    phase: StagePhase::Context,
    priority: 100,
    description: "Masks e-mail addresses and phone numbers in resource text (example plugin).",
    build: build,
}

/// Makes sure the linker keeps this crate's registration: call it (it does nothing)
/// from the binary that links the plugin.
pub fn link() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage() -> RedactPii {
        RedactPii::new(RedactConfig::default()).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn masks_addresses_and_numbers_but_not_dates_or_versions() {
        let (out, n) = stage().redact(
            "Write to billing@acme.example or call +1 555 010 0199 / (030) 1234-5678. \
             Released 2026-11-30 as v1.2.3, order 12345.",
        );
        assert_eq!(
            out,
            "Write to [email] or call [phone] / [phone]. Released 2026-11-30 as v1.2.3, order 12345."
        );
        assert_eq!(n, 3);
    }

    #[test]
    fn unknown_keys_and_self_masking_replacements_are_config_errors() {
        let err = parse_section::<RedactConfig>(&serde_json::json!({"email": false}))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown field `email`"), "{err}");
        let bad = RedactConfig {
            phone_replacement: "000".into(),
            ..RedactConfig::default()
        };
        let err = RedactPii::new(bad).err().map(|e| e.key).unwrap_or_default();
        assert_eq!(err, "phone_replacement");
    }
}
