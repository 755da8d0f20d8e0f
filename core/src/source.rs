//! What stages may ask of MCP servers, in hostpipe's own types.
//!
//! The MCP crate (`hostpipe-mcp`) implements [`McpSource`] and converts the SDK's types
//! to these at its edge. Field names follow the MCP specification (2025-11-25,
//! "Server Features"): a [`Resource`] is what `resources/list` returns, a
//! [`ResourceTemplate`] what `resources/templates/list` returns, and so on.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::SourceError;

/// The connection state of one configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerStatus {
    /// The host is starting the connection.
    Connecting,
    /// Initialized and usable.
    Connected,
    /// The connection failed or was lost; `reason` says why (e.g. the OS error of a
    /// command that does not exist, or a timeout).
    Failed {
        /// Human-readable cause.
        reason: String,
    },
    /// The connection was lost; the host is reconnecting with exponential backoff.
    Reconnecting {
        /// Why the connection was lost (or why the last attempt failed).
        reason: String,
        /// The attempt that comes next, from 1.
        attempt: u32,
    },
    /// The server answered `401 Unauthorized` and hostpipe has no usable credentials
    /// for it (MCP spec 2025-11-25, "Authorization"): an administrator must log in
    /// (`hostpipe login SERVER`, or `POST /v1/servers/{server}/login`). Not retried
    /// until then.
    NeedsLogin {
        /// Why, e.g. `the server requires OAuth authorization`.
        reason: String,
    },
    /// `disabled: true` in the configuration; never started.
    Disabled,
}

impl ServerStatus {
    /// Every [`ServerStatus::state`], in the order of the variants.
    pub const STATES: [&'static str; 6] = [
        "connecting",
        "connected",
        "failed",
        "reconnecting",
        "needs_login",
        "disabled",
    ];

    /// The state alone, as the `state` tag serializes it: `connecting`, `connected`,
    /// `failed`, `reconnecting`, `needs_login` or `disabled`.
    pub fn state(&self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Connected => "connected",
            Self::Failed { .. } => "failed",
            Self::Reconnecting { .. } => "reconnecting",
            Self::NeedsLogin { .. } => "needs_login",
            Self::Disabled => "disabled",
        }
    }

    /// Whether requests can be sent.
    pub fn is_connected(&self) -> bool {
        matches!(self, Self::Connected)
    }

    /// Whether an administrator must log in before it can connect.
    pub fn needs_login(&self) -> bool {
        matches!(self, Self::NeedsLogin { .. })
    }

    /// A short description: `connected`, `failed: <reason>`, ...
    pub fn describe(&self) -> String {
        match self {
            Self::Connecting => "connecting".into(),
            Self::Connected => "connected".into(),
            Self::Failed { reason } => format!("failed: {reason}"),
            Self::Reconnecting { reason, attempt } => {
                format!("reconnecting (attempt {attempt}): {reason}")
            }
            Self::NeedsLogin { reason } => {
                format!(
                    "needs login: {reason}; an administrator must log in (`hostpipe login`, or the admin page)"
                )
            }
            Self::Disabled => "disabled".into(),
        }
    }
}

/// The capabilities a server declared in its `initialize` result
/// (MCP spec 2025-11-25, "Lifecycle / Capability Negotiation").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCapabilities {
    /// `tools` is declared.
    pub tools: bool,
    /// `resources` is declared.
    pub resources: bool,
    /// `resources.subscribe` is true.
    pub resources_subscribe: bool,
    /// `resources.listChanged` is true.
    pub resources_list_changed: bool,
    /// `prompts` is declared.
    pub prompts: bool,
    /// `completions` is declared.
    pub completions: bool,
    /// `logging` is declared.
    pub logging: bool,
}

/// How many items of each kind the host prefetched from a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCounts {
    /// Tools.
    pub tools: usize,
    /// Static resources.
    pub resources: usize,
    /// Resource templates.
    pub resource_templates: usize,
    /// Prompts.
    pub prompts: usize,
}

/// One configured server as the host sees it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The configured name (the key under `mcpServers`).
    pub name: String,
    /// Connection state.
    pub status: ServerStatus,
    /// Declared capabilities (all false until connected).
    pub capabilities: ServerCapabilities,
    /// Negotiated protocol version, e.g. `2025-11-25`.
    pub protocol_version: Option<String>,
    /// `serverInfo.name` and `serverInfo.version` as the server reported them.
    pub implementation: Option<(String, String)>,
    /// The server's `instructions`, if any.
    pub instructions: Option<String>,
    /// Prefetched list sizes.
    pub counts: ListCounts,
    /// Problems met while connecting or listing that did not fail the server (e.g. a
    /// list cut at the page cap, a repeated pagination cursor).
    pub warnings: Vec<String>,
    /// The last lines a stdio server wrote to stderr (at most 5), to explain a failed
    /// start. For operators only: never shown to the model.
    pub stderr_tail: Vec<String>,
}

/// Who a resource is meant for (MCP `Role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human user.
    User,
    /// The model.
    Assistant,
}

/// MCP annotations on a resource or template (spec 2025-11-25, "Resources / Annotations").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Annotations {
    /// Intended audience; `["user"]` alone means never for the model.
    pub audience: Option<Vec<Role>>,
    /// 0.0 (least) to 1.0 (most important; effectively required).
    pub priority: Option<f32>,
    /// ISO 8601 timestamp, as sent (not parsed).
    pub last_modified: Option<String>,
}

impl Annotations {
    /// Whether the audience is given and excludes the model (`["user"]` only).
    pub fn is_user_only(&self) -> bool {
        self.audience
            .as_ref()
            .is_some_and(|a| !a.is_empty() && !a.contains(&Role::Assistant))
    }
}

/// A resource as listed by `resources/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// The resource URI.
    pub uri: String,
    /// Programmatic name.
    pub name: String,
    /// Display title.
    pub title: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// MIME type, when the server gives one.
    pub mime_type: Option<String>,
    /// Size in bytes of the raw content, when the server gives it.
    pub size: Option<u64>,
    /// Annotations.
    pub annotations: Option<Annotations>,
}

/// A resource template as listed by `resources/templates/list` (RFC 6570 URI template).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceTemplate {
    /// The RFC 6570 URI template, e.g. `greeting://{name}`.
    pub uri_template: String,
    /// Programmatic name.
    pub name: String,
    /// Display title.
    pub title: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// MIME type of every matching resource, when uniform.
    pub mime_type: Option<String>,
    /// Annotations.
    pub annotations: Option<Annotations>,
}

/// One item of a `resources/read` result. Blobs are already decoded from base64 by the
/// host: base64 never travels further than the MCP edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResourceContents {
    /// `TextResourceContents`.
    Text {
        /// URI of this item (may differ from the one read, e.g. for directories).
        uri: String,
        /// MIME type, if given.
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// `BlobResourceContents`, decoded.
    Blob {
        /// URI of this item.
        uri: String,
        /// MIME type, if given.
        mime_type: Option<String>,
        /// The decoded bytes.
        #[serde(skip)]
        data: Vec<u8>,
    },
}

impl ResourceContents {
    /// The item's URI.
    pub fn uri(&self) -> &str {
        match self {
            Self::Text { uri, .. } | Self::Blob { uri, .. } => uri,
        }
    }

    /// The item's MIME type.
    pub fn mime_type(&self) -> Option<&str> {
        match self {
            Self::Text { mime_type, .. } | Self::Blob { mime_type, .. } => mime_type.as_deref(),
        }
    }

    /// Size of the content in bytes (UTF-8 bytes for text, decoded bytes for blobs).
    pub fn byte_len(&self) -> usize {
        match self {
            Self::Text { text, .. } => text.len(),
            Self::Blob { data, .. } => data.len(),
        }
    }
}

/// What [`McpSource::read_resource`] returns: the `contents` of a `resources/read`
/// result, shared with the host's content cache.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceRead {
    /// The items, in the server's order. Shared, not copied, between the turns that
    /// read the same cached entry.
    pub contents: Arc<[ResourceContents]>,
    /// Whether the host answered from its content cache without sending a request.
    pub cache_hit: bool,
}

impl ResourceRead {
    /// A read answered by the server (not from a cache).
    pub fn fresh(contents: impl Into<Arc<[ResourceContents]>>) -> Self {
        Self {
            contents: contents.into(),
            cache_hit: false,
        }
    }
}

/// A tool as listed by `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The server's own tool name.
    pub name: String,
    /// Display title.
    pub title: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// JSON Schema of the arguments (a JSON object schema).
    pub input_schema: serde_json::Value,
    /// What the server says the tool does (MCP spec 2025-11-25, "Tool annotations"):
    /// hints, not guarantees.
    #[serde(default)]
    pub annotations: ToolHints,
}

/// A tool's behaviour hints (MCP `ToolAnnotations`), as the server gave them: `None`
/// where it said nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHints {
    /// `readOnlyHint`: it does not modify its environment (the spec's default: false).
    pub read_only: Option<bool>,
    /// `destructiveHint`: it may perform destructive updates (the spec's default: true,
    /// meaningful only when not read-only).
    pub destructive: Option<bool>,
}

/// A prompt argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptArgument {
    /// Argument name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Whether it must be given.
    pub required: bool,
}

/// A prompt as listed by `prompts/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// Prompt name.
    pub name: String,
    /// Display title.
    pub title: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Arguments.
    pub arguments: Vec<PromptArgument>,
}

/// One content item of a `tools/call` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolContent {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, decoded.
    Image {
        /// MIME type.
        mime_type: String,
        /// Decoded bytes.
        #[serde(skip)]
        data: Vec<u8>,
    },
    /// Audio, decoded.
    Audio {
        /// MIME type.
        mime_type: String,
        /// Decoded bytes.
        #[serde(skip)]
        data: Vec<u8>,
    },
    /// A link to a resource (not its contents).
    ResourceLink {
        /// The linked resource.
        resource: Resource,
    },
    /// An embedded resource.
    Resource {
        /// Its contents.
        contents: ResourceContents,
    },
}

/// The result of `tools/call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallResult {
    /// Unstructured content.
    pub content: Vec<ToolContent>,
    /// `structuredContent`, if any.
    pub structured_content: Option<serde_json::Value>,
    /// Whether the tool reported an error (`isError`).
    pub is_error: bool,
}

/// One message of a `prompts/get` result (MCP spec 2025-11-25, "Prompts").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// Who says it.
    pub role: Role,
    /// What is said: the MCP `ContentBlock` (text, image, audio, resource link or
    /// embedded resource), as in tool results.
    pub content: ToolContent,
}

/// The result of `prompts/get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptResult {
    /// The prompt's description, if the server gives one.
    pub description: Option<String>,
    /// The messages, in order.
    pub messages: Vec<PromptMessage>,
}

/// What `completion/complete` completes an argument of (MCP spec 2025-11-25,
/// "Utilities / Completion").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CompletionRef {
    /// A prompt (`ref/prompt`), by name.
    Prompt {
        /// The prompt's name.
        name: String,
    },
    /// A resource template (`ref/resource`), by its URI template.
    ResourceTemplate {
        /// The RFC 6570 URI template.
        uri_template: String,
    },
}

/// The result of `completion/complete`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// Suggested values, best first (at most 100, per the spec).
    pub values: Vec<String>,
    /// How many values there are in all, when the server says.
    pub total: Option<u32>,
    /// Whether there are more than `values`.
    pub has_more: bool,
}

/// Access to the configured MCP servers. Implemented by `hostpipe-mcp`'s host; tests and
/// other hosts may implement it too.
///
/// Lists are what the host prefetched (the host follows `nextCursor` to the end);
/// reads and tool calls go to the server, each with the host's request timeout.
/// Every method is cancel-safe: dropping the future cancels the MCP request.
#[async_trait]
pub trait McpSource: Send + Sync {
    /// Every configured server, sorted by name.
    fn servers(&self) -> Vec<ServerInfo>;

    /// One server by name, or `None` if it is not configured.
    fn server(&self, name: &str) -> Option<ServerInfo> {
        self.servers().into_iter().find(|s| s.name == name)
    }

    /// Static resources of `server`. Empty (not an error) when it does not declare the
    /// `resources` capability.
    ///
    /// # Errors
    /// [`SourceError::UnknownServer`], [`SourceError::Unavailable`].
    async fn list_resources(&self, server: &str) -> Result<Arc<[Resource]>, SourceError>;

    /// Resource templates of `server`; empty when it declares no `resources`.
    ///
    /// # Errors
    /// As [`McpSource::list_resources`].
    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError>;

    /// Tools of `server`; empty when it declares no `tools`.
    ///
    /// # Errors
    /// As [`McpSource::list_resources`].
    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError>;

    /// Prompts of `server`; empty when it declares no `prompts`.
    ///
    /// # Errors
    /// As [`McpSource::list_resources`].
    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError>;

    /// `resources/read` of `uri` on `server`, or the host's cached copy of it. A host
    /// with a content cache answers from it only while the entry is fresh: within its
    /// TTL and not invalidated by `notifications/resources/updated` or a reconnect.
    /// Concurrent reads of the same URI may share one request.
    ///
    /// # Errors
    /// [`SourceError::NotSupported`] if the server declares no `resources`;
    /// [`SourceError::Timeout`], [`SourceError::Protocol`] (e.g. not found),
    /// [`SourceError::Transport`], [`SourceError::InvalidResponse`].
    async fn read_resource(&self, server: &str, uri: &str) -> Result<ResourceRead, SourceError>;

    /// `tools/call` of `tool` (the server's own name) with JSON object `arguments`.
    ///
    /// # Errors
    /// As [`McpSource::read_resource`], for the `tools` capability.
    async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ToolCallResult, SourceError>;

    /// `prompts/get` of prompt `name` with string `arguments`.
    ///
    /// # Errors
    /// As [`McpSource::read_resource`], for the `prompts` capability; a missing
    /// required argument is the server's JSON-RPC error (usually -32602). The default
    /// implementation answers [`SourceError::NotSupported`].
    async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &std::collections::BTreeMap<String, String>,
    ) -> Result<PromptResult, SourceError> {
        let _ = (name, arguments);
        Err(SourceError::NotSupported {
            server: server.to_owned(),
            capability: "prompts",
        })
    }

    /// `completion/complete`: values for `argument` of `reference` that start from
    /// `value`, given the arguments already chosen (`context`).
    ///
    /// # Errors
    /// [`SourceError::NotSupported`] when the server does not declare `completions`
    /// (the default implementation's answer); otherwise as
    /// [`McpSource::read_resource`].
    async fn complete(
        &self,
        server: &str,
        reference: &CompletionRef,
        argument: &str,
        value: &str,
        context: &std::collections::BTreeMap<String, String>,
    ) -> Result<Completion, SourceError> {
        let _ = (reference, argument, value, context);
        Err(SourceError::NotSupported {
            server: server.to_owned(),
            capability: "completions",
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::ServerStatus;

    #[test]
    fn a_status_state_is_its_serialized_tag_and_listed_in_order() {
        let all = [
            ServerStatus::Connecting,
            ServerStatus::Connected,
            ServerStatus::Failed { reason: "x".into() },
            ServerStatus::Reconnecting {
                reason: "x".into(),
                attempt: 1,
            },
            ServerStatus::NeedsLogin { reason: "x".into() },
            ServerStatus::Disabled,
        ];
        for (status, listed) in all.iter().zip(ServerStatus::STATES) {
            assert_eq!(status.state(), listed);
            assert_eq!(serde_json::to_value(status).unwrap()["state"], listed);
        }
    }
}
