//! Conversions from rmcp's model types to hostpipe's, at the edge of this crate.

use base64::Engine as _;
use hostpipe_core::{
    Annotations, Prompt, PromptArgument, Resource, ResourceContents, ResourceTemplate, Role,
    ServerCapabilities, SourceError, Tool, ToolCallResult, ToolContent,
};
use rmcp::model as m;

pub(crate) fn capabilities(c: &m::ServerCapabilities) -> ServerCapabilities {
    ServerCapabilities {
        tools: c.tools.is_some(),
        resources: c.resources.is_some(),
        resources_subscribe: c
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false),
        resources_list_changed: c
            .resources
            .as_ref()
            .and_then(|r| r.list_changed)
            .unwrap_or(false),
        prompts: c.prompts.is_some(),
        completions: c.completions.is_some(),
        logging: c.logging.is_some(),
    }
}

fn annotations(a: Option<m::Annotations>) -> Option<Annotations> {
    a.map(|a| Annotations {
        audience: a.audience.map(|roles| {
            roles
                .into_iter()
                .map(|r| match r {
                    m::Role::User => Role::User,
                    _ => Role::Assistant,
                })
                .collect()
        }),
        priority: a.priority,
        last_modified: a.last_modified,
    })
}

pub(crate) fn resource(r: m::Resource) -> Resource {
    Resource {
        uri: r.uri,
        name: r.name,
        title: r.title,
        description: r.description,
        mime_type: r.mime_type,
        size: r.size,
        annotations: annotations(r.annotations),
    }
}

pub(crate) fn resource_template(t: m::ResourceTemplate) -> ResourceTemplate {
    ResourceTemplate {
        uri_template: t.uri_template,
        name: t.name,
        title: t.title,
        description: t.description,
        mime_type: t.mime_type,
        annotations: annotations(t.annotations),
    }
}

pub(crate) fn tool(t: m::Tool) -> Tool {
    Tool {
        name: t.name.into_owned(),
        title: t.title,
        description: t.description.map(|d| d.into_owned()),
        input_schema: serde_json::Value::Object((*t.input_schema).clone()),
        annotations: t
            .annotations
            .map(|a| hostpipe_core::ToolHints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
            })
            .unwrap_or_default(),
    }
}

pub(crate) fn prompt(p: m::Prompt) -> Prompt {
    Prompt {
        name: p.name,
        title: p.title,
        description: p.description,
        arguments: p
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|a| PromptArgument {
                name: a.name,
                description: a.description,
                required: a.required.unwrap_or(false),
            })
            .collect(),
    }
}

fn decode_base64(
    server: &str,
    operation: &str,
    what: &str,
    data: &str,
) -> Result<Vec<u8>, SourceError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| SourceError::InvalidResponse {
            server: server.to_owned(),
            operation: operation.to_owned(),
            message: format!("{what} is not valid base64: {e}"),
        })
}

pub(crate) fn contents(
    server: &str,
    c: m::ResourceContents,
) -> Result<ResourceContents, SourceError> {
    Ok(match c {
        m::ResourceContents::TextResourceContents {
            uri,
            mime_type,
            text,
            ..
        } => ResourceContents::Text {
            uri,
            mime_type,
            text,
        },
        m::ResourceContents::BlobResourceContents {
            uri,
            mime_type,
            blob,
            ..
        } => {
            let data = decode_base64(server, "resources/read", &format!("blob of `{uri}`"), &blob)?;
            ResourceContents::Blob {
                uri,
                mime_type,
                data,
            }
        }
        other => {
            return Err(SourceError::InvalidResponse {
                server: server.to_owned(),
                operation: "resources/read".into(),
                message: format!("unsupported resource contents: {other:?}"),
            });
        }
    })
}

/// One MCP `ContentBlock` (of a tool result or a prompt message), base64 decoded.
fn content_block(
    server: &str,
    op: &str,
    block: m::ContentBlock,
) -> Result<ToolContent, SourceError> {
    Ok(match block {
        m::ContentBlock::Text(t) => ToolContent::Text { text: t.text },
        m::ContentBlock::Image(i) => ToolContent::Image {
            data: decode_base64(server, op, "image data", &i.data)?,
            mime_type: i.mime_type,
        },
        m::ContentBlock::Audio(a) => ToolContent::Audio {
            data: decode_base64(server, op, "audio data", &a.data)?,
            mime_type: a.mime_type,
        },
        m::ContentBlock::ResourceLink(r) => ToolContent::ResourceLink {
            resource: resource(r),
        },
        m::ContentBlock::Resource(e) => ToolContent::Resource {
            contents: contents(server, e.resource)?,
        },
        other => {
            return Err(SourceError::InvalidResponse {
                server: server.to_owned(),
                operation: op.into(),
                message: format!("unsupported content block: {other:?}"),
            });
        }
    })
}

pub(crate) fn tool_result(
    server: &str,
    r: m::CallToolResult,
) -> Result<ToolCallResult, SourceError> {
    let content = r
        .content
        .into_iter()
        .map(|b| content_block(server, "tools/call", b))
        .collect::<Result<_, _>>()?;
    Ok(ToolCallResult {
        content,
        structured_content: r.structured_content,
        is_error: r.is_error.unwrap_or(false),
    })
}

pub(crate) fn prompt_result(
    server: &str,
    r: m::GetPromptResult,
) -> Result<hostpipe_core::PromptResult, SourceError> {
    let messages = r
        .messages
        .into_iter()
        .map(|msg| {
            Ok(hostpipe_core::PromptMessage {
                role: match msg.role {
                    m::Role::Assistant => hostpipe_core::Role::Assistant,
                    _ => hostpipe_core::Role::User,
                },
                content: content_block(server, "prompts/get", msg.content)?,
            })
        })
        .collect::<Result<_, SourceError>>()?;
    Ok(hostpipe_core::PromptResult {
        description: r.description,
        messages,
    })
}

/// An error's message with the root cause it wraps, without the layers of generic
/// wrappers in between: `error sending request … (Connection refused (os error 111))`.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut root = e;
    while let Some(next) = root.source() {
        root = next;
    }
    let top = e.to_string();
    if std::ptr::addr_eq(root, e) {
        return top;
    }
    // rmcp's transport errors print type names; keep only the root cause then.
    let top = if top.contains("rmcp::") || top.len() > 200 {
        String::new()
    } else {
        top
    };
    let root = root.to_string();
    if top.is_empty() || top.contains(&root) {
        root
    } else {
        format!("{top}: {root}")
    }
}

/// [`describe`] for a failed handshake; rmcp's transport variant keeps its cause in a
/// field that is not the error's `source`.
pub(crate) fn describe_init(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{} (while trying to {context})", describe(error))
        }
        other => describe(other),
    }
}

/// A JSON-RPC error's message, with what the 2026-07-28 codes mean and carry (spec
/// 2026-07-28, "Base protocol": -32021 names the client capabilities the server
/// requires in `data.requiredCapabilities`, -32022 the versions it supports in
/// `data.supported`).
fn protocol_message(data: &rmcp::model::ErrorData) -> String {
    let field = |key: &str| {
        data.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map_or_else(|| "?".to_owned(), ToString::to_string)
    };
    // The TypeScript SDK's `McpError` puts `MCP error CODE: ` before its message, and
    // servers send that text on: the code is said once, by `SourceError::Protocol`.
    let message = data
        .message
        .strip_prefix(&format!("MCP error {}: ", data.code.0))
        .unwrap_or(&data.message);
    match data.code.0 {
        -32021 => format!(
            "{message} (the server requires a client capability hostpipe does not declare: {})",
            field("requiredCapabilities")
        ),
        -32022 => format!(
            "{message} (the server does not speak this protocol version; it speaks {}: set the server's `protocol`)",
            field("supported")
        ),
        _ => message.to_owned(),
    }
}

pub(crate) fn service_error(server: &str, operation: &str, e: rmcp::ServiceError) -> SourceError {
    let server = server.to_owned();
    let operation = operation.to_owned();
    match e {
        rmcp::ServiceError::McpError(data) => SourceError::Protocol {
            server,
            operation,
            code: data.code.0,
            message: protocol_message(&data),
        },
        rmcp::ServiceError::Timeout { timeout } => SourceError::Timeout {
            server,
            operation,
            timeout,
        },
        rmcp::ServiceError::UnexpectedResponse => SourceError::InvalidResponse {
            server,
            operation,
            message: "the result does not have the shape this method requires (a 2026-07-28 server may have asked for input, `input_required`, which hostpipe does not answer yet)".into(),
        },
        rmcp::ServiceError::InputRequiredRoundsExceeded { max_rounds } => {
            SourceError::InvalidResponse {
                server,
                operation,
                message: format!(
                    "the server still asked for input (`input_required`) after {max_rounds} rounds"
                ),
            }
        }
        other => SourceError::Transport {
            server,
            operation,
            message: if matches!(other, rmcp::ServiceError::TransportClosed) {
                "the connection closed (the server exited or dropped the session)".into()
            } else {
                describe(&other)
            },
            source: std::sync::Arc::new(other),
        },
    }
}

/// A `resources/read` result as it arrives on the wire (the JSON of its `result`),
/// converted as the host converts it: blobs base64-decoded, unknown kinds refused.
///
/// # Errors
/// [`SourceError::InvalidResponse`] for JSON that is not a read result, invalid base64,
/// or unsupported contents.
pub fn decode_read_result(server: &str, json: &str) -> Result<Vec<ResourceContents>, SourceError> {
    let result: m::ReadResourceResult =
        serde_json::from_str(json).map_err(|e| SourceError::InvalidResponse {
            server: server.to_owned(),
            operation: "resources/read".into(),
            message: format!("not a read result: {e}"),
        })?;
    result
        .contents
        .into_iter()
        .map(|c| contents(server, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: i32, data: serde_json::Value) -> rmcp::ServiceError {
        rmcp::ServiceError::McpError(rmcp::model::ErrorData::new(
            rmcp::model::ErrorCode(code),
            "refused",
            Some(data),
        ))
    }

    #[test]
    fn the_2026_07_28_errors_say_what_they_carry() {
        let e = service_error(
            "s",
            "tools/call",
            error(
                -32021,
                serde_json::json!({"requiredCapabilities": {"elicitation": {}}}),
            ),
        );
        assert_eq!(
            e.to_string(),
            "MCP server `s`: tools/call failed with JSON-RPC error -32021: refused (the server requires a client capability hostpipe does not declare: {\"elicitation\":{}})"
        );
        let e = service_error(
            "s",
            "resources/read",
            error(-32022, serde_json::json!({"supported": ["2026-07-28"]})),
        );
        assert!(
            e.to_string().ends_with(
                "refused (the server does not speak this protocol version; it speaks [\"2026-07-28\"]: set the server's `protocol`)"
            ),
            "{e}"
        );
        let e = service_error(
            "s",
            "resources/read",
            error(-32602, serde_json::json!(null)),
        );
        assert!(e.is_not_found());
    }

    #[test]
    fn the_typescript_sdks_prefix_is_not_said_twice() {
        let e = service_error(
            "everything",
            "prompts/get",
            rmcp::ServiceError::McpError(rmcp::model::ErrorData::new(
                rmcp::model::ErrorCode(-32602),
                "MCP error -32602: Invalid arguments for prompt args-prompt",
                None,
            )),
        );
        assert_eq!(
            e.to_string(),
            "MCP server `everything`: prompts/get failed with JSON-RPC error -32602: Invalid arguments for prompt args-prompt"
        );
        // Another code's prefix is the server's own text, kept.
        let e = service_error(
            "s",
            "tools/call",
            rmcp::ServiceError::McpError(rmcp::model::ErrorData::new(
                rmcp::model::ErrorCode(-32603),
                "MCP error -32602: x",
                None,
            )),
        );
        assert!(
            e.to_string().ends_with("-32603: MCP error -32602: x"),
            "{e}"
        );
    }
}
