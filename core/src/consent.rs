//! Consent: which resource reads and which tool calls a pipeline may make, decided
//! before any request reaches a server.
//!
//! A [`ConsentPolicy`] is an ordered list of [`ConsentRule`]s (server name, URI glob)
//! with separate decisions for the two kinds of read ([`ReadOrigin`]): *host* reads,
//! which a user or the platform chose by attaching a resource (pipeline, conversation or
//! message scope), and *model* reads, which the model chose through the `read_resource`
//! exploration tool. The first rule that matches the server, the URI and the origin
//! decides; when none does, the policy's default for the origin does.
//!
//! Tool calls are decided the same way by rules that name a `tool` (a glob over the
//! tool's name as its server lists it) and a `call` decision. When no rule matches, the
//! tool's own annotations choose the default (MCP spec 2025-11-25, "Tool annotations"):
//! `read_only_call` for a tool that declares `readOnlyHint: true`, `destructive_call` for
//! one that declares `destructiveHint: true`, `default_call` for the others. Annotations
//! are the server's word, not a guarantee: rules decide before them.
//!
//! [`Decision::Ask`] goes to an [`Approver`] (the bot platform shows the request to
//! its user); no answer within the policy's `ask_timeout_ms` counts as a denial, and so
//! does `ask` with no approver. "Allow for this conversation" is remembered by the
//! [`Consent`] gate for that conversation, server, URI and origin, for as long as the
//! gate lives (the pipeline), up to [`Consent::MAX_GRANTS`] grants.
//!
//! A denied read never reaches the server. The model is told the resource was withheld
//! (not that it does not exist), and the trace and the read history record the
//! decision ([`ReadRecord::consent`](crate::ReadRecord::consent)).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// Who chose a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadOrigin {
    /// The host read an attachment (pipeline, conversation or message scope): a user or
    /// the platform chose it.
    #[default]
    Host,
    /// The model asked for it (the `read_resource` exploration tool).
    Model,
}

impl ReadOrigin {
    /// `host` or `model`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Model => "model",
        }
    }
}

/// What a rule (or a default) says about a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Read it.
    Allow,
    /// Never read it.
    Deny,
    /// Ask the [`Approver`]; no approver, or no answer in time, is a denial.
    Ask,
}

/// One rule of a [`ConsentPolicy`]. A rule with neither `host` nor `model` is an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsentRule {
    /// The server name the rule is for; absent: every server.
    #[serde(default)]
    pub server: Option<String>,
    /// A glob over URIs: `*` matches any run of characters (`/` included), `?` one
    /// character, `[a-z]` a class, `{a,b}` alternatives; `\` escapes. Absent: every URI.
    #[serde(default)]
    pub uri: Option<String>,
    /// The decision for host reads (attachments); absent: the rule does not apply to them.
    #[serde(default)]
    pub host: Option<Decision>,
    /// The decision for model reads (`read_resource`); absent: the rule does not apply.
    #[serde(default)]
    pub model: Option<Decision>,
    /// A glob over tool names as the server lists them (not the model's `server__tool`
    /// name), for `call` rules. Absent: every tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// The decision for tool calls; absent: the rule does not apply to them.
    #[serde(default)]
    pub call: Option<Decision>,
}

/// `[pipelines.ID.consent]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsentConfig {
    /// Host reads no rule matches. Default `allow`.
    pub default_host: Decision,
    /// Model reads no rule matches. Default `allow`.
    pub default_model: Decision,
    /// Tool calls no rule matches, of a tool that declares neither `readOnlyHint` nor
    /// `destructiveHint`. Default `allow`.
    pub default_call: Decision,
    /// Tool calls no rule matches, of a tool that declares `readOnlyHint: true`. Default
    /// `allow`.
    pub read_only_call: Decision,
    /// Tool calls no rule matches, of a tool that declares `destructiveHint: true` (and
    /// is not read-only). Default `ask`.
    pub destructive_call: Decision,
    /// Rules, first match wins.
    pub rules: Vec<ConsentRule>,
    /// How long an `ask` waits for the approver, in milliseconds; then it is a denial.
    /// Default 60 000.
    pub ask_timeout_ms: u64,
}

impl Default for ConsentConfig {
    fn default() -> Self {
        Self {
            default_host: Decision::Allow,
            default_model: Decision::Allow,
            default_call: Decision::Allow,
            read_only_call: Decision::Allow,
            destructive_call: Decision::Ask,
            rules: Vec::new(),
            ask_timeout_ms: 60_000,
        }
    }
}

/// A checked [`ConsentConfig`]: globs compiled.
#[derive(Debug, Clone)]
pub struct ConsentPolicy {
    config: ConsentConfig,
    globs: Vec<Option<GlobMatcher>>,
    tool_globs: Vec<Option<GlobMatcher>>,
}

/// Which part of the policy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// Rule `i` (from 0).
    Rule(usize),
    /// The default for the origin (or, for a call, `default_call`).
    Default,
    /// `read_only_call`: the tool declares `readOnlyHint: true`.
    ReadOnlyTool,
    /// `destructive_call`: the tool declares `destructiveHint: true`.
    DestructiveTool,
}

/// What is being decided: a read for an origin, or a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    Read(ReadOrigin),
    Call,
}

fn compile_glob(key: String, pattern: &str) -> Result<GlobMatcher, ConfigError> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            ConfigError::new(
                key,
                format!("`{pattern}` is not a valid glob: {}", e.kind()),
            )
        })
}

impl ConsentPolicy {
    /// Checks `config`: every glob compiles, every rule decides something.
    ///
    /// # Errors
    /// [`ConfigError`] at `rules[i].uri`, `rules[i].tool` or `rules[i]`: a glob that
    /// does not compile or is empty, a rule that decides nothing, a `tool` rule that
    /// decides reads or a `uri` rule that decides calls.
    pub fn new(config: ConsentConfig) -> Result<Self, ConfigError> {
        let mut globs = Vec::with_capacity(config.rules.len());
        let mut tool_globs = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            if rule.host.is_none() && rule.model.is_none() && rule.call.is_none() {
                return Err(ConfigError::new(
                    format!("rules[{i}]"),
                    "the rule decides nothing: give `host` or `model` for reads, `call` for tool calls (allow, deny or ask)",
                ));
            }
            if rule.tool.is_some() && (rule.host.is_some() || rule.model.is_some()) {
                return Err(ConfigError::new(
                    format!("rules[{i}]"),
                    "a rule with `tool` is about tool calls: it decides `call`, not `host` or `model`",
                ));
            }
            if rule.uri.is_some() && rule.call.is_some() {
                return Err(ConfigError::new(
                    format!("rules[{i}]"),
                    "a rule with `uri` is about reads: it decides `host` or `model`; name a `tool` to decide `call`",
                ));
            }
            for (key, glob) in [("uri", &rule.uri), ("tool", &rule.tool)] {
                if glob.as_deref().is_some_and(|g| g.trim().is_empty()) {
                    return Err(ConfigError::new(
                        format!("rules[{i}].{key}"),
                        format!(
                            "an empty glob matches nothing: leave `{key}` out to match every one"
                        ),
                    ));
                }
            }
            globs.push(
                rule.uri
                    .as_deref()
                    .map(|p| compile_glob(format!("rules[{i}].uri"), p))
                    .transpose()?,
            );
            tool_globs.push(
                rule.tool
                    .as_deref()
                    .map(|p| compile_glob(format!("rules[{i}].tool"), p))
                    .transpose()?,
            );
        }
        Ok(Self {
            config,
            globs,
            tool_globs,
        })
    }

    /// The policy that allows everything (no rules).
    pub fn allow_all() -> Self {
        Self {
            config: ConsentConfig::default(),
            globs: Vec::new(),
            tool_globs: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ConsentConfig {
        &self.config
    }

    /// What the policy says about reading `uri` from `server` for `origin`.
    ///
    /// A server may decode the URI before it looks it up (the Python SDK's templates
    /// percent-decode their values), so the policy judges the URI as given and in its
    /// normalized form ([`normalize_uri`]), and the stricter answer wins
    /// (deny over ask over allow): `kb://%73ecret/plan` is `kb://secret/plan`.
    pub fn decide(&self, server: &str, uri: &str, origin: ReadOrigin) -> (Decision, DecidedBy) {
        let mut strictest = self.decide_form(server, uri, origin);
        for form in uri_forms(uri) {
            let other = self.decide_form(server, &form, origin);
            if strictness(other.0) > strictness(strictest.0) {
                strictest = other;
            }
        }
        strictest
    }

    fn decide_form(&self, server: &str, uri: &str, origin: ReadOrigin) -> (Decision, DecidedBy) {
        for (i, (rule, glob)) in self.config.rules.iter().zip(&self.globs).enumerate() {
            let decision = match origin {
                ReadOrigin::Host => rule.host,
                ReadOrigin::Model => rule.model,
            };
            let Some(decision) = decision else { continue };
            if rule.server.as_deref().is_some_and(|s| s != server) {
                continue;
            }
            if glob.as_ref().is_some_and(|g| !g.is_match(uri)) {
                continue;
            }
            return (decision, DecidedBy::Rule(i));
        }
        let default = match origin {
            ReadOrigin::Host => self.config.default_host,
            ReadOrigin::Model => self.config.default_model,
        };
        (default, DecidedBy::Default)
    }

    /// What the policy says about calling `tool` (as its server lists it) on `server`,
    /// a tool that declares `hints`.
    pub fn decide_call(
        &self,
        server: &str,
        tool: &str,
        hints: crate::source::ToolHints,
    ) -> (Decision, DecidedBy) {
        for (i, (rule, glob)) in self.config.rules.iter().zip(&self.tool_globs).enumerate() {
            let Some(decision) = rule.call else { continue };
            if rule.server.as_deref().is_some_and(|s| s != server) {
                continue;
            }
            if glob.as_ref().is_some_and(|g| !g.is_match(tool)) {
                continue;
            }
            return (decision, DecidedBy::Rule(i));
        }
        if hints.read_only == Some(true) {
            (self.config.read_only_call, DecidedBy::ReadOnlyTool)
        } else if hints.destructive == Some(true) {
            (self.config.destructive_call, DecidedBy::DestructiveTool)
        } else {
            (self.config.default_call, DecidedBy::Default)
        }
    }

    /// `rules[1] (server kb, uri kb://secret/*)`, `the default for host reads`, `the
    /// default for read-only tools`.
    fn describe(&self, by: DecidedBy, subject: Subject) -> String {
        match (by, subject) {
            (DecidedBy::Default, Subject::Read(origin)) => {
                format!("the default for {} reads", origin.as_str())
            }
            (DecidedBy::Default, Subject::Call) => "the default for tool calls".into(),
            (DecidedBy::ReadOnlyTool, _) => "the default for read-only tools".into(),
            (DecidedBy::DestructiveTool, _) => "the default for destructive tools".into(),
            (DecidedBy::Rule(i), _) => {
                let rule = &self.config.rules[i];
                let mut parts = Vec::new();
                if let Some(s) = &rule.server {
                    parts.push(format!("server {s}"));
                }
                if let Some(u) = &rule.uri {
                    parts.push(format!("uri {u}"));
                }
                if let Some(t) = &rule.tool {
                    parts.push(format!("tool {t}"));
                }
                if parts.is_empty() {
                    format!("rules[{i}]")
                } else {
                    format!("rules[{i}] ({})", parts.join(", "))
                }
            }
        }
    }
}

fn strictness(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Ask => 1,
        Decision::Deny => 2,
    }
}

/// The forms of `uri` a server might read it as, besides the URI itself: normalized
/// ([`normalize_uri`]), and normalized with the authority taken as the first path
/// segment (`kb://public/../secret` is `kb://secret` to a server that matches strings).
fn uri_forms(uri: &str) -> Vec<String> {
    let normalized = normalize_uri(uri);
    let mut forms = Vec::new();
    if let Some((scheme, rest)) = uri.split_once("://") {
        let flat = normalize_uri(&format!("{scheme}:/{rest}"));
        if let Some((scheme, path)) = flat.split_once(":/") {
            forms.push(format!("{scheme}://{path}"));
        }
    }
    forms.push(normalized);
    forms.retain(|f| f != uri);
    forms
}

/// `uri` as a server that decodes it would see it: every `%XX` decoded (RFC 3986
/// §2.1; invalid UTF-8 kept as given), the scheme in lower case (§3.1), and `.` and
/// `..` path segments removed (§5.2.4). Used to judge a URI the way the server will
/// read it, never to change what is sent.
pub fn normalize_uri(uri: &str) -> String {
    // Decode every triplet.
    let bytes = uri.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            decoded.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(decoded).unwrap_or_else(|_| uri.to_owned());
    // Lower-case the scheme.
    let (scheme, rest) = match decoded.split_once(':') {
        Some((s, r))
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (s.to_ascii_lowercase(), r.to_owned())
        }
        _ => return decoded,
    };
    // Remove dot segments from the path (after `//authority`, if any).
    let (authority, path) = match rest.strip_prefix("//") {
        Some(r) => match r.find('/') {
            Some(p) => (format!("//{}", &r[..p]), r[p..].to_owned()),
            None => (format!("//{r}"), String::new()),
        },
        None => (String::new(), rest),
    };
    let (path, tail) = match path.find(['?', '#']) {
        Some(p) => (path[..p].to_owned(), path[p..].to_owned()),
        None => (path, String::new()),
    };
    let mut out: Vec<&str> = Vec::new();
    let absolute = path.starts_with('/');
    for seg in path.split('/') {
        match seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut path = out.join("/");
    if absolute && !path.starts_with('/') {
        path.insert(0, '/');
    }
    format!("{scheme}:{authority}{path}{tail}")
}

/// A read or a tool call the policy says to ask about, as an [`Approver`] gets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsentRequest {
    /// The turn asking ([`Trace::turn_id`](crate::Trace::turn_id)): lets a service route
    /// the question to the caller of that turn.
    #[serde(default)]
    pub turn_id: String,
    /// The pipeline.
    pub pipeline: String,
    /// The conversation, if any ("allow for this conversation" needs one).
    pub conversation: Option<String>,
    /// Who sent the message (platform user id), if known.
    pub sender: Option<String>,
    /// The MCP server.
    pub server: String,
    /// The resource URI.
    pub uri: String,
    /// Who chose the read.
    pub origin: ReadOrigin,
    /// Why it is being read, for the user: e.g. "attached to this conversation",
    /// "the model called read_resource".
    pub reason: String,
    /// For a tool call (then `uri` is empty): the tool and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCallRequest>,
}

/// The tool call a [`ConsentRequest`] asks about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The tool's name as its server lists it.
    pub name: String,
    /// Its arguments (a JSON object); an object over [`ToolCallRequest::MAX_ARGUMENT_BYTES`]
    /// of JSON is replaced by a string: its first bytes and how many were left out.
    pub arguments: serde_json::Value,
    /// Who makes the call: the model, an HTTP API caller or a remote agent.
    #[serde(default)]
    pub caller: crate::trace::CallOrigin,
}

impl ToolCallRequest {
    /// Most bytes of arguments shown to the approver (and kept in the history), as JSON.
    pub const MAX_ARGUMENT_BYTES: usize = 4096;

    /// The request of `caller` for calling `name` with `arguments`, capped.
    pub fn new(
        name: impl Into<String>,
        arguments: &serde_json::Value,
        caller: crate::trace::CallOrigin,
    ) -> Self {
        Self {
            name: name.into(),
            arguments: cap_json(arguments, Self::MAX_ARGUMENT_BYTES),
            caller,
        }
    }
}

/// `value` as is when its JSON is at most `max` bytes, else a string with its first
/// bytes (on a character boundary) and how many were left out.
pub fn cap_json(value: &serde_json::Value, max: usize) -> serde_json::Value {
    let text = value.to_string();
    if text.len() <= max {
        return value.clone();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::Value::String(format!(
        "{}… [{} more bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsentAnswer {
    /// This read only.
    AllowOnce,
    /// This and every later read of the same server, URI and origin in this
    /// conversation (without a conversation: this read only).
    AllowConversation,
    /// Do not read it.
    Deny,
}

/// Asks a person. A bot platform shows the request (server, URI, who asked, why) and
/// returns the user's answer; the CLI asks on its terminal.
#[async_trait]
pub trait Approver: Send + Sync {
    /// The answer for `request`. The gate stops waiting after the policy's
    /// `ask_timeout_ms` (a denial), so an approver need not time out itself.
    async fn approve(&self, request: &ConsentRequest) -> ConsentAnswer;
}

impl std::fmt::Debug for dyn Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

/// The decision on one read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the read may go to the server.
    pub allowed: bool,
    /// How it was decided, for the trace and the history: e.g. "allowed by the default
    /// for host reads", "denied by rule 1 (uri kb://secret/*)", "asked (rule 2): allowed
    /// for the conversation", "asked (rule 2): no answer within 60000 ms, denied".
    pub how: String,
}

/// A pipeline's consent gate: its policy, its approver, and the conversation grants
/// (in memory, and in the pipeline's attachment store when it has one, so that every
/// worker sharing the store honours them).
pub struct Consent {
    policy: ConsentPolicy,
    approver: Option<Arc<dyn Approver>>,
    grants: Mutex<HashSet<crate::store::ConsentGrant>>,
    store: std::sync::OnceLock<Arc<dyn crate::store::AttachmentStore>>,
}

impl std::fmt::Debug for Consent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consent")
            .field("policy", &self.policy.config)
            .field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

impl Consent {
    /// Most conversation grants kept; past it, all are forgotten (and asked again).
    pub const MAX_GRANTS: usize = 100_000;

    /// A gate for `policy`, asking `approver` (none: `ask` denies).
    pub fn new(policy: ConsentPolicy, approver: Option<Arc<dyn Approver>>) -> Self {
        Self {
            policy,
            approver,
            grants: Mutex::new(HashSet::new()),
            store: std::sync::OnceLock::new(),
        }
    }

    /// Keeps conversation grants in `store` too, and honours those it holds
    /// ([`AttachmentStore::grant`](crate::AttachmentStore::grant)); the first store given
    /// stays. [`Pipeline::with_store`](crate::Pipeline::with_store) calls it.
    pub fn use_store(&self, store: Arc<dyn crate::store::AttachmentStore>) {
        let _ = self.store.set(store);
    }

    /// The policy.
    pub fn policy(&self) -> &ConsentPolicy {
        &self.policy
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, HashSet<crate::store::ConsentGrant>> {
        // Every change is one insert or clear: a poisoned set is still consistent.
        self.grants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the gate waits on its store for a grant.
    const STORE_TIMEOUT: Duration = Duration::from_secs(5);

    /// Whether the store holds `grant` (remembered in memory from then on). A store that
    /// fails or is slow counts as "no": the person is asked again, never skipped.
    async fn stored_grant(&self, grant: &crate::store::ConsentGrant) -> bool {
        let Some(store) = self.store.get() else {
            return false;
        };
        match tokio::time::timeout(Self::STORE_TIMEOUT, store.is_granted(grant)).await {
            Ok(Ok(true)) => {
                self.remember(grant.clone());
                true
            }
            Ok(Ok(false)) => false,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading a consent grant failed; asking again");
                false
            }
            Err(_) => {
                tracing::warn!("the store did not answer within 5 s; asking again");
                false
            }
        }
    }

    fn remember(&self, grant: crate::store::ConsentGrant) {
        let mut grants = self.grants();
        if grants.len() >= Self::MAX_GRANTS {
            grants.clear();
        }
        grants.insert(grant);
    }

    /// Remembers `grant`, and keeps it in the store (a failure is logged: the grant then
    /// holds in this process only).
    async fn keep_grant(&self, grant: crate::store::ConsentGrant) {
        if let Some(store) = self.store.get() {
            let now = crate::store::unix_ms_now();
            match tokio::time::timeout(Self::STORE_TIMEOUT, store.grant(&grant, now)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "keeping a consent grant failed"),
                Err(_) => tracing::warn!("the store did not keep a consent grant within 5 s"),
            }
        }
        self.remember(grant);
    }

    /// Decides on `request` (asking the approver when the policy says `ask`).
    pub async fn check(&self, request: &ConsentRequest) -> Verdict {
        let origin = request.origin;
        let (decision, by) = self.policy.decide(&request.server, &request.uri, origin);
        let by_text = self.policy.describe(by, Subject::Read(origin));
        self.decided(request, decision, &by_text).await
    }

    /// The verdict on the tool call `request` describes (its `tool` set), a tool that
    /// declares `hints`: rules, then the annotations' defaults (see the module docs);
    /// `ask` as for reads. Cancel-safe.
    pub async fn check_call(
        &self,
        request: &ConsentRequest,
        hints: crate::source::ToolHints,
    ) -> Verdict {
        let tool = request.tool.as_ref().map_or("", |t| t.name.as_str());
        let (decision, by) = self.policy.decide_call(&request.server, tool, hints);
        let by_text = self.policy.describe(by, Subject::Call);
        self.decided(request, decision, &by_text).await
    }

    async fn decided(
        &self,
        request: &ConsentRequest,
        decision: Decision,
        by_text: &str,
    ) -> Verdict {
        match decision {
            Decision::Allow => Verdict {
                allowed: true,
                how: format!("allowed by {by_text}"),
            },
            Decision::Deny => Verdict {
                allowed: false,
                how: format!("denied by {by_text}"),
            },
            Decision::Ask => self.ask(request, by_text).await,
        }
    }

    async fn ask(&self, request: &ConsentRequest, by: &str) -> Verdict {
        let key = request.conversation.as_ref().map(|c| match &request.tool {
            None => crate::store::ConsentGrant {
                pipeline: request.pipeline.clone(),
                conversation: c.clone(),
                server: request.server.clone(),
                uri: request.uri.clone(),
                origin: request.origin,
                kind: crate::store::GrantKind::Read,
            },
            Some(tool) => crate::store::ConsentGrant {
                pipeline: request.pipeline.clone(),
                conversation: c.clone(),
                server: request.server.clone(),
                uri: tool.name.clone(),
                origin: request.origin,
                kind: crate::store::GrantKind::Call,
            },
        });
        if let Some(k) = &key
            && (self.grants().contains(k) || self.stored_grant(k).await)
        {
            return Verdict {
                allowed: true,
                how: format!("allowed: granted earlier for this conversation ({by} asks)"),
            };
        }
        let Some(approver) = &self.approver else {
            return Verdict {
                allowed: false,
                how: format!("denied: {by} asks, and there is no approver to ask"),
            };
        };
        let timeout = Duration::from_millis(self.policy.config.ask_timeout_ms);
        let answer = tokio::time::timeout(timeout, approver.approve(request)).await;
        match answer {
            Ok(ConsentAnswer::AllowOnce) => Verdict {
                allowed: true,
                how: format!("asked ({by}): allowed once"),
            },
            Ok(ConsentAnswer::AllowConversation) => {
                if let Some(k) = key {
                    self.keep_grant(k).await;
                }
                Verdict {
                    allowed: true,
                    how: format!("asked ({by}): allowed for the conversation"),
                }
            }
            Ok(ConsentAnswer::Deny) => Verdict {
                allowed: false,
                how: format!("asked ({by}): denied"),
            },
            Err(_) => Verdict {
                allowed: false,
                how: format!(
                    "asked ({by}): no answer within {} ms, denied",
                    timeout.as_millis()
                ),
            },
        }
    }
}

/// [`Consent::check`], but a denial when `deadline` passes first (the turn cannot wait
/// longer for an answer).
pub async fn check_until(
    gate: &Consent,
    request: &ConsentRequest,
    deadline: Option<std::time::Instant>,
) -> Verdict {
    match deadline {
        None => gate.check(request).await,
        Some(d) => tokio::time::timeout_at(d.into(), gate.check(request))
            .await
            .unwrap_or_else(|_| Verdict {
                allowed: false,
                how: "denied: the turn's deadline passed before the approver answered".into(),
            }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn policy(rules: Vec<ConsentRule>) -> ConsentPolicy {
        ConsentPolicy::new(ConsentConfig {
            rules,
            ..ConsentConfig::default()
        })
        .unwrap()
    }

    fn rule(
        server: Option<&str>,
        uri: &str,
        host: Option<Decision>,
        model: Option<Decision>,
    ) -> ConsentRule {
        ConsentRule {
            server: server.map(str::to_owned),
            uri: Some(uri.into()),
            host,
            model,
            tool: None,
            call: None,
        }
    }

    fn call_rule(server: Option<&str>, tool: Option<&str>, call: Decision) -> ConsentRule {
        ConsentRule {
            server: server.map(str::to_owned),
            uri: None,
            host: None,
            model: None,
            tool: tool.map(str::to_owned),
            call: Some(call),
        }
    }

    #[test]
    fn tool_calls_follow_call_rules_then_the_annotations() {
        use crate::source::ToolHints;
        let p = policy(vec![
            call_rule(Some("fs"), Some("write_*"), Decision::Deny),
            call_rule(None, Some("search"), Decision::Allow),
            rule(Some("fs"), "file:///*", Some(Decision::Allow), None),
        ]);
        let none = ToolHints::default();
        let read_only = ToolHints {
            read_only: Some(true),
            destructive: None,
        };
        let destructive = ToolHints {
            read_only: Some(false),
            destructive: Some(true),
        };
        assert_eq!(
            p.decide_call("fs", "write_file", read_only),
            (Decision::Deny, DecidedBy::Rule(0))
        );
        assert_eq!(
            p.decide_call("kb", "write_file", none),
            (Decision::Allow, DecidedBy::Default)
        );
        assert_eq!(
            p.decide_call("kb", "search", destructive),
            (Decision::Allow, DecidedBy::Rule(1))
        );
        assert_eq!(
            p.decide_call("kb", "drop", destructive),
            (Decision::Ask, DecidedBy::DestructiveTool)
        );
        assert_eq!(
            p.decide_call("kb", "list", read_only),
            (Decision::Allow, DecidedBy::ReadOnlyTool)
        );
        // A read rule never decides a call, nor a call rule a read.
        assert_eq!(
            p.decide("fs", "file:///x", ReadOrigin::Host).1,
            DecidedBy::Rule(2)
        );
        assert_eq!(
            p.decide("fs", "write_x", ReadOrigin::Host).1,
            DecidedBy::Default
        );
        assert_eq!(
            p.describe(DecidedBy::Rule(0), Subject::Call),
            "rules[0] (server fs, tool write_*)"
        );
    }

    #[test]
    fn call_rules_are_checked() {
        let err = |r: ConsentRule| {
            ConsentPolicy::new(ConsentConfig {
                rules: vec![r],
                ..ConsentConfig::default()
            })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
        };
        assert!(
            err(ConsentRule {
                host: Some(Decision::Allow),
                ..call_rule(None, Some("x"), Decision::Deny)
            })
            .contains("a rule with `tool` is about tool calls")
        );
        assert!(
            err(ConsentRule {
                uri: Some("kb://*".into()),
                ..call_rule(None, None, Decision::Deny)
            })
            .contains("a rule with `uri` is about reads")
        );
        assert!(err(call_rule(None, Some("["), Decision::Deny)).contains("rules[0].tool"));
    }

    #[test]
    fn first_matching_rule_for_the_origin_decides() {
        let p = policy(vec![
            rule(
                Some("kb"),
                "kb://secret/*",
                Some(Decision::Deny),
                Some(Decision::Deny),
            ),
            rule(None, "kb://public/*", None, Some(Decision::Ask)),
            rule(None, "*", None, Some(Decision::Deny)),
        ]);
        let d = |s: &str, u: &str, o| p.decide(s, u, o);
        assert_eq!(
            d("kb", "kb://secret/plan", ReadOrigin::Host),
            (Decision::Deny, DecidedBy::Rule(0))
        );
        assert_eq!(
            d("kb", "kb://secret/a/b", ReadOrigin::Model),
            (Decision::Deny, DecidedBy::Rule(0))
        );
        // Another server: the first rule does not apply.
        assert_eq!(
            d("other", "kb://secret/plan", ReadOrigin::Host),
            (Decision::Allow, DecidedBy::Default)
        );
        assert_eq!(
            d("kb", "kb://public/x", ReadOrigin::Model),
            (Decision::Ask, DecidedBy::Rule(1))
        );
        assert_eq!(
            d("kb", "kb://public/x", ReadOrigin::Host),
            (Decision::Allow, DecidedBy::Default)
        );
        assert_eq!(
            d("kb", "kb://else", ReadOrigin::Model),
            (Decision::Deny, DecidedBy::Rule(2))
        );
        // A glob is anchored: a prefix does not match.
        assert_eq!(
            d("kb", "xkb://secret/plan", ReadOrigin::Host).1,
            DecidedBy::Default
        );
    }

    #[test]
    fn an_encoded_or_dotted_uri_is_judged_as_the_server_reads_it() {
        let p = policy(vec![rule(
            Some("kb"),
            "kb://secret/*",
            Some(Decision::Deny),
            Some(Decision::Deny),
        )]);
        for uri in [
            "kb://%73ecret/plan",
            "KB://secret/plan",
            "kb://public/../secret/plan",
            "kb://secret%2Fplan",
            "kb://./secret/plan",
        ] {
            assert_eq!(
                p.decide("kb", uri, ReadOrigin::Host).0,
                Decision::Deny,
                "{uri}"
            );
        }
        assert_eq!(
            p.decide("kb", "kb://public/plan", ReadOrigin::Host).0,
            Decision::Allow
        );
        assert_eq!(
            normalize_uri("KB://h/a/./b/../c%20d?x=%41"),
            "kb://h/a/c d?x=A"
        );
    }

    #[test]
    fn bad_rules_are_config_errors() {
        let e = ConsentPolicy::new(ConsentConfig {
            rules: vec![rule(None, "kb://[", Some(Decision::Deny), None)],
            ..ConsentConfig::default()
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rules[0].uri: `kb://[` is not a valid glob: unclosed character class; missing ']'"
        );
        let e = ConsentPolicy::new(ConsentConfig {
            rules: vec![rule(None, "*", None, None)],
            ..ConsentConfig::default()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rules[0]: the rule decides nothing"),
            "{e}"
        );
    }
}
