//! Turning `resources/read` contents into something a model may see, by MIME type.
//!
//! Rules:
//! - text contents (`TextResourceContents`) are text;
//! - a blob (`BlobResourceContents`) is text when its MIME type is textual (`text/*`,
//!   JSON, XML, YAML, CSV, TOML, JavaScript, `+json`/`+xml`), or when no MIME type is
//!   given anywhere and the bytes are valid UTF-8. The MIME type the read result gives
//!   wins over the listing's or the template's declaration: it describes the bytes that
//!   came (server-everything's blob template declares `application/octet-stream` and
//!   sends `text/plain` blobs: text);
//! - an image blob (`image/png`, `image/jpeg`, `image/gif`, `image/webp`) is decoded
//!   under explicit limits (a decompression bomb is refused before decoding); for a model
//!   with vision it is downscaled to the profile's limits and re-encoded, otherwise it
//!   becomes a note with its name, type, dimensions, size and description;
//! - any other blob becomes a note with its metadata. Base64 or raw bytes never reach
//!   text.

use std::io::Cursor;

use hostpipe_core::{FallbackReason, ModelProfile, Resource, ResourceContents, ResourceTemplate};

/// What the listing said about a resource, to describe it and to check its MIME type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceMeta {
    /// Name or title.
    pub name: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// MIME type from `resources/list` or the template.
    pub listed_mime: Option<String>,
}

impl ResourceMeta {
    /// What `resources/list` said of a resource: its title (else its name), description
    /// and MIME type.
    pub fn of_resource(r: &Resource) -> Self {
        Self {
            name: Some(r.title.clone().unwrap_or_else(|| r.name.clone())),
            description: r.description.clone(),
            listed_mime: r.mime_type.clone(),
        }
    }

    /// What `resources/templates/list` said of the template a URI was expanded from:
    /// its title (else its name), description and MIME type.
    pub fn of_template(t: &ResourceTemplate) -> Self {
        Self {
            name: Some(t.title.clone().unwrap_or_else(|| t.name.clone())),
            description: t.description.clone(),
            listed_mime: t.mime_type.clone(),
        }
    }
}

/// Limits checked before anything is decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertLimits {
    /// Largest image accepted for decoding, in pixels (width × height). Default 40 M.
    pub max_image_pixels: u64,
    /// Largest image edge accepted for decoding, in pixels. Default 16 384.
    pub max_image_edge_px: u32,
    /// Memory the decoder may allocate, in bytes. Default 256 MiB.
    pub max_image_alloc_bytes: u64,
}

impl Default for ConvertLimits {
    fn default() -> Self {
        Self {
            max_image_pixels: 40_000_000,
            max_image_edge_px: 16_384,
            max_image_alloc_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What one content item becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Converted {
    /// Text for the model.
    Text(String),
    /// An image for a model with vision, within its limits.
    Image {
        /// MIME type of `data`.
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
    /// The content was refused (e.g. a decompression bomb); the note says so.
    Refused {
        /// What was wrong, for the trace.
        error: String,
        /// The note for the model.
        note: String,
    },
}

fn essence(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether `mime` names textual content.
pub fn is_textual(mime: &str) -> bool {
    let e = essence(mime);
    e.starts_with("text/")
        || e.ends_with("+json")
        || e.ends_with("+xml")
        || matches!(
            e.as_str(),
            "application/json"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/javascript"
                | "application/ecmascript"
                | "application/x-sh"
                | "application/sql"
                | "application/graphql"
                | "application/x-ndjson"
                | "application/csv"
        )
}

/// Whether `mime` is an image type hostpipe decodes.
pub fn is_image(mime: &str) -> bool {
    matches!(
        essence(mime).as_str(),
        "image/png" | "image/jpeg" | "image/jpg" | "image/gif" | "image/webp"
    )
}

/// `(NAME, MIME, W×H px, N bytes; DESCRIPTION)`, leaving out what is unknown.
fn describe(meta: &ResourceMeta, mime: &str, bytes: usize, dims: Option<(u32, u32)>) -> String {
    let mut s = String::from("(");
    if let Some(n) = &meta.name {
        s.push_str(&format!("{n}, "));
    }
    s.push_str(mime);
    if let Some((w, h)) = dims {
        s.push_str(&format!(", {w}×{h} px"));
    }
    s.push_str(&format!(", {bytes} bytes"));
    if let Some(d) = &meta.description {
        s.push_str(&format!("; {d}"));
    }
    s.push(')');
    s
}

/// Converts one content item for `model`.
pub fn convert(
    contents: ResourceContents,
    meta: &ResourceMeta,
    model: &ModelProfile,
    limits: &ConvertLimits,
) -> Converted {
    match contents {
        ResourceContents::Text { text, .. } => Converted::Text(text),
        ResourceContents::Blob {
            uri,
            mime_type,
            data,
        } => {
            match mime_type.as_deref().or(meta.listed_mime.as_deref()) {
                Some(m) if is_textual(m) => return text_or_binary(uri, m, data, meta),
                None => return text_or_binary(uri, "application/octet-stream", data, meta),
                Some(m) if is_image(m) => return image(&uri, m, data, meta, model, limits),
                _ => {}
            }
            let mime = mime_type.unwrap_or_else(|| "application/octet-stream".into());
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: format!(
                    "[binary resource {uri} not shown: {} is not text {}]",
                    essence(&mime),
                    describe(meta, &mime, data.len(), None)
                ),
            }
        }
    }
}

fn text_or_binary(uri: String, mime: &str, data: Vec<u8>, meta: &ResourceMeta) -> Converted {
    let charset = mime
        .split(';')
        .skip(1)
        .find_map(|p| p.trim().strip_prefix("charset="))
        .map(|c| c.trim_matches('"').to_ascii_lowercase());
    if matches!(
        charset.as_deref(),
        Some("iso-8859-1" | "latin1" | "latin-1" | "us-ascii")
    ) {
        // ISO 8859-1 maps each byte to the code point of the same value.
        return Converted::Text(data.iter().map(|&b| char::from(b)).collect());
    }
    match String::from_utf8(data) {
        Ok(text) => Converted::Text(text),
        Err(e) => Converted::Fallback {
            reason: FallbackReason::Binary,
            note: format!(
                "[binary resource {uri} not shown: its bytes are not UTF-8 text {}]",
                describe(meta, mime, e.as_bytes().len(), None)
            ),
        },
    }
}

fn image(
    uri: &str,
    mime: &str,
    data: Vec<u8>,
    meta: &ResourceMeta,
    model: &ModelProfile,
    limits: &ConvertLimits,
) -> Converted {
    let bytes = data.len();
    let refused = |error: String| Converted::Refused {
        note: format!(
            "[image resource {uri} not shown, {error} {}]",
            describe(meta, mime, bytes, None)
        ),
        error,
    };
    let reader = match image::ImageReader::new(Cursor::new(&data)).with_guessed_format() {
        Ok(r) => r,
        Err(e) => return refused(format!("cannot read the image: {e}")),
    };
    let (width, height) = match reader.into_dimensions() {
        Ok(d) => d,
        Err(e) => return refused(format!("not a decodable image: {e}")),
    };
    if u64::from(width) * u64::from(height) > limits.max_image_pixels
        || width.max(height) > limits.max_image_edge_px
    {
        return refused(format!(
            "{width}×{height} px is over the decoding limit ({} px, {} px per edge); refused as a possible decompression bomb",
            limits.max_image_pixels, limits.max_image_edge_px
        ));
    }
    if !model.vision {
        return Converted::Fallback {
            reason: FallbackReason::ImageWithoutVision,
            note: format!(
                "[image resource {uri} not shown, the model has no vision {}]",
                describe(meta, mime, bytes, Some((width, height)))
            ),
        };
    }
    if width.max(height) <= model.max_image_edge_px && bytes <= model.max_image_bytes {
        return Converted::Image {
            mime_type: essence(mime),
            data,
            width,
            height,
        };
    }
    match downscale(&data, model, limits) {
        Ok((data, w, h)) => Converted::Image {
            mime_type: "image/png".into(),
            data,
            width: w,
            height: h,
        },
        Err(e) => refused(e),
    }
}

/// Decodes under `limits`, scales to fit the profile's longest edge, and re-encodes as
/// PNG, halving again while the result is over the profile's byte limit.
fn downscale(
    data: &[u8],
    model: &ModelProfile,
    limits: &ConvertLimits,
) -> Result<(Vec<u8>, u32, u32), String> {
    let mut reader = image::ImageReader::new(Cursor::new(data))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    let mut l = image::Limits::default();
    l.max_image_width = Some(limits.max_image_edge_px);
    l.max_image_height = Some(limits.max_image_edge_px);
    l.max_alloc = Some(limits.max_image_alloc_bytes);
    reader.limits(l);
    let img = reader.decode().map_err(|e| format!("cannot decode: {e}"))?;
    let mut edge = model.max_image_edge_px.min(img.width().max(img.height()));
    for _ in 0..8 {
        // `thumbnail` is a fast box filter: a good downscale at a fraction of the cost.
        let scaled = img.thumbnail(edge, edge);
        let mut out = Vec::new();
        scaled
            .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
            .map_err(|e| format!("cannot re-encode: {e}"))?;
        if out.len() <= model.max_image_bytes {
            return Ok((out, scaled.width(), scaled.height()));
        }
        edge /= 2;
        if edge < 16 {
            break;
        }
    }
    Err(format!(
        "cannot fit the image in {} bytes",
        model.max_image_bytes
    ))
}

/// Input tokens an image of `width`×`height` px costs with OpenAI's high-detail rule
/// (scale to fit 2048×2048, then the short side to 768; 85 tokens plus 170 per
/// 512-px tile; OpenAI "Images and vision" guide).
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
        let _ = img.write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png);
        out
    }

    fn blob(mime: Option<&str>, data: Vec<u8>) -> ResourceContents {
        ResourceContents::Blob {
            uri: "x://b".into(),
            mime_type: mime.map(Into::into),
            data,
        }
    }

    fn conv(c: ResourceContents, model: &ModelProfile) -> Converted {
        convert(
            c,
            &ResourceMeta::default(),
            model,
            &ConvertLimits::default(),
        )
    }

    #[test]
    fn the_read_results_mime_type_wins_over_the_listings() {
        let m = ModelProfile::default();
        assert_eq!(
            conv(blob(Some("application/json"), b"{}".to_vec()), &m),
            Converted::Text("{}".into())
        );
        assert_eq!(
            conv(blob(None, "héllo".as_bytes().to_vec()), &m),
            Converted::Text("héllo".into())
        );
        let meta = ResourceMeta {
            listed_mime: Some("application/octet-stream".into()),
            ..ResourceMeta::default()
        };
        let c = convert(
            blob(Some("text/plain"), b"hello".to_vec()),
            &meta,
            &m,
            &ConvertLimits::default(),
        );
        // The template declares octet-stream; the read says text/plain: it is text.
        assert_eq!(c, Converted::Text("hello".into()));
        // And the other way round: a PDF listed as text is still a PDF, and the note
        // says why it is not shown.
        let meta = ResourceMeta {
            listed_mime: Some("text/plain".into()),
            ..ResourceMeta::default()
        };
        let c = convert(
            blob(Some("application/pdf"), b"%PDF-1.4".to_vec()),
            &meta,
            &m,
            &ConvertLimits::default(),
        );
        assert_eq!(
            c,
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: "[binary resource x://b not shown: application/pdf is not text (application/pdf, 8 bytes)]".into()
            }
        );
    }

    #[test]
    fn latin1_blobs_are_decoded() {
        let c = conv(
            blob(
                Some("text/plain; charset=ISO-8859-1"),
                vec![b'c', b'a', b'f', 0xe9],
            ),
            &ModelProfile::default(),
        );
        assert_eq!(c, Converted::Text("café".into()));
    }

    #[test]
    fn binary_blobs_become_notes_without_their_bytes() {
        let c = conv(
            blob(None, vec![0xde, 0xad, 0xbe, 0xef]),
            &ModelProfile::default(),
        );
        assert_eq!(
            c,
            Converted::Fallback {
                reason: FallbackReason::Binary,
                note: "[binary resource x://b not shown: its bytes are not UTF-8 text (application/octet-stream, 4 bytes)]".into()
            }
        );
    }

    #[test]
    fn images_follow_vision_and_are_downscaled() {
        let with = ModelProfile {
            max_image_edge_px: 100,
            ..ModelProfile::default()
        };
        assert!(matches!(
            conv(blob(Some("image/png"), png(40, 30)), &with),
            Converted::Image {
                width: 40,
                height: 30,
                ..
            }
        ));
        assert!(matches!(
            conv(blob(Some("image/png"), png(400, 300)), &with),
            Converted::Image {
                width: 100,
                height: 75,
                ..
            }
        ));
        let without = ModelProfile {
            vision: false,
            ..ModelProfile::default()
        };
        match conv(blob(Some("image/png"), png(4, 3)), &without) {
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
    fn a_huge_declared_size_is_refused_before_decoding() {
        // A PNG header claiming 100000×100000 px.
        let mut data = png(1, 1);
        data[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        data[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        // The IHDR chunk's CRC-32 (ISO 3309) covers its type and data, bytes 12..29.
        let crc = !data[12..29].iter().fold(!0u32, |mut c, &b| {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
            }
            c
        });
        data[29..33].copy_from_slice(&crc.to_be_bytes());
        match conv(blob(Some("image/png"), data), &ModelProfile::default()) {
            Converted::Refused { error, .. } => {
                assert!(error.contains("decompression bomb"), "{error}")
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
