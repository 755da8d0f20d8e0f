//! A [`Summarizer`] backed by any OpenAI-compatible chat completions endpoint (OpenAI,
//! vLLM, Ollama, llama.cpp, LiteLLM): `POST {base_url}/chat/completions` as the OpenAI
//! API reference ("Chat / Create chat completion") defines it, non-streaming.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{SummarizeError, Summarizer, Tokenizer, TruncationSide};
use serde::{Deserialize, Serialize};

/// Settings of an [`OpenAiSummarizer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiSummarizerConfig {
    /// API base URL including the version, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Model name, e.g. `gpt-4o-mini`.
    pub model: String,
    /// Bearer token, if the endpoint needs one.
    pub api_key: Option<String>,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Whole-request timeout. Default 60 s.
    pub timeout: Duration,
    /// Most tokens of the document sent; a longer one is cut (head and tail kept) first.
    /// Default 12 000.
    pub max_input_tokens: usize,
}

impl OpenAiSummarizerConfig {
    /// Settings for `model` at `base_url`, with the defaults above.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            headers: BTreeMap::new(),
            timeout: Duration::from_secs(60),
            max_input_tokens: 12_000,
        }
    }
}

/// Asks a chat model for a summary within the token allowance.
pub struct OpenAiSummarizer {
    name: String,
    config: OpenAiSummarizerConfig,
    client: reqwest::Client,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [Message<'a>; 2],
    /// Upper bound on generated tokens (OpenAI's current name; `max_tokens` is deprecated
    /// for OpenAI models but still what many compatible servers read, so both are sent).
    max_completion_tokens: usize,
    max_tokens: usize,
    temperature: f32,
    stream: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: String,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
}

#[derive(Deserialize)]
struct ResponseMessage {
    content: Option<String>,
}

impl OpenAiSummarizer {
    /// A summarizer registered as `name`.
    ///
    /// # Errors
    /// [`SummarizeError`] when a header is invalid or the HTTP client cannot be built.
    pub fn new(
        name: impl Into<String>,
        config: OpenAiSummarizerConfig,
    ) -> Result<Self, SummarizeError> {
        let name = name.into();
        let err = |message: String| SummarizeError {
            summarizer: name.clone(),
            message,
        };
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &config.headers {
            let k = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| err(format!("header `{k}`: {e}")))?;
            let v = reqwest::header::HeaderValue::from_str(v)
                .map_err(|e| err(format!("header `{k}`: {e}")))?;
            headers.insert(k, v);
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .default_headers(headers)
            .build()
            .map_err(|e| err(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            name,
            config,
            client,
        })
    }
}

#[async_trait]
impl Summarizer for OpenAiSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn summarize(
        &self,
        text: &str,
        query: &str,
        max_tokens: usize,
        tk: &Tokenizer,
    ) -> Result<String, SummarizeError> {
        let err = |message: String| SummarizeError {
            summarizer: self.name.clone(),
            message,
        };
        let header = format!("[summary by {}]\n", self.config.model);
        let room = max_tokens.saturating_sub(tk.count(&header));
        if room < 16 {
            return Err(err(format!(
                "{max_tokens} tokens leave no room for a summary"
            )));
        }
        let document = tk
            .truncate(text, self.config.max_input_tokens, TruncationSide::HeadTail)
            .map_or_else(|| text.to_owned(), |t| t.text);
        let request = ChatRequest {
            model: &self.config.model,
            messages: [
                Message {
                    role: "system",
                    content: format!(
                        "Summarize the document for someone who must answer the user's question from it. \
                         Keep names, numbers and facts that bear on the question. Answer with the summary only, \
                         in at most {} words.",
                        room * 3 / 4
                    ),
                },
                Message {
                    role: "user",
                    content: format!("Question: {query}\n\nDocument:\n{document}"),
                },
            ],
            max_completion_tokens: room,
            max_tokens: room,
            temperature: 0.0,
            stream: false,
        };
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut req = self.client.post(&url).json(&request);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let response = req
            .send()
            .await
            .map_err(|e| err(format!("POST {url}: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body: String = body.chars().take(300).collect();
            return Err(err(format!("POST {url}: HTTP {status}: {body}")));
        }
        let parsed: ChatResponse = response
            .json()
            .await
            .map_err(|e| err(format!("POST {url}: invalid response: {e}")))?;
        let content = parsed
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| err(format!("POST {url}: no message content in the response")))?;
        // The model may overshoot `max_completion_tokens` in our tokenizer's count.
        let content = tk
            .truncate(content.trim(), room, TruncationSide::Head)
            .map_or_else(|| content.trim().to_owned(), |t| t.text);
        Ok(format!("{header}{content}"))
    }
}
