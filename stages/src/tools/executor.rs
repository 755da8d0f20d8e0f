//! [`BoundTools`]: runs the tool calls of one turn, under the pipeline's policy.
//!
//! Every call is checked, in order: the tool is offered (`tool_assembly.include` and
//! `exclude`), its server is bound for the turn, and the consent gate allows it (rules
//! that name the tool, else the tool's annotations; `ask` goes to the approver with the
//! tool and its arguments). A call that is withheld never reaches the server, and the
//! model is told it was withheld, not that it failed. Every call, run or not, is
//! reported to the turn's [`ReadSink`] as a [`ToolCallRecord`]: it lands in the trace
//! and the history.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use hostpipe_core::trace::ReadSink;
use hostpipe_core::{
    CallOrigin, CallerRead, ConsentGate, ConsentRequest, McpSource, ModelProfile, ReadOrigin,
    ResourceContents, Tokenizer, ToolCallRecord, ToolCallRequest, ToolCallResult, ToolContent,
    ToolError, ToolExecutor, ToolHints, ToolOrigin, cap_json,
};

use super::LIST_RESOURCES;
use crate::reader::ReadPolicy;

/// Executes tool calls for one turn (see the module docs).
pub struct BoundTools {
    pub(super) mcp: Arc<dyn McpSource>,
    pub(super) bound: Vec<String>,
    /// The tools offered, by the name the model sees.
    pub(super) routes: BTreeMap<String, ToolOrigin>,
    /// Each offered MCP tool's annotations, by the name the model sees.
    pub(super) hints: BTreeMap<String, ToolHints>,
    /// Tools the bound servers list that the pipeline does not offer, by the name the
    /// model would see.
    pub(super) not_offered: BTreeMap<String, ToolOrigin>,
    pub(super) model: Arc<ModelProfile>,
    pub(super) max_read_tokens: usize,
    /// The pipeline's rules for resources ([`ReadPolicy`]).
    pub(super) policy: Arc<ReadPolicy>,
    pub(super) consent: Option<Arc<dyn ConsentGate>>,
    /// The turn's ids for consent requests (server, URI or tool filled in per call).
    pub(super) asker: ConsentRequest,
    pub(super) deadline: Option<Instant>,
    pub(super) reads: ReadSink,
}

/// What the model is told about a call the policy withheld.
fn withheld(name: &str) -> ToolCallResult {
    ToolCallResult {
        content: vec![ToolContent::Text {
            text: format!(
                "[tool call `{name}` withheld: the pipeline's policy did not allow it, so it was not run]"
            ),
        }],
        structured_content: None,
        is_error: true,
    }
}

/// Bytes of a result's content (text as UTF-8, blobs decoded) and tokens of its text.
fn measure(result: &ToolCallResult, tk: Option<&Tokenizer>) -> (usize, usize) {
    let mut texts: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    let mut bytes = 0;
    for c in &result.content {
        match c {
            ToolContent::Text { text }
            | ToolContent::Resource {
                contents: ResourceContents::Text { text, .. },
            } => texts.push(text.as_str().into()),
            ToolContent::Image { data, .. } | ToolContent::Audio { data, .. } => {
                bytes += data.len();
            }
            ToolContent::Resource { contents } => bytes += contents.byte_len(),
            ToolContent::ResourceLink { resource } => bytes += resource.uri.len(),
        }
    }
    if let Some(s) = &result.structured_content {
        texts.push(s.to_string().into());
    }
    bytes += texts.iter().map(|t| t.len()).sum::<usize>();
    let tokens = tk.map_or(0, |tk| texts.iter().map(|t| tk.count(t)).sum());
    (bytes, tokens)
}

impl BoundTools {
    /// A record of calling `tool` on `server` as `name`, not yet run.
    pub(super) fn record(
        server: &str,
        tool: &str,
        name: &str,
        args: &serde_json::Value,
        origin: CallOrigin,
    ) -> ToolCallRecord {
        ToolCallRecord {
            server: server.to_owned(),
            tool: tool.to_owned(),
            name: name.to_owned(),
            arguments: cap_json(args, ToolCallRequest::MAX_ARGUMENT_BYTES),
            result_bytes: 0,
            result_tokens: 0,
            is_error: false,
            error: None,
            withheld: false,
            elapsed_ms: 0,
            consent: None,
            origin,
        }
    }

    /// Reports `record` with the time since `started` and what `result` says.
    pub(super) fn report(
        &self,
        mut record: ToolCallRecord,
        started: Instant,
        result: Result<&ToolCallResult, &ToolError>,
    ) {
        record.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok(r) => {
                let tk = Tokenizer::new(self.model.encoding).ok();
                (record.result_bytes, record.result_tokens) = measure(r, tk.as_ref());
                record.is_error |= r.is_error;
            }
            Err(e) => {
                record.is_error = true;
                record.error.get_or_insert_with(|| e.to_string());
            }
        }
        self.reads.push_call(record);
    }

    pub(super) fn server_arg<'a>(
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

    /// Calls MCP tool `tool` of `server`, offered as `name`, under the policy.
    async fn call_mcp(
        &self,
        name: &str,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        record: &mut ToolCallRecord,
    ) -> Result<ToolCallResult, ToolError> {
        if !self.bound.iter().any(|b| b == server) {
            record.withheld = true;
            return Err(ToolError::ServerNotBound {
                server: server.to_owned(),
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
        if let Some(gate) = &self.consent {
            let request = ConsentRequest {
                server: server.to_owned(),
                uri: String::new(),
                reason: match record.origin {
                    CallOrigin::Model => format!("the model called {name}"),
                    CallOrigin::Api => format!("an API caller called {name}"),
                    CallOrigin::Agent => format!("the remote agent called {name}"),
                },
                tool: Some(ToolCallRequest::new(
                    tool,
                    &args
                        .clone()
                        .map_or(serde_json::Value::Null, serde_json::Value::Object),
                    record.origin,
                )),
                ..self.asker.clone()
            };
            let hints = self.hints.get(name).copied().unwrap_or_default();
            let checking = gate.check_call(&request, hints);
            let verdict = match self.deadline {
                None => checking.await,
                Some(d) => tokio::time::timeout_at(d.into(), checking)
                    .await
                    .unwrap_or_else(|_| hostpipe_core::Verdict {
                        allowed: false,
                        how: "denied: the turn's deadline passed before the approver answered"
                            .into(),
                    }),
            };
            record.consent = Some(verdict.how.clone());
            if !verdict.allowed {
                record.is_error = true;
                record.withheld = true;
                record.error = Some(format!("withheld: {}", verdict.how));
                return Ok(withheld(name));
            }
        }
        Ok(self.mcp.call_tool(server, tool, args).await?)
    }

    async fn list(&self, args: &serde_json::Value) -> Result<ToolCallResult, ToolError> {
        let server = self.server_arg(LIST_RESOURCES, args)?;
        let resources = self.mcp.list_resources(server).await?;
        let templates = self.mcp.list_resource_templates(server).await?;
        // What never goes to the model is not offered to it either: resources for the
        // user only, and those a rule denies to the model outright (not those it asks
        // about: the answer may be yes).
        let denied = |uri: &str| {
            self.consent
                .as_ref()
                .is_some_and(|gate| gate.denies(server, uri, ReadOrigin::Model))
        };
        let resources: Vec<_> = resources
            .iter()
            .filter(|r| !r.annotations.as_ref().is_some_and(|a| a.is_user_only()))
            .filter(|r| !denied(&r.uri))
            .collect();
        let templates: Vec<_> = templates
            .iter()
            .filter(|t| !t.annotations.as_ref().is_some_and(|a| a.is_user_only()))
            .collect();
        let mut out = format!("Resources of `{server}` ({}):\n", resources.len());
        for r in resources {
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
        for t in templates {
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
}

/// A result that is only `text`, marked as an error (a read the model does not get).
pub(super) fn error_result(text: String) -> ToolCallResult {
    ToolCallResult {
        content: vec![ToolContent::Text { text }],
        structured_content: None,
        is_error: true,
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
        self.call_from(name, arguments, CallOrigin::Model).await
    }

    async fn call_from(
        &self,
        name: &str,
        arguments: serde_json::Value,
        caller: CallOrigin,
    ) -> Result<ToolCallResult, ToolError> {
        let started = Instant::now();
        let Some(origin) = self.routes.get(name) else {
            // Refused, and recorded: a tool the pipeline's filter leaves out (withheld by
            // the policy), or a name that was never offered.
            let (server, tool, error) = match self.not_offered.get(name) {
                Some(ToolOrigin::Mcp { server, tool }) => (
                    server.clone(),
                    tool.clone(),
                    ToolError::NotOffered { name: name.into() },
                ),
                Some(ToolOrigin::Exploration | ToolOrigin::Caller) => (
                    arguments
                        .get("server")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name.to_owned(),
                    ToolError::NotOffered { name: name.into() },
                ),
                None => (
                    String::new(),
                    name.to_owned(),
                    ToolError::UnknownTool { name: name.into() },
                ),
            };
            let mut record = Self::record(&server, &tool, name, &arguments, caller);
            record.withheld = matches!(error, ToolError::NotOffered { .. });
            let result = Err(error);
            self.report(record, started, result.as_ref());
            return result;
        };
        match origin {
            ToolOrigin::Exploration => {
                let server = arguments
                    .get("server")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let mut record = Self::record(&server, name, name, &arguments, caller);
                let result = if name == LIST_RESOURCES {
                    self.list(&arguments).await
                } else {
                    self.read(&arguments, &mut record).await
                };
                self.report(record, started, result.as_ref());
                result
            }
            ToolOrigin::Mcp { server, tool } => {
                let mut record = Self::record(server, tool, name, &arguments, caller);
                let result = self
                    .call_mcp(name, server, tool, arguments, &mut record)
                    .await;
                self.report(record, started, result.as_ref());
                result
            }
            // The caller runs its own tools; the tool assembly never routes one here.
            ToolOrigin::Caller => Err(ToolError::UnknownTool { name: name.into() }),
        }
    }

    async fn read_for_caller(
        &self,
        server: &str,
        uri: &str,
        origin: CallOrigin,
    ) -> Result<CallerRead, ToolError> {
        self.caller_read(server, uri, origin).await
    }

    async fn call_server_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        caller: CallOrigin,
    ) -> Result<ToolCallResult, ToolError> {
        let same = |o: &ToolOrigin| matches!(o, ToolOrigin::Mcp { server: s, tool: t } if s == server && t == tool);
        let name = self
            .routes
            .iter()
            .chain(self.not_offered.iter())
            .find(|(_, o)| same(o))
            .map(|(n, _)| n.clone());
        if let Some(name) = name {
            return self.call_from(&name, arguments, caller).await;
        }
        // Neither offered nor left out: its server is not bound, or does not list it.
        let started = Instant::now();
        let mut record = Self::record(server, tool, "", &arguments, caller);
        let error = if self.bound.iter().any(|b| b == server) {
            ToolError::UnknownTool {
                name: format!("{server}/{tool}"),
            }
        } else {
            record.withheld = true;
            ToolError::ServerNotBound {
                server: server.to_owned(),
                allowed: self.bound.clone(),
            }
        };
        let result = Err(error);
        self.report(record, started, result.as_ref());
        result
    }
}
