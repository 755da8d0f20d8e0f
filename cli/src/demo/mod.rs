//! The embedded demo MCP server (`hostpipe demo-server`), written with rmcp and served
//! over stdio. It is the default pipeline's server and a realistic peer for tests.
//!
//! Resources:
//! - `demo://docs/handbook.md`, `demo://docs/deployment.md`,
//!   `demo://docs/incident-runbook.md`: markdown documents (2–4 KB each);
//! - `demo://config/app.json`: the application config (JSON);
//! - `demo://images/logo.png`: a 64×64 PNG, made at start-up;
//! - `demo://data/sample.bin`: 2 KiB of binary data (`application/octet-stream`).
//!
//! Resource template `demo://docs/{topic}` (one of `handbook`, `deployment`,
//! `incident-runbook`, with or without `.md`); prompt `summarize_doc` (argument
//! `topic`); tool `search_docs` (argument `query`).

use std::sync::Arc;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Reference, Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

const DOCS: [(&str, &str, &str); 3] = [
    (
        "handbook",
        "Support team handbook",
        include_str!("docs/handbook.md"),
    ),
    (
        "deployment",
        "Deployment notes",
        include_str!("docs/deployment.md"),
    ),
    (
        "incident-runbook",
        "Incident runbook",
        include_str!("docs/incident-runbook.md"),
    ),
];

const CONFIG_JSON: &str = r#"{
  "service": "acme-assistant",
  "version": "2026.11.3",
  "regions": {
    "eu-west": { "model": "gpt-4o", "vision": true, "max_context_tokens": 8000 },
    "us-east": { "model": "gpt-4o", "vision": true, "max_context_tokens": 8000 },
    "ap-east": { "model": "qwen2.5-72b", "vision": false, "max_context_tokens": 4000, "beta": true }
  },
  "features": {
    "resource_context": true,
    "image_answers": true,
    "handover_on_refund": true
  },
  "mcp": {
    "request_timeout_ms": 10000,
    "servers": ["kb", "crm", "status"]
  },
  "support_hours_utc": { "early": "07:00-15:00", "late": "15:00-23:00" }
}
"#;

/// The demo server. Cheap to clone.
#[derive(Clone)]
pub struct DemoServer {
    logo_png: Arc<Vec<u8>>,
    sample_bin: Arc<Vec<u8>>,
    /// Speak 2026-07-28 only: `initialize` is refused (rmcp answers it with an error
    /// naming the supported versions), as by a server built for that revision alone.
    modern_only: bool,
}

impl Default for DemoServer {
    fn default() -> Self {
        Self::new()
    }
}

impl DemoServer {
    /// A server with its PNG and binary sample made.
    pub fn new() -> Self {
        Self {
            logo_png: Arc::new(logo_png()),
            sample_bin: Arc::new(
                (0..2048u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                    .collect(),
            ),
            modern_only: false,
        }
    }

    /// The same server, speaking MCP 2026-07-28 only (`hostpipe demo-server --protocol
    /// 2026-07-28`).
    #[must_use]
    pub fn modern_only(mut self) -> Self {
        self.modern_only = true;
        self
    }

    fn resources(&self) -> Vec<Resource> {
        let mut out: Vec<Resource> = DOCS
            .iter()
            .map(|(slug, title, text)| {
                Resource::new(format!("demo://docs/{slug}.md"), format!("{slug}.md"))
                    .with_title(*title)
                    .with_mime_type("text/markdown")
                    .with_size(text.len() as u64)
            })
            .collect();
        out.push(
            Resource::new("demo://config/app.json", "app.json")
                .with_title("Application config")
                .with_mime_type("application/json")
                .with_size(CONFIG_JSON.len() as u64),
        );
        out.push(
            Resource::new("demo://images/logo.png", "logo.png")
                .with_title("Acme logo")
                .with_mime_type("image/png")
                .with_size(self.logo_png.len() as u64),
        );
        out.push(
            Resource::new("demo://data/sample.bin", "sample.bin")
                .with_title("Binary sample")
                .with_mime_type("application/octet-stream")
                .with_size(self.sample_bin.len() as u64),
        );
        out
    }

    fn read(&self, uri: &str) -> Option<ResourceContents> {
        let b64 = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
        if let Some(rest) = uri.strip_prefix("demo://docs/") {
            let slug = rest.strip_suffix(".md").unwrap_or(rest);
            return DOCS
                .iter()
                .find(|(s, _, _)| *s == slug)
                .map(|(_, _, text)| {
                    ResourceContents::text(*text, uri).with_mime_type("text/markdown")
                });
        }
        match uri {
            "demo://config/app.json" => {
                Some(ResourceContents::text(CONFIG_JSON, uri).with_mime_type("application/json"))
            }
            "demo://images/logo.png" => {
                Some(ResourceContents::blob(b64(&self.logo_png), uri).with_mime_type("image/png"))
            }
            "demo://data/sample.bin" => Some(
                ResourceContents::blob(b64(&self.sample_bin), uri)
                    .with_mime_type("application/octet-stream"),
            ),
            _ => None,
        }
    }
}

fn logo_png() -> Vec<u8> {
    let img = image::RgbImage::from_fn(64, 64, |x, y| {
        let inside = (x as i32 - 32).pow(2) + (y as i32 - 32).pow(2) < 24 * 24;
        if inside {
            image::Rgb([230, 80, 30])
        } else {
            image::Rgb([(x * 4) as u8, (y * 4) as u8, 200])
        }
    });
    let mut out = Vec::new();
    if let Err(e) = img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png) {
        tracing::error!(error = %e, "cannot encode the demo PNG");
    }
    out
}

fn search(query: &str) -> String {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut hits = Vec::new();
    for (slug, _, text) in DOCS {
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if !words.is_empty() && words.iter().any(|w| lower.contains(w.as_str())) {
                hits.push(format!("demo://docs/{slug}.md:{}: {}", n + 1, line.trim()));
            }
        }
    }
    if hits.is_empty() {
        format!("no lines match `{query}`")
    } else {
        hits.truncate(20);
        hits.join("\n")
    }
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_prompts()
                .enable_completions()
                .enable_tools()
                .build(),
        )
        .with_server_info(Implementation::new(
            "hostpipe-demo",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Acme support documents, config and samples for hostpipe's demo pipeline.",
        )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.modern_only {
            std::borrow::Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("demo://docs/{topic}", "doc")
                .with_title("Document by topic")
                .with_description("One of: handbook, deployment, incident-runbook")
                .with_mime_type("text/markdown"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.read(&request.uri) {
            Some(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            None => Err(ErrorData::resource_not_found(
                format!("no resource `{}`", request.uri),
                Some(serde_json::json!({ "uri": request.uri })),
            )),
        }
    }

    /// Completes `topic` of the template `demo://docs/{topic}` and of the prompt
    /// `summarize_doc`: the document slugs that start with the value.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let known = match &request.r#ref {
            Reference::Resource(r) => r.uri == "demo://docs/{topic}",
            Reference::Prompt(p) => p.name == "summarize_doc",
            _ => false,
        };
        let values: Vec<String> = if known && request.argument.name == "topic" {
            DOCS.iter()
                .map(|(slug, _, _)| (*slug).to_owned())
                .filter(|slug| slug.starts_with(&request.argument.value))
                .collect()
        } else {
            Vec::new()
        };
        let info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "summarize_doc",
            Some("Summarize one of the demo documents"),
            Some(vec![
                PromptArgument::new("topic")
                    .with_description("handbook, deployment or incident-runbook")
                    .with_required(true),
            ]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "summarize_doc" {
            return Err(ErrorData::invalid_params(
                format!("no prompt `{}`", request.name),
                None,
            ));
        }
        let topic = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("topic"))
            .and_then(|v| v.as_str())
            .ok_or_else(|| ErrorData::invalid_params("argument `topic` is required", None))?;
        let uri = format!("demo://docs/{topic}.md");
        let contents = self
            .read(&uri)
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown topic `{topic}`"), None))?;
        Ok(GetPromptResult::new(vec![
            PromptMessage::new_text(
                Role::User,
                format!("Summarize the document {uri} in five bullet points."),
            ),
            PromptMessage::new(Role::User, ContentBlock::resource(contents)),
        ])
        .into())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": { "query": { "type": "string", "description": "Words to look for" } },
            "required": ["query"]
        });
        let schema = match schema {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "search_docs",
            "Search the demo documents; returns matching lines with their URI and line number.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "search_docs" {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`", request.name),
                None,
            ));
        }
        let query = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("query"))
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                ErrorData::invalid_params("argument `query` (a string) is required", None)
            })?;
        Ok(CallToolResult::success(vec![ContentBlock::text(search(query))]).into())
    }
}

/// Serves the demo server on stdin/stdout until the client disconnects.
///
/// # Errors
/// When the transport fails to start.
pub async fn serve_stdio(server: DemoServer) -> anyhow::Result<()> {
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_resource_reads() {
        let s = DemoServer::new();
        for r in s.resources() {
            assert!(s.read(&r.uri).is_some(), "{}", r.uri);
        }
        assert!(s.read("demo://docs/deployment").is_some());
        assert!(s.read("demo://docs/nope").is_none());
    }
}
