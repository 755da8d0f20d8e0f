//! HTTP clients for the retrieval seams ([`Embedder`], [`Reranker`]):
//!
//! - [`OpenAiEmbedder`]: `POST {base_url}/embeddings` as the OpenAI API reference
//!   ("Embeddings / Create embeddings") defines it: `{"model", "input": [texts],
//!   "encoding_format": "float"}` → `{"data": [{"index", "embedding": [floats]}]}`. vLLM,
//!   Ollama, llama.cpp's server, LiteLLM and text-embeddings-inference (TEI) serve it.
//! - [`HttpReranker`]: `POST {base_url}/rerank`, in Cohere's shape (Cohere API reference,
//!   "Rerank v2"; Jina, vLLM, llama.cpp's server and Infinity serve it): `{"model",
//!   "query", "documents": [texts], "top_n"}` → `{"results": [{"index",
//!   "relevance_score"}]}`; or in TEI's own shape (`api = "tei"`): `{"query", "texts"}` →
//!   `[{"index", "score"}]`.
//!
//! Every request has a timeout; an error never carries the API key or a header value.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{Embedder, Reranker, RetrievalError};
use serde::{Deserialize, Serialize};

/// Settings of an HTTP retrieval service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrievalServiceConfig {
    /// API base URL including the version, e.g. `https://api.openai.com/v1`,
    /// `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Bearer token, if the endpoint needs one.
    pub api_key: Option<String>,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Whole-request timeout. Default 10 s.
    pub timeout: Duration,
}

impl RetrievalServiceConfig {
    /// Settings for `model` at `base_url`, with a 10 s timeout.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// One HTTP client with the service's settings.
struct Service {
    kind: &'static str,
    name: String,
    config: RetrievalServiceConfig,
    client: reqwest::Client,
}

impl Service {
    fn new(
        kind: &'static str,
        name: String,
        config: RetrievalServiceConfig,
    ) -> Result<Self, RetrievalError> {
        let err = |message: String| RetrievalError {
            kind,
            name: name.clone(),
            message,
            timed_out: false,
        };
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &config.headers {
            let k = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| err(format!("header `{k}`: {e}")))?;
            let mut v = reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| err(format!("header `{k}`: not a valid header value")))?;
            v.set_sensitive(true);
            headers.insert(k, v);
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .default_headers(headers)
            .build()
            .map_err(|e| err(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            kind,
            name,
            config,
            client,
        })
    }

    fn error(&self, message: String, timed_out: bool) -> RetrievalError {
        RetrievalError {
            kind: self.kind,
            name: self.name.clone(),
            message,
            timed_out,
        }
    }

    /// POSTs `body` to `{base_url}/{path}` and parses the answer.
    async fn post<B: Serialize + Sync, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, RetrievalError> {
        let url = format!("{}/{path}", self.config.base_url.trim_end_matches('/'));
        let mut req = self.client.post(&url).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let response = req.send().await.map_err(|e| {
            let what = if e.is_timeout() {
                format!("no answer within {} ms", self.config.timeout.as_millis())
            } else if e.is_connect() {
                "cannot connect".to_owned()
            } else {
                "the request failed".to_owned()
            };
            self.error(format!("POST {url}: {what}"), e.is_timeout())
        })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(300).collect();
            return Err(self.error(format!("POST {url}: HTTP {status}: {body}"), false));
        }
        response.json().await.map_err(|e| {
            self.error(
                format!("POST {url}: the answer is not the expected JSON: {e}"),
                e.is_timeout(),
            )
        })
    }
}

/// An [`Embedder`] backed by an OpenAI-compatible `/embeddings` endpoint.
pub struct OpenAiEmbedder {
    service: Service,
    batch: usize,
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [&'a str],
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingData>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// An embedder registered as `name`, sending at most `batch` inputs per request
    /// (OpenAI accepts 2048; local servers often fewer).
    ///
    /// # Errors
    /// [`RetrievalError`] when a header is invalid or the HTTP client cannot be built.
    pub fn new(
        name: impl Into<String>,
        config: RetrievalServiceConfig,
        batch: usize,
    ) -> Result<Self, RetrievalError> {
        Ok(Self {
            service: Service::new("embedder", name.into(), config)?,
            batch: batch.max(1),
        })
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn name(&self) -> &str {
        &self.service.name
    }

    async fn embed(&self, inputs: &[&str]) -> Result<Vec<Vec<f32>>, RetrievalError> {
        let mut out: Vec<Vec<f32>> = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(self.batch) {
            let request = EmbeddingsRequest {
                model: &self.service.config.model,
                input: batch,
                encoding_format: "float",
            };
            let response: EmbeddingsResponse = self.service.post("embeddings", &request).await?;
            let mut vectors: Vec<Option<Vec<f32>>> = vec![None; batch.len()];
            for d in response.data {
                match vectors.get_mut(d.index) {
                    Some(slot @ None) => *slot = Some(d.embedding),
                    _ => {
                        return Err(self.service.error(
                            format!(
                                "the answer has index {} twice or out of range (0..{})",
                                d.index,
                                batch.len()
                            ),
                            false,
                        ));
                    }
                }
            }
            let dim = out.first().map(Vec::len);
            for (i, v) in vectors.into_iter().enumerate() {
                let v = v.ok_or_else(|| {
                    self.service
                        .error(format!("the answer has no embedding for input {i}"), false)
                })?;
                if v.is_empty() || dim.is_some_and(|d| d != v.len()) {
                    return Err(self
                        .service
                        .error("the answer's embeddings differ in dimension".into(), false));
                }
                out.push(v);
            }
        }
        Ok(out)
    }
}

/// Which request and answer shape a reranker speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankApi {
    /// Cohere's (Jina, vLLM, llama.cpp, Infinity): `documents` in, `results` out.
    #[default]
    Cohere,
    /// Hugging Face text-embeddings-inference's own: `texts` in, a bare array out.
    Tei,
}

/// A [`Reranker`] backed by a `/rerank` endpoint.
pub struct HttpReranker {
    service: Service,
    api: RerankApi,
}

#[derive(Serialize)]
struct CohereRerankRequest<'a> {
    model: &'a str,
    query: &'a str,
    documents: &'a [&'a str],
    top_n: usize,
}

#[derive(Deserialize)]
struct CohereRerankResponse {
    results: Vec<CohereResult>,
}

#[derive(Deserialize)]
struct CohereResult {
    index: usize,
    relevance_score: f64,
}

#[derive(Serialize)]
struct TeiRerankRequest<'a> {
    query: &'a str,
    texts: &'a [&'a str],
}

#[derive(Deserialize)]
struct TeiResult {
    index: usize,
    score: f64,
}

impl HttpReranker {
    /// A reranker registered as `name`.
    ///
    /// # Errors
    /// [`RetrievalError`] when a header is invalid or the HTTP client cannot be built.
    pub fn new(
        name: impl Into<String>,
        config: RetrievalServiceConfig,
        api: RerankApi,
    ) -> Result<Self, RetrievalError> {
        Ok(Self {
            service: Service::new("reranker", name.into(), config)?,
            api,
        })
    }
}

#[async_trait]
impl Reranker for HttpReranker {
    fn name(&self) -> &str {
        &self.service.name
    }

    async fn rerank(
        &self,
        query: &str,
        documents: &[&str],
    ) -> Result<Vec<(usize, f64)>, RetrievalError> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let scored: Vec<(usize, f64)> = match self.api {
            RerankApi::Cohere => {
                let request = CohereRerankRequest {
                    model: &self.service.config.model,
                    query,
                    documents,
                    top_n: documents.len(),
                };
                let r: CohereRerankResponse = self.service.post("rerank", &request).await?;
                r.results
                    .into_iter()
                    .map(|x| (x.index, x.relevance_score))
                    .collect()
            }
            RerankApi::Tei => {
                let request = TeiRerankRequest {
                    query,
                    texts: documents,
                };
                let r: Vec<TeiResult> = self.service.post("rerank", &request).await?;
                r.into_iter().map(|x| (x.index, x.score)).collect()
            }
        };
        if let Some((i, _)) = scored.iter().find(|(i, _)| *i >= documents.len()) {
            return Err(self.service.error(
                format!(
                    "the answer scores document {i}, but {} were sent",
                    documents.len()
                ),
                false,
            ));
        }
        Ok(scored)
    }
}
