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
//! decision ([`ReadRecord::consent`](hostpipe_core::ReadRecord::consent)).

mod grants;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use hostpipe_core::{ConfigError, ConsentGate, ConsentRequest, ReadOrigin, ToolHints, Verdict};
use serde::{Deserialize, Serialize};

pub use grants::{ConsentGrant, GrantKind, GrantStore};

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
    pub fn decide_call(&self, server: &str, tool: &str, hints: ToolHints) -> (Decision, DecidedBy) {
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

/// A pipeline's consent gate: its policy, its approver, and the conversation grants
/// (in memory, and in a [`GrantStore`] when it has one, so that every worker sharing the
/// store honours them).
pub struct Consent {
    policy: ConsentPolicy,
    approver: Option<Arc<dyn Approver>>,
    grants: Mutex<HashSet<ConsentGrant>>,
    store: Option<Arc<dyn GrantStore>>,
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
            store: None,
        }
    }

    /// The same gate (policy, approver, the grants it remembers), keeping conversation
    /// grants in `store` too and honouring those it holds ([`GrantStore::grant`]).
    /// [`Pipeline::with_store`](crate::Pipeline::with_store) gives a pipeline's gate the
    /// pipeline's store this way.
    #[must_use]
    pub fn with_grant_store(&self, store: Arc<dyn GrantStore>) -> Self {
        Self {
            policy: self.policy.clone(),
            approver: self.approver.clone(),
            grants: Mutex::new(self.grants().clone()),
            store: Some(store),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &ConsentPolicy {
        &self.policy
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, HashSet<ConsentGrant>> {
        // Every change is one insert or clear: a poisoned set is still consistent.
        self.grants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long the gate waits on its store for a grant.
    const STORE_TIMEOUT: Duration = Duration::from_secs(5);

    /// Whether the store holds `grant` (remembered in memory from then on). A store that
    /// fails or is slow counts as "no": the person is asked again, never skipped.
    async fn stored_grant(&self, grant: &ConsentGrant) -> bool {
        let Some(store) = &self.store else {
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

    fn remember(&self, grant: ConsentGrant) {
        let mut grants = self.grants();
        if grants.len() >= Self::MAX_GRANTS {
            grants.clear();
        }
        grants.insert(grant);
    }

    /// Remembers `grant`, and keeps it in the store (a failure is logged: the grant then
    /// holds in this process only).
    async fn keep_grant(&self, grant: ConsentGrant) {
        if let Some(store) = &self.store {
            let now = hostpipe_core::unix_ms_now();
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
    pub async fn check_call(&self, request: &ConsentRequest, hints: ToolHints) -> Verdict {
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
            None => ConsentGrant {
                pipeline: request.pipeline.clone(),
                conversation: c.clone(),
                server: request.server.clone(),
                uri: request.uri.clone(),
                origin: request.origin,
                kind: GrantKind::Read,
            },
            Some(tool) => ConsentGrant {
                pipeline: request.pipeline.clone(),
                conversation: c.clone(),
                server: request.server.clone(),
                uri: tool.name.clone(),
                origin: request.origin,
                kind: GrantKind::Call,
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

#[async_trait]
impl ConsentGate for Consent {
    async fn check(&self, request: &ConsentRequest) -> Verdict {
        Consent::check(self, request).await
    }

    async fn check_call(&self, request: &ConsentRequest, hints: ToolHints) -> Verdict {
        Consent::check_call(self, request, hints).await
    }

    fn denies(&self, server: &str, uri: &str, origin: ReadOrigin) -> bool {
        self.policy.decide(server, uri, origin).0 == Decision::Deny
    }
}

#[cfg(test)]
mod tests;
