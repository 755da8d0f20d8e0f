//! Turning `resources/read` contents into something a model may see, by MIME type.
//!
//! Rules:
//! - text contents (`TextResourceContents`) are text;
//! - a blob (`BlobResourceContents`) is never decoded into text, whatever its MIME type:
//!   the server chose a binary encoding, so the model gets a note instead (a server
//!   that means text sends `text`);
//! - an image blob becomes an image only for a model with vision, within its pixel and
//!   byte limits; otherwise a fallback note with its type, size and dimensions;
//! - any other blob becomes a fallback note. Base64 or raw bytes never reach text.

use hostpipe_core::{FallbackReason, ModelProfile, ResourceContents};

/// What one content item becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Converted {
    /// Text for the model.
    Text(String),
    /// An image for a model with vision.
    Image {
        /// MIME type.
        mime_type: String,
        /// Encoded bytes.
        data: Vec<u8>,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// A note in place of the content.
    Fallback {
        /// Why.
        reason: FallbackReason,
        /// The note.
        note: String,
    },
}

/// Converts one content item for `model`.
pub fn convert(contents: ResourceContents, model: &ModelProfile) -> Converted {
    match contents {
        ResourceContents::Text { text, .. } => Converted::Text(text),
        ResourceContents::Blob {
            uri,
            mime_type,
            data,
        } => {
            let mime = mime_type.unwrap_or_else(|| "application/octet-stream".into());
            if mime.to_ascii_lowercase().starts_with("image/") {
                return image(uri, mime, data, model);
            }
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: format!(
                    "[binary resource {uri} ({mime}, {} bytes) not shown]",
                    data.len()
                ),
            }
        }
    }
}

fn image(uri: String, mime: String, data: Vec<u8>, model: &ModelProfile) -> Converted {
    let dims = image::ImageReader::new(std::io::Cursor::new(&data))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.into_dimensions().ok());
    let Some((width, height)) = dims else {
        return Converted::Fallback {
            reason: FallbackReason::Binary,
            note: format!(
                "[image resource {uri} ({mime}, {} bytes) not shown: not a decodable image]",
                data.len()
            ),
        };
    };
    let why_not = if !model.vision {
        Some("the model has no vision".to_owned())
    } else if width.max(height) > model.max_image_edge_px {
        Some(format!(
            "larger than {} px on its longest edge",
            model.max_image_edge_px
        ))
    } else if data.len() > model.max_image_bytes {
        Some(format!("larger than {} bytes", model.max_image_bytes))
    } else {
        None
    };
    match why_not {
        None => Converted::Image {
            mime_type: mime,
            data,
            width,
            height,
        },
        Some(why) => Converted::Fallback {
            reason: FallbackReason::ImageWithoutVision,
            note: format!(
                "[image resource {uri} ({mime}, {width}×{height} px, {} bytes) not shown: {why}]",
                data.len()
            ),
        },
    }
}

/// Input tokens an image of `width`×`height` px costs with OpenAI's high-detail rule
/// (scale to fit 2048×2048, then the short side to 768; 85 tokens plus 170 per
/// 512-px tile; OpenAI "Images and vision" guide). Used to keep images inside the
/// budget.
pub fn image_tokens(width: u32, height: u32) -> usize {
    let (mut w, mut h) = (f64::from(width.max(1)), f64::from(height.max(1)));
    let fit = (2048.0 / w.max(h)).min(1.0);
    w *= fit;
    h *= fit;
    let short = (768.0 / w.min(h)).min(1.0);
    w *= short;
    h *= short;
    let tiles = ((w / 512.0).ceil() * (h / 512.0).ceil()) as usize;
    85 + 170 * tiles
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let img = image::RgbImage::new(w, h);
        let _ = img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png);
        out
    }

    fn blob(mime: &str, data: Vec<u8>) -> ResourceContents {
        ResourceContents::Blob {
            uri: "x://b".into(),
            mime_type: Some(mime.into()),
            data,
        }
    }

    #[test]
    fn text_blobs_are_not_decoded() {
        let c = convert(
            blob("text/plain", b"hello".to_vec()),
            &ModelProfile::default(),
        );
        assert_eq!(
            c,
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: "[binary resource x://b (text/plain, 5 bytes) not shown]".into()
            }
        );
    }

    #[test]
    fn binary_blobs_become_notes_without_their_bytes() {
        let c = convert(
            blob("application/octet-stream", vec![0xde, 0xad, 0xbe, 0xef]),
            &ModelProfile::default(),
        );
        assert_eq!(
            c,
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: "[binary resource x://b (application/octet-stream, 4 bytes) not shown]"
                    .into()
            }
        );
    }

    #[test]
    fn images_follow_vision() {
        let with = ModelProfile::default();
        assert!(matches!(
            convert(blob("image/png", png(4, 3)), &with),
            Converted::Image {
                width: 4,
                height: 3,
                ..
            }
        ));
        let without = ModelProfile {
            vision: false,
            ..ModelProfile::default()
        };
        match convert(blob("image/png", png(4, 3)), &without) {
            Converted::Fallback { reason, note } => {
                assert_eq!(reason, FallbackReason::ImageWithoutVision);
                assert!(
                    note.contains("4×3 px") && note.contains("no vision"),
                    "{note}"
                );
            }
            other => unreachable!("{other:?}"),
        }
    }

    #[test]
    fn image_tokens_follow_openai_tiles() {
        // OpenAI's worked examples: 1024×1024 → 765 tokens; 2048×4096 → 1105 tokens.
        assert_eq!(image_tokens(1024, 1024), 765);
        assert_eq!(image_tokens(2048, 4096), 1105);
    }
}
