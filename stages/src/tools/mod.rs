//! `tool_assembly`: the bound servers' tools, namespaced, plus the two exploration
//! tools, filtered by the pipeline's `include` and `exclude`, and the executor
//! ([`BoundTools`]) that runs the model's calls under the pipeline's policy.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    BuildContext, ConfigError, McpSource, ReadOrigin, Stage, StageError, StageOutcome, StagePhase,
    ToolFilter, ToolOrigin, ToolSpec, TraceEvent, Turn,
};
use serde::Deserialize;
use serde_json::json;

use crate::config::parse_section;

mod executor;
mod read;
#[cfg(test)]
mod read_tests;

pub use executor::BoundTools;

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
    /// Globs over the names the model sees (`server__tool`, `list_resources`,
    /// `read_resource`): only the tools that match one are offered. Default: every tool.
    pub include: Vec<String>,
    /// Globs over the same names: the tools that match one are not offered, whatever
    /// `include` says. Default: none.
    pub exclude: Vec<String>,
}

impl Default for ToolAssemblyConfig {
    fn default() -> Self {
        Self {
            exploration_tools: true,
            max_read_tokens: 4000,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// Gathers tools of the bound, connected servers, named `SERVER__TOOL` (sanitized to
/// `[a-zA-Z0-9_-]`, at most 64 characters; a name that would be longer or collide gets a
/// short stable hash), plus the exploration tools.
pub struct ToolAssembly {
    config: ToolAssemblyConfig,
    filter: ToolFilter,
    mcp: Arc<dyn McpSource>,
}

impl ToolAssembly {
    /// The name this stage is registered under.
    pub const NAME: &'static str = "tool_assembly";

    /// A stage with `config`.
    ///
    /// # Errors
    /// [`ConfigError`] at `include[i]` or `exclude[i]` for a glob that does not compile.
    pub fn new(config: ToolAssemblyConfig, mcp: Arc<dyn McpSource>) -> Result<Self, ConfigError> {
        let filter = ToolFilter::new(&config.include, &config.exclude)?;
        Ok(Self {
            config,
            filter,
            mcp,
        })
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
        let mut hints = BTreeMap::new();
        let mut not_offered = BTreeMap::new();
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
                let name = namespaced_name(server, &t.name, &|n| {
                    routes.contains_key(n) || reserved(n) || not_offered.contains_key(n)
                });
                let origin = ToolOrigin::Mcp {
                    server: server.clone(),
                    tool: t.name.clone(),
                };
                // The plain `server__tool` too: a glob written for it still holds when
                // a collision or the length limit gave the tool a hashed name.
                let plain = format!("{}__{}", sanitize(server), sanitize(&t.name));
                if !self.filter.offers_any(&[&name, &plain]) {
                    not_offered.insert(name, origin);
                    continue;
                }
                hints.insert(name.clone(), t.annotations);
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
            for t in exploration_tools(&with_resources) {
                if self.filter.offers(&t.name) {
                    routes.insert(t.name.clone(), ToolOrigin::Exploration);
                    tools.push(t);
                } else {
                    not_offered.insert(t.name, ToolOrigin::Exploration);
                }
            }
        }
        if !not_offered.is_empty() {
            turn.trace.note(format!(
                "{} not offered (tool_assembly include and exclude): {}",
                if not_offered.len() == 1 {
                    "1 tool is".to_owned()
                } else {
                    format!("{} tools are", not_offered.len())
                },
                not_offered.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
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
            hints,
            not_offered,
            model: Arc::clone(&turn.model),
            max_read_tokens: self.config.max_read_tokens,
            policy: crate::reader::ReadPolicy::of_turn(&turn.extensions),
            consent: turn.consent.clone(),
            asker: turn.consent_request(
                "",
                "",
                ReadOrigin::Model,
                "the model called read_resource",
            ),
            deadline: turn.deadline,
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

fn build(section: &serde_json::Value, ctx: &BuildContext) -> Result<Box<dyn Stage>, ConfigError> {
    let config: ToolAssemblyConfig = parse_section(section)?;
    Ok(Box::new(ToolAssembly::new(config, Arc::clone(&ctx.mcp))?))
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
