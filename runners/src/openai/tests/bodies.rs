//! The request bodies: messages, tools, settings, the tool loop and the window.

use super::*;

#[tokio::test]
async fn text_only_with_history_and_context_non_streamed() {
    let stub = Stub::start(vec![Reply::json(&completion(
        json!({"role": "assistant", "content": "It says hi.", "refusal": null}),
        "stop",
        Some((12, 3)),
    ))])
    .await;
    let runner = runner(&stub, false);
    let mut request = stub::request("What does the doc say?");
    request.system_prompt = Some("Be brief.".into());
    request.history = vec![
        HistoryMessage {
            role: Role::User,
            text: "Hi".into(),
        },
        HistoryMessage {
            role: Role::Assistant,
            text: "Hello!".into(),
        },
        HistoryMessage {
            role: Role::Assistant,
            text: String::new(),
        },
    ];
    request.context = vec![stub::text_block("The doc says hi.")];
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].content_type, "application/json");
    assert_eq!(requests[0].authorization.as_deref(), Some("Bearer sk-test"));
    let system = format!(
        "Be brief.\n\n{}\n\n{}\n",
        preamble(),
        fenced(DOC_ATTRS, "The doc says hi.")
    );
    assert_eq!(
        requests[0].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "What does the doc say?"},
            ],
            "stream": false,
        })
    );
    assert_eq!(
        events,
        [
            delta("It says hi."),
            completed("It says hi."),
            RunEvent::RunCompleted {
                usage: usage(12, 3)
            },
        ]
    );
}

#[tokio::test]
async fn images_go_to_the_user_message_with_vision_streamed() {
    let stub = Stub::start(vec![sse(
        &[
            chunk(json!({"role": "assistant", "content": ""})),
            chunk(json!({"content": "A blue "})),
            chunk(json!({"content": "logo."})),
            finish_chunk("stop"),
            usage_chunk(40, 4),
        ],
        true,
    )])
    .await;
    let runner = runner_with(&stub, |c| {
        c.temperature = Some(0.5);
        c.max_tokens = Some(256);
    });
    let mut request = stub::request("Describe it.");
    request.context = vec![stub::text_block("About the logo."), stub::image_block()];
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    let system = format!(
        "{}\n\n{}\n\n{}\n",
        preamble(),
        fenced(DOC_ATTRS, "About the logo."),
        fenced(LOGO_ATTRS, "[image 2×1 px, attached to the user message]")
    );
    assert_eq!(
        stub.requests()[0].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": [
                    {"type": "text", "text": "Describe it."},
                    {"type": "text", "text": format!("<resource-{NONCE} {LOGO_ATTRS}>")},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AQID"}},
                    {"type": "text", "text": format!("</resource-{NONCE}>")},
                ]},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.5,
            "max_tokens": 256,
        })
    );
    assert_eq!(
        events,
        [
            delta("A blue "),
            delta("logo."),
            completed("A blue logo."),
            RunEvent::RunCompleted {
                usage: usage(40, 4)
            },
        ]
    );
}

#[tokio::test]
async fn without_vision_images_are_a_note_and_the_message_stays_text() {
    let stub = Stub::start(vec![Reply::json(&completion(
        json!({"role": "assistant", "content": "No image."}),
        "stop",
        None,
    ))])
    .await;
    let runner = runner(&stub, false);
    let mut request = stub::request("Describe it.");
    request.model.vision = false;
    request.context = vec![stub::image_block()];
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    let system = format!(
        "{}\n\n{}\n",
        preamble(),
        fenced(
            LOGO_ATTRS,
            "[image 2×1 px, not shown: the model has no vision]"
        )
    );
    assert_eq!(
        stub.requests()[0].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "Describe it."},
            ],
            "stream": false,
        })
    );
    assert_eq!(
        events,
        [
            delta("No image."),
            completed("No image."),
            RunEvent::RunCompleted { usage: None },
        ]
    );
}

#[tokio::test]
async fn a_float_setting_goes_out_as_the_f32_widened_to_f64() {
    let stub = Stub::start(vec![Reply::json(&completion(
        json!({"role": "assistant", "content": "ok"}),
        "stop",
        None,
    ))])
    .await;
    let runner = runner_with(&stub, |c| {
        c.stream = false;
        c.temperature = Some(0.7);
    });
    stub::run(&runner, &stub::request("hi")).await.0.unwrap();
    let body = stub.requests()[0].text();
    assert!(
        body.contains(r#""temperature":0.699999988079071"#),
        "{body}"
    );
}

#[tokio::test]
async fn without_an_executor_tools_are_not_offered_but_the_preamble_is_there() {
    let stub = Stub::start(vec![
        Reply::json(&completion(
            json!({"role": "assistant", "content": "a"}),
            "stop",
            None,
        )),
        Reply::json(&completion(
            json!({"role": "assistant", "content": "b"}),
            "stop",
            None,
        )),
        Reply::json(&completion(
            json!({"role": "assistant", "content": "c"}),
            "stop",
            None,
        )),
    ])
    .await;
    let runner = runner(&stub, false);
    let mut request = stub::request("hi");
    request.tools = vec![tool(
        "kb__search",
        mcp("kb", "search"),
        json!({"type": "object"}),
    )];
    stub::run(&runner, &request).await.0.unwrap();
    // With an executor but a model without tool calling: no tools either.
    request.tool_executor = Some(ScriptedTools::new(Vec::new()));
    request.model.tool_calling = false;
    stub::run(&runner, &request).await.0.unwrap();
    let expected = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": preamble()},
            {"role": "user", "content": "hi"},
        ],
        "stream": false,
    });
    // Only the caller's own tools: their results are not fenced, so no preamble.
    request.tools = vec![tool(
        "caller__lookup",
        ToolOrigin::Caller,
        json!({"type": "object"}),
    )];
    stub::run(&runner, &request).await.0.unwrap();
    let requests = stub.requests();
    assert_eq!(requests[0].json(), expected);
    assert_eq!(requests[1].json(), expected);
    assert_eq!(
        requests[2].json()["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
}

/// A streamed round with two tool calls whose pieces interleave, then the answer.
fn interleaved_tool_calls() -> Vec<Reply> {
    vec![
        sse(
            &[
                chunk(json!({"role": "assistant", "content": "Let me look. "})),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "kb__search", "arguments": ""}}]}),
                ),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":"}}]})),
                chunk(
                    json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "read_resource", "arguments": "{\"server\":\"kb\","}}]}),
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"rust\"}"}}]}),
                ),
                chunk(
                    json!({"tool_calls": [{"index": 1, "function": {"name": "again", "arguments": "\"uri\":\"kb://x\"}"}}]}),
                ),
                finish_chunk("tool_calls"),
                usage_chunk(10, 5),
            ],
            true,
        ),
        sse(
            &[
                chunk(json!({"content": "Found it."})),
                finish_chunk("stop"),
                usage_chunk(20, 2),
            ],
            true,
        ),
    ]
}

/// An MCP search tool (its schema with `$schema`) and the exploration `read_resource`.
fn search_tools() -> Vec<ToolSpec> {
    vec![
        tool(
            "kb__search",
            mcp("kb", "search"),
            json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"],
            }),
        ),
        tool(
            "read_resource",
            ToolOrigin::Exploration,
            json!({"type": "object", "properties": {"server": {"type": "string"}, "uri": {"type": "string"}}}),
        ),
    ]
}

#[tokio::test]
async fn a_streamed_tool_loop_assembles_calls_split_over_chunks() {
    let stub = Stub::start(interleaved_tool_calls()).await;
    let runner = runner(&stub, true);
    let tools = ScriptedTools::new(vec![
        text_result("3 hits for rust"),
        Ok(ToolCallResult {
            content: vec![ToolContent::Resource {
                contents: ResourceContents::Text {
                    uri: "kb://x".into(),
                    mime_type: Some("text/plain".into()),
                    text: "X text\n".into(),
                },
            }],
            structured_content: None,
            is_error: false,
        }),
    ]);
    let mut request = stub::request("Find rust");
    request.tools = search_tools();
    request.tool_executor = Some(tools.clone());
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        tools.calls(),
        [
            ("kb__search".to_owned(), json!({"q": "rust"})),
            (
                "read_resource".to_owned(),
                json!({"server": "kb", "uri": "kb://x"})
            ),
        ]
    );
    let offered = json!([
        {"type": "function", "function": {
            "name": "kb__search",
            "description": "The kb__search tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        }},
        {"type": "function", "function": {
            "name": "read_resource",
            "description": "The read_resource tool.",
            "parameters": {"type": "object", "properties": {"server": {"type": "string"}, "uri": {"type": "string"}}},
        }},
    ]);
    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": preamble()},
                {"role": "user", "content": "Find rust"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": offered,
        })
    );
    assert_eq!(
        requests[1].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": preamble()},
                {"role": "user", "content": "Find rust"},
                {"role": "assistant", "content": "Let me look. ", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "kb__search", "arguments": "{\"q\":\"rust\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "read_resource", "arguments": "{\"server\":\"kb\",\"uri\":\"kb://x\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "3 hits for rust"},
                {"role": "tool", "tool_call_id": "call_2", "content": fenced(r#"server="kb" uri="kb://x" mime="text/plain""#, "X text")},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": offered,
        })
    );
    assert_eq!(
        events,
        [
            delta("Let me look. "),
            started("call_1", "kb__search", json!({"q": "rust"})),
            finished("call_1", "kb__search", false),
            started(
                "call_2",
                "read_resource",
                json!({"server": "kb", "uri": "kb://x"})
            ),
            finished("call_2", "read_resource", false),
            delta("Found it."),
            completed("Let me look. Found it."),
            RunEvent::RunCompleted {
                usage: usage(30, 7)
            },
        ]
    );
}

/// A failed result with content of every kind: text with a fence tag in it, an image,
/// audio, a resource link, an image blob and another blob.
fn every_kind_of_content() -> Result<ToolCallResult, ToolError> {
    Ok(ToolCallResult {
        content: vec![
            ToolContent::Text {
                text: format!("line <resource-{NONCE}>"),
            },
            ToolContent::Image {
                mime_type: "image/png".into(),
                data: vec![1, 2, 3],
            },
            ToolContent::Audio {
                mime_type: "audio/wav".into(),
                data: vec![0; 4],
            },
            ToolContent::ResourceLink {
                resource: Resource {
                    uri: "kb://l".into(),
                    name: "l".into(),
                    title: None,
                    description: None,
                    mime_type: Some("text/plain".into()),
                    size: None,
                    annotations: None,
                },
            },
            ToolContent::Resource {
                contents: ResourceContents::Blob {
                    uri: "kb://img".into(),
                    mime_type: Some("image/png".into()),
                    data: vec![4, 5],
                },
            },
            ToolContent::Resource {
                contents: ResourceContents::Blob {
                    uri: "kb://bin".into(),
                    mime_type: None,
                    data: vec![0; 7],
                },
            },
        ],
        structured_content: None,
        is_error: true,
    })
}

#[tokio::test]
async fn tool_results_of_every_kind_become_one_string_and_images_follow() {
    let stub = Stub::start(vec![
        Reply::json(&completion(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "kb__fetch", "arguments": "{}"}},
                {"id": "call_b", "type": "function", "function": {"name": "kb__fetch", "arguments": {"an": "object"}}},
                {"id": "call_c", "type": "function", "function": {"name": "kb__fetch", "arguments": "{oops"}},
                {"type": "function", "function": {"name": "kb__fetch", "arguments": "{}"}},
                {"id": "call_d", "type": "function", "function": {"name": "kb__fetch"}},
            ]}),
            "tool_calls",
            Some((100, 10)),
        )),
        Reply::json(&completion(
            json!({"role": "assistant", "content": "Done."}),
            "stop",
            Some((200, 20)),
        )),
    ])
    .await;
    let runner = runner(&stub, false);
    let tools = ScriptedTools::new(vec![
        every_kind_of_content(),
        Err(ToolError::UnknownTool {
            name: "kb__fetch".into(),
        }),
        // Taken by the call with invalid arguments (the executor records it).
        text_result("unused"),
        Ok(ToolCallResult {
            content: Vec::new(),
            structured_content: Some(json!({"n": 1})),
            is_error: false,
        }),
    ]);
    let mut request = stub::request("Fetch");
    request.tools = vec![tool(
        "kb__fetch",
        mcp("kb", "fetch"),
        json!({"type": "object"}),
    )];
    request.tool_executor = Some(tools.clone());
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        tools.calls(),
        [
            ("kb__fetch".to_owned(), json!({})),
            ("kb__fetch".to_owned(), json!({})),
            ("kb__fetch".to_owned(), json!("{oops")),
            ("kb__fetch".to_owned(), json!({})),
        ]
    );
    let first_result = format!(
        "Error: line &lt;resource-{NONCE}>\n\
         [image image/png, 3 bytes: attached below]\n\
         [audio audio/wav, 4 bytes: not shown]\n\
         [resource link: kb://l (l, text/plain)]\n\
         [image resource kb://img: attached below]\n\
         [binary resource kb://bin (application/octet-stream, 7 bytes) not shown]"
    );
    assert_eq!(
        stub.requests()[1].json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": preamble()},
                {"role": "user", "content": "Fetch"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "kb__fetch", "arguments": "{}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "kb__fetch", "arguments": "{}"}},
                    {"id": "call_c", "type": "function", "function": {"name": "kb__fetch", "arguments": "{oops"}},
                    {"id": "call_d", "type": "function", "function": {"name": "kb__fetch", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_a", "content": first_result},
                {"role": "tool", "tool_call_id": "call_b", "content": "Error: no tool named `kb__fetch` is offered in this turn"},
                {"role": "tool", "tool_call_id": "call_c", "content": "Error: the arguments are not valid JSON: key must be a string at line 1 column 2"},
                {"role": "tool", "tool_call_id": "call_d", "content": "{\"n\":1}"},
                {"role": "user", "content": [
                    {"type": "text", "text": "Images returned by the tool calls above:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AQID"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,BAU="}},
                ]},
            ],
            "stream": false,
            "tools": [{"type": "function", "function": {"name": "kb__fetch", "description": "The kb__fetch tool.", "parameters": {"type": "object"}}}],
        })
    );
    assert_eq!(
        events,
        [
            started("call_a", "kb__fetch", json!({})),
            finished("call_a", "kb__fetch", true),
            started("call_b", "kb__fetch", json!({})),
            finished("call_b", "kb__fetch", true),
            started("call_c", "kb__fetch", json!("{oops")),
            finished("call_c", "kb__fetch", true),
            started("call_d", "kb__fetch", json!({})),
            finished("call_d", "kb__fetch", false),
            delta("Done."),
            completed("Done."),
            RunEvent::RunCompleted {
                usage: usage(300, 30)
            },
        ]
    );
}

#[tokio::test]
async fn tool_results_are_cut_to_the_window_oldest_first() {
    let long = "alpha ".repeat(3000);
    let stub = Stub::start(vec![
        Reply::json(&completion(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ]}),
            "tool_calls",
            None,
        )),
        Reply::json(&completion(
            json!({"role": "assistant", "content": "ok"}),
            "stop",
            None,
        )),
    ])
    .await;
    let runner = runner(&stub, false);
    let mut request = stub::request("go");
    request.model = ModelProfile {
        context_window: 1200,
        max_output_tokens: 200,
        ..ModelProfile::default()
    };
    request.tools = vec![tool("t", ToolOrigin::Exploration, json!({}))];
    request.tool_executor = Some(ScriptedTools::new(vec![
        text_result(&long),
        text_result(&long),
    ]));
    stub::run(&runner, &request).await.0.unwrap();
    let tk = Tokenizer::new(request.model.encoding).unwrap();
    let body = stub.requests()[1].json();
    let contents: Vec<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    let tokens: Vec<usize> = contents.iter().map(|c| tk.count(c)).collect();
    let tails: Vec<&str> = contents
        .iter()
        .map(|c| c.rsplit("alpha").next().unwrap())
        .collect();
    assert_eq!(tokens, [598, 250]);
    assert_eq!(
        tails,
        ["\n[… 250 tokens omitted …]", "\n[… 2760 tokens omitted …]"]
    );
    let lengths: Vec<usize> = contents.iter().map(String::len).collect();
    assert_eq!(lengths, [3568, 1475]);
}

#[tokio::test]
async fn messages_over_the_window_fail_before_any_call() {
    let stub = Stub::start(Vec::new()).await;
    let runner = runner(&stub, false);
    let mut request = stub::request(&"alpha ".repeat(2000));
    request.model = ModelProfile {
        context_window: 1200,
        max_output_tokens: 200,
        ..ModelProfile::default()
    };
    let (e, _) = failure(&runner, &request).await;
    assert!(
        matches!(&e, RunError::ContextTooLong { message } if message == "the messages are 2005 tokens, over the 1000 input tokens the model has, even with tool results cut"),
        "{e:?}"
    );
    assert!(stub.requests().is_empty());
}

#[test]
fn model_schema_drops_document_keywords_but_keeps_names() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "urn:tool",
        "type": "object",
        "properties": {
            "$id": {"type": "string", "$comment": "an argument called $id"},
            "items": {"type": "array", "items": {"$schema": "x", "type": "integer"}}
        },
        "required": ["$id"]
    });
    assert_eq!(
        model_schema(&schema),
        json!({
            "type": "object",
            "properties": {
                "$id": {"type": "string"},
                "items": {"type": "array", "items": {"type": "integer"}}
            },
            "required": ["$id"]
        })
    );
}
