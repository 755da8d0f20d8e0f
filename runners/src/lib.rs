//! hostpipe's runners. Each renders the uniform [`hostpipe_core::RunRequest`] into its
//! own output and reports [`hostpipe_core::RunEvent`]s.
//!
//! - [`preview`] (`preview`, the default): no model; shows the request exactly as a
//!   model would receive it, with a budget report, as text or JSON.
//! - [`openai`] (`local`): an agent on any OpenAI-compatible `/chat/completions`
//!   endpoint, with a tool loop over the turn's tools.
//!
//! Also [`summarizer`]: a `Summarizer` backed by an OpenAI-compatible endpoint.

mod http;
pub mod openai;
pub mod preview;
pub mod render;
pub mod summarizer;

pub use openai::{LocalAgentRunner, LocalConfig};
pub use preview::{PreviewConfig, PreviewFormat, PreviewReport, PreviewRunner};
pub use summarizer::{OpenAiSummarizer, OpenAiSummarizerConfig};

/// Makes sure the linker keeps this crate's registrations: call it (it does nothing)
/// from a binary that uses the registry.
pub fn link() {}
