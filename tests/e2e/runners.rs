//! Runners against local stand-ins of the providers' HTTP APIs that check every
//! request against the published reference; the tools the model calls are real
//! (server-everything).

use hostpipe_core::{
    BlockBody, BlockSource, ContextBlock, ModelProfile, RunError, RunEvent, RunRequest, Runner,
    Scope, Treatment, Turn, collect_reply,
};
use hostpipe_runners::{LocalAgentRunner, LocalConfig};
use hostpipe_tests::openai_api::{ChatCompletions, answer, stream, tool_call};
use hostpipe_tests::{connect, everything};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::pipeline;

async fn endpoint(replies: Vec<ResponseTemplate>) -> (MockServer, ChatCompletions) {
    let server = MockServer::start().await;
    let api = ChatCompletions::new(replies);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(api.clone())
        .mount(&server)
        .await;
    (server, api)
}

fn local_pipeline(base: &str, stream: bool) -> String {
    format!(
        r#"
[model]
name = "gpt-test"
vision = false
[pipelines.default]
stages = ["bind_mcp_servers", "tool_assembly"]
runner = "local"
system_prompt = "You are a test assistant."
[pipelines.default.bind_mcp_servers]
servers = ["everything"]
[pipelines.default.local]
base_url = "{base}/v1"
model = "gpt-test"
api_key_env = "HOSTPIPE_TEST_UNSET_KEY"
stream = {stream}
"#
    )
}

#[tokio::test]
async fn the_tool_loop_calls_the_real_tool_and_sends_its_content_list_as_one_string() {
    let host = connect(vec![everything("everything")]).await;
    let (server, api) = endpoint(vec![
        tool_call("call_1", "everything__get-tiny-image", "{}"),
        answer("That is the MCP logo."),
    ])
    .await;
    let p = pipeline(&host, &local_pipeline(&server.uri(), false));
    let outcome = p.run_turn(Turn::new("default", "Show me the logo")).await;
    assert_eq!(
        outcome.status,
        hostpipe_engine::TurnStatus::Completed,
        "{}",
        outcome.reply
    );
    assert_eq!(outcome.reply, "That is the MCP logo.");

    let requests = api.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(first["messages"][1]["content"], "Show me the logo");
    let tools = first["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["function"]["name"] == "everything__get-tiny-image")
    );
    // The tool result (text, image, text) reaches the endpoint as one string.
    let tool_message = &requests[1]["messages"][3];
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_call_id"], "call_1");
    let content = tool_message["content"].as_str().unwrap();
    assert!(
        content.starts_with("Here's the image you requested:\n[image image/png, "),
        "{content}"
    );
    assert!(
        content.contains("not shown, the model has no vision]"),
        "{content}"
    );
    assert!(
        content.ends_with("The image above is the MCP logo."),
        "{content}"
    );

    let run = outcome.run.unwrap();
    let kinds: Vec<&str> = run
        .events
        .iter()
        .map(|e| match e {
            RunEvent::ToolCallStarted { .. } => "started",
            RunEvent::ToolCallFinished { .. } => "finished",
            RunEvent::MessageDelta { .. } => "delta",
            RunEvent::MessageCompleted { .. } => "completed",
            RunEvent::RunCompleted { .. } => "run_completed",
            RunEvent::RunFailed { .. } => "failed",
        })
        .collect();
    assert_eq!(
        kinds,
        ["started", "finished", "delta", "completed", "run_completed"]
    );
    assert_eq!(
        run.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((150, 15)),
        "usage summed over both calls"
    );
    host.shutdown().await;
}

#[tokio::test]
async fn streamed_deltas_and_a_streamed_tool_call_assemble() {
    let host = connect(vec![everything("everything")]).await;
    let (server, api) = endpoint(vec![
        stream(&[
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "everything__echo", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"message\":"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": " \"hi there\"}"}}]}),
        ]),
        stream(&[
            json!({"role": "assistant", "content": "The echo "}),
            json!({"content": "said hi."}),
        ]),
    ])
    .await;
    let p = pipeline(&host, &local_pipeline(&server.uri(), true));
    let outcome = p.run_turn(Turn::new("default", "Echo hi there")).await;
    assert_eq!(
        outcome.status,
        hostpipe_engine::TurnStatus::Completed,
        "{}",
        outcome.reply
    );
    assert_eq!(outcome.reply, "The echo said hi.");
    let requests = api.requests();
    assert_eq!(requests[0]["stream"], true);
    assert_eq!(requests[0]["stream_options"]["include_usage"], true);
    assert_eq!(
        requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"message\": \"hi there\"}"
    );
    assert_eq!(requests[1]["messages"][3]["content"], "Echo: hi there");
    let deltas: Vec<String> = outcome
        .run
        .unwrap()
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::MessageDelta { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["The echo ", "said hi."]);
    host.shutdown().await;
}

fn request_with_image(vision: bool) -> RunRequest {
    let mut turn = Turn::new("default", "What is in the picture?");
    turn.model = std::sync::Arc::new(ModelProfile {
        vision,
        ..ModelProfile::default()
    });
    turn.context.push(ContextBlock {
        source: BlockSource {
            server: "demo".into(),
            uri: "demo://images/logo.png".into(),
            template: None,
            scope: Scope::Pipeline,
            name: None,
        },
        mime_type: Some("image/png".into()),
        body: BlockBody::Image {
            mime_type: "image/png".into(),
            data: vec![137, 80, 78, 71],
            width: 1,
            height: 1,
        },
        treatment: Treatment::Whole,
        tokens_before: 0,
        tokens_after: 85,
    });
    RunRequest::from_turn(&mut turn)
}

fn config(base: &str) -> LocalConfig {
    LocalConfig {
        base_url: format!("{base}/v1"),
        model: "gpt-test".into(),
        stream: false,
        max_retries: 2,
        ..LocalConfig::default()
    }
}

#[tokio::test]
async fn images_are_image_parts_only_for_vision_and_the_key_is_a_bearer_token() {
    let (server, api) = endpoint(vec![answer("A logo.")]).await;
    let runner = LocalAgentRunner::new(config(&server.uri()), Some("sk-test")).unwrap();
    collect_reply(&runner, &request_with_image(true))
        .await
        .unwrap();
    collect_reply(&runner, &request_with_image(false))
        .await
        .unwrap();
    let requests = api.requests();
    let with = &requests[0]["messages"][1]["content"];
    assert_eq!(with[0]["text"], "What is in the picture?");
    assert_eq!(
        with[2]["image_url"]["url"],
        "data:image/png;base64,iVBORw=="
    );
    assert_eq!(
        requests[1]["messages"][1]["content"],
        "What is in the picture?"
    );
    let system = requests[1]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("[image 1×1 px, not shown: the model has no vision]"),
        "{system}"
    );
    let auth = server.received_requests().await.unwrap()[0]
        .headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn retries_honour_retry_after_and_errors_are_typed() {
    // 429 then success: one retry, after the server's Retry-After (0 s here).
    let (server, api) = endpoint(vec![
        ResponseTemplate::new(429)
            .insert_header("retry-after", "0")
            .set_body_json(json!({"error": {"message": "slow down", "type": "rate_limit_error"}})),
        answer("ok"),
    ])
    .await;
    let runner = LocalAgentRunner::new(config(&server.uri()), None).unwrap();
    let reply = collect_reply(&runner, &request_with_image(false))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(api.requests().len(), 2);

    let cases = [
        (
            ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "Incorrect API key provided"}})),
            "auth",
        ),
        (
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}})),
            "context",
        ),
        (
            ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}})),
            "server",
        ),
        (
            ResponseTemplate::new(429).insert_header("retry-after", "0").set_body_json(json!({"error": {"message": "quota"}})),
            "rate",
        ),
    ];
    for (reply, kind) in cases {
        let (server, api) = endpoint(vec![reply]).await;
        let runner = LocalAgentRunner::new(config(&server.uri()), None).unwrap();
        let err = collect_reply(&runner, &request_with_image(false))
            .await
            .unwrap_err();
        let ok = match kind {
            "auth" => {
                matches!(&err, RunError::Auth { status: 401, message } if message.contains("Incorrect API key"))
            }
            "context" => matches!(err, RunError::ContextTooLong { .. }),
            "server" => matches!(err, RunError::Server { status: 503, .. }),
            _ => matches!(err, RunError::RateLimited { .. }),
        };
        assert!(ok, "{kind}: {err:?}");
        let expected = if matches!(kind, "server" | "rate") {
            3
        } else {
            1
        };
        assert_eq!(
            api.requests().len(),
            expected,
            "{kind}: retried only 429/5xx"
        );
    }
}

#[tokio::test]
async fn a_model_that_never_stops_calling_tools_ends_at_max_rounds() {
    let host = connect(vec![everything("everything")]).await;
    let (server, api) = endpoint(vec![tool_call(
        "c",
        "everything__echo",
        "{\"message\":\"x\"}",
    )])
    .await;
    let toml = local_pipeline(&server.uri(), false) + "max_rounds = 3\n";
    let p = pipeline(&host, &toml);
    let outcome = p.run_turn(Turn::new("default", "loop")).await;
    assert_eq!(outcome.status, hostpipe_engine::TurnStatus::RunnerFailed);
    // Why is in the trace; the user's reply says only that it failed.
    assert!(outcome.trace.records().iter().any(|r| matches!(&r.event,
        hostpipe_core::TraceEvent::RunFinished { error: Some(e), .. }
            if e.contains("still calling tools after 3 rounds"))));
    assert!(
        outcome
            .reply
            .starts_with("Sorry, I could not answer this message"),
        "{}",
        outcome.reply
    );
    assert_eq!(api.requests().len(), 3);
    host.shutdown().await;
}

/// A runner must stop when the caller drops the run: here the endpoint answers after
/// 30 s and the run is abandoned after 200 ms.
#[tokio::test]
async fn dropping_the_run_cancels_it() {
    let (server, _api) = endpoint(vec![
        answer("late").set_delay(std::time::Duration::from_secs(30)),
    ])
    .await;
    let runner = LocalAgentRunner::new(config(&server.uri()), None).unwrap();
    let request = request_with_image(false);
    let started = std::time::Instant::now();
    let run = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        collect_reply(&runner as &dyn Runner, &request),
    )
    .await;
    assert!(run.is_err(), "still running at 200 ms");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn the_stand_in_rejects_requests_that_break_the_reference() {
    use hostpipe_tests::openai_api::check_request;
    let ok = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(check_request(&ok), Ok(()));
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            "`model` (string) is required",
        ),
        (
            json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].tool_call_id is required",
        ),
        (
            json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "a", "content": "x"}]}),
            "answers no earlier tool call",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image", "url": "x"}]}]}),
            "must be a text or image_url part",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}),
            "tools[0] must be",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "context": []}),
            "unknown request field `context`",
        ),
    ];
    for (body, rule) in cases {
        let err = check_request(&body).unwrap_err();
        assert!(err.contains(rule), "{err} / {rule}");
    }
}

#[tokio::test]
async fn the_cli_runs_the_local_runner_without_a_config_file() {
    let (server, api) = endpoint(vec![answer("Hi from the model.")]).await;
    let out = tokio::process::Command::from(hostpipe_tests::hostpipe_command())
        .args([
            "run",
            "--runner",
            "local",
            "--base-url",
            &format!("{}/v1", server.uri()),
            "--model",
            "qwen3",
            "What does the config say?",
        ])
        .current_dir(hostpipe_tests::root())
        .env_remove("OPENAI_API_KEY")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "Hi from the model.");
    let body = &api.requests()[0];
    assert_eq!(body["model"], "qwen3");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains(" server=\"demo\" uri=\"demo://config/app.json\""),
        "{system}"
    );
}

mod remote {
    use hostpipe_core::{RunError, collect_reply};
    use hostpipe_runners::remote::{RemoteRunRequest, VERSION, request_schema, request_schema_v2};
    use hostpipe_runners::{RemoteConfig, RemoteRunner};
    use serde_json::json;
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::request_with_image;

    #[test]
    fn the_published_schemas_are_the_ones_the_code_sends() {
        for (name, schema) in [
            ("remote-run-request.v1.schema.json", request_schema()),
            ("remote-run-request.v2.schema.json", request_schema_v2()),
        ] {
            let file = hostpipe_tests::root().join("docs").join(name);
            let generated = serde_json::to_string_pretty(&schema).unwrap() + "\n";
            if std::env::var_os("HOSTPIPE_BLESS").is_some() {
                std::fs::write(&file, &generated).unwrap();
            }
            let published = std::fs::read_to_string(&file).unwrap_or_default();
            assert_eq!(
                published, generated,
                "{name}: run with HOSTPIPE_BLESS=1 to update the file"
            );
        }
    }

    async fn agent(reply: ResponseTemplate) -> MockServer {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/agent"))
            .and(header("authorization", "Bearer t0ken"))
            .respond_with(reply)
            .mount(&server)
            .await;
        server
    }

    fn runner(server: &MockServer) -> RemoteRunner {
        let config = RemoteConfig {
            url: format!("{}/agent", server.uri()),
            max_retries: 0,
            ..RemoteConfig::default()
        };
        RemoteRunner::new(config, Some("t0ken")).unwrap()
    }

    #[tokio::test]
    async fn a_json_reply_and_the_versioned_body() {
        let server = agent(ResponseTemplate::new(200).set_body_json(
            json!({"text": "Remote says hi.", "usage": {"input_tokens": 3, "output_tokens": 4}}),
        ))
        .await;
        let mut request = request_with_image(true);
        request.variables.insert("group_id", "g-1");
        let reply = collect_reply(&runner(&server), &request).await.unwrap();
        assert_eq!(reply.text, "Remote says hi.");
        assert_eq!(reply.usage.map(|u| u.output_tokens), Some(4));
        let received = server.received_requests().await.unwrap();
        let body: RemoteRunRequest = serde_json::from_slice(&received[0].body).unwrap();
        assert_eq!(body.version, VERSION);
        assert_eq!(body.message, "What is in the picture?");
        assert_eq!(body.variables["group_id"], "g-1");
        let raw: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
        assert_eq!(raw["context"][0]["body"]["kind"], "image");
        assert_eq!(raw["context"][0]["body"]["data_base64"], "iVBORw==");
        assert_eq!(raw["context"][0]["uri"], "demo://images/logo.png");
    }

    #[tokio::test]
    async fn an_event_stream_is_relayed_and_a_failure_is_an_error() {
        let events = [
            json!({"event": "message_delta", "text": "Hel"}),
            json!({"event": "message_delta", "text": "lo"}),
            json!({"event": "run_completed", "usage": null}),
        ];
        let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        let server =
            agent(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
        let reply = collect_reply(&runner(&server), &request_with_image(false))
            .await
            .unwrap();
        assert_eq!(reply.text, "Hello");
        assert!(matches!(
            reply.events.last(),
            Some(hostpipe_core::RunEvent::RunCompleted { .. })
        ));

        let body = format!(
            "data: {}\n\n",
            json!({"event": "run_failed", "error": "the agent crashed"})
        );
        let server =
            agent(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")).await;
        let err = collect_reply(&runner(&server), &request_with_image(false))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RunError::Backend { message, .. } if message.contains("the agent crashed")),
            "{err}"
        );

        let server =
            agent(ResponseTemplate::new(403).set_body_json(json!({"message": "no"}))).await;
        let err = collect_reply(&runner(&server), &request_with_image(false))
            .await
            .unwrap_err();
        assert!(matches!(err, RunError::Auth { status: 403, .. }), "{err:?}");
    }
}

mod dify {
    use std::sync::{Arc, Mutex};

    use hostpipe_core::{RunEvent, collect_reply};
    use hostpipe_runners::{DifyAppType, DifyConfig, DifyRunner};
    use serde_json::{Value, json};
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    use super::request_with_image;

    /// The Dify service API reference's rules for `POST /v1/chat-messages` and
    /// `POST /v1/workflows/run` bodies; `Err` names the broken rule.
    fn check_body(body: &Value, workflow: bool) -> Result<(), String> {
        let obj = body.as_object().ok_or("the body must be an object")?;
        let known: &[&str] = if workflow {
            &["inputs", "response_mode", "user", "files"]
        } else {
            &[
                "query",
                "inputs",
                "response_mode",
                "user",
                "conversation_id",
                "files",
                "auto_generate_name",
            ]
        };
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown field `{k}`"));
        }
        if !workflow && !obj.get("query").is_some_and(Value::is_string) {
            return Err("`query` (string) is required".into());
        }
        let inputs = obj
            .get("inputs")
            .and_then(Value::as_object)
            .ok_or("`inputs` (object) is required")?;
        if inputs.values().any(|v| !v.is_string()) {
            return Err("`inputs` values must be strings here".into());
        }
        if !matches!(
            obj.get("response_mode").and_then(Value::as_str),
            Some("streaming" | "blocking")
        ) {
            return Err("`response_mode` must be streaming or blocking".into());
        }
        if !obj.get("user").is_some_and(Value::is_string) {
            return Err("`user` (string) is required".into());
        }
        for (i, f) in obj
            .get("files")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let ty = f.get("type").and_then(Value::as_str).unwrap_or("");
            let tm = f
                .get("transfer_method")
                .and_then(Value::as_str)
                .unwrap_or("");
            let ok = ["document", "image", "audio", "video", "custom"].contains(&ty)
                && match tm {
                    "local_file" => f.get("upload_file_id").is_some_and(Value::is_string),
                    "remote_url" => f.get("url").is_some_and(Value::is_string),
                    _ => false,
                };
            if !ok {
                return Err(format!(
                    "files[{i}] must be {{type, transfer_method, upload_file_id | url}}"
                ));
            }
        }
        Ok(())
    }

    fn sse(events: &[Value]) -> ResponseTemplate {
        let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
    }

    #[derive(Clone, Default)]
    struct Dify {
        bodies: Arc<Mutex<Vec<Value>>>,
        uploads: Arc<Mutex<Vec<String>>>,
        script: Arc<Mutex<Vec<ResponseTemplate>>>,
        workflow: bool,
    }

    impl Respond for Dify {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            if request.url.path().ends_with("/files/upload") {
                let raw = String::from_utf8_lossy(&request.body).into_owned();
                let ok = raw.contains("name=\"file\"") && raw.contains("name=\"user\"");
                if !ok {
                    return ResponseTemplate::new(400).set_body_json(json!({"code": "invalid_param", "message": "file and user are required", "status": 400}));
                }
                self.uploads.lock().unwrap().push(raw);
                return ResponseTemplate::new(201).set_body_json(json!({"id": "file-1", "name": "context-1.png", "size": 4, "extension": "png", "mime_type": "image/png", "created_by": "u", "created_at": 1}));
            }
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            self.bodies.lock().unwrap().push(body.clone());
            if let Err(rule) = check_body(&body, self.workflow) {
                return ResponseTemplate::new(400).set_body_json(
                    json!({"code": "invalid_param", "message": rule, "status": 400}),
                );
            }
            let mut script = self.script.lock().unwrap();
            if script.len() > 1 {
                script.remove(0)
            } else {
                script[0].clone()
            }
        }
    }

    async fn stand_in(script: Vec<ResponseTemplate>, workflow: bool) -> (MockServer, Dify) {
        let server = MockServer::start().await;
        let dify = Dify {
            script: Arc::new(Mutex::new(script)),
            workflow,
            ..Dify::default()
        };
        Mock::given(method("POST"))
            .respond_with(dify.clone())
            .mount(&server)
            .await;
        (server, dify)
    }

    fn runner(server: &MockServer, app_type: DifyAppType) -> DifyRunner {
        let config = DifyConfig {
            base_url: format!("{}/v1", server.uri()),
            app_type,
            max_retries: 0,
            ..DifyConfig::default()
        };
        DifyRunner::new(config, Some("app-key")).unwrap()
    }

    fn answer(conversation: &str, text: &str) -> ResponseTemplate {
        sse(&[
            json!({"event": "message", "task_id": "t", "message_id": "m", "conversation_id": conversation, "answer": text, "created_at": 1}),
            json!({"event": "message_end", "task_id": "t", "message_id": "m", "conversation_id": conversation, "metadata": {"usage": {"prompt_tokens": 11, "completion_tokens": 2}}}),
        ])
    }

    #[tokio::test]
    async fn chat_inputs_files_and_a_stale_conversation_that_recovers() {
        let not_found = ResponseTemplate::new(404).set_body_json(
            json!({"code": "not_found", "message": "Conversation Not Exists.", "status": 404}),
        );
        let (server, dify) = stand_in(
            vec![
                answer("conv-1", "Hi."),
                not_found,
                answer("conv-2", "Hello again."),
            ],
            false,
        )
        .await;
        let r = runner(&server, DifyAppType::Chat);
        let mut request = request_with_image(true);
        request.ids.conversation = Some("chat-7".into());
        request.sender = Some("user-42".into());
        request.variables.insert("group_id", "g-1");

        let first = collect_reply(&r, &request).await.unwrap();
        assert_eq!(first.text, "Hi.");
        assert_eq!(first.usage.map(|u| u.input_tokens), Some(11));
        let second = collect_reply(&r, &request).await.unwrap();
        assert_eq!(second.text, "Hello again.");

        let bodies = dify.bodies.lock().unwrap().clone();
        assert_eq!(bodies.len(), 3);
        // Only the user-visible variables and the context go into `inputs`.
        let mut keys: Vec<&str> = bodies[0]["inputs"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["context", "group_id"]);
        let context = bodies[0]["inputs"]["context"].as_str().unwrap();
        assert!(
            context.contains(" server=\"demo\" uri=\"demo://images/logo.png\""),
            "{context}"
        );
        assert_eq!(bodies[0]["user"], "user-42");
        assert_eq!(
            bodies[0]["files"],
            json!([{"type": "image", "transfer_method": "local_file", "upload_file_id": "file-1"}])
        );
        assert!(
            bodies[0].get("conversation_id").is_none(),
            "a new conversation first"
        );
        assert_eq!(bodies[1]["conversation_id"], "conv-1", "then the stored id");
        assert!(
            bodies[2].get("conversation_id").is_none(),
            "the stale id is dropped and the turn retried once"
        );
        let uploads = dify.uploads.lock().unwrap().clone();
        assert!(
            uploads[0].contains("user-42"),
            "the upload carries the user"
        );
    }

    #[tokio::test]
    async fn a_workflow_streams_chunks_and_ends_with_its_output() {
        let (server, dify) = stand_in(vec![sse(&[
            json!({"event": "workflow_started", "task_id": "t", "workflow_run_id": "w", "data": {"id": "w"}}),
            json!({"event": "text_chunk", "task_id": "t", "workflow_run_id": "w", "data": {"text": "Done "}}),
            json!({"event": "text_chunk", "task_id": "t", "workflow_run_id": "w", "data": {"text": "here."}}),
            json!({"event": "workflow_finished", "task_id": "t", "workflow_run_id": "w", "data": {"id": "w", "status": "succeeded", "outputs": {"text": "Done here."}, "total_tokens": 30}}),
        ])], true)
        .await;
        let reply = collect_reply(
            &runner(&server, DifyAppType::Workflow),
            &request_with_image(false),
        )
        .await
        .unwrap();
        assert_eq!(reply.text, "Done here.");
        let deltas: Vec<&RunEvent> = reply
            .events
            .iter()
            .filter(|e| matches!(e, RunEvent::MessageDelta { .. }))
            .collect();
        assert_eq!(deltas.len(), 2);
        let body = &dify.bodies.lock().unwrap()[0];
        assert_eq!(body["inputs"]["query"], "What is in the picture?");
    }

    #[test]
    fn mime_types_map_to_dify_file_types() {
        use hostpipe_runners::dify::file_type;
        assert_eq!(file_type("image/png"), "image");
        assert_eq!(file_type("application/pdf"), "document");
        assert_eq!(file_type("audio/mpeg"), "audio");
        assert_eq!(file_type("video/mp4"), "video");
        assert_eq!(file_type("application/zip"), "custom");
    }
}

/// The contract every runner keeps (`hostpipe_engine::testkit::conformance`), checked
/// on each with the same request: a success ends with `message_completed` then
/// `run_completed` (deltas only before them, nothing after); a backend failure is a typed
/// error and, under the pipeline's layers, the last event is `run_failed`; a dropped run
/// stops.
mod runner_conformance {
    use std::time::{Duration, Instant};

    use hostpipe_core::{RunError, Runner, collect_reply};
    use hostpipe_engine::testkit::conformance;
    use hostpipe_runners::{
        DifyConfig, DifyRunner, LocalAgentRunner, PreviewConfig, PreviewRunner, RemoteConfig,
        RemoteRunner,
    };
    use serde_json::json;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::request_with_image;

    async fn server(reply: ResponseTemplate) -> MockServer {
        let s = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(reply)
            .mount(&s)
            .await;
        s
    }

    fn local(s: &MockServer) -> Box<dyn Runner> {
        let c = hostpipe_runners::LocalConfig {
            base_url: format!("{}/v1", s.uri()),
            model: "m".into(),
            max_retries: 0,
            ..Default::default()
        };
        Box::new(LocalAgentRunner::new(c, None).unwrap())
    }
    fn dify(s: &MockServer) -> Box<dyn Runner> {
        let c = DifyConfig {
            base_url: format!("{}/v1", s.uri()),
            max_retries: 0,
            ..Default::default()
        };
        Box::new(DifyRunner::new(c, Some("k")).unwrap())
    }
    fn remote(s: &MockServer) -> Box<dyn Runner> {
        let c = RemoteConfig {
            url: format!("{}/agent", s.uri()),
            max_retries: 0,
            ..Default::default()
        };
        Box::new(RemoteRunner::new(c, None).unwrap())
    }

    #[tokio::test]
    async fn every_runner_keeps_the_contract() {
        let mut request = request_with_image(false);
        request.context.clear();
        // Success.
        let preview = PreviewRunner::new(PreviewConfig::default());
        let reply = collect_reply(&preview, &request).await.unwrap();
        conformance::check_success("preview", &preview, &request, &reply.text)
            .await
            .unwrap();
        type Make = fn(&MockServer) -> Box<dyn Runner>;
        let cases: Vec<(&str, ResponseTemplate, Make)> = vec![
            ("local", hostpipe_tests::openai_api::answer("A."), local),
            (
                "dify",
                ResponseTemplate::new(200).set_body_raw(
                    format!(
                        "data: {}\n\ndata: {}\n\n",
                        json!({"event": "message", "conversation_id": "c", "answer": "A."}),
                        json!({"event": "message_end", "conversation_id": "c", "metadata": {}})
                    ),
                    "text/event-stream",
                ),
                dify,
            ),
            (
                "remote",
                ResponseTemplate::new(200).set_body_json(json!({"text": "A."})),
                remote,
            ),
        ];
        for (name, reply, make) in cases {
            let s = server(reply).await;
            conformance::check_success(name, make(&s).as_ref(), &request, "A.")
                .await
                .unwrap();
            // A backend failure: typed, and reported as the last event.
            let failing =
                server(ResponseTemplate::new(500).set_body_json(json!({"message": "boom"}))).await;
            conformance::check_failure(name, make(&failing).as_ref(), &request, |e| {
                matches!(e, RunError::Server { status: 500, .. })
            })
            .await
            .unwrap();
            // Cancellation: dropping the run ends it.
            let slow = server(ResponseTemplate::new(200).set_delay(Duration::from_secs(30))).await;
            let started = Instant::now();
            conformance::check_cancellation(name, make(&slow).as_ref(), &request)
                .await
                .unwrap();
            assert!(started.elapsed() < Duration::from_secs(2), "{name}");
        }
    }
}

/// What a review of the runners broke, kept broken-proof.
mod hardening {
    use std::time::{Duration, Instant};

    use hostpipe_core::{RunError, collect_reply};
    use hostpipe_runners::{
        DifyConfig, DifyRunner, LocalAgentRunner, LocalConfig, RemoteConfig, RemoteRunner,
    };
    use serde_json::json;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::request_with_image;

    fn text_request() -> hostpipe_core::RunRequest {
        let mut r = request_with_image(false);
        r.context.clear();
        r
    }

    async fn server(reply: ResponseTemplate) -> MockServer {
        let s = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(reply)
            .mount(&s)
            .await;
        s
    }

    #[tokio::test]
    async fn a_token_in_the_url_never_reaches_the_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = RemoteConfig {
            url: format!("http://127.0.0.1:{port}/agent?token=S3CRET"),
            max_retries: 0,
            ..Default::default()
        };
        let err = collect_reply(&RemoteRunner::new(config, None).unwrap(), &text_request())
            .await
            .unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("S3CRET"), "{shown}");
    }

    #[tokio::test]
    async fn a_stream_cut_off_before_its_end_is_an_error() {
        let cut = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The answer is\"},\"finish_reason\":null}]}\n\n";
        let s = server(ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream")).await;
        let config = LocalConfig {
            base_url: format!("{}/v1", s.uri()),
            model: "m".into(),
            max_retries: 0,
            ..Default::default()
        };
        let err = collect_reply(
            &LocalAgentRunner::new(config, None).unwrap(),
            &text_request(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("cut off"), "{err}");

        let cut = format!(
            "data: {}\n\n",
            json!({"event": "message", "conversation_id": "c", "answer": "Half"})
        );
        let s = server(ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream")).await;
        let config = DifyConfig {
            base_url: format!("{}/v1", s.uri()),
            max_retries: 0,
            ..Default::default()
        };
        let err = collect_reply(&DifyRunner::new(config, None).unwrap(), &text_request())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("without message_end"), "{err}");
    }

    #[tokio::test]
    async fn retries_stop_at_the_timeout_and_side_effects_are_not_repeated() {
        let s = server(
            ResponseTemplate::new(503)
                .insert_header("retry-after", "3")
                .set_body_json(json!({"error": {"message": "busy"}})),
        )
        .await;
        let config = LocalConfig {
            base_url: format!("{}/v1", s.uri()),
            model: "m".into(),
            timeout_ms: 1000,
            max_retries: 5,
            ..Default::default()
        };
        let started = Instant::now();
        let err = collect_reply(
            &LocalAgentRunner::new(config, None).unwrap(),
            &text_request(),
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(
            matches!(err, RunError::Server { status: 503, .. }),
            "{err:?}"
        );
        assert_eq!(s.received_requests().await.unwrap().len(), 1);

        // A 502 from an agent may have started the turn: not sent again.
        let s = server(ResponseTemplate::new(502).set_body_json(json!({"message": "bad gateway"})))
            .await;
        let config = RemoteConfig {
            url: format!("{}/agent", s.uri()),
            max_retries: 3,
            ..Default::default()
        };
        let _ = collect_reply(&RemoteRunner::new(config, None).unwrap(), &text_request())
            .await
            .unwrap_err();
        let got = s.received_requests().await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0]
                .headers
                .get("idempotency-key")
                .map(|v| v.to_str().unwrap().to_owned()),
            Some(text_request().ids.message)
        );
    }

    #[tokio::test]
    async fn each_member_of_a_group_has_their_own_dify_conversation() {
        let reply = |c: &str| {
            format!(
                "data: {}\n\ndata: {}\n\n",
                json!({"event": "message", "conversation_id": c, "answer": "ok"}),
                json!({"event": "message_end", "conversation_id": c, "metadata": {}})
            )
        };
        let s = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200).set_body_raw(reply("conv-a"), "text/event-stream"),
            )
            .mount(&s)
            .await;
        let config = DifyConfig {
            base_url: format!("{}/v1", s.uri()),
            max_retries: 0,
            ..Default::default()
        };
        let runner = DifyRunner::new(config, None).unwrap();
        let mut alice = text_request();
        alice.ids.conversation = Some("group-1".into());
        alice.sender = Some("alice".into());
        let mut bob = alice.clone();
        bob.sender = Some("bob".into());
        collect_reply(&runner, &alice).await.unwrap();
        collect_reply(&runner, &bob).await.unwrap();
        collect_reply(&runner, &alice).await.unwrap();
        let bodies: Vec<serde_json::Value> = s
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect();
        assert!(
            bodies[1].get("conversation_id").is_none(),
            "bob starts his own: {}",
            bodies[1]
        );
        assert_eq!(
            bodies[2]["conversation_id"], "conv-a",
            "alice continues hers"
        );
    }
}
