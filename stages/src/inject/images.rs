//! The images of the user's message ([`hostpipe_core::UserMessage::images`]): fitted
//! with the resources, as musts at message scope, so that a model with vision gets them
//! within its budget and limits (decoded, checked and scaled as an attached image is)
//! and any other model a note. They are not reads: the trace has a note for each, not
//! a read record.

use hostpipe_core::{BlockSource, ResourceContents, Scope, Turn};

use crate::convert::{ConvertLimits, ResourceMeta, convert};
use crate::fit::{FitOutcome, Item, Strategy};

/// The pseudo-server the message's images are named under in their blocks' fences.
pub(super) const SERVER: &str = "message";

/// The `URI` of the message's image number `n` (from 1).
fn uri(n: usize) -> String {
    format!("message:image/{n}")
}

/// One item per image of the turn's message, converted for the turn's model.
pub(super) fn items(turn: &Turn, limits: &ConvertLimits) -> Vec<Item> {
    turn.message
        .images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let uri = uri(i + 1);
            let meta = ResourceMeta {
                name: Some(format!("image {} of the message", i + 1)),
                description: None,
                listed_mime: Some(image.mime_type.clone()),
            };
            let contents = ResourceContents::Blob {
                uri: uri.clone(),
                mime_type: Some(image.mime_type.clone()),
                data: image.data.clone(),
            };
            Item {
                source: BlockSource {
                    server: SERVER.to_owned(),
                    uri,
                    template: None,
                    scope: Scope::Message,
                    name: meta.name.clone(),
                },
                mime_type: Some(image.mime_type.clone()),
                converted: convert(contents, &meta, &turn.model, limits),
                must: true,
                must_scope: Scope::Message,
                priority: 1.0,
                strategy: Strategy::Whole,
                text_hash: None,
            }
        })
        .collect()
}

/// Takes the images' results (every fitted item from `resources` on) out of
/// `outcome`: their blocks go into the context, and the trace says what became of each.
pub(super) fn finish(turn: &mut Turn, mut outcome: FitOutcome, resources: usize) -> FitOutcome {
    if outcome.fitted.len() <= resources {
        return outcome;
    }
    for (i, f) in outcome.fitted.split_off(resources).into_iter().enumerate() {
        let what = format!("image {} of the message", i + 1);
        match f.block {
            Some(block) => {
                let note = match &block.body {
                    hostpipe_core::BlockBody::Image { width, height, .. } => format!(
                        "{what}: sent with the message ({width}×{height} px, {} tokens)",
                        block.tokens_after
                    ),
                    _ => format!("{what}: not shown to the model; a note says so"),
                };
                turn.trace.note(note);
                if let Some(w) = f.warning {
                    turn.trace.warn(format!("{what}: {w}"));
                }
                turn.context.push(block);
            }
            None => turn.trace.warn(format!(
                "{what} was left out: {}",
                f.reason
                    .unwrap_or_else(|| "it did not fit the budget".to_owned())
            )),
        }
    }
    outcome
}
