//! The `dify` runner against a stand-in of the Dify service API: the request bodies it
//! sends (compared whole) and what it makes of the event streams.

use hostpipe_core::RunEvent;
use serde_json::{Value, json};

use super::*;
use crate::stub::{self, DOC_ATTRS, Reply, Stub, completed, delta, fenced, preamble, usage};

fn runner_with(stub: &Stub, change: impl FnOnce(&mut DifyConfig)) -> DifyRunner {
    let mut config = DifyConfig {
        base_url: stub.base_url.clone(),
        max_retries: 0,
        ..DifyConfig::default()
    };
    change(&mut config);
    DifyRunner::new(config, Some("app-test")).unwrap()
}

fn runner(stub: &Stub) -> DifyRunner {
    runner_with(stub, |_| {})
}

fn message(conversation: &str, answer: &str) -> Value {
    json!({"event": "message", "task_id": "t1", "message_id": "m1", "conversation_id": conversation, "answer": answer, "created_at": 1})
}

fn message_end(conversation: &str, usage: Option<(u64, u64)>) -> Value {
    let mut v = json!({"event": "message_end", "task_id": "t1", "message_id": "m1", "conversation_id": conversation});
    if let Some((p, c)) = usage {
        v["metadata"] = json!({"usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c, "currency": "USD"}, "retriever_resources": []});
    }
    v
}

/// Runs and expects a failure; its display text, after checking `run_failed` came
/// last.
async fn failure(runner: &DifyRunner, request: &RunRequest) -> String {
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
    e.to_string()
}

#[tokio::test]
async fn chat_sends_context_and_variables_as_inputs_and_keeps_the_conversation() {
    let stub = Stub::start(vec![
        Reply::sse_json(&[
            json!({"event": "workflow_started", "conversation_id": "dc-1", "data": {}}),
            message("dc-1", "Hel"),
            json!({"event": "agent_thought", "conversation_id": "dc-1", "thought": "hm"}),
            json!({"event": "agent_message", "conversation_id": "dc-1", "answer": "lo"}),
            message("dc-1", ""),
            message_end("dc-1", Some((30, 2))),
            message("dc-1", "after the end"),
        ]),
        Reply::sse(&[
            "ping",
            &message("dc-1", "draft").to_string(),
            r#"{"event": "message_replace", "conversation_id": "dc-1", "answer": "Final."}"#,
            &message_end("dc-1", None).to_string(),
        ]),
    ])
    .await;
    let runner = runner(&stub);
    let mut request = stub::request("What now?");
    request.system_prompt = Some("Be brief.".into());
    request.context = vec![stub::text_block("The doc says hi.")];
    request.variables.insert("group", "g1");
    request.sender = Some("alice".into());
    request.ids.conversation = Some("c1".into());
    let (result, first) = stub::run(&runner, &request).await;
    result.unwrap();
    let (result, second) = stub::run(&runner, &request).await;
    result.unwrap();
    let context = format!(
        "Be brief.\n\n{}\n\n{}\n",
        preamble(),
        fenced(DOC_ATTRS, "The doc says hi.")
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/chat-messages");
    assert_eq!(requests[0].content_type, "application/json");
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some("Bearer app-test")
    );
    let mut body = json!({
        "query": "What now?",
        "inputs": {"group": "g1", "context": context},
        "response_mode": "streaming",
        "user": "alice",
        "files": [],
    });
    assert_eq!(requests[0].json(), body);
    body["conversation_id"] = json!("dc-1");
    assert_eq!(requests[1].json(), body);
    assert_eq!(
        first,
        [
            delta("Hel"),
            delta("lo"),
            completed("Hello"),
            RunEvent::RunCompleted {
                usage: usage(30, 2)
            },
        ]
    );
    assert_eq!(
        second,
        [
            delta("draft"),
            completed("Final."),
            RunEvent::RunCompleted { usage: None },
        ]
    );
}

#[tokio::test]
async fn context_in_query_default_user_and_no_conversation() {
    let stub = Stub::start(vec![
        Reply::sse_json(&[message("dc-9", "a"), message_end("dc-9", None)]),
        Reply::sse_json(&[message("dc-9", "b"), message_end("dc-9", None)]),
    ])
    .await;
    let runner = runner_with(&stub, |c| {
        c.context_in_query = true;
        c.default_user = "bot".into();
        c.inputs_variable = "kb_context".into();
    });
    let mut request = stub::request("What now?");
    request.context = vec![stub::text_block("The doc says hi.")];
    request.variables.insert("kb_context", "from the user");
    stub::run(&runner, &request).await.0.unwrap();
    let mut bare = stub::request("Hi");
    bare.variables.insert("kb_context", "from the user");
    stub::run(&runner, &bare).await.0.unwrap();
    let context = format!(
        "{}\n\n{}\n",
        preamble(),
        fenced(DOC_ATTRS, "The doc says hi.")
    );
    let requests = stub.requests();
    assert_eq!(
        requests[0].json(),
        json!({
            "query": format!("{context}\n\nWhat now?"),
            "inputs": {"kb_context": context},
            "response_mode": "streaming",
            "user": "bot",
            "files": [],
        })
    );
    assert_eq!(
        requests[1].json(),
        json!({
            "query": "Hi",
            "inputs": {"kb_context": ""},
            "response_mode": "streaming",
            "user": "bot",
            "files": [],
        })
    );
}

#[tokio::test]
async fn images_are_uploaded_and_referenced_by_id() {
    let stub = Stub::start(vec![
        Reply::json(&json!({"id": "file-1", "name": "context-1.png", "size": 3, "extension": "png", "mime_type": "image/png", "created_by": "u", "created_at": 1})),
        Reply::json(&json!({"id": "file-2"})),
        Reply::sse_json(&[message("", "A logo."), message_end("", None)]),
    ])
    .await;
    let runner = runner(&stub);
    let mut jpeg = stub::image_block();
    if let hostpipe_core::BlockBody::Image { mime_type, .. } = &mut jpeg.body {
        *mime_type = "image/jpeg".into();
    }
    jpeg.source.uri = "kb://photo".into();
    jpeg.mime_type = Some("image/jpeg".into());
    let mut request = stub::request("Describe.");
    request.context = vec![stub::image_block(), jpeg];
    request.sender = Some("alice".into());
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    let requests = stub.requests();
    assert_eq!(requests.len(), 3);
    for (upload, name, mime) in [
        (&requests[0], "context-1.png", "image/png"),
        (&requests[1], "context-2.jpg", "image/jpeg"),
    ] {
        assert_eq!(upload.path, "/v1/files/upload");
        assert!(
            upload
                .content_type
                .starts_with("multipart/form-data; boundary="),
            "{}",
            upload.content_type
        );
        let body = upload.text();
        assert!(
            body.contains(&format!(
                "Content-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {mime}\r\n\r\n\u{1}\u{2}\u{3}\r\n"
            )),
            "{body}"
        );
        assert!(
            body.contains("Content-Disposition: form-data; name=\"user\"\r\n\r\nalice\r\n"),
            "{body}"
        );
    }
    let note = |uri: &str, mime: &str| {
        fenced(
            &format!(r#"server="kb" uri="{uri}" scope="message" mime="{mime}" treatment="whole""#),
            "[image 2×1 px, attached to the user message]",
        )
    };
    let context = format!(
        "{}\n\n{}\n\n{}\n",
        preamble(),
        note("kb://logo", "image/png"),
        note("kb://photo", "image/jpeg")
    );
    assert_eq!(
        requests[2].json(),
        json!({
            "query": "Describe.",
            "inputs": {"context": context},
            "response_mode": "streaming",
            "user": "alice",
            "files": [
                {"type": "image", "transfer_method": "local_file", "upload_file_id": "file-1"},
                {"type": "image", "transfer_method": "local_file", "upload_file_id": "file-2"},
            ],
        })
    );
    assert_eq!(
        events,
        [
            delta("A logo."),
            completed("A logo."),
            RunEvent::RunCompleted { usage: None },
        ]
    );
}

#[tokio::test]
async fn upload_answers_without_an_id_fail() {
    let stub = Stub::start(vec![
        Reply::json(&json!({"name": "context-1.png"})),
        Reply::json(&json!({"id": 7})),
        Reply::raw(200, "application/json", "nope"),
        Reply::raw(
            413,
            "application/json",
            r#"{"code": "file_too_large", "message": "File size exceeded.", "status": 413}"#,
        ),
    ])
    .await;
    let runner = runner(&stub);
    let mut request = stub::request("Describe.");
    request.context = vec![stub::image_block()];
    let mut errors = Vec::new();
    for _ in 0..4 {
        errors.push(failure(&runner, &request).await);
    }
    assert_eq!(
        errors,
        [
            "runner backend failed: files/upload: the answer has no `id`".to_owned(),
            "runner backend failed: files/upload: the answer has no `id`".to_owned(),
            format!(
                "runner backend failed: files/upload: invalid JSON: error decoding response body for url ({}/files/upload)",
                stub.base_url
            ),
            "runner backend failed: files/upload: File size exceeded. (HTTP 413)".to_owned(),
        ]
    );
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|r| r.path == "/v1/files/upload"));
    // The `user` of a turn without a sender.
    assert!(
        requests[0]
            .text()
            .contains("name=\"user\"\r\n\r\nhostpipe\r\n")
    );
}

#[tokio::test]
async fn stream_errors_and_odd_events() {
    let stub = Stub::start(vec![
        Reply::sse_json(&[
            message("", "part"),
            json!({"event": "error", "task_id": "t1", "status": 400, "code": "provider_quota_exceeded", "message": "quota exceeded"}),
        ]),
        Reply::sse_json(&[json!({"event": "error"})]),
        Reply::sse_json(&[message("", "part")]),
        // Leniency: unparseable data, odd types and a `null` usage.
        Reply::sse(&[
            "not json",
            "42",
            r#"{"event": 5, "answer": "x"}"#,
            r#"{"event": "message", "answer": 5, "conversation_id": 1}"#,
            r#"{"event": "message", "answer": "ok"}"#,
            r#"{"event": "message_end", "metadata": {"usage": null}}"#,
        ]),
        Reply::sse(&[
            r#"{"event": "message_end", "metadata": {"usage": {"prompt_tokens": "1", "completion_tokens": 2}}}"#,
        ]),
        Reply::sse(&[r#"{"event": "message_end", "metadata": 5}"#]),
    ])
    .await;
    let runner = runner(&stub);
    let request = stub::request("Hi");
    let mut errors = Vec::new();
    for _ in 0..3 {
        errors.push(failure(&runner, &request).await);
    }
    assert_eq!(
        errors,
        [
            "runner backend failed: Dify: quota exceeded (provider_quota_exceeded)",
            "runner backend failed: Dify: error (?)",
            "runner backend failed: chat-messages: the stream ended without message_end (the answer may be cut off)",
        ]
    );
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta("ok"),
            completed("ok"),
            RunEvent::RunCompleted { usage: usage(0, 0) },
        ]
    );
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        events,
        [completed(""), RunEvent::RunCompleted { usage: usage(0, 2) },]
    );
    let (result, events) = stub::run(&runner, &request).await;
    result.unwrap();
    assert_eq!(
        events,
        [completed(""), RunEvent::RunCompleted { usage: None }]
    );
}

#[tokio::test]
async fn a_stale_conversation_is_dropped_and_the_message_sent_again_once() {
    let not_found = Reply::raw(
        404,
        "application/json",
        r#"{"code": "not_found", "message": "Conversation Not Exists.", "status": 404}"#,
    );
    let stub = Stub::start(vec![
        Reply::sse_json(&[message("dc-1", "one"), message_end("dc-1", None)]),
        not_found.clone(),
        Reply::sse_json(&[message("dc-2", "two"), message_end("dc-2", None)]),
        Reply::sse_json(&[message("dc-2", "three"), message_end("dc-2", None)]),
        not_found.clone(),
        Reply::raw(
            404,
            "application/json",
            r#"{"code": "not_found", "message": "App not found.", "status": 404}"#,
        ),
    ])
    .await;
    let runner = runner(&stub);
    let mut request = stub::request("Hi");
    request.ids.conversation = Some("c1".into());
    for _ in 0..3 {
        stub::run(&runner, &request).await.0.unwrap();
    }
    let conversations: Vec<Option<Value>> = stub
        .requests()
        .iter()
        .map(|r| r.json().get("conversation_id").cloned())
        .collect();
    assert_eq!(
        conversations,
        [None, Some(json!("dc-1")), None, Some(json!("dc-2"))]
    );
    // A 404 on a message without a known conversation is an error.
    let fresh = stub::request("Hi");
    assert_eq!(
        failure(&runner, &fresh).await,
        "runner backend failed: chat-messages: 404 conversation not found"
    );
    assert_eq!(
        failure(&runner, &fresh).await,
        "runner backend failed: chat-messages: App not found. (HTTP 404)"
    );
}

#[tokio::test]
async fn a_workflow_gets_the_query_among_its_inputs_and_answers_with_its_output() {
    let finished = |data: Value| json!({"event": "workflow_finished", "task_id": "t1", "workflow_run_id": "r1", "data": data});
    let stub = Stub::start(vec![
        Reply::sse_json(&[
            json!({"event": "workflow_started", "data": {}}),
            json!({"event": "text_chunk", "data": {"text": "Sum"}}),
            json!({"event": "text_chunk", "data": {}}),
            json!({"event": "node_finished", "data": {}}),
            finished(json!({"status": "succeeded", "outputs": {"text": "Summary.", "other": 1}, "total_tokens": 9})),
        ]),
        Reply::sse_json(&[
            json!({"event": "text_chunk", "data": {"text": "Chunks"}}),
            finished(json!({"status": "partial-succeeded", "outputs": {"text": 5}})),
        ]),
        Reply::sse_json(&[finished(json!({"status": "failed", "error": "boom"}))]),
        Reply::sse_json(&[finished(json!({"status": "stopped"}))]),
        Reply::sse_json(&[json!({"event": "workflow_finished"})]),
        Reply::sse_json(&[json!({"event": "error", "message": "bad input", "code": "invalid_param"})]),
        Reply::sse_json(&[json!({"event": "error"})]),
        Reply::sse_json(&[json!({"event": "text_chunk", "data": {"text": "a"}})]),
    ])
    .await;
    let runner = runner_with(&stub, |c| c.app_type = DifyAppType::Workflow);
    let mut request = stub::request("Summarize");
    request.context = vec![stub::text_block("The doc says hi.")];
    request.variables.insert("query", "shadowed");
    request.variables.insert("lang", "en");
    let (result, first) = stub::run(&runner, &request).await;
    result.unwrap();
    let (result, second) = stub::run(&runner, &request).await;
    result.unwrap();
    let mut errors = Vec::new();
    for _ in 0..6 {
        errors.push(failure(&runner, &request).await);
    }
    let context = format!(
        "{}\n\n{}\n",
        preamble(),
        fenced(DOC_ATTRS, "The doc says hi.")
    );
    let requests = stub.requests();
    assert_eq!(requests[0].path, "/v1/workflows/run");
    assert_eq!(
        requests[0].json(),
        json!({
            "inputs": {"lang": "en", "query": "Summarize", "context": context},
            "response_mode": "streaming",
            "user": "hostpipe",
            "files": [],
        })
    );
    assert_eq!(
        first,
        [
            delta("Sum"),
            delta(""),
            completed("Summary."),
            RunEvent::RunCompleted { usage: None },
        ]
    );
    assert_eq!(
        second,
        [
            delta("Chunks"),
            completed("Chunks"),
            RunEvent::RunCompleted { usage: None },
        ]
    );
    assert_eq!(
        errors,
        [
            "runner backend failed: Dify workflow failed: boom",
            "runner backend failed: Dify workflow stopped: no error given",
            "runner backend failed: Dify workflow failed: no error given",
            "runner backend failed: Dify: bad input",
            "runner backend failed: Dify: error",
            "runner backend failed: Dify workflow: the stream ended without workflow_finished",
        ]
    );
}

#[tokio::test]
async fn a_workflow_reads_the_configured_output_variable() {
    let stub = Stub::start(vec![Reply::sse_json(&[json!({"event": "workflow_finished", "data": {"status": "succeeded", "outputs": {"text": "no", "answer": "yes"}}})])]).await;
    let runner = runner_with(&stub, |c| {
        c.app_type = DifyAppType::Workflow;
        c.output_variable = "answer".into();
    });
    let (result, events) = stub::run(&runner, &stub::request("Hi")).await;
    result.unwrap();
    assert_eq!(
        events,
        [completed("yes"), RunEvent::RunCompleted { usage: None }]
    );
}

#[test]
fn mime_types_map_to_dify_file_types() {
    assert_eq!(file_type("image/png"), "image");
    assert_eq!(file_type("text/markdown; charset=utf-8"), "document");
    assert_eq!(file_type("application/pdf"), "document");
    assert_eq!(file_type("audio/mpeg"), "audio");
    assert_eq!(file_type("video/mp4"), "video");
    assert_eq!(file_type("application/zip"), "custom");
}

#[tokio::test]
async fn arrays_where_objects_belong_count_as_absent() {
    let stub = Stub::start(vec![
        Reply::sse(&[
            r#"{"event": "message", "answer": "a"}"#,
            r#"{"event": "message_end", "metadata": [{"usage": {"prompt_tokens": 1}}]}"#,
        ]),
        Reply::sse(&[
            r#"{"event": "text_chunk", "data": ["x"]}"#,
            r#"{"event": "workflow_finished", "data": {"status": "succeeded", "outputs": ["y"]}}"#,
        ]),
        Reply::sse(&[r#"{"event": "workflow_finished", "data": ["succeeded"]}"#]),
    ])
    .await;
    let (result, events) = stub::run(&runner(&stub), &stub::request("Hi")).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta("a"),
            completed("a"),
            RunEvent::RunCompleted { usage: None },
        ]
    );
    let workflow = runner_with(&stub, |c| c.app_type = DifyAppType::Workflow);
    let (result, events) = stub::run(&workflow, &stub::request("Hi")).await;
    result.unwrap();
    assert_eq!(
        events,
        [
            delta(""),
            completed(""),
            RunEvent::RunCompleted { usage: None },
        ]
    );
    assert_eq!(
        failure(&workflow, &stub::request("Hi")).await,
        "runner backend failed: Dify workflow failed: no error given"
    );
}
