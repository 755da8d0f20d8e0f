//! hostpipe's runners. Each renders the uniform [`hostpipe_core::RunRequest`] into its
//! own output and reports [`hostpipe_core::RunEvent`]s.
//!
//! - [`preview`] (`preview`, the default): no model; shows the request exactly as a
//!   model would receive it, with a budget report, as text or JSON.
//!
//! Also [`summarizer`]: a `Summarizer` backed by an OpenAI-compatible endpoint.

pub mod preview;
pub mod summarizer;

pub use preview::{PreviewConfig, PreviewFormat, PreviewReport, PreviewRunner};
pub use summarizer::{OpenAiSummarizer, OpenAiSummarizerConfig};

/// Makes sure the linker keeps this crate's registrations: call it (it does nothing)
/// from a binary that uses the registry.
pub fn link() {}
