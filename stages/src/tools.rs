//! `tool_assembly`: the bound servers' tools, namespaced, plus the two exploration
//! tools, and the executor that runs the model's calls.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::trace::ReadSink;
use hostpipe_core::{
    BuildContext, ConfigError, Consent, ConsentRequest, McpSource, ModelProfile, ReadOrigin,
    ReadRecord, ResourceContents, Scope, Stage, StageError, StageOutcome, StagePhase, Tokenizer,
    ToolCallResult, ToolContent, ToolError, ToolExecutor, ToolOrigin, ToolSpec, TraceEvent,
    Treatment, TruncationSide, Turn,
};
use serde::Deserialize;
use serde_json::json;

use crate::config::parse_section;
use crate::convert::{ConvertLimits, Converted, ResourceMeta, convert};

/// Longest tool name model APIs accept (OpenAI Chat Completions: `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// The exploration tool that lists a server's resources and templates.
pub const LIST_RESOURCES: &str = "list_resources";
/// The exploration tool that reads one resource.
pub const READ_RESOURCE: &str = "read_resource";

/// Config section `[pipelines.ID.tool_assembly]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolAssemblyConfig {
    /// Offer `list_resources` and `read_resource` when a bound, connected server declares
    /// resources. Default true.
    pub exploration_tools: bool,
    /// Most tokens a `read_resource` result may carry before it is truncated. Default
    /// 4000.
    pub max_read_tokens: usize,
}

impl Default for ToolAssemblyConfig {
    fn default() -> Self {
        Self {
            exploration_tools: true,
            max_read_tokens: 4000,
        }
    }
}

/// Gathers tools of the bound, connected servers, named `SERVER__TOOL` (sanitized to
/// `[a-zA-Z0-9_-]`, at most 64 characters; a name that would be longer or collide gets a
/// short stable hash), plus the exploration tools.
pub struct ToolAssembly {
    config: ToolAssemblyConfig,
    mcp: Arc<dyn McpSource>,
}

impl ToolAssembly {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "tool_assembly";

    /// A stage with `config`.
    pub fn new(config: ToolAssemblyConfig, mcp: Arc<dyn McpSource>) -> Self {
        Self { config, mcp }
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// FNV-1a, 64 bit: stable across Rust versions and platforms, unlike `DefaultHasher`.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The model-facing name of `tool` on `server`: `SERVER__TOOL`, sanitized; if that is
/// longer than 64 characters or already `taken`, a prefix of it plus `_` and 8 hex
/// digits of a hash of the pair.
pub fn namespaced_name(server: &str, tool: &str, taken: &dyn Fn(&str) -> bool) -> String {
    let plain = format!("{}__{}", sanitize(server), sanitize(tool));
    if plain.len() <= MAX_TOOL_NAME_LEN && !taken(&plain) {
        return plain;
    }
    let mut salt = 0u32;
    loop {
        let hash = fnv1a(&[server, tool, &salt.to_string()]);
        let suffix = format!("_{:08x}", hash as u32);
        let mut name: String = plain
            .chars()
            .take(MAX_TOOL_NAME_LEN - suffix.len())
            .collect();
        name.push_str(&suffix);
        if !taken(&name) {
            return name;
        }
        salt += 1;
    }
}

#[async_trait]
impl Stage for ToolAssembly {
    async fn process(&self, turn: &mut Turn) -> Result<StageOutcome, StageError> {
        let mut tools: Vec<ToolSpec> = Vec::new();
        let mut dropped = Vec::new();
        let mut routes = BTreeMap::new();
        let connected: Vec<String> = turn.connected_servers().map(str::to_owned).collect();
        let mut with_resources = Vec::new();
        let reserved =
            |n: &str| self.config.exploration_tools && (n == LIST_RESOURCES || n == READ_RESOURCE);
        for server in &connected {
            if self
                .mcp
                .server(server)
                .is_some_and(|s| s.capabilities.resources)
            {
                with_resources.push(server.clone());
            }
            let listed = match self.mcp.list_tools(server).await {
                Ok(l) => l,
                Err(e) => {
                    turn.trace
                        .warn(format!("tools of `{server}` left out: {e}"));
                    continue;
                }
            };
            for t in listed.iter() {
                if !t.input_schema.is_object() {
                    dropped.push(format!(
                        "{server}/{}: inputSchema is not a JSON object",
                        t.name
                    ));
                    continue;
                }
                let name =
                    namespaced_name(server, &t.name, &|n| routes.contains_key(n) || reserved(n));
                routes.insert(
                    name.clone(),
                    ToolOrigin::Mcp {
                        server: server.clone(),
                        tool: t.name.clone(),
                    },
                );
                tools.push(ToolSpec {
                    name,
                    description: t
                        .description
                        .clone()
                        .or_else(|| t.title.clone())
                        .unwrap_or_default(),
                    input_schema: t.input_schema.clone(),
                    origin: ToolOrigin::Mcp {
                        server: server.clone(),
                        tool: t.name.clone(),
                    },
                });
            }
        }
        if self.config.exploration_tools && !with_resources.is_empty() {
            tools.extend(exploration_tools(&with_resources));
            routes.insert(LIST_RESOURCES.into(), ToolOrigin::Exploration);
            routes.insert(READ_RESOURCE.into(), ToolOrigin::Exploration);
        }
        turn.trace.record(TraceEvent::ToolsAssembled {
            count: tools.len(),
            dropped,
        });
        turn.tools = tools;
        turn.tool_executor = Some(Arc::new(BoundTools {
            mcp: Arc::clone(&self.mcp),
            bound: turn.bound_servers.iter().map(|b| b.name.clone()).collect(),
            routes,
            model: Arc::clone(&turn.model),
            max_read_tokens: self.config.max_read_tokens,
            consent: turn.consent.clone(),
            asker: turn.consent_request(
                "",
                "",
                ReadOrigin::Model,
                "the model called read_resource",
            ),
            reads: turn.trace.read_sink(),
        }));
        Ok(StageOutcome::Continue)
    }
}

fn exploration_tools(servers: &[String]) -> [ToolSpec; 2] {
    let server = json!({"type": "string", "enum": servers, "description": "MCP server name"});
    [
        ToolSpec {
            name: LIST_RESOURCES.into(),
            description: "List the resources and resource templates an MCP server offers (URI, name, MIME type, description).".into(),
            input_schema: json!({"type": "object", "properties": {"server": server}, "required": ["server"], "additionalProperties": false}),
            origin: ToolOrigin::Exploration,
        },
        ToolSpec {
            name: READ_RESOURCE.into(),
            description: "Read one resource of an MCP server by URI. Binary content is described, not returned.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"server": server, "uri": {"type": "string", "description": "Resource URI"}},
                "required": ["server", "uri"],
                "additionalProperties": false
            }),
            origin: ToolOrigin::Exploration,
        },
    ]
}

/// Executes tool calls for one turn; refuses servers not bound for it. Every
/// `read_resource` is checked against the pipeline's consent policy (as a model read)
/// and reported to the turn's [`ReadSink`], so it lands in the trace and the history.
pub struct BoundTools {
    mcp: Arc<dyn McpSource>,
    bound: Vec<String>,
    routes: BTreeMap<String, ToolOrigin>,
    model: Arc<ModelProfile>,
    max_read_tokens: usize,
    consent: Option<Arc<Consent>>,
    /// The turn's ids for consent requests (server and URI filled in per read).
    asker: ConsentRequest,
    reads: ReadSink,
}

impl BoundTools {
    fn server_arg<'a>(
        &self,
        tool: &str,
        args: &'a serde_json::Value,
    ) -> Result<&'a str, ToolError> {
        let server = args.get("server").and_then(|v| v.as_str()).ok_or_else(|| {
            ToolError::InvalidArguments {
                tool: tool.into(),
                message: "`server` (a string) is required".into(),
            }
        })?;
        if !self.bound.iter().any(|b| b == server) {
            return Err(ToolError::ServerNotBound {
                server: server.into(),
                allowed: self.bound.clone(),
            });
        }
        Ok(server)
    }

    async fn list(&self, args: &serde_json::Value) -> Result<ToolCallResult, ToolError> {
        let server = self.server_arg(LIST_RESOURCES, args)?;
        let resources = self.mcp.list_resources(server).await?;
        let templates = self.mcp.list_resource_templates(server).await?;
        let mut out = format!("Resources of `{server}` ({}):\n", resources.len());
        for r in resources.iter() {
            let _ = write!(
                out,
                "- {} ({})",
                r.uri,
                r.title.as_deref().unwrap_or(&r.name)
            );
            if let Some(m) = &r.mime_type {
                let _ = write!(out, " [{m}]");
            }
            if let Some(d) = &r.description {
                let _ = write!(out, ": {d}");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "Resource templates of `{server}` ({}):",
            templates.len()
        );
        for t in templates.iter() {
            let _ = write!(
                out,
                "- {} ({})",
                t.uri_template,
                t.title.as_deref().unwrap_or(&t.name)
            );
            if let Some(d) = &t.description {
                let _ = write!(out, ": {d}");
            }
            out.push('\n');
        }
        Ok(text_result(out))
    }

    async fn read(&self, args: &serde_json::Value) -> Result<ToolCallResult, ToolError> {
        let server = self.server_arg(READ_RESOURCE, args)?;
        let uri = args.get("uri").and_then(|v| v.as_str()).ok_or_else(|| {
            ToolError::InvalidArguments {
                tool: READ_RESOURCE.into(),
                message: "`uri` (a string) is required".into(),
            }
        })?;
        let started = std::time::Instant::now();
        let mut record = ReadRecord {
            server: server.to_owned(),
            uri: uri.to_owned(),
            mime_type: None,
            scope: Scope::Message,
            bytes: 0,
            tokens_before: 0,
            tokens_estimated: false,
            tokens_after: 0,
            treatment: Treatment::Whole,
            elapsed_ms: 0,
            cache_hit: false,
            error: None,
            origin: ReadOrigin::Model,
            consent: None,
            passages: Vec::new(),
            reason: None,
        };
        if let Some(gate) = &self.consent {
            let request = ConsentRequest {
                server: server.to_owned(),
                uri: uri.to_owned(),
                ..self.asker.clone()
            };
            let verdict = gate.check(&request).await;
            if !verdict.allowed {
                record.error = Some(format!("withheld: {}", verdict.how));
                record.treatment = Treatment::Omitted;
                record.consent = Some(verdict.how);
                self.reads.push(record);
                // Withheld, not missing: the model must not conclude it does not exist.
                return Ok(ToolCallResult {
                    content: vec![ToolContent::Text {
                        text: format!(
                            "[resource {uri} from `{server}` withheld: reading it was not allowed]"
                        ),
                    }],
                    structured_content: None,
                    is_error: true,
                });
            }
            record.consent = Some(verdict.how);
        }
        let read = self.mcp.read_resource(server, uri).await;
        record.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                record.error = Some(e.to_string());
                record.treatment = Treatment::Omitted;
                self.reads.push(record);
                return Err(e.into());
            }
        };
        record.cache_hit = read.cache_hit;
        let contents = read.contents;
        record.bytes = contents.iter().map(ResourceContents::byte_len).sum();
        record.mime_type = contents
            .first()
            .and_then(|c| c.mime_type())
            .map(str::to_owned);
        let tk = Tokenizer::new(self.model.encoding).map_err(|e| ToolError::InvalidArguments {
            tool: READ_RESOURCE.into(),
            message: e.to_string(),
        })?;
        let mut content = Vec::with_capacity(contents.len());
        for item in contents.iter().cloned() {
            // An item under another URI is judged on its own (a denied URI never
            // reaches the model, whatever URI was asked for).
            let item_uri = item.uri().to_owned();
            let item_mime = item.mime_type().map(str::to_owned);
            if item_uri != uri
                && let Some(gate) = &self.consent
            {
                let request = ConsentRequest {
                    server: server.to_owned(),
                    uri: item_uri.clone(),
                    reason: format!("returned by read_resource of {uri}"),
                    ..self.asker.clone()
                };
                let verdict = gate.check(&request).await;
                if !verdict.allowed {
                    content.push(ToolContent::Text {
                        text: format!(
                            "[resource {item_uri} from `{server}` withheld: reading it was not allowed]"
                        ),
                    });
                    record.error = Some(format!("withheld ({item_uri}): {}", verdict.how));
                    continue;
                }
            }
            content.push(
                match convert(
                    item,
                    &ResourceMeta::default(),
                    &self.model,
                    &ConvertLimits::default(),
                ) {
                    Converted::Text(text) => {
                        let before = tk.count(&text);
                        record.tokens_before += before;
                        let text =
                            match tk.truncate(&text, self.max_read_tokens, TruncationSide::Head) {
                                Some(t) if before > self.max_read_tokens => {
                                    record.tokens_after += t.tokens;
                                    record.treatment = Treatment::Truncated {
                                        side: TruncationSide::Head,
                                        omitted_tokens: t.omitted_tokens,
                                    };
                                    t.text
                                }
                                _ => {
                                    record.tokens_after += before;
                                    text
                                }
                            };
                        // Resource text: the runner puts it in the turn's fence.
                        ToolContent::Resource {
                            contents: ResourceContents::Text {
                                uri: item_uri,
                                mime_type: item_mime,
                                text,
                            },
                        }
                    }
                    Converted::Image {
                        mime_type, data, ..
                    } => ToolContent::Image { mime_type, data },
                    Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                        ToolContent::Text { text: note }
                    }
                },
            );
        }
        self.reads.push(record);
        Ok(ToolCallResult {
            content,
            structured_content: None,
            is_error: false,
        })
    }
}

fn text_result(text: String) -> ToolCallResult {
    ToolCallResult {
        content: vec![ToolContent::Text { text }],
        structured_content: None,
        is_error: false,
    }
}

#[async_trait]
impl ToolExecutor for BoundTools {
    async fn call(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<ToolCallResult, ToolError> {
        match self.routes.get(name) {
            None => Err(ToolError::UnknownTool { name: name.into() }),
            Some(ToolOrigin::Exploration) if name == LIST_RESOURCES => self.list(&arguments).await,
            Some(ToolOrigin::Exploration) => self.read(&arguments).await,
            Some(ToolOrigin::Mcp { server, tool }) => {
                if !self.bound.contains(server) {
                    return Err(ToolError::ServerNotBound {
                        server: server.clone(),
                        allowed: self.bound.clone(),
                    });
                }
                let args = match arguments {
                    serde_json::Value::Object(m) => Some(m),
                    serde_json::Value::Null => None,
                    other => {
                        return Err(ToolError::InvalidArguments {
                            tool: name.into(),
                            message: format!("arguments must be a JSON object, not {other}"),
                        });
                    }
                };
                Ok(self.mcp.call_tool(server, tool, args).await?)
            }
        }
    }
}

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: ToolAssemblyConfig = parse_section(section)?;
    Ok(Box::new(ToolAssembly::new(config, Arc::clone(&ctx.mcp))))
}

hostpipe_core::submit_stage! {
    name: ToolAssembly::NAME,
    phase: StagePhase::Tools,
    priority: 0,
    description: "Offers the bound servers' tools (namespaced) and the resource exploration tools.",
    build: build,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_namespaced_sanitized_and_bounded() {
        let none = |_: &str| false;
        assert_eq!(namespaced_name("kb", "search", &none), "kb__search");
        assert_eq!(namespaced_name("my kb", "a.b", &none), "my_kb__a_b");
        let long = namespaced_name(&"s".repeat(40), &"t".repeat(40), &none);
        assert_eq!(long.len(), MAX_TOOL_NAME_LEN);
        assert_ne!(
            long,
            namespaced_name(&"s".repeat(40), &"t".repeat(41), &none)
        );
        let taken = |n: &str| n == "a__b";
        let other = namespaced_name("a", "b", &taken);
        assert!(
            other.starts_with("a__b_") && other.len() == "a__b_".len() + 8,
            "{other}"
        );
    }
}
