//! Test support for the HTTP runners: a stand-in for a provider's API on 127.0.0.1
//! that records every request and answers from a script, in order; a tool executor
//! that answers from a script; and request fixtures with a fixed fence.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hostpipe_core::{
    BlockBody, BlockSource, ContextBlock, EventSink, Fence, ModelProfile, RunError, RunEvent,
    RunRequest, Runner, Scope, TokenUsage, ToolCallResult, ToolError, ToolExecutor, Treatment,
    TurnIds, UserMessage, Variables,
};
use serde_json::Value;

/// The nonce of the fence every fixture request uses.
pub(crate) const NONCE: &str = "0123456789abcdef";

/// One request as the stand-in received it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// The path, e.g. `/v1/chat/completions`.
    pub(crate) path: String,
    /// The `Content-Type` header.
    pub(crate) content_type: String,
    /// The `Authorization` header, if sent.
    pub(crate) authorization: Option<String>,
    /// The body as sent.
    pub(crate) body: Vec<u8>,
}

impl Recorded {
    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// The body as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Reply {
    /// HTTP 200 with a JSON body.
    pub(crate) fn json(body: &Value) -> Self {
        Self::raw(200, "application/json", &body.to_string())
    }

    /// HTTP 200, `text/event-stream`, one event per `data` (written as is).
    pub(crate) fn sse(data: &[&str]) -> Self {
        let body: String = data.iter().map(|d| format!("data: {d}\n\n")).collect();
        Self::raw(200, "text/event-stream", &body)
    }

    /// HTTP 200, `text/event-stream`, one event per JSON value.
    pub(crate) fn sse_json(data: &[Value]) -> Self {
        let data: Vec<String> = data.iter().map(Value::to_string).collect();
        let data: Vec<&str> = data.iter().map(String::as_str).collect();
        Self::sse(&data)
    }

    /// Any status, content type and body.
    pub(crate) fn raw(status: u16, content_type: &'static str, body: &str) -> Self {
        Self {
            status,
            content_type,
            body: body.to_owned(),
        }
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    recorded: Mutex<Vec<Recorded>>,
}

/// The stand-in server; it runs until the test's runtime ends.
pub(crate) struct Stub {
    /// `http://127.0.0.1:PORT/v1`.
    pub(crate) base_url: String,
    shared: Arc<Shared>,
}

impl Stub {
    /// Starts a stand-in that answers `replies` in order, then HTTP 599.
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            recorded: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("the stand-in's address");
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&shared));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base_url: format!("http://{addr}/v1"),
            shared,
        }
    }

    /// Every request so far, in order.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared
            .recorded
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Ok(mut recorded) = shared.recorded.lock() {
        recorded.push(Recorded {
            path: uri.path().to_owned(),
            content_type: text(header::CONTENT_TYPE).unwrap_or_default(),
            authorization: text(header::AUTHORIZATION),
            body: body.to_vec(),
        });
    }
    let reply = shared.replies.lock().ok().and_then(|mut r| r.pop_front());
    match reply {
        Some(r) => (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [(header::CONTENT_TYPE, r.content_type)],
            r.body,
        )
            .into_response(),
        None => (
            StatusCode::from_u16(599).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "no more scripted replies",
        )
            .into_response(),
    }
}

/// Runs `runner` on `request`; its result and every event it sent, in order.
pub(crate) async fn run(
    runner: &dyn Runner,
    request: &RunRequest,
) -> (Result<(), RunError>, Vec<RunEvent>) {
    let (sink, mut rx) = EventSink::channel(1024);
    let result = runner.run(request, &sink).await;
    drop(sink);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (result, events)
}

/// A tool executor that answers each call with the next scripted result and records
/// the calls (name, arguments).
#[derive(Default)]
pub(crate) struct ScriptedTools {
    results: Mutex<VecDeque<Result<ToolCallResult, ToolError>>>,
    calls: Mutex<Vec<(String, Value)>>,
}

impl ScriptedTools {
    /// An executor answering `results` in order (then an unknown-tool error).
    pub(crate) fn new(results: Vec<Result<ToolCallResult, ToolError>>) -> Arc<Self> {
        Arc::new(Self {
            results: Mutex::new(results.into()),
            calls: Mutex::default(),
        })
    }

    /// The calls so far.
    pub(crate) fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl ToolExecutor for ScriptedTools {
    async fn call(&self, name: &str, arguments: Value) -> Result<ToolCallResult, ToolError> {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((name.to_owned(), arguments));
        }
        self.results
            .lock()
            .ok()
            .and_then(|mut r| r.pop_front())
            .unwrap_or_else(|| {
                Err(ToolError::UnknownTool {
                    name: name.to_owned(),
                })
            })
    }
}

/// A request carrying `text` for pipeline `p`, with the default model profile
/// (`gpt-4o`, vision and tool calling), the fence of [`NONCE`], and nothing else.
pub(crate) fn request(text: &str) -> RunRequest {
    RunRequest {
        ids: TurnIds {
            pipeline: "p".into(),
            ..TurnIds::default()
        },
        system_prompt: None,
        history: Vec::new(),
        message: UserMessage {
            text: text.into(),
            images: Vec::new(),
        },
        variables: Variables::new(),
        sender: None,
        context: Vec::new(),
        context_budget: None,
        tools: Vec::new(),
        caller_rounds: Vec::new(),
        tool_executor: None,
        model: ModelProfile::default(),
        reads: Vec::new(),
        fence: fence(),
        deadline: None,
    }
}

/// The fence of [`NONCE`].
pub(crate) fn fence() -> Fence {
    Fence::with_nonce(NONCE).expect("a valid nonce")
}

/// A whole text block of server `kb`, URI `kb://doc`, `text/markdown`.
pub(crate) fn text_block(text: &str) -> ContextBlock {
    ContextBlock {
        source: BlockSource {
            server: "kb".into(),
            uri: "kb://doc".into(),
            template: None,
            scope: Scope::Message,
            name: None,
        },
        mime_type: Some("text/markdown".into()),
        body: BlockBody::Text { text: text.into() },
        treatment: Treatment::Whole,
        tokens_before: 3,
        tokens_after: 3,
    }
}

/// A 2×1 PNG block (bytes `[1, 2, 3]`) of server `kb`, URI `kb://logo`.
pub(crate) fn image_block() -> ContextBlock {
    ContextBlock {
        source: BlockSource {
            server: "kb".into(),
            uri: "kb://logo".into(),
            template: None,
            scope: Scope::Message,
            name: None,
        },
        mime_type: Some("image/png".into()),
        body: BlockBody::Image {
            mime_type: "image/png".into(),
            data: vec![1, 2, 3],
            width: 2,
            height: 1,
        },
        treatment: Treatment::Whole,
        tokens_before: 0,
        tokens_after: 0,
    }
}

/// `text` inside the test fence, with `attrs`, as the runners render a context block.
pub(crate) fn fenced(attrs: &str, text: &str) -> String {
    format!("<resource-{NONCE} {attrs}>\n{text}\n</resource-{NONCE}>")
}

/// The test fence's preamble.
pub(crate) fn preamble() -> String {
    fence().preamble()
}

/// The attributes of [`text_block`]'s fence.
pub(crate) const DOC_ATTRS: &str =
    r#"server="kb" uri="kb://doc" scope="message" mime="text/markdown" treatment="whole""#;

/// Token usage, as a run reports it.
pub(crate) fn usage(input_tokens: u64, output_tokens: u64) -> Option<TokenUsage> {
    Some(TokenUsage {
        input_tokens,
        output_tokens,
    })
}

/// A `message_delta` event.
pub(crate) fn delta(text: &str) -> RunEvent {
    RunEvent::MessageDelta { text: text.into() }
}

/// A `message_completed` event.
pub(crate) fn completed(text: &str) -> RunEvent {
    RunEvent::MessageCompleted { text: text.into() }
}
