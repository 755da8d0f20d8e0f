//! The typed bodies against the JSON they replaced and against docs/openapi.json.

#![allow(clippy::unwrap_used, clippy::panic)]

use hostpipe_core::{
    CallOrigin, FallbackReason, RunReply, ServerStatus, TokenUsage, Tool, ToolCallRecord,
    ToolCallResult, ToolHints, Trace,
};
use hostpipe_engine::TurnOutcome;
use hostpipe_stages::convert::Converted;
use serde_json::{Value, json};

use super::super::openai::wire::{
    ChatCompletion, Choice, Chunk, ChunkChoice, Delta, FinishReason, Model, ModelList, OpenAiError,
    OutFunctionCall, OutMessage, OutToolCall, Usage,
};
use super::*;

fn tool() -> Tool {
    Tool {
        name: "echo".into(),
        title: None,
        description: Some("Echoes its input".into()),
        input_schema: json!({"type": "object"}),
        annotations: ToolHints::default(),
    }
}

fn record() -> ToolCallRecord {
    ToolCallRecord {
        server: "demo".into(),
        tool: "echo".into(),
        name: "demo__echo".into(),
        arguments: json!({"text": "hi"}),
        result_bytes: 2,
        result_tokens: 1,
        is_error: false,
        error: None,
        withheld: false,
        elapsed_ms: 3,
        consent: None,
        origin: CallOrigin::Api,
    }
}

fn item(converted: Converted) -> ContentItem {
    ContentItem::from(PreviewItem {
        uri: "demo://a".into(),
        mime_type: None,
        bytes: 3,
        converted,
    })
}

fn outcome() -> TurnOutcome {
    TurnOutcome {
        reply: "hello".into(),
        ended_by: None,
        request: None,
        run: Some(RunReply {
            text: "hello".into(),
            usage: Some(TokenUsage {
                input_tokens: 10,
                output_tokens: 2,
            }),
            events: vec![RunEvent::MessageDelta {
                text: "hello".into(),
            }],
        }),
        status: hostpipe_engine::TurnStatus::Completed,
        runner_failure: None,
        trace: Trace::new(),
    }
}

fn value(dto: &impl Serialize) -> Value {
    document(dto).unwrap()
}

/// The typed bodies give the JSON the `json!` bodies gave: the same fields, `null`
/// where a value is absent.
#[test]
fn typed_bodies_serialize_as_the_json_bodies_did() {
    let items = [
        (
            item(Converted::Text("abc".into())),
            json!({"uri": "demo://a", "mime_type": null, "bytes": 3, "kind": "text", "text": "abc"}),
        ),
        (
            item(Converted::Image {
                mime_type: "image/png".into(),
                data: vec![1, 2, 3],
                width: 4,
                height: 5,
            }),
            json!({"uri": "demo://a", "mime_type": null, "bytes": 3, "kind": "image", "image": {
                "mime_type": "image/png", "width": 4, "height": 5, "data": "AQID",
            }}),
        ),
        (
            item(Converted::Fallback {
                reason: FallbackReason::Binary,
                note: "[binary]".into(),
            }),
            json!({"uri": "demo://a", "mime_type": null, "bytes": 3, "kind": "fallback",
                "reason": {"kind": "binary"}, "text": "[binary]"}),
        ),
        (
            item(Converted::Refused {
                error: "too large".into(),
                note: "[refused]".into(),
            }),
            json!({"uri": "demo://a", "mime_type": null, "bytes": 3, "kind": "refused",
                "error": "too large", "text": "[refused]"}),
        ),
    ];
    for (item, expected) in items {
        assert_eq!(value(&item), expected);
    }

    let t = tool();
    let offered = OfferedTool {
        tool: &t,
        offered_as: None,
    };
    let mut expected = serde_json::to_value(&t).unwrap();
    expected["offered_as"] = Value::Null;
    assert_eq!(value(&offered), expected);

    let c = CompletionResponse::from(Completion {
        values: vec!["a".into()],
        total: None,
        has_more: false,
    });
    assert_eq!(
        value(&c),
        json!({"completion": {"values": ["a"], "total": null, "hasMore": false}})
    );

    assert_eq!(
        value(&StoreHealth::from(Ok("memory".to_owned()))),
        json!({"ok": true, "store": "memory"})
    );
    assert_eq!(
        value(&StoreHealth::from(Err("down".to_owned()))),
        json!({"ok": false, "error": "down"})
    );
    assert_eq!(
        value(&ReadyStatus::StoreUnavailable),
        json!("store_unavailable")
    );
    assert_eq!(
        value(&HistoryPage {
            records: Vec::new(),
            next_offset: None
        }),
        json!({"records": [], "next_offset": null})
    );

    let outcome = outcome();
    let run = outcome.run.as_ref().unwrap();
    assert_eq!(
        value(&TurnResponse::new(&outcome, "default", "local")),
        json!({
            "turn_id": outcome.trace.turn_id(),
            "pipeline": "default",
            "runner": "local",
            "reply": outcome.reply,
            "failed": false,
            "status": "completed",
            "ended_by": outcome.ended_by,
            "usage": run.usage,
            "events": run.events,
            "request": null,
            "trace": outcome.trace.records(),
        })
    );
}

/// Schemas that list only some of their properties on purpose: a [`RunEvent`]'s
/// other fields depend on its `event`.
const OPEN: &[&str] = &["#/components/schemas/RunEvent"];

/// What of `value` does not match `schema` (resolving `$ref`s in `doc`): a required
/// property missing, a property the schema does not list (stricter than JSON Schema,
/// to catch a misspelt field; not for the [`OPEN`] schemas), a type or value it does
/// not allow. Enough of JSON Schema for our documents, not all of it.
fn mismatches(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let reference = schema["$ref"].as_str();
    let open = reference.is_some_and(|r| OPEN.contains(&r));
    let schema = match reference {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap(),
        None => schema,
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let allowed: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let number = kind == "integer" && allowed.contains(&"number");
    if !allowed.is_empty() && !allowed.contains(&kind) && !number {
        out.push(format!("{at}: {kind}, the schema says {allowed:?}"));
        return;
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        out.push(format!("{at}: {value} is not one of {options:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        out.push(format!("{at}: {value}, the schema says {c}"));
    }
    match value {
        Value::Object(fields) => {
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap();
                if !fields.contains_key(name) {
                    out.push(format!("{at}: required `{name}` is missing"));
                }
            }
            let Some(properties) = schema["properties"].as_object() else {
                return;
            };
            for (name, v) in fields {
                match properties.get(name) {
                    Some(s) => mismatches(doc, s, v, &format!("{at}.{name}"), out),
                    None if open || schema["additionalProperties"] == Value::Bool(true) => {}
                    None => out.push(format!("{at}: `{name}` is not in the schema")),
                }
            }
        }
        Value::Array(items) if schema.get("items").is_some() => {
            for (i, v) in items.iter().enumerate() {
                mismatches(doc, &schema["items"], v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A sample of each typed body: the route, method and status it answers, and its JSON.
fn samples() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let t = tool();
    let outcome = outcome();
    vec![
        ("/healthz", "get", "200", value(&Health { status: "ok" })),
        (
            "/readyz",
            "get",
            "200",
            value(&Ready {
                status: ReadyStatus::Ready,
                store: StoreHealth::from(Ok("memory".to_owned())),
                servers: vec![
                    ServerHealth {
                        name: "demo".into(),
                        status: (&ServerStatus::Connected).into(),
                    },
                    ServerHealth {
                        name: "remote".into(),
                        status: (&ServerStatus::NeedsLogin {
                            reason: "HTTP 401".into(),
                        })
                            .into(),
                    },
                ],
            }),
        ),
        (
            "/v1/servers/{server}/login",
            "post",
            "200",
            value(&LoginStarted {
                server: "remote".into(),
                authorization_url: "https://as.example/authorize?state=s".into(),
                redirect_uri: "http://127.0.0.1:8787/oauth/callback".into(),
                expires_in_s: 600,
                persistent: true,
            }),
        ),
        (
            "/v1/servers",
            "get",
            "200",
            value(&ServerList {
                servers: Vec::new(),
                added: vec!["kb".into()],
            }),
        ),
        (
            "/v1/servers",
            "post",
            "201",
            value(&AddedServer {
                server: None,
                ignored_keys: vec!["autoApprove".into()],
            }),
        ),
        (
            "/v1/servers/{server}",
            "delete",
            "200",
            value(&RemovedServer {
                name: "kb".into(),
                bound_by: vec!["support".into()],
            }),
        ),
        (
            "/v1/reload",
            "post",
            "200",
            value(&super::super::reload::Reloaded {
                source: "hostpipe.toml".into(),
                servers: super::super::reload::ServerChanges {
                    kept: vec!["demo".into()],
                    added: vec!["kb".into()],
                    changed: Vec::new(),
                    removed: vec!["old".into()],
                },
                pipelines: vec!["support".into()],
                warnings: vec!["[serve] changed: that takes effect at the next start".into()],
            }),
        ),
        (
            "/v1/servers/{server}/resources",
            "get",
            "200",
            value(&ResourceList { resources: &[] }),
        ),
        (
            "/v1/servers/{server}/resource-templates",
            "get",
            "200",
            value(&ResourceTemplateList {
                resource_templates: &[],
            }),
        ),
        (
            "/v1/servers/{server}/prompts",
            "get",
            "200",
            value(&PromptList { prompts: &[] }),
        ),
        (
            "/v1/servers/{server}/tools",
            "get",
            "200",
            value(&ToolList {
                tools: std::slice::from_ref(&t),
            }),
        ),
        (
            "/v1/servers/{server}/tools",
            "get",
            "200",
            value(&PipelineToolList {
                pipeline: "default".into(),
                tools: vec![
                    OfferedTool {
                        tool: &t,
                        offered_as: Some("demo__echo".into()),
                    },
                    OfferedTool {
                        tool: &t,
                        offered_as: None,
                    },
                ],
            }),
        ),
        (
            "/v1/servers/{server}/resources/read",
            "post",
            "200",
            value(&ReadResponse {
                uri: "demo://a".into(),
                model: ModelSummary {
                    name: "gpt-4o".into(),
                    vision: true,
                },
                contents: vec![
                    item(Converted::Text("abc".into())),
                    item(Converted::Image {
                        mime_type: "image/png".into(),
                        data: vec![1],
                        width: 1,
                        height: 1,
                    }),
                    item(Converted::Fallback {
                        reason: FallbackReason::ImageWithoutVision,
                        note: "[image]".into(),
                    }),
                    item(Converted::Refused {
                        error: "bomb".into(),
                        note: "[refused]".into(),
                    }),
                ],
            }),
        ),
        (
            "/v1/servers/{server}/completion",
            "post",
            "200",
            value(&CompletionResponse::from(Completion {
                values: vec!["a".into()],
                total: Some(1),
                has_more: false,
            })),
        ),
        (
            "/v1/servers/{server}/tools/{name}/call",
            "post",
            "200",
            value(&ToolCallResponse {
                turn_id: outcome.trace.turn_id().to_owned(),
                pipeline: "default".into(),
                server: "demo".into(),
                tool: "echo".into(),
                offered_as: Some("demo__echo".into()),
                result: hostpipe_runners::mcp_json::call_tool_result(&ToolCallResult {
                    content: Vec::new(),
                    structured_content: None,
                    is_error: false,
                }),
                call: Some(record()),
            }),
        ),
        (
            "/v1/pipelines",
            "get",
            "200",
            value(&PipelineList {
                pipelines: vec![
                    PipelineSummary {
                        id: "default",
                        runner: "local",
                        stages: vec!["bind_mcp_servers"],
                        model: "gpt-4o",
                        bound_servers: Some(vec!["demo".into()]),
                    },
                    PipelineSummary {
                        id: "other",
                        runner: "preview",
                        stages: Vec::new(),
                        model: "gpt-4o",
                        bound_servers: None,
                    },
                ],
            }),
        ),
        (
            "/v1/pipelines/{id}/attachments",
            "get",
            "200",
            value(&Attachments {
                pins: Vec::new(),
                configured: Vec::new(),
            }),
        ),
        (
            "/v1/pins",
            "get",
            "200",
            value(&PinPage {
                pins: vec![hostpipe_engine::Pin {
                    id: "00000000-0000-0000-0000-000000000000".into(),
                    owner: hostpipe_engine::PinOwner::Conversation("c-1".into()),
                    server: "kb".into(),
                    target: hostpipe_core::AttachmentTarget::Uri {
                        uri: "kb://a".into(),
                    },
                    created_at_ms: 1,
                    expires_at_ms: None,
                }],
                next_offset: Some(1),
            }),
        ),
        (
            "/v1/history",
            "get",
            "200",
            value(&HistoryPage {
                records: Vec::new(),
                next_offset: Some(50),
            }),
        ),
        (
            "/v1/history/tool-calls",
            "get",
            "200",
            value(&ToolCallPage {
                calls: Vec::new(),
                next_offset: None,
            }),
        ),
        (
            "/v1/consent-requests",
            "get",
            "200",
            value(&ConsentRequestList {
                consent_requests: Vec::new(),
            }),
        ),
        (
            "/v1/elicitation-requests",
            "get",
            "200",
            value(&ElicitationRequestList {
                elicitation_requests: ["form", "url"]
                    .iter()
                    .map(|mode| super::super::elicitor::PendingElicitation {
                        id: "00000000-0000-0000-0000-000000000000".into(),
                        asked_at_ms: 1,
                        request: hostpipe_core::ElicitationRequest {
                            turn_id: "t".into(),
                            pipeline: "default".into(),
                            conversation: Some("c".into()),
                            sender: None,
                            server: "s".into(),
                            message: "m".into(),
                            mode: if *mode == "form" {
                                hostpipe_core::ElicitationMode::Form {
                                    requested_schema: serde_json::json!({"type": "object"}),
                                }
                            } else {
                                hostpipe_core::ElicitationMode::Url {
                                    url: "https://a.example/x".into(),
                                    domain: "a.example".into(),
                                }
                            },
                        },
                    })
                    .collect(),
            }),
        ),
        (
            "/v1/turns",
            "post",
            "200",
            value(&TurnResponse::new(&outcome, "default", "local")),
        ),
        (
            "/v1/chat/completions",
            "post",
            "200",
            value(&ChatCompletion {
                id: "chatcmpl-1",
                object: "chat.completion",
                created: 1,
                model: "default",
                choices: [Choice {
                    index: 0,
                    message: OutMessage {
                        role: "assistant",
                        content: Some("hello"),
                        tool_calls: vec![OutToolCall {
                            index: None,
                            id: "call_1".into(),
                            kind: "function",
                            function: OutFunctionCall {
                                name: "lookup".into(),
                                arguments: "{}".into(),
                            },
                        }],
                        refusal: None,
                    },
                    finish_reason: FinishReason::Stop,
                }],
                usage: outcome.run.as_ref().and_then(|r| r.usage).map(Into::into),
            }),
        ),
        (
            "/v1/chat/completions",
            "post",
            "404",
            OpenAiError::from(ApiError::not_found("model_not_found", "no"))
                .with_param("model")
                .body(),
        ),
        (
            "/v1/chat/completions",
            "post",
            "401",
            OpenAiError::from(ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "invalid_token",
                "no",
            ))
            .body(),
        ),
        (
            "/v1/models",
            "get",
            "200",
            value(&ModelList {
                object: "list",
                data: vec![Model {
                    id: "default",
                    object: "model",
                    created: 1,
                    owned_by: "hostpipe",
                }],
            }),
        ),
        (
            "/v1/models/{model}",
            "get",
            "200",
            value(&Model {
                id: "default",
                object: "model",
                created: 1,
                owned_by: "hostpipe",
            }),
        ),
    ]
}

/// A streamed chunk, a content one and the usage one, against `ChatCompletionChunk`.
#[test]
fn chat_completion_chunks_match_the_openapi_document() {
    let doc: Value = serde_json::from_str(super::super::OPENAPI).unwrap();
    let schema = json!({"$ref": "#/components/schemas/ChatCompletionChunk"});
    let content = Chunk {
        id: "chatcmpl-1",
        object: "chat.completion.chunk",
        created: 1,
        model: "default",
        choices: vec![ChunkChoice {
            index: 0,
            delta: Delta {
                role: Some("assistant"),
                content: Some("hi"),
                tool_calls: vec![OutToolCall {
                    index: Some(0),
                    id: "call_1".into(),
                    kind: "function",
                    function: OutFunctionCall {
                        name: "lookup".into(),
                        arguments: "{}".into(),
                    },
                }],
            },
            finish_reason: None,
        }],
        usage: None,
    };
    let usage = Chunk {
        choices: Vec::new(),
        usage: Some(Usage::from(TokenUsage {
            input_tokens: 3,
            output_tokens: 4,
        })),
        ..content
    };
    let mut out = Vec::new();
    for chunk in [value(&content), value(&usage)] {
        mismatches(&doc, &schema, &chunk, "chunk", &mut out);
    }
    assert!(out.is_empty(), "{out:#?}");
    assert_eq!(value(&usage)["usage"]["total_tokens"], 7);
}

/// Each typed body, from a sample, against the schema docs/openapi.json gives for its
/// route's answer.
#[test]
fn typed_bodies_match_the_openapi_document() {
    let doc: Value = serde_json::from_str(super::super::OPENAPI).unwrap();
    let mut out = Vec::new();
    for (path, method, status, sample) in &samples() {
        let schema = &doc["paths"][path][method]["responses"][status]["content"]["application/json"]
            ["schema"];
        assert!(schema.is_object(), "no schema for {method} {path} {status}");
        mismatches(&doc, schema, sample, &format!("{method} {path}"), &mut out);
    }
    assert!(out.is_empty(), "{out:#?}");
}
