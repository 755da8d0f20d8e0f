//! Elicitation: an MCP server asking the *user* a question in the middle of a tool call,
//! a read or a prompt (MCP 2025-11-25 `client/elicitation`, legacy `elicitation/create`
//! requests; MCP 2026-07-28 multi-round-trip requests, `input_required` results whose
//! `inputRequests` hold an `elicitation/create`). On a bot platform the user is in a
//! chat, so the question becomes a chat turn: an [`Elicitor`] shows it and returns the
//! user's [`ElicitationAnswer`].
//!
//! - [`ElicitationRequest`]: what is asked: the server, its message, and either a form
//!   (a restricted JSON Schema, [`validate_content`]) or a URL to open (only its domain
//!   is trusted for display, [`url_domain`]; the user must accept explicitly, and the
//!   URL is never opened or fetched by hostpipe).
//! - [`Elicitor`]: who asks: the CLI on its terminal, `hostpipe serve` its caller.
//! - [`ElicitScope`]: which turn an elicitation belongs to (a server request carries no
//!   turn): the pipeline sets it around a turn, the MCP host finds it (see its docs).
//!
//! An answer is never sent to a server unchecked: accepted form content is validated
//! against the requested schema first, and invalid content becomes a decline recorded
//! in the trace ([`ElicitationRecord`]). Every wait is bounded
//! ([`ElicitationSettings::timeout`]); no answer in time is a decline.

mod scope;
mod validate;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use scope::{ElicitScope, ElicitationSettings};
pub use validate::{ContentError, complete_content, validate_content, validate_schema};

/// What the server asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ElicitationMode {
    /// Form mode: the user fills in `requested_schema` (a flat JSON Schema object of
    /// primitive properties, MCP 2025-11-25 `client/elicitation`, "Requested Schema").
    Form {
        /// The schema, as the server sent it.
        requested_schema: serde_json::Value,
    },
    /// URL mode (MCP 2025-11-25): the user opens `url` themselves (out of band) and
    /// says whether they did.
    Url {
        /// The URL, as the server sent it. Never opened or fetched by hostpipe.
        url: String,
        /// The URL's host, lower-cased ([`url_domain`]): what the user should look at
        /// before following it.
        domain: String,
    },
}

impl ElicitationMode {
    /// `form` or `url`.
    pub fn as_str(&self) -> &'static str {
        match self.kind() {
            ModeKind::Form => "form",
            ModeKind::Url => "url",
        }
    }

    /// Form or URL, without the data.
    pub fn kind(&self) -> ModeKind {
        match self {
            Self::Form { .. } => ModeKind::Form,
            Self::Url { .. } => ModeKind::Url,
        }
    }
}

/// A server's question to the user of a turn, as an [`Elicitor`] gets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationRequest {
    /// The turn it belongs to ([`Trace::turn_id`](crate::Trace::turn_id)): lets a
    /// service route the question to the caller of that turn.
    pub turn_id: String,
    /// The pipeline.
    pub pipeline: String,
    /// The conversation, if any.
    pub conversation: Option<String>,
    /// Who sent the turn's message (platform user id), if known.
    pub sender: Option<String>,
    /// The MCP server asking.
    pub server: String,
    /// The server's message to the user (its words, not hostpipe's: show it as such).
    pub message: String,
    /// Form or URL.
    #[serde(flatten)]
    pub mode: ElicitationMode,
}

/// The user's answer (MCP 2025-11-25 `client/elicitation`, "Response actions").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ElicitationAnswer {
    /// The user answered. Form mode: `content` holds the values (checked against the
    /// schema before it is sent); URL mode: `content` is empty (the user consented to
    /// open the URL).
    Accept {
        /// The form's values by property name.
        #[serde(default)]
        content: serde_json::Map<String, serde_json::Value>,
    },
    /// The user said no.
    Decline,
    /// The user dismissed the question without choosing.
    Cancel,
}

impl ElicitationAnswer {
    /// The MCP `action`.
    pub fn action(&self) -> Action {
        match self {
            Self::Accept { .. } => Action::Accept,
            Self::Decline => Action::Decline,
            Self::Cancel => Action::Cancel,
        }
    }
}

/// Asks a person. A bot platform shows the question in the chat of the turn and returns
/// the user's answer; the CLI asks on its terminal; `hostpipe serve` asks its caller.
#[async_trait]
pub trait Elicitor: Send + Sync {
    /// The answer to `request`. The caller stops waiting after the pipeline's timeout
    /// (then it declines), so an elicitor need not time out itself; it should return
    /// form content that passes [`validate_content`] (content that does not is turned
    /// into a decline, never sent). Must be cancel-safe.
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer;
}

impl std::fmt::Debug for dyn Elicitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Elicitor")
    }
}

/// `form` or `url` ([`ElicitationMode`] without its data), for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeKind {
    /// Form mode.
    Form,
    /// URL mode.
    Url,
}

/// The MCP `action` a server was told (MCP 2025-11-25 `client/elicitation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// `accept`.
    Accept,
    /// `decline`.
    Decline,
    /// `cancel`.
    Cancel,
}

/// One elicitation of a turn, for the trace and the history: who asked, what was
/// answered and how long it took; never the values the user gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElicitationRecord {
    /// The MCP server that asked.
    pub server: String,
    /// `form` or `url`.
    pub mode: ModeKind,
    /// For URL mode: the URL's domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// What the server was told: `accept`, `decline` or `cancel`.
    pub action: Action,
    /// The names of the fields sent with an `accept` (their values are not kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// How it was decided: e.g. "answered", "no answer within 120000 ms: declined",
    /// "url mode is off for this pipeline: declined".
    pub how: String,
    /// From the question to the answer, milliseconds.
    pub elapsed_ms: u64,
}

/// The host of an `http` or `https` URL as the WHATWG URL Standard parses it (the
/// `url` crate): lower-cased, an internationalized name in its ASCII (punycode) form so
/// that look-alike letters show, without user info or port. What a user must see before
/// following the URL (MCP 2025-11-25 `client/elicitation`, "URL mode", safety: show the
/// domain). `None` for any other scheme, no host, or a URL that does not parse.
pub fn url_domain(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    parsed.host_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_is_the_host_a_browser_would_visit() {
        assert_eq!(
            url_domain("https://Example.COM/path?q=1").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            url_domain("https://bank.example@evil.example:8443/login").as_deref(),
            Some("evil.example")
        );
        assert_eq!(url_domain("http://[::1]:80/").as_deref(), Some("[::1]"));
        assert_eq!(url_domain("javascript:alert(1)"), None);
        assert_eq!(url_domain("file:///etc/passwd"), None);
        // Where a browser goes with it (the URL Standard skips the empty authority).
        assert_eq!(url_domain("https:///nohost").as_deref(), Some("nohost"));
        assert_eq!(url_domain("https://exa mple.com/"), None);
        // A look-alike name shows as what it is.
        assert_eq!(
            url_domain("https://аpple.com/").as_deref(),
            Some("xn--pple-43d.com")
        );
    }

    #[test]
    fn answers_serialize_as_mcp_actions() {
        let accept: ElicitationAnswer =
            serde_json::from_value(serde_json::json!({"action": "accept", "content": {"a": 1}}))
                .unwrap_or(ElicitationAnswer::Cancel);
        assert_eq!(accept.action(), Action::Accept);
        let decline: ElicitationAnswer =
            serde_json::from_value(serde_json::json!({"action": "decline"}))
                .unwrap_or(ElicitationAnswer::Cancel);
        assert_eq!(decline, ElicitationAnswer::Decline);
    }
}
