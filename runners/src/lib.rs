//! hostpipe's runners. Each renders the uniform [`hostpipe_core::RunRequest`] into its
//! own output and reports [`hostpipe_core::RunEvent`]s.
//!
//! - [`preview`] (`preview`, the default): no model; shows the request exactly as a
//!   model would receive it, with a budget report, as text or JSON.
//! - [`openai`] (`local`): an agent on any OpenAI-compatible `/chat/completions`
//!   endpoint, with a tool loop over the turn's tools.
//! - [`dify`] (`dify`): a Dify app through the Dify service API.
//! - [`remote`] (`remote`): POSTs the turn as versioned JSON to an agent in any
//!   language; reads one JSON reply or a stream of `RunEvent`s.
//!
//! Also [`summarizer`]: a `Summarizer` backed by an OpenAI-compatible endpoint.

pub mod dify;
mod http;
mod lenient;
pub mod mcp_json;
pub mod openai;
pub mod preview;
pub mod remote;
pub mod render;
pub mod retrieval;
#[cfg(test)]
#[allow(clippy::expect_used)]
mod stub;
pub mod summarizer;

pub use dify::{DifyAppType, DifyConfig, DifyRunner};
pub use openai::{LocalAgentRunner, LocalConfig};
pub use preview::{PreviewConfig, PreviewFormat, PreviewReport, PreviewRunner};
pub use remote::{RemoteConfig, RemoteRunRequest, RemoteRunner};
pub use retrieval::{HttpReranker, OpenAiEmbedder, RerankApi, RetrievalServiceConfig};
pub use summarizer::{OpenAiSummarizer, OpenAiSummarizerConfig};

/// Makes sure the linker keeps this crate's registrations: call it (it does nothing)
/// from a binary that uses the registry.
pub fn link() {}
