//! The `local` runner against a stand-in of the Chat Completions endpoint: the request
//! bodies it sends, compared whole ([`bodies`]), and what it makes of the answers,
//! streamed and not ([`answers`]).

mod answers;
mod bodies;

use hostpipe_core::{
    HistoryMessage, ModelProfile, Resource, ResourceContents, Role, RunError, RunEvent, Tokenizer,
    ToolCallResult, ToolContent, ToolError, ToolOrigin, ToolSpec,
};
use serde_json::{Value, json};

use super::*;
use crate::stub::{
    self, DOC_ATTRS, NONCE, Reply, ScriptedTools, Stub, completed, delta, fenced, preamble, usage,
};

fn runner(stub: &Stub, stream: bool) -> LocalAgentRunner {
    runner_with(stub, |c| c.stream = stream)
}

fn runner_with(stub: &Stub, change: impl FnOnce(&mut LocalConfig)) -> LocalAgentRunner {
    let mut config = LocalConfig {
        base_url: stub.base_url.clone(),
        model: "gpt-test".into(),
        api_key_env: "HOSTPIPE_TEST_UNSET".into(),
        max_retries: 0,
        ..LocalConfig::default()
    };
    change(&mut config);
    LocalAgentRunner::new(config, Some("sk-test")).unwrap()
}

/// A non-streamed answer.
fn completion(message: Value, finish: &str, usage: Option<(u64, u64)>) -> Value {
    let mut v = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
    });
    if let Some((p, c)) = usage {
        v["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    v
}

/// A stream chunk carrying `delta`.
fn chunk(delta: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}],
        "usage": null,
    })
}

fn finish_chunk(reason: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}], "usage": null})
}

fn usage_chunk(p: u64, c: u64) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}})
}

fn sse(chunks: &[Value], done: bool) -> Reply {
    let mut data: Vec<String> = chunks.iter().map(Value::to_string).collect();
    if done {
        data.push("[DONE]".into());
    }
    let data: Vec<&str> = data.iter().map(String::as_str).collect();
    Reply::sse(&data)
}

const LOGO_ATTRS: &str =
    r#"server="kb" uri="kb://logo" scope="message" mime="image/png" treatment="whole""#;

fn started(id: &str, name: &str, arguments: Value) -> RunEvent {
    RunEvent::ToolCallStarted {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

fn finished(id: &str, name: &str, is_error: bool) -> RunEvent {
    RunEvent::ToolCallFinished {
        id: id.into(),
        name: name.into(),
        is_error,
    }
}

fn tool(name: &str, origin: ToolOrigin, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: schema,
        origin,
    }
}

fn mcp(server: &str, tool: &str) -> ToolOrigin {
    ToolOrigin::Mcp {
        server: server.into(),
        tool: tool.into(),
    }
}

fn text_result(text: &str) -> Result<ToolCallResult, ToolError> {
    Ok(ToolCallResult {
        content: vec![ToolContent::Text { text: text.into() }],
        structured_content: None,
        is_error: false,
    })
}

/// Runs and expects a failure; its display text, and checks `run_failed` came last.
async fn failure(runner: &LocalAgentRunner, request: &RunRequest) -> (RunError, Vec<RunEvent>) {
    // As a pipeline runs it: its failure reported by the layer.
    let layered = hostpipe_engine::layer::ReportFailure::new(runner);
    let (result, events) = stub::run(&layered, request).await;
    let e = result.unwrap_err();
    assert_eq!(
        events.last(),
        Some(&RunEvent::RunFailed {
            error: e.to_string()
        })
    );
    (e, events)
}
