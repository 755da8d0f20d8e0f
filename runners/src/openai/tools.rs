//! What the model gets of a tool: its schema ([`model_schema`]) and its result as the
//! string a `tool` message carries ([`tool_result_text`]).

use hostpipe_core::{
    Fence, ModelProfile, ResourceContents, Tokenizer, ToolCallResult, ToolContent, TruncationSide,
};
use serde_json::Value;

use super::wire::ContentPart;

/// The JSON Schema of a tool as the model API gets it: without the keywords that only
/// describe the schema document (`$schema`, `$id`, `$comment`), which some strict
/// OpenAI-compatible backends reject (a server built with zod-to-json-schema sends
/// `$schema` in every tool). Everything that constrains the arguments stays.
/// Keys of `properties`, `patternProperties`, `$defs` and `definitions` are names, not
/// keywords: an argument called `$id` stays.
pub fn model_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "$id" | "$comment"))
                .map(|(k, v)| {
                    let named = matches!(
                        k.as_str(),
                        "properties" | "patternProperties" | "$defs" | "definitions"
                    );
                    let v = match v {
                        Value::Object(names) if named => Value::Object(
                            names
                                .iter()
                                .map(|(n, s)| (n.clone(), model_schema(s)))
                                .collect(),
                        ),
                        _ => model_schema(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(model_schema).collect()),
        other => other.clone(),
    }
}

/// A tool result as the string the `tool` message carries, plus images for a
/// following user message (vision only). Cut to `max_tokens`.
pub(super) fn tool_result_text(
    result: &ToolCallResult,
    server: Option<&str>,
    fence: &Fence,
    model: &ModelProfile,
    tk: &Tokenizer,
    max_tokens: usize,
) -> (String, Vec<ContentPart>) {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for c in &result.content {
        match c {
            // Text from a server: a leaked nonce cannot open or close a fence in it.
            ToolContent::Text { text } => parts.push(fence.defuse(text)),
            ToolContent::Image { mime_type, data } if model.vision => {
                parts.push(format!(
                    "[image {mime_type}, {} bytes: attached below]",
                    data.len()
                ));
                images.push(ContentPart::image(mime_type, data));
            }
            ToolContent::Image { mime_type, data } => parts.push(format!(
                "[image {mime_type}, {} bytes: not shown, the model has no vision]",
                data.len()
            )),
            ToolContent::Audio { mime_type, data } => parts.push(format!(
                "[audio {mime_type}, {} bytes: not shown]",
                data.len()
            )),
            ToolContent::ResourceLink { resource } => parts.push(format!(
                "[resource link: {} ({}{})]",
                resource.uri,
                resource.name,
                resource
                    .mime_type
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default()
            )),
            ToolContent::Resource { contents } => match contents {
                ResourceContents::Text {
                    uri,
                    mime_type,
                    text,
                } => {
                    // A resource in a tool result is resource text: in the turn's fence.
                    let mut attrs = Vec::new();
                    if let Some(s) = server {
                        attrs.push(("server", s));
                    }
                    attrs.push(("uri", uri.as_str()));
                    if let Some(m) = mime_type.as_deref() {
                        attrs.push(("mime", m));
                    }
                    parts.push(fence.wrap(&attrs, text));
                }
                ResourceContents::Blob {
                    uri,
                    mime_type,
                    data,
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    if model.vision && mime.starts_with("image/") {
                        parts.push(format!("[image resource {uri}: attached below]"));
                        images.push(ContentPart::image(mime, data));
                    } else {
                        parts.push(format!(
                            "[binary resource {uri} ({mime}, {} bytes) not shown]",
                            data.len()
                        ));
                    }
                }
            },
        }
    }
    if parts.is_empty()
        && let Some(s) = &result.structured_content
    {
        parts.push(s.to_string());
    }
    let mut text = parts.join("\n");
    if result.is_error {
        text = format!("Error: {text}");
    }
    match tk.truncate(&text, max_tokens, TruncationSide::Head) {
        Some(t) => text = t.text,
        // Over the room and not even the marker fits: the whole result is left out.
        None if tk.count(&text) > max_tokens => {
            text = format!(
                "[tool result of {} tokens omitted: no room left in the model's context]",
                tk.count(&text)
            );
        }
        None => {}
    }
    (text, images)
}
