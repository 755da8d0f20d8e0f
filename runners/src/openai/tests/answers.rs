//! What the runner makes of answers: streamed tool calls, cut answers, odd fields,
//! errors.

use super::*;

#[tokio::test]
async fn streamed_tool_calls_without_index_start_a_new_call_with_each_new_id() {
    let stub = Stub::start(vec![
        sse(
            &[
                chunk(json!({"tool_calls": [{"id": "a", "function": {"name": "one", "arguments": "{\"x\""}}]})),
                chunk(json!({"tool_calls": [{"function": {"arguments": ":1}"}}]})),
                chunk(json!({"tool_calls": [{"id": "b", "function": {"name": "two", "arguments": ""}}]})),
                chunk(json!({"tool_calls": [{"id": "b", "function": {"name": "ignored", "arguments": "{}"}}]})),
                chunk(json!({"tool_calls": [{"id": "", "index": "not a number", "function": {"arguments": 5}}]})),
            ],
            true,
        ),
        sse(&[chunk(json!({"content": "ok"})), finish_chunk("stop")], false),
    ])
    .await;
    let runner = runner(&stub, true);
    let tools = ScriptedTools::new(vec![text_result("1"), text_result("2")]);
    let mut request = stub::request("go");
    request.tools = vec![
        tool("one", ToolOrigin::Exploration, json!({})),
        tool("two", ToolOrigin::Exploration, json!({})),
    ];
    request.tool_executor = Some(tools.clone());
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        stub.requests()[1].json()["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "one", "arguments": "{\"x\":1}"}},
            {"id": "b", "type": "function", "function": {"name": "two", "arguments": "{}"}},
        ]})
    );
    assert_eq!(
        tools.calls(),
        [
            ("one".to_owned(), json!({"x": 1})),
            ("two".to_owned(), json!({}))
        ]
    );
    assert_eq!(
        events,
        [
            started("a", "one", json!({"x": 1})),
            finished("a", "one", false),
            started("b", "two", json!({})),
            finished("b", "two", false),
            delta("ok"),
            completed("ok"),
            RunEvent::RunCompleted { usage: None },
        ]
    );
}

#[tokio::test]
async fn a_cut_answer_gets_the_marker_and_a_stream_may_end_without_done() {
    let stub = Stub::start(vec![sse(
        &[chunk(json!({"content": "Partial"})), finish_chunk("length")],
        false,
    )])
    .await;
    let runner = runner(&stub, true);
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    let marker = "\n[… the answer was cut at the token limit …]";
    assert_eq!(
        events,
        [
            delta("Partial"),
            delta(marker),
            completed(&format!("Partial{marker}")),
            RunEvent::RunCompleted { usage: None },
        ]
    );
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_is_taken_as_is() {
    let stub = Stub::start(vec![Reply::json(&completion(
        json!({"role": "assistant", "content": "Whole."}),
        "length",
        Some((7, 1)),
    ))])
    .await;
    let runner = runner(&stub, true);
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    let marker = "\n[… the answer was cut at the token limit …]";
    assert_eq!(
        events,
        [
            delta("Whole."),
            delta(marker),
            completed(&format!("Whole.{marker}")),
            RunEvent::RunCompleted { usage: usage(7, 1) },
        ]
    );
}

#[tokio::test]
async fn odd_fields_are_read_leniently() {
    // Usage without an object, a non-string content, unknown fields, comments and
    // non-object chunks: ignored as before.
    let stub = Stub::start(vec![
        Reply::sse(&[
            r#"{"choices": [{"delta": {"content": 5}}], "usage": 3, "extra": true}"#,
            "42",
            r#"{"choices": [{"delta": {"content": "a"}, "finish_reason": 7}]}"#,
            r#"{"choices": [{"delta": {"content": "b"}}], "usage": {"prompt_tokens": "x", "completion_tokens": 2}}"#,
            r#"{"choices": [{"finish_reason": "stop"}], "error": null}"#,
            " [DONE] ",
        ]),
        Reply::json(&json!({
            "choices": [{"message": {"content": ["not", "text"], "tool_calls": "none"}, "finish_reason": null}],
            "usage": {"prompt_tokens": 1.5, "completion_tokens": 4},
        })),
        Reply::json(&json!({"choices": [{"message": null}]})),
    ])
    .await;
    let runner = runner(&stub, true);
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta("a"),
            delta("b"),
            completed("ab"),
            RunEvent::RunCompleted { usage: usage(0, 2) },
        ]
    );
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    assert_eq!(
        events,
        [completed(""), RunEvent::RunCompleted { usage: usage(0, 4) },]
    );
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    assert_eq!(
        events,
        [completed(""), RunEvent::RunCompleted { usage: None }]
    );
}

#[tokio::test]
async fn errors_in_answers_name_what_was_wrong() {
    let stub = Stub::start(vec![
        Reply::json(&json!({"error": {"message": "bad model", "type": "invalid_request_error"}})),
        Reply::json(&json!({"error": "just text"})),
        Reply::json(&json!({"choices": []})),
        Reply::json(&json!([1, 2])),
        Reply::raw(200, "application/json", "nope"),
        Reply::sse(&["{oops"]),
        Reply::sse(&[r#"{"error": {"message": "overloaded"}}"#]),
        Reply::sse(&[r#"{"error": {"code": 1}}"#]),
        Reply::sse(&[]),
    ])
    .await;
    let runner = runner(&stub, true);
    let mut messages = Vec::new();
    for _ in 0..9 {
        let (e, events) = failure(&runner, &stub::request("go")).await;
        assert_eq!(events.len(), 1, "{events:?}");
        messages.push(e.to_string());
    }
    assert_eq!(
        messages,
        [
            "runner backend failed: chat/completions: bad model",
            "runner backend failed: chat/completions: error",
            "runner backend failed: chat/completions: the answer has no choices[0].message",
            "runner backend failed: chat/completions: the answer has no choices[0].message",
            // reqwest's text, with the URL.
            &format!(
                "runner backend failed: chat/completions: invalid JSON: error decoding response body for url ({}/chat/completions)",
                stub.base_url
            ),
            "runner backend failed: chat/completions: invalid stream chunk: key must be a string at line 1 column 2",
            "runner backend failed: chat/completions stream error: overloaded",
            "runner backend failed: chat/completions stream error: ?",
            "runner backend failed: chat/completions: the stream ended without a finish_reason or [DONE] (the answer is cut off)",
        ]
    );
}

#[tokio::test]
async fn http_errors_are_typed() {
    let stub = Stub::start(vec![
        Reply::raw(
            400,
            "application/json",
            r#"{"error": {"message": "Too long.", "code": "context_length_exceeded"}}"#,
        ),
        Reply::raw(
            400,
            "application/json",
            r#"{"error": {"message": "This model's maximum context length is 4096 tokens."}}"#,
        ),
        Reply::raw(
            400,
            "application/json",
            r#"{"error": {"message": "bad request"}}"#,
        ),
        Reply::raw(
            401,
            "application/json",
            r#"{"error": {"message": "no key"}}"#,
        ),
    ])
    .await;
    let runner = runner(&stub, false);
    let mut errors = Vec::new();
    for _ in 0..4 {
        errors.push(failure(&runner, &stub::request("go")).await.0);
    }
    assert!(
        matches!(&errors[0], RunError::ContextTooLong { message } if message == "Too long."),
        "{:?}",
        errors[0]
    );
    assert!(
        matches!(&errors[1], RunError::ContextTooLong { message } if message == "This model's maximum context length is 4096 tokens."),
        "{:?}",
        errors[1]
    );
    assert_eq!(
        errors[2].to_string(),
        "runner backend failed: chat/completions: bad request (HTTP 400)"
    );
    assert!(
        matches!(&errors[3], RunError::Auth { status: 401, message } if message == "chat/completions: no key"),
        "{:?}",
        errors[3]
    );
}

#[tokio::test]
async fn a_model_that_keeps_calling_tools_stops_at_max_rounds() {
    let call = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ]}),
        "tool_calls",
        None,
    );
    let stub = Stub::start(vec![Reply::json(&call), Reply::json(&call)]).await;
    let runner = runner_with(&stub, |c| {
        c.stream = false;
        c.max_rounds = 2;
    });
    let mut request = stub::request("go");
    request.tools = vec![tool("t", ToolOrigin::Exploration, json!({}))];
    request.tool_executor = Some(ScriptedTools::new(vec![text_result("1"), text_result("2")]));
    let (e, events) = failure(&runner, &request).await;
    assert_eq!(
        e.to_string(),
        "runner backend failed: the model was still calling tools after 2 rounds (max_rounds)"
    );
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(stub.requests().len(), 2);
}

#[tokio::test]
async fn arrays_where_objects_belong_count_as_absent() {
    let stub = Stub::start(vec![
        Reply::sse(&[
            r#"{"choices": [{"delta": {"content": "a"}}], "usage": [1, 2]}"#,
            r#"{"choices": [{"delta": [1], "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}"#,
            r#"{"choices": [{"delta": {"content": "b"}}], "usage": [5, 6]}"#,
            "[DONE]",
        ]),
        Reply::json(&json!({
            "choices": [{"message": {"content": "c", "tool_calls": [
                {"id": "x", "function": ["t", "{}"]},
            ]}, "finish_reason": "stop"}],
            "usage": [7, 8],
        })),
        Reply::json(&json!({"error": ["boom"]})),
        Reply::raw(
            400,
            "application/json",
            r#"{"error": ["too long", "context_length_exceeded"]}"#,
        ),
    ])
    .await;
    let runner = runner(&stub, true);
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta("a"),
            delta("b"),
            completed("ab"),
            RunEvent::RunCompleted { usage: usage(3, 0) },
        ]
    );
    let (result, events) = stub::run(&runner, &stub::request("go")).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta("c"),
            completed("c"),
            RunEvent::RunCompleted { usage: None }
        ]
    );
    let (e, _) = failure(&runner, &stub::request("go")).await;
    assert_eq!(
        e.to_string(),
        "runner backend failed: chat/completions: error"
    );
    let (e, _) = failure(&runner, &stub::request("go")).await;
    assert!(matches!(e, RunError::Backend { .. }), "{e:?}");
}

/// The OpenAI-compatible door's caller tools: the caller's rounds follow the user's
/// message; a call of a caller's tool ends the run (the pipeline's tool called in the
/// same answer is not run), reported as a started call with the model's JSON text.
#[tokio::test]
async fn a_call_of_a_caller_tool_ends_the_run_after_the_callers_rounds() {
    let stub = Stub::start(vec![Reply::json(&completion(
        json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "m1", "type": "function", "function": {"name": "kb__search", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "caller__lookup", "arguments": "{\"q\": 2}"}},
        ]}),
        "tool_calls",
        Some((9, 4)),
    ))])
    .await;
    let runner = runner(&stub, false);
    let tools = ScriptedTools::new(vec![text_result("never")]);
    let mut request = stub::request("go");
    request.tools = vec![
        tool("kb__search", mcp("kb", "search"), json!({"type": "object"})),
        tool(
            "caller__lookup",
            ToolOrigin::Caller,
            json!({"type": "object"}),
        ),
    ];
    request.tool_executor = Some(tools.clone());
    request.caller_rounds = vec![hostpipe_core::CallerRound {
        text: None,
        calls: vec![hostpipe_core::CallerToolCall {
            id: "c1".into(),
            name: "caller__lookup".into(),
            arguments: "{\"q\": 1}".into(),
        }],
        results: vec![hostpipe_core::CallerToolResult {
            call_id: "c1".into(),
            text: "one".into(),
        }],
    }];
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    let sent = stub.requests()[0].json();
    assert_eq!(
        sent["messages"].as_array().unwrap()[1..],
        [
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "caller__lookup", "arguments": "{\"q\": 1}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "one"}),
        ]
    );
    assert_eq!(sent["tools"][1]["function"]["name"], "caller__lookup");
    assert!(tools.calls().is_empty(), "the pipeline's tool was not run");
    assert_eq!(
        events,
        [
            delta("Let me look."),
            started("c2", "caller__lookup", json!("{\"q\": 2}")),
            completed("Let me look."),
            RunEvent::RunCompleted { usage: usage(9, 4) },
        ]
    );
}
