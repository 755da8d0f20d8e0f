//! Fuzz targets, shared by the cargo-fuzz harness (`tests/fuzz`, see
//! `docs/untrusted-content.md`) and the corpus replay in the end-to-end tests. Each
//! takes arbitrary bytes and panics only when an invariant breaks: anything else,
//! however malformed, must come back as a value or an error.
#![allow(clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hostpipe_core::{
    ArgumentValue, ContextBlock, Fence, ModelProfile, ResourceContents, Variables,
};
use hostpipe_stages::convert::{ConvertLimits, Converted, ResourceMeta, convert};

/// A fuzz target: arbitrary bytes in, a panic only for a broken invariant.
pub type Target = fn(&[u8]);

/// The targets by name, for the corpus replay.
pub const TARGETS: [(&str, Target); 4] = [
    ("uri_template", uri_template),
    ("read_result", read_result),
    ("fence", fence),
    ("config", config),
];

/// RFC 6570 expansion: the first line is the template, the rest are values, one per
/// variable in order. A `{name}` (simple) value never adds a `/`.
pub fn uri_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let template = lines.next().unwrap_or_default();
    let Ok(names) = hostpipe_stages::uri_template::variables(template) else {
        return;
    };
    let values: Vec<&str> = lines.collect();
    let arguments: BTreeMap<String, ArgumentValue> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v = values.get(i).copied().unwrap_or("");
            (n.clone(), ArgumentValue::Literal(v.to_owned()))
        })
        .collect();
    let Ok((uri, _)) =
        hostpipe_stages::uri_template::expand(template, &arguments, &Variables::new())
    else {
        return;
    };
    // Only simple expressions (`{name}`, no operator): the template's own slashes are
    // all the URI may have.
    let simple_only = template.split('{').skip(1).all(|e| {
        e.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    if simple_only {
        let literal_slashes: usize = template
            .split('{')
            .enumerate()
            .map(|(i, part)| {
                let literal = if i == 0 {
                    part
                } else {
                    part.split_once('}').map_or("", |(_, rest)| rest)
                };
                literal.matches('/').count()
            })
            .sum();
        if uri.matches('/').count() != literal_slashes {
            panic!("a value added a `/`: {template:?} → {uri:?}");
        }
    }
}

/// A `resources/read` result from the wire (JSON), decoded as the host does, then
/// converted for a model with vision and for one without: no base64 ever reaches a
/// text, and notes stay short.
pub fn read_result(data: &[u8]) {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(contents) = hostpipe_mcp::decode_read_result("fuzz", json) else {
        return;
    };
    let limits = ConvertLimits {
        max_image_pixels: 4_000_000,
        max_image_edge_px: 4096,
        max_image_alloc_bytes: 64 * 1024 * 1024,
    };
    for vision in [true, false] {
        let model = ModelProfile {
            vision,
            ..ModelProfile::default()
        };
        for c in contents.iter().cloned() {
            let blob = match &c {
                ResourceContents::Blob { data, .. } if data.len() >= 12 => Some(data.clone()),
                _ => None,
            };
            let converted = convert(c, &ResourceMeta::default(), &model, &limits);
            match (&converted, blob) {
                (Converted::Fallback { note, .. } | Converted::Refused { note, .. }, _)
                    if note.len() > 2048 =>
                {
                    panic!("a {}-byte fallback note", note.len())
                }
                (Converted::Text(text), Some(bytes)) => {
                    use base64::Engine as _;
                    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
                    if text.contains(&b64[..16]) {
                        panic!("base64 of a blob reached a text");
                    }
                }
                (Converted::Image { .. }, _) if !vision => {
                    panic!("an image for a model without vision")
                }
                _ => {}
            }
        }
    }
}

/// The fence: whatever the text and the attribute values, the block has one opening
/// tag on its first line and exactly one closing tag, at its end.
pub fn fence(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (attr, body) = text.split_once('\u{0}').unwrap_or(("kb://x", &text));
    let Some(f) = Fence::with_nonce("0123456789abcdef") else {
        panic!("a valid nonce was refused");
    };
    let wrapped = f.wrap(&[("server", "kb"), ("uri", attr)], body);
    let close = f.close();
    if !wrapped.ends_with(&close) {
        panic!("the block does not end with its closing tag: {wrapped:?}");
    }
    if wrapped.matches(&close[..close.len() - 1]).count() != 1 {
        panic!("the text closed its fence: {wrapped:?}");
    }
    let first = wrapped.split('\n').next().unwrap_or_default();
    if first.matches('"').count() != 4 || !first.ends_with('>') || first.matches('>').count() != 1 {
        panic!("an attribute value broke the opening tag: {first:?}");
    }
    // The same through the renderer the runners use.
    let block = ContextBlock {
        source: hostpipe_core::BlockSource {
            server: "kb".into(),
            uri: attr.to_owned(),
            template: None,
            scope: hostpipe_core::Scope::Message,
            name: None,
        },
        mime_type: Some(attr.to_owned()),
        body: hostpipe_core::BlockBody::Text {
            text: body.to_owned(),
        },
        treatment: hostpipe_core::Treatment::Whole,
        tokens_before: 0,
        tokens_after: 0,
    };
    let rendered = hostpipe_runners::render::context_text(&[block], false, &f);
    // The preamble names the closing tag once; the block has it once.
    let blocks = rendered.split_once("\n\n").map_or("", |(_, b)| b);
    if blocks.matches(&close[..close.len() - 1]).count() != 1 {
        panic!("the text closed its fence in the rendered context: {rendered:?}");
    }
}

/// Config parsing, then building every pipeline against a host that never connects.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(config) = crate::config::parse(&text, "fuzz.toml") else {
        return;
    };
    let Ok(registry) = crate::registry() else {
        panic!("the registry has conflicts");
    };
    let host = Arc::new(hostpipe_mcp::McpHost::new(
        config.servers.clone(),
        config.host.clone(),
    ));
    let _ = config.build_pipelines(&registry, host, None);
}
