//! The retrieval seams: dense embeddings and reranking, optional services that refine
//! the lexical ranking of passages (`hostpipe-stages` fuses them in; `hostpipe-runners`
//! implements both over HTTP: an OpenAI-compatible `/embeddings` endpoint and a
//! Cohere-style `/rerank` endpoint).
//!
//! A failing service never fails a turn: the stage keeps the lexical ranking and says
//! why in the trace.

use async_trait::async_trait;

/// An embedding or rerank request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} `{name}` failed: {message}")]
pub struct RetrievalError {
    /// `embedder` or `reranker`.
    pub kind: &'static str,
    /// The configured name.
    pub name: String,
    /// What went wrong (no secrets: never the API key or a header value).
    pub message: String,
    /// Whether the request ran out of time.
    pub timed_out: bool,
}

impl RetrievalError {
    /// Whether the service did not answer within its timeout.
    pub fn is_timeout(&self) -> bool {
        self.timed_out
    }
}

/// Turns texts into vectors whose cosine similarity says how close their meanings are.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// A short name for traces and cache keys, e.g. `bge-m3`.
    fn name(&self) -> &str;

    /// One vector per input, in order, all of one dimension. Cancel-safe.
    ///
    /// # Errors
    /// [`RetrievalError`] when the service fails, times out, or answers with the wrong
    /// number of vectors.
    async fn embed(&self, inputs: &[&str]) -> Result<Vec<Vec<f32>>, RetrievalError>;
}

/// Scores documents for a query with a cross-encoder (or any relevance model).
#[async_trait]
pub trait Reranker: Send + Sync {
    /// A short name for traces, e.g. `bge-reranker-v2-m3`.
    fn name(&self) -> &str;

    /// `(index into documents, relevance)` for the documents it scored (higher is more
    /// relevant; any order). Cancel-safe.
    ///
    /// # Errors
    /// [`RetrievalError`] when the service fails, times out, or answers with an index
    /// out of range.
    async fn rerank(
        &self,
        query: &str,
        documents: &[&str],
    ) -> Result<Vec<(usize, f64)>, RetrievalError>;
}
