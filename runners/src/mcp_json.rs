//! MCP results in their wire shape (MCP spec 2025-11-25, "Tools" `CallToolResult` and
//! "Prompts" `GetPromptResult`): what the HTTP API's tool and prompt routes and the
//! remote runner's tool endpoint (protocol v2) answer, so a caller that knows MCP reads
//! them as it would a server's own answer.

use base64::Engine as _;
use hostpipe_core::{PromptResult, ResourceContents, Role, ToolCallResult, ToolContent, ToolError};
use serde_json::{Map, Value, json};

/// One content block (`TextContent`, `ImageContent`, `AudioContent`, `ResourceLink`,
/// `EmbeddedResource`); binary data as base64 (RFC 4648, standard alphabet).
pub fn content_block(content: &ToolContent) -> Value {
    let b64 = |data: &[u8]| base64::engine::general_purpose::STANDARD.encode(data);
    match content {
        ToolContent::Text { text } => json!({"type": "text", "text": text}),
        ToolContent::Image { mime_type, data } => {
            json!({"type": "image", "mimeType": mime_type, "data": b64(data)})
        }
        ToolContent::Audio { mime_type, data } => {
            json!({"type": "audio", "mimeType": mime_type, "data": b64(data)})
        }
        ToolContent::ResourceLink { resource } => {
            let mut link = Map::new();
            link.insert("type".into(), "resource_link".into());
            link.insert("uri".into(), resource.uri.clone().into());
            link.insert("name".into(), resource.name.clone().into());
            for (key, value) in [
                ("title", &resource.title),
                ("description", &resource.description),
                ("mimeType", &resource.mime_type),
            ] {
                if let Some(v) = value {
                    link.insert(key.into(), v.clone().into());
                }
            }
            if let Some(size) = resource.size {
                link.insert("size".into(), size.into());
            }
            Value::Object(link)
        }
        ToolContent::Resource { contents } => {
            let mut resource = Map::new();
            resource.insert("uri".into(), contents.uri().into());
            if let Some(m) = contents.mime_type() {
                resource.insert("mimeType".into(), m.into());
            }
            match contents {
                ResourceContents::Text { text, .. } => {
                    resource.insert("text".into(), text.clone().into());
                }
                ResourceContents::Blob { data, .. } => {
                    resource.insert("blob".into(), b64(data).into());
                }
            }
            json!({"type": "resource", "resource": resource})
        }
    }
}

/// A `CallToolResult`: `{"content": [...], "structuredContent"?: {...}, "isError": bool}`.
pub fn call_tool_result(result: &ToolCallResult) -> Value {
    let mut out = Map::new();
    out.insert(
        "content".into(),
        result.content.iter().map(content_block).collect(),
    );
    if let Some(s) = &result.structured_content {
        out.insert("structuredContent".into(), s.clone());
    }
    out.insert("isError".into(), result.is_error.into());
    Value::Object(out)
}

/// A `GetPromptResult`: `{"description"?: "...", "messages": [{"role", "content"}]}`.
pub fn get_prompt_result(result: &PromptResult) -> Value {
    let mut out = Map::new();
    if let Some(d) = &result.description {
        out.insert("description".into(), d.clone().into());
    }
    out.insert(
        "messages".into(),
        result
            .messages
            .iter()
            .map(|m| {
                json!({
                    "role": match m.role { Role::User => "user", Role::Assistant => "assistant" },
                    "content": content_block(&m.content),
                })
            })
            .collect(),
    );
    Value::Object(out)
}

/// Why a tool call was not made, as an HTTP status and a stable error code: 404
/// `unknown_tool`, 403 `tool_not_offered`, 409 `server_not_bound`, 400
/// `invalid_arguments`; a failed MCP request is `None` (the caller maps its
/// [`hostpipe_core::SourceError`] as for any other MCP request).
pub fn tool_error_status(error: &ToolError) -> Option<(u16, &'static str)> {
    match error {
        ToolError::UnknownTool { .. } => Some((404, "unknown_tool")),
        ToolError::NotOffered { .. } => Some((403, "tool_not_offered")),
        ToolError::ServerNotBound { .. } => Some((409, "server_not_bound")),
        ToolError::InvalidArguments { .. } => Some((400, "invalid_arguments")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use hostpipe_core::Resource;

    use super::*;

    #[test]
    fn results_have_the_spec_shape() {
        let result = ToolCallResult {
            content: vec![
                ToolContent::Text { text: "hi".into() },
                ToolContent::Image {
                    mime_type: "image/png".into(),
                    data: vec![1, 2, 3],
                },
                ToolContent::Resource {
                    contents: ResourceContents::Blob {
                        uri: "x://b".into(),
                        mime_type: None,
                        data: b"ab".to_vec(),
                    },
                },
                ToolContent::ResourceLink {
                    resource: Resource {
                        uri: "x://l".into(),
                        name: "l".into(),
                        title: None,
                        description: Some("a link".into()),
                        mime_type: None,
                        size: Some(7),
                        annotations: None,
                    },
                },
            ],
            structured_content: None,
            is_error: false,
        };
        assert_eq!(
            call_tool_result(&result),
            json!({"content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "mimeType": "image/png", "data": "AQID"},
                {"type": "resource", "resource": {"uri": "x://b", "blob": "YWI="}},
                {"type": "resource_link", "uri": "x://l", "name": "l", "description": "a link", "size": 7}
            ], "isError": false})
        );
    }
}
