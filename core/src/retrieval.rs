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

/// A turn that asks for passages instead of a fitted context: put an
/// `Arc<PassageRequest>` in [`Turn::extensions`](crate::Turn::extensions) and the
/// resource context injection stage reads what it always reads (same attachments,
/// policy, consent, cache and history), ranks every text's passages against the message
/// as a turn's fitting does, and leaves the best in [`PassageRequest::take`] instead
/// of fitting a context. This is what `hostpipe serve`'s Dify External Knowledge API
/// door (`POST /retrieval`) runs.
#[derive(Debug)]
pub struct PassageRequest {
    /// Most passages wanted (Dify's `retrieval_setting.top_k`).
    pub top_k: usize,
    /// Least score wanted, in [0, 1] (Dify's `retrieval_setting.score_threshold`; 0
    /// keeps every passage the ranking found).
    pub score_threshold: f64,
    found: std::sync::Mutex<Option<Vec<RetrievedPassage>>>,
}

impl PassageRequest {
    /// A request for at most `top_k` passages scoring at least `score_threshold`.
    pub fn new(top_k: usize, score_threshold: f64) -> Self {
        Self {
            top_k,
            score_threshold,
            found: std::sync::Mutex::new(None),
        }
    }

    /// Called by the stage with what it found (best first).
    pub fn answer(&self, passages: Vec<RetrievedPassage>) {
        match self.found.lock() {
            Ok(mut f) => *f = Some(passages),
            Err(e) => *e.into_inner() = Some(passages),
        }
    }

    /// What the stage found, best first; `None` when no stage answered (the pipeline
    /// has no resource context injection stage, or a stage before it ended the turn).
    pub fn take(&self) -> Option<Vec<RetrievedPassage>> {
        match self.found.lock() {
            Ok(mut f) => f.take(),
            Err(e) => e.into_inner().take(),
        }
    }
}

/// One passage of a [`PassageRequest`]'s answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RetrievedPassage {
    /// The MCP server it was read from.
    pub server: String,
    /// The resource's URI.
    pub uri: String,
    /// The resource's title or name, when the listing gave one.
    pub title: Option<String>,
    /// The resource's MIME type, when known.
    pub mime_type: Option<String>,
    /// The passage's text, as read (not fenced).
    pub text: String,
    /// Relevance in [0, 1]: the reranker's relevance for reranked passages, otherwise
    /// 1 − e^(−1.5·x), where x is the passage's BM25 score (with the scope and priority
    /// boost) over what a passage of average length holding each query term the
    /// resources contain once scores (x = 1 gives 0.78). Non-increasing along the
    /// answer.
    pub score: f64,
    /// Its place in the turn's ranking of all passages, from 1.
    pub rank: usize,
    /// First line in the resource (1-based).
    pub first_line: u32,
    /// Last line in the resource (1-based).
    pub last_line: u32,
    /// The headings it sits under, joined by ` > ` (empty when none).
    pub heading: String,
}
