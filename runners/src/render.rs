//! How context blocks are rendered for a model, shared by the runners: each block in
//! the turn's fence (`<resource-NONCE …>`, [`hostpipe_core::fence`]) that carries its
//! provenance (server, URI, scope, MIME type, treatment) and that the text cannot close,
//! after a preamble that says the content is data, not instructions.

use hostpipe_core::{BlockBody, ContextBlock, Fence, Treatment, TruncationSide};

/// A short name for a treatment, as the preview and the model see it: `whole`,
/// `head kept, 1200 cut`, `chunked 2/9`, `summarized`, `fallback`.
pub fn treatment_label(t: &Treatment) -> String {
    match t {
        Treatment::Whole => "whole".into(),
        Treatment::Truncated {
            side,
            omitted_tokens,
        } => {
            let side = match side {
                TruncationSide::Head => "head",
                TruncationSide::Tail => "tail",
                TruncationSide::HeadTail => "head+tail",
            };
            format!("{side} kept, {omitted_tokens} cut")
        }
        Treatment::Chunked { kept, total } => format!("chunked {kept}/{total}"),
        Treatment::Summarized => "summarized".into(),
        Treatment::Omitted => "fallback".into(),
    }
}

/// The provenance attributes of a block, in order: server, uri, scope, mime (if
/// known), treatment.
fn attributes(b: &ContextBlock) -> Vec<(&'static str, String)> {
    let mut attrs = vec![
        ("server", b.source.server.clone()),
        ("uri", b.source.uri.clone()),
        ("scope", b.source.scope.as_str().to_owned()),
    ];
    if let Some(m) = &b.mime_type {
        attrs.push(("mime", m.clone()));
    }
    attrs.push(("treatment", treatment_label(&b.treatment)));
    attrs
}

fn borrowed<'a>(attrs: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    attrs.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The opening tag of a block in `fence` (attribute values escaped).
pub fn open_tag(b: &ContextBlock, fence: &Fence) -> String {
    fence.open(&borrowed(&attributes(b)))
}

/// The text blocks (and fallback notes) of `blocks`, each in `fence`, after the fence's
/// preamble; image blocks are named with a note saying they follow as images
/// (`vision`) or are not shown. Empty when there are no blocks.
///
/// The bytes are exactly what the `local` and `dify` runners send and what the preview
/// prints.
pub fn context_text(blocks: &[ContextBlock], vision: bool, fence: &Fence) -> String {
    if blocks.is_empty() {
        return String::new();
    }
    let mut out = fence.preamble();
    out.push('\n');
    for b in blocks {
        let body = match &b.body {
            BlockBody::Text { text } => text.clone(),
            BlockBody::Fallback { note, .. } => note.clone(),
            BlockBody::Image { width, height, .. } => format!(
                "[image {width}×{height} px{}]",
                if vision {
                    ", attached to the user message"
                } else {
                    ", not shown: the model has no vision"
                }
            ),
        };
        out.push('\n');
        out.push_str(&fence.wrap(&borrowed(&attributes(b)), &body));
        out.push('\n');
    }
    out
}

/// The image blocks: (provenance tag in `fence`, MIME type, bytes).
pub fn images<'a>(blocks: &'a [ContextBlock], fence: &Fence) -> Vec<(String, &'a str, &'a [u8])> {
    blocks
        .iter()
        .filter_map(|b| match &b.body {
            BlockBody::Image {
                mime_type, data, ..
            } => Some((open_tag(b, fence), mime_type.as_str(), data.as_slice())),
            _ => None,
        })
        .collect()
}

/// `data:` URL of an image (RFC 2397), as OpenAI's `image_url` parts take it.
pub fn data_url(mime: &str, data: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(data)
    )
}
