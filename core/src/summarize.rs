//! The summarizer seam: anything that can shorten a text to a token allowance.

use async_trait::async_trait;

use crate::tokens::Tokenizer;

/// A summary could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summarizer `{summarizer}` failed: {message}")]
pub struct SummarizeError {
    /// The summarizer's name.
    pub summarizer: String,
    /// What went wrong.
    pub message: String,
}

/// Makes a summary of a text within a token allowance. `hostpipe-stages` ships an
/// extractive one that needs no model; `hostpipe-runners` one that asks any
/// OpenAI-compatible chat completions endpoint.
///
/// The stage counts the result with the model's tokenizer and refuses a summary over the
/// allowance (then it truncates), so an implementation may be approximate.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// A short name for traces and errors, e.g. `extractive`.
    fn name(&self) -> &str;

    /// Summarizes `text` in at most `max_tokens` tokens (as `tk` counts them), with
    /// `query`, the user's message, as a hint of what matters. Cancel-safe.
    ///
    /// # Errors
    /// [`SummarizeError`] when no summary can be made.
    async fn summarize(
        &self,
        text: &str,
        query: &str,
        max_tokens: usize,
        tk: &Tokenizer,
    ) -> Result<String, SummarizeError>;
}
