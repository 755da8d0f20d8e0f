//! A fake [`McpSource`] for tests: servers that serve text and blob resources and
//! templates from memory, fail reads on demand, and remember which reads reached them.
//!
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use hostpipe_core::{
    Annotations, McpSource, Prompt, Resource, ResourceContents, ResourceRead, ResourceTemplate,
    ServerCapabilities, ServerInfo, ServerStatus, SourceError, Tool, ToolCallResult,
};

/// Serves a read of a URI a template matches: the contents, or `None` when it has none.
type TemplateReader = Arc<dyn Fn(&str) -> Option<ResourceContents> + Send + Sync>;

/// One fake server.
#[derive(Default)]
struct Server {
    resources: Vec<Resource>,
    templates: Vec<(ResourceTemplate, TemplateReader)>,
    contents: BTreeMap<String, Vec<ResourceContents>>,
    /// URI → (JSON-RPC code, message) of a read that fails.
    failing: BTreeMap<String, (i32, String)>,
}

/// A fake MCP host (see the module docs). Build it with the `with_*` methods, then
/// share it as an `Arc<dyn McpSource>`.
#[derive(Default)]
pub struct FakeSource {
    servers: BTreeMap<String, Server>,
    reads: Mutex<Vec<(String, String)>>,
}

impl FakeSource {
    /// No servers yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&mut self, name: &str) -> &mut Server {
        self.servers.entry(name.to_owned()).or_default()
    }

    fn listed(uri: &str, mime: &str, size: usize) -> Resource {
        Resource {
            uri: uri.to_owned(),
            name: uri.rsplit('/').next().unwrap_or(uri).to_owned(),
            title: None,
            description: None,
            mime_type: Some(mime.to_owned()),
            size: Some(size as u64),
            annotations: None,
        }
    }

    /// A server with no resources (it answers every list with nothing).
    pub fn with_server(mut self, server: &str) -> Self {
        self.entry(server);
        self
    }

    /// Lists and serves a text resource.
    pub fn with_text(mut self, server: &str, uri: &str, mime: &str, text: &str) -> Self {
        let s = self.entry(server);
        s.resources.push(Self::listed(uri, mime, text.len()));
        s.contents.insert(
            uri.to_owned(),
            vec![ResourceContents::Text {
                uri: uri.to_owned(),
                mime_type: Some(mime.to_owned()),
                text: text.to_owned(),
            }],
        );
        self
    }

    /// Lists and serves a blob resource (bytes as they are, e.g. a PNG).
    pub fn with_blob(mut self, server: &str, uri: &str, mime: &str, data: Vec<u8>) -> Self {
        let s = self.entry(server);
        s.resources.push(Self::listed(uri, mime, data.len()));
        s.contents.insert(
            uri.to_owned(),
            vec![ResourceContents::Blob {
                uri: uri.to_owned(),
                mime_type: Some(mime.to_owned()),
                data,
            }],
        );
        self
    }

    /// Serves `contents` for a read of `uri` without listing it (e.g. a read that
    /// answers with items under other URIs).
    pub fn with_contents(
        mut self,
        server: &str,
        uri: &str,
        contents: Vec<ResourceContents>,
    ) -> Self {
        self.entry(server).contents.insert(uri.to_owned(), contents);
        self
    }

    /// Sets the annotations of the listed resource `uri`.
    pub fn with_annotations(mut self, server: &str, uri: &str, a: Annotations) -> Self {
        if let Some(r) = self
            .entry(server)
            .resources
            .iter_mut()
            .find(|r| r.uri == uri)
        {
            r.annotations = Some(a);
        }
        self
    }

    /// Lists a resource template; `read` serves the URIs it matches.
    pub fn with_template(
        mut self,
        server: &str,
        uri_template: &str,
        mime: &str,
        read: impl Fn(&str) -> Option<ResourceContents> + Send + Sync + 'static,
    ) -> Self {
        let t = ResourceTemplate {
            uri_template: uri_template.to_owned(),
            name: uri_template.to_owned(),
            title: None,
            description: None,
            mime_type: Some(mime.to_owned()),
            annotations: None,
        };
        self.entry(server).templates.push((t, Arc::new(read)));
        self
    }

    /// Lists `uri` and fails every read of it with JSON-RPC error `code` (e.g. -32603
    /// internal error, -32002 resource not found).
    pub fn with_failing(mut self, server: &str, uri: &str, code: i32, message: &str) -> Self {
        let s = self.entry(server);
        s.resources.push(Self::listed(uri, "text/plain", 0));
        s.failing.insert(uri.to_owned(), (code, message.to_owned()));
        self
    }

    /// The reads that reached a server, as (server, URI), in order.
    pub fn reads(&self) -> Vec<(String, String)> {
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn get(&self, server: &str) -> Result<&Server, SourceError> {
        self.servers
            .get(server)
            .ok_or_else(|| SourceError::UnknownServer {
                server: server.to_owned(),
                known: self.servers.keys().cloned().collect(),
            })
    }
}

#[async_trait]
impl McpSource for FakeSource {
    fn servers(&self) -> Vec<ServerInfo> {
        self.servers
            .keys()
            .map(|name| ServerInfo {
                name: name.clone(),
                status: ServerStatus::Connected,
                capabilities: ServerCapabilities {
                    resources: true,
                    ..ServerCapabilities::default()
                },
                protocol_version: None,
                implementation: None,
                instructions: None,
                counts: Default::default(),
                warnings: Vec::new(),
                stderr_tail: Vec::new(),
            })
            .collect()
    }

    async fn list_resources(&self, server: &str) -> Result<Arc<[Resource]>, SourceError> {
        Ok(self.get(server)?.resources.clone().into())
    }

    async fn list_resource_templates(
        &self,
        server: &str,
    ) -> Result<Arc<[ResourceTemplate]>, SourceError> {
        Ok(self
            .get(server)?
            .templates
            .iter()
            .map(|(t, _)| t.clone())
            .collect::<Vec<_>>()
            .into())
    }

    async fn list_tools(&self, server: &str) -> Result<Arc<[Tool]>, SourceError> {
        self.get(server)?;
        Ok(Vec::new().into())
    }

    async fn list_prompts(&self, server: &str) -> Result<Arc<[Prompt]>, SourceError> {
        self.get(server)?;
        Ok(Vec::new().into())
    }

    async fn read_resource(&self, server: &str, uri: &str) -> Result<ResourceRead, SourceError> {
        let s = self.get(server)?;
        self.reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((server.to_owned(), uri.to_owned()));
        let protocol = |code: i32, message: &str| SourceError::Protocol {
            server: server.to_owned(),
            operation: "resources/read".into(),
            code,
            message: message.to_owned(),
        };
        if let Some((code, message)) = s.failing.get(uri) {
            return Err(protocol(*code, message));
        }
        if let Some(contents) = s.contents.get(uri) {
            return Ok(ResourceRead::fresh(contents.clone()));
        }
        s.templates
            .iter()
            .find_map(|(_, read)| read(uri))
            .map(|c| ResourceRead::fresh(vec![c]))
            .ok_or_else(|| protocol(-32002, &format!("resource not found: {uri}")))
    }

    async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        _arguments: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<ToolCallResult, SourceError> {
        self.get(server)?;
        Err(SourceError::Protocol {
            server: server.to_owned(),
            operation: "tools/call".into(),
            code: -32602,
            message: format!("unknown tool: {tool}"),
        })
    }
}
