//! The `/v1` handlers and the health routes. Shapes are in docs/openapi.json; every
//! error is `{"error": {"code", "message"}}` ([`ApiError`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use hostpipe_core::{
    ArgumentValue, Attachment, AttachmentTarget, CallOrigin, CompletionRef, ConsentAnswer,
    EventSink, HistoryMessage, HistoryQuery, McpSource as _, NewPin, PinOwner, Pipeline,
    Scope as PinScope, Turn, TurnOutcome, Variables,
};
use hostpipe_runners::PreviewReport;
use hostpipe_stages::convert::Converted;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{ApiError, Body, Params, ServeState, TurnEvent};
use crate::ops::{TargetError, pin_target};

type St = State<Arc<ServeState>>;
type ApiResult<T = Response> = Result<T, ApiError>;

/// The `/v1` routes (the caller adds the token check). Every route but a turn is bounded
/// by `request_timeout` (then 504); a turn has its own bound, `[serve] turn_timeout_ms`,
/// which also holds while it streams.
pub(super) fn routes(request_timeout: Duration) -> Router<Arc<ServeState>> {
    Router::new()
        .route("/v1/servers", get(list_servers))
        .route("/v1/servers/{server}", get(get_server))
        .route("/v1/servers/{server}/resources", get(list_resources))
        .route(
            "/v1/servers/{server}/resource-templates",
            get(list_resource_templates),
        )
        .route("/v1/servers/{server}/prompts", get(list_prompts))
        .route("/v1/servers/{server}/prompts/{name}", post(get_prompt))
        .route("/v1/servers/{server}/tools", get(list_tools))
        .route("/v1/servers/{server}/resources/read", post(read_resource))
        .route("/v1/servers/{server}/completion", post(complete))
        .route("/v1/pipelines", get(list_pipelines))
        .route(
            "/v1/pipelines/{id}/attachments",
            get(list_pipeline_pins).post(add_pipeline_pin),
        )
        .route(
            "/v1/pipelines/{id}/attachments/{pin_id}",
            axum::routing::delete(remove_pipeline_pin),
        )
        .route(
            "/v1/conversations/{id}/attachments",
            get(list_conversation_pins).post(add_conversation_pin),
        )
        .route(
            "/v1/conversations/{id}/attachments/{pin_id}",
            axum::routing::delete(remove_conversation_pin),
        )
        .route("/v1/history", get(history))
        .route("/v1/history/tool-calls", get(tool_call_history))
        .route("/v1/consent-requests", get(list_consent_requests))
        .route("/v1/consent-requests/{id}", post(answer_consent_request))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                match tokio::time::timeout(request_timeout, next.run(req)).await {
                    Ok(response) => response,
                    Err(_) => ApiError::new(
                        StatusCode::GATEWAY_TIMEOUT,
                        "request_timeout",
                        format!(
                            "no answer within {} ms ([serve] request_timeout_ms)",
                            request_timeout.as_millis()
                        ),
                    )
                    .into_response(),
                }
            },
        ))
        .route("/v1/turns", post(run_turn))
        // A tool call may wait for a consent answer: bounded like a turn.
        .route("/v1/servers/{server}/tools/{name}/call", post(call_tool))
}

fn json(value: impl serde::Serialize) -> Response {
    axum::Json(value).into_response()
}

// ---- health -------------------------------------------------------------------------

/// `GET /healthz`: the process answers.
pub(super) async fn healthz() -> Response {
    json(serde_json::json!({"status": "ok"}))
}

/// `GET /readyz`: 200 once the servers' first connection attempts are over and the store
/// answers; 503 while starting, when the store fails, and while shutting down. A failed
/// MCP server does not make the instance unready (its status is in the body).
pub(super) async fn readyz(State(state): St) -> Response {
    let servers: Vec<serde_json::Value> = state
        .app
        .host
        .servers()
        .into_iter()
        .map(|s| serde_json::json!({"name": s.name, "status": s.status}))
        .collect();
    let store = match &state.app.store {
        None => Ok("none".to_owned()),
        Some(store) => {
            let probe = HistoryQuery {
                limit: 1,
                ..HistoryQuery::default()
            };
            match tokio::time::timeout(Duration::from_secs(2), store.history(&probe)).await {
                Ok(Ok(_)) => Ok(store.describe()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("{} did not answer within 2 s", store.describe())),
            }
        }
    };
    let status = if state.draining.load(Ordering::SeqCst) {
        "draining"
    } else if !state.connected.load(Ordering::SeqCst) {
        "starting"
    } else if store.is_err() {
        "store_unavailable"
    } else {
        "ready"
    };
    let code = if status == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let store = match store {
        Ok(s) => serde_json::json!({"ok": true, "store": s}),
        Err(e) => serde_json::json!({"ok": false, "error": e}),
    };
    (
        code,
        axum::Json(serde_json::json!({"status": status, "store": store, "servers": servers})),
    )
        .into_response()
}

/// Any other path.
pub(super) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(
        "not_found",
        format!(
            "no route {}; the API is described at /openapi.json",
            uri.path()
        ),
    )
}

/// A known path with another method.
pub(super) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

// ---- servers ------------------------------------------------------------------------

async fn list_servers(State(state): St) -> Response {
    json(serde_json::json!({"servers": state.app.host.servers()}))
}

async fn get_server(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let info = state
        .app
        .host
        .servers()
        .into_iter()
        .find(|s| s.name == server);
    Ok(json(info))
}

async fn list_resources(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let resources = state.app.host.list_resources(&server).await?;
    Ok(json(serde_json::json!({"resources": &*resources})))
}

async fn list_resource_templates(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let templates = state.app.host.list_resource_templates(&server).await?;
    Ok(json(serde_json::json!({"resource_templates": &*templates})))
}

async fn list_prompts(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let prompts = state.app.host.list_prompts(&server).await?;
    Ok(json(serde_json::json!({"prompts": &*prompts})))
}

/// `POST /v1/servers/{server}/resources/read`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadBody {
    /// The resource URI; or `template` and `arguments`.
    uri: Option<String>,
    /// An RFC 6570 URI template, expanded with `arguments`.
    template: Option<String>,
    #[serde(default)]
    arguments: BTreeMap<String, String>,
    /// Convert for this pipeline's model (default: `[model]`).
    pipeline: Option<String>,
}

async fn read_resource(
    State(state): St,
    Params(server): Params<String>,
    Body(body): Body<ReadBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let from_template = body.template.clone();
    let uri = match (body.uri, body.template) {
        (Some(uri), None) if body.arguments.is_empty() => uri,
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "`arguments` are for `template`; give `uri` alone",
            ));
        }
        (None, Some(template)) => {
            let arguments = body
                .arguments
                .into_iter()
                .map(|(k, v)| (k, ArgumentValue::Literal(v)))
                .collect();
            let AttachmentTarget::Template {
                template,
                arguments,
            } = pin_target(&template, arguments).map_err(target_error)?
            else {
                return Err(ApiError::bad_request(format!(
                    "`{template}` is not a URI template (no {{variable}}); give it as `uri`"
                )));
            };
            hostpipe_stages::uri_template::expand(&template, &arguments, &Variables::default())
                .map_err(|e| ApiError::bad_request(format!("URI template `{template}`: {e}")))?
                .0
        }
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of `uri` and `template`",
            ));
        }
    };
    if uri.is_empty() {
        return Err(ApiError::bad_request("`uri` is empty"));
    }
    let model = match &body.pipeline {
        Some(id) => Arc::clone(pipeline(&state, id)?.model()),
        None => Arc::new(state.app.config.model.clone()),
    };
    let items = state
        .app
        .preview_read(&server, &uri, from_template.as_deref(), &model)
        .await?;
    let contents: Vec<serde_json::Value> = items
        .into_iter()
        .map(|item| {
            let mut v = serde_json::json!({
                "uri": item.uri,
                "mime_type": item.mime_type,
                "bytes": item.bytes,
            });
            let extra = match item.converted {
                Converted::Text(text) => serde_json::json!({"kind": "text", "text": text}),
                Converted::Image {
                    mime_type,
                    data,
                    width,
                    height,
                } => serde_json::json!({"kind": "image", "image": {
                    "mime_type": mime_type,
                    "width": width,
                    "height": height,
                    "data": base64::engine::general_purpose::STANDARD.encode(data),
                }}),
                Converted::Fallback { reason, note } => {
                    serde_json::json!({"kind": "fallback", "reason": reason, "text": note})
                }
                Converted::Refused { error, note } => {
                    serde_json::json!({"kind": "refused", "error": error, "text": note})
                }
            };
            if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
                v.extend(extra);
            }
            v
        })
        .collect();
    Ok(json(serde_json::json!({
        "uri": uri,
        "model": {"name": model.name, "vision": model.vision},
        "contents": contents,
    })))
}

/// `POST /v1/servers/{server}/prompts/{name}`: MCP `prompts/get` (spec 2025-11-25,
/// "Prompts") with string `arguments`; the answer is the spec's `GetPromptResult`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptBody {
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

async fn get_prompt(
    State(state): St,
    Params((server, name)): Params<(String, String)>,
    Body(body): Body<PromptBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let result = match state
        .app
        .host
        .get_prompt(&server, &name, &body.arguments)
        .await
    {
        Ok(result) => result,
        // Servers answer an unknown prompt with -32602, like a bad argument: the list
        // tells them apart.
        Err(e @ hostpipe_core::SourceError::Protocol { code: -32602, .. }) => {
            let listed = state.app.host.list_prompts(&server).await?;
            if listed.iter().any(|p| p.name == name) {
                return Err(e.into());
            }
            return Err(ApiError::not_found(
                "unknown_prompt",
                format!("`{server}` lists no prompt `{name}`"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(json(hostpipe_runners::mcp_json::get_prompt_result(&result)))
}

/// `GET /v1/servers/{server}/tools` query: `pipeline` names the pipeline whose offer to
/// show (`offered_as`: the name its model sees, or null when its `tool_assembly`
/// leaves the tool out or the server is not bound for it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsParams {
    pipeline: Option<String>,
}

async fn list_tools(
    State(state): St,
    Params(server): Params<String>,
    params: Result<Query<ToolsParams>, QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    state.app.check_server(&server)?;
    let tools = state.app.host.list_tools(&server).await?;
    let Some(id) = params.pipeline else {
        return Ok(json(serde_json::json!({"tools": &*tools})));
    };
    let offered = pipeline(&state, &id)?
        .offered_tools(Turn::new(id.as_str(), ""))
        .await
        .map_err(|outcome| ended(&outcome))?;
    let tools: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            let offered_as = offered.iter().find_map(|o| match &o.origin {
                hostpipe_core::ToolOrigin::Mcp { server: s, tool }
                    if *s == server && *tool == t.name =>
                {
                    Some(o.name.clone())
                }
                _ => None,
            });
            let mut v = serde_json::to_value(t).unwrap_or_default();
            if let Some(v) = v.as_object_mut() {
                v.insert("offered_as".into(), offered_as.into());
            }
            v
        })
        .collect();
    Ok(json(serde_json::json!({"pipeline": id, "tools": tools})))
}

/// A turn a stage ended before the tools were assembled (a required server down, a
/// stage failing): 409 with the stage's reply.
fn ended(outcome: &hostpipe_core::TurnOutcome) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "turn_ended",
        format!(
            "stage `{}` ended the turn before its tools were assembled: {}",
            outcome.ended_by.as_deref().unwrap_or("?"),
            outcome.reply
        ),
    )
}

/// `POST /v1/servers/{server}/tools/{name}/call`: `name` as the server lists it; the
/// call is made as in a turn of `pipeline` (see [`hostpipe_core::Pipeline::call_tool`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallBody {
    pipeline: String,
    /// A JSON object; absent or null for none.
    #[serde(default)]
    arguments: serde_json::Value,
    conversation_id: Option<String>,
    message_id: Option<String>,
    bot_id: Option<String>,
    sender: Option<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
}

async fn call_tool(
    State(state): St,
    Params((server, name)): Params<(String, String)>,
    Body(body): Body<ToolCallBody>,
) -> ApiResult {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this instance is shutting down; send the call to another",
        ));
    }
    state.app.check_server(&server)?;
    pipeline(&state, &body.pipeline)?;
    if !(body.arguments.is_object() || body.arguments.is_null()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_arguments",
            format!(
                "`arguments` must be a JSON object, not {}",
                json_kind(&body.arguments)
            ),
        ));
    }
    check_ids(&[
        ("conversation_id", &body.conversation_id),
        ("message_id", &body.message_id),
        ("bot_id", &body.bot_id),
        ("sender", &body.sender),
    ])?;
    let mut turn = Turn::new(body.pipeline.as_str(), "");
    turn.ids.conversation = body.conversation_id;
    turn.ids.bot = body.bot_id;
    turn.ids.message = body
        .message_id
        .unwrap_or_else(|| format!("http-tool-{}", uuid::Uuid::new_v4()));
    turn.sender = body.sender;
    turn.variables = body.variables.into_iter().collect::<Variables>();
    turn.deadline = Some(std::time::Instant::now() + state.options.turn_timeout);
    let turn_id = turn.trace.turn_id().to_owned();
    let pipeline_id = body.pipeline;
    let task = {
        let state = Arc::clone(&state);
        let (server, name, pipeline_id) = (server.clone(), name.clone(), pipeline_id.clone());
        // The call runs to its end (and reaches the history) even if the caller leaves.
        state.turns.clone().spawn(async move {
            let p = state.app.pipelines.get(&pipeline_id)?;
            Some(
                p.call_tool(turn, &server, &name, body.arguments, CallOrigin::Api)
                    .await,
            )
        })
    };
    let outcome = match task.await {
        Ok(Some(Ok(outcome))) => outcome,
        Ok(Some(Err(ended_turn))) => return Err(ended(&ended_turn)),
        Ok(None) => return Err(ApiError::not_found("unknown_pipeline", pipeline_id)),
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the tool call's task failed: {e}"),
            ));
        }
    };
    let record = outcome.trace.tool_calls().last().cloned();
    let result = match outcome.result {
        Ok(result) => result,
        Err(hostpipe_core::ToolError::NotOffered { .. }) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "tool_not_offered",
                format!(
                    "pipeline `{pipeline_id}` does not offer tool `{name}` of `{server}` ([pipelines.{pipeline_id}.tool_assembly] include and exclude)"
                ),
            ));
        }
        Err(hostpipe_core::ToolError::UnknownTool { .. }) => {
            return Err(ApiError::not_found(
                "unknown_tool",
                format!("`{server}` lists no tool `{name}`"),
            ));
        }
        Err(hostpipe_core::ToolError::ServerNotBound { allowed, .. }) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "server_not_bound",
                format!(
                    "pipeline `{pipeline_id}` does not bind server `{server}`; it binds: {}",
                    if allowed.is_empty() {
                        "(none)".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            ));
        }
        Err(hostpipe_core::ToolError::Source(e)) => return Err(e.into()),
        Err(e) => {
            let (status, code) =
                hostpipe_runners::mcp_json::tool_error_status(&e).unwrap_or((502, "server_error"));
            return Err(ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                code,
                e.to_string(),
            ));
        }
    };
    if let Some(r) = record.as_ref().filter(|r| r.withheld) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "tool_call_withheld",
            format!(
                "pipeline `{pipeline_id}`'s consent policy withheld the call of `{name}` (turn {turn_id}): {}",
                r.consent.as_deref().unwrap_or("denied")
            ),
        ));
    }
    Ok(json(serde_json::json!({
        "turn_id": turn_id,
        "pipeline": pipeline_id,
        "server": server,
        "tool": name,
        "offered_as": outcome.name,
        "result": hostpipe_runners::mcp_json::call_tool_result(&result),
        "call": record,
    })))
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Ids given in a body: 1 to [`hostpipe_core::store::MAX_ID_BYTES`] bytes, not blank.
fn check_ids(ids: &[(&str, &Option<String>)]) -> ApiResult<()> {
    for (name, value) in ids {
        if let Some(v) = value
            && (v.trim().is_empty() || v.len() > hostpipe_core::store::MAX_ID_BYTES)
        {
            return Err(ApiError::bad_request(format!(
                "`{name}` must be 1 to {} bytes, not blank",
                hostpipe_core::store::MAX_ID_BYTES
            )));
        }
    }
    Ok(())
}

/// `POST /v1/servers/{server}/completion`: MCP `completion/complete` (spec 2025-11-25,
/// "Utilities / Completion"), with the spec's request shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteBody {
    #[serde(rename = "ref")]
    reference: CompleteRef,
    argument: CompleteArgument,
    #[serde(default)]
    context: CompleteContext,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum CompleteRef {
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteArgument {
    name: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteContext {
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

async fn complete(
    State(state): St,
    Params(server): Params<String>,
    Body(body): Body<CompleteBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let reference = match body.reference {
        CompleteRef::Resource { uri } => CompletionRef::ResourceTemplate { uri_template: uri },
        CompleteRef::Prompt { name } => CompletionRef::Prompt { name },
    };
    let c = state
        .app
        .host
        .complete(
            &server,
            &reference,
            &body.argument.name,
            &body.argument.value,
            &body.context.arguments,
        )
        .await?;
    Ok(json(serde_json::json!({"completion": {
        "values": c.values,
        "total": c.total,
        "hasMore": c.has_more,
    }})))
}

// ---- pipelines and attachments ------------------------------------------------------

fn pipeline<'a>(state: &'a ServeState, id: &str) -> ApiResult<&'a Pipeline> {
    state.app.pipelines.get(id).ok_or_else(|| {
        let ids: Vec<&str> = state.app.pipelines.keys().map(String::as_str).collect();
        ApiError::not_found(
            "unknown_pipeline",
            format!("no pipeline `{id}`; pipelines: {}", ids.join(", ")),
        )
    })
}

async fn list_pipelines(State(state): St) -> Response {
    let pipelines: Vec<serde_json::Value> = state
        .app
        .pipelines
        .values()
        .map(|p| {
            serde_json::json!({
                "id": p.id(),
                "runner": p.runner_name(),
                "stages": p.stage_names().collect::<Vec<_>>(),
                "model": p.model().name,
                "bound_servers": state.app.config.bound_servers(p.id()),
            })
        })
        .collect();
    json(serde_json::json!({"pipelines": pipelines}))
}

fn target_error(e: TargetError) -> ApiError {
    match &e {
        TargetError::ArgumentsWithoutTemplate(t) => ApiError::bad_request(format!(
            "`arguments` are for a URI template (`{t}` has no {{variable}}); give `uri` alone"
        )),
        TargetError::MissingVariable { name, .. } => ApiError::bad_request(format!(
            "{e}: give `arguments.{name}` a value, or {{\"var\": \"NAME\"}} to take turn variable NAME"
        )),
        _ => ApiError::bad_request(e.to_string()),
    }
}

/// A `uri` that is a template: said so, rather than guessed.
fn uri_with_brace() -> ApiError {
    ApiError::bad_request("a `uri` with `{` is a template: give it as `template`, with `arguments`")
}

/// `POST …/attachments`: a URI, or a template with its arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinBody {
    server: String,
    uri: Option<String>,
    template: Option<String>,
    #[serde(default)]
    arguments: BTreeMap<String, ArgumentValue>,
    /// Stop applying after this many milliseconds (default: never).
    expires_in_ms: Option<u64>,
}

/// At most 100 years, as `hostpipe attach --expires-in`.
const MAX_EXPIRY_MS: u64 = 100 * 365 * 86_400_000;

async fn list_pins(state: &ServeState, owner: PinOwner) -> ApiResult {
    let store = store(state)?;
    let pins = store
        .pins(
            std::slice::from_ref(&owner),
            hostpipe_core::store::unix_ms_now(),
        )
        .await?;
    let configured: Vec<Attachment> = match &owner {
        PinOwner::Pipeline(id) => state
            .app
            .config
            .pipeline_attachments(id)
            .unwrap_or_default(),
        PinOwner::Conversation(_) => Vec::new(),
    };
    Ok(json(
        serde_json::json!({"pins": pins, "configured": configured}),
    ))
}

async fn add_pin(state: &ServeState, owner: PinOwner, body: PinBody) -> ApiResult {
    state.app.check_server(&body.server)?;
    state
        .app
        .check_pin_owner(&owner, &body.server)
        .map_err(|e| match &owner {
            PinOwner::Pipeline(id) if state.app.pipeline(id).is_err() => {
                ApiError::not_found("unknown_pipeline", format!("{e:#}"))
            }
            _ => ApiError::new(StatusCode::CONFLICT, "server_not_bound", format!("{e:#}")),
        })?;
    let target = match (body.uri, body.template) {
        (Some(uri), None) if uri.contains('{') => return Err(uri_with_brace()),
        (Some(uri), None) => pin_target(&uri, body.arguments),
        (None, Some(template)) if template.contains('{') => pin_target(&template, body.arguments),
        (None, Some(template)) => {
            return Err(ApiError::bad_request(format!(
                "`{template}` is not a URI template (no {{variable}}); give it as `uri`"
            )));
        }
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of `uri` and `template`",
            ));
        }
    }
    .map_err(target_error)?;
    let expires_at_ms = match body.expires_in_ms {
        Some(0) => {
            return Err(ApiError::bad_request(
                "`expires_in_ms` is 0: a pin that expires at once never applies",
            ));
        }
        Some(ms) if ms > MAX_EXPIRY_MS => {
            return Err(ApiError::bad_request(
                "`expires_in_ms` is more than 100 years; leave it out for a pin that never expires",
            ));
        }
        Some(ms) => Some(
            hostpipe_core::store::unix_ms_now()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
        ),
        None => None,
    };
    let pin = store(state)?
        .pin(NewPin {
            owner,
            server: body.server,
            target,
            expires_at_ms,
        })
        .await?;
    Ok((StatusCode::CREATED, axum::Json(pin)).into_response())
}

async fn remove_pin(state: &ServeState, owner: PinOwner, pin_id: &str) -> ApiResult {
    // Ids are UUIDs, written in lower case.
    let pin_id = pin_id.to_ascii_lowercase();
    if store(state)?.unpin_id(&owner, &pin_id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(
            "pin_not_found",
            format!("{owner} has no pin {pin_id}"),
        ))
    }
}

fn store(state: &ServeState) -> ApiResult<&dyn hostpipe_core::AttachmentStore> {
    state.app.store.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_store",
            "this instance has no attachment store (--store none): pins and history need one",
        )
    })
}

fn conversation_owner(id: String) -> ApiResult<PinOwner> {
    if id.trim().is_empty() {
        return Err(ApiError::bad_request("the conversation id is empty"));
    }
    Ok(PinOwner::Conversation(id))
}

async fn list_pipeline_pins(State(state): St, Params(id): Params<String>) -> ApiResult {
    pipeline(&state, &id)?;
    list_pins(&state, PinOwner::Pipeline(id)).await
}

async fn add_pipeline_pin(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<PinBody>,
) -> ApiResult {
    pipeline(&state, &id)?;
    add_pin(&state, PinOwner::Pipeline(id), body).await
}

async fn remove_pipeline_pin(
    State(state): St,
    Params((id, pin_id)): Params<(String, String)>,
) -> ApiResult {
    pipeline(&state, &id)?;
    remove_pin(&state, PinOwner::Pipeline(id), &pin_id).await
}

async fn list_conversation_pins(State(state): St, Params(id): Params<String>) -> ApiResult {
    list_pins(&state, conversation_owner(id)?).await
}

async fn add_conversation_pin(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<PinBody>,
) -> ApiResult {
    add_pin(&state, conversation_owner(id)?, body).await
}

async fn remove_conversation_pin(
    State(state): St,
    Params((id, pin_id)): Params<(String, String)>,
) -> ApiResult {
    remove_pin(&state, conversation_owner(id)?, &pin_id).await
}

// ---- history ------------------------------------------------------------------------

/// `GET /v1/history` query parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    conversation: Option<String>,
    pipeline: Option<String>,
    server: Option<String>,
    /// RFC 3339.
    since: Option<String>,
    /// RFC 3339.
    until: Option<String>,
    #[serde(default)]
    errors: bool,
    limit: Option<u32>,
    #[serde(default)]
    offset: u32,
}

/// Most records in one page.
const MAX_HISTORY_LIMIT: u32 = 1000;

fn rfc3339(name: &str, value: Option<String>) -> ApiResult<Option<i64>> {
    value
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(&v)
                .map(|t| t.timestamp_millis())
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "`{name}`: `{v}` is not an RFC 3339 time (2026-11-30T09:00:00Z): {e}"
                    ))
                })
        })
        .transpose()
}

/// The store query of `params` (asking one record more than the page, to tell whether
/// there is a next one), and the page size.
fn history_query(params: HistoryParams) -> ApiResult<(HistoryQuery, u32)> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "`limit` is {limit}; give 1 to {MAX_HISTORY_LIMIT}"
        )));
    }
    let since_ms = rfc3339("since", params.since)?;
    let until_ms = rfc3339("until", params.until)?;
    if let (Some(s), Some(u)) = (since_ms, until_ms)
        && s >= u
    {
        return Err(ApiError::bad_request(
            "`since` is not before `until`: no turn can match",
        ));
    }
    let query = HistoryQuery {
        conversation: params.conversation,
        pipeline: params.pipeline,
        server: params.server,
        since_ms,
        until_ms,
        errors_only: params.errors,
        // One more than asked, to tell whether there is a next page.
        limit: limit + 1,
        offset: params.offset,
    };
    Ok((query, limit))
}

async fn history(
    State(state): St,
    params: Result<Query<HistoryParams>, QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (query, limit) = history_query(params)?;
    let records = store(&state)?.history(&query).await?;
    Ok(page("records", records, &query, limit))
}

/// A history page: the first `limit` of `items` (the store was asked for one more) under
/// `key`, and `next_offset`, null on the last page.
fn page<T: serde::Serialize>(
    key: &str,
    mut items: Vec<T>,
    query: &HistoryQuery,
    limit: u32,
) -> Response {
    let next_offset = (items.len() > limit as usize).then(|| query.offset + limit);
    items.truncate(limit as usize);
    json(serde_json::json!({key: items, "next_offset": next_offset}))
}

/// `GET /v1/history/tool-calls`: the tool calls, with the read history's filters
/// (`errors`: calls that failed, were withheld or that the tool reported as errors).
async fn tool_call_history(
    State(state): St,
    params: Result<Query<HistoryParams>, QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (query, limit) = history_query(params)?;
    let calls = store(&state)?.call_history(&query).await?;
    Ok(page("calls", calls, &query, limit))
}

// ---- turns --------------------------------------------------------------------------

/// `POST /v1/turns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnBody {
    pipeline: String,
    message: String,
    /// `preview`, or the pipeline's own runner (default).
    runner: Option<String>,
    conversation_id: Option<String>,
    message_id: Option<String>,
    bot_id: Option<String>,
    sender: Option<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    #[serde(default)]
    history: Vec<HistoryMessage>,
    /// Message-scope attachments.
    #[serde(default)]
    attachments: Vec<TurnAttachment>,
    /// Stream server-sent events (also: `Accept: text/event-stream`).
    #[serde(default)]
    stream: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnAttachment {
    server: String,
    uri: Option<String>,
    template: Option<String>,
    #[serde(default)]
    arguments: BTreeMap<String, ArgumentValue>,
}

/// Why a turn ended without an outcome.
enum TurnEnd {
    /// `[serve] turn_timeout_ms` passed.
    Timeout,
    /// The shutdown timeout passed.
    ShuttingDown,
}

/// Largest message, in bytes (the body limit bounds it too).
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The pipeline a turn asks for, and whether it is the `preview` copy.
fn turn_pipeline<'a>(state: &'a ServeState, body: &TurnBody) -> ApiResult<(&'a Pipeline, bool)> {
    let configured = pipeline(state, &body.pipeline)?;
    match body.runner.as_deref() {
        None => Ok((configured, false)),
        Some(r) if r == configured.runner_name() => Ok((configured, false)),
        Some("preview") => state
            .preview
            .get(&body.pipeline)
            .map(|p| (p, true))
            .ok_or_else(|| ApiError::not_found("unknown_pipeline", "no preview pipeline")),
        Some(r) => Err(ApiError::bad_request(format!(
            "pipeline `{}` runs with runner `{}`; a turn may ask for that one or `preview`, not `{r}` (set `runner` in [pipelines.{}])",
            body.pipeline,
            configured.runner_name(),
            body.pipeline
        ))),
    }
}

fn turn_from(state: &ServeState, body: TurnBody) -> ApiResult<Turn> {
    if body.message.trim().is_empty() {
        return Err(ApiError::bad_request("`message` is empty"));
    }
    if body.message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "message_too_large",
            format!(
                "`message` is {} bytes; at most {MAX_MESSAGE_BYTES}",
                body.message.len()
            ),
        ));
    }
    let mut attachments = Vec::with_capacity(body.attachments.len());
    for (i, a) in body.attachments.into_iter().enumerate() {
        state
            .app
            .check_server(&a.server)
            .map_err(|e| ApiError::bad_request(format!("attachments[{i}]: {e}")))?;
        let target = match (a.uri, a.template) {
            (Some(uri), None) if uri.contains('{') => {
                return Err(ApiError::bad_request(format!(
                    "attachments[{i}]: {}",
                    uri_with_brace().message
                )));
            }
            (Some(uri), None) => pin_target(&uri, a.arguments),
            (None, Some(t)) => pin_target(&t, a.arguments),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "attachments[{i}]: give exactly one of `uri` and `template`"
                )));
            }
        }
        .map_err(|e| ApiError::bad_request(format!("attachments[{i}]: {e}")))?;
        attachments.push(Attachment {
            server: a.server,
            target,
            scope: PinScope::Message,
        });
    }
    check_ids(&[
        ("conversation_id", &body.conversation_id),
        ("message_id", &body.message_id),
        ("bot_id", &body.bot_id),
        ("sender", &body.sender),
    ])?;
    let mut turn = Turn::new(body.pipeline, body.message);
    turn.ids.conversation = body.conversation_id;
    turn.ids.bot = body.bot_id;
    turn.ids.message = body
        .message_id
        .unwrap_or_else(|| format!("http-{}", uuid::Uuid::new_v4()));
    turn.sender = body.sender;
    turn.variables = body.variables.into_iter().collect::<Variables>();
    turn.history = body.history;
    turn.attachments = attachments;
    Ok(turn)
}

/// The turn's result document: the JSON response, and the `done` event's data.
fn outcome_json(outcome: &TurnOutcome, pipeline: &str, runner: &str) -> serde_json::Value {
    serde_json::json!({
        "turn_id": outcome.trace.turn_id(),
        "pipeline": pipeline,
        "runner": runner,
        "reply": outcome.reply,
        "failed": outcome.failed(),
        "ended_by": outcome.ended_by,
        "usage": outcome.run.as_ref().and_then(|r| r.usage),
        "events": outcome.run.as_ref().map(|r| &r.events),
        "request": outcome.request.as_ref().map(PreviewReport::new),
        "trace": outcome.trace.records(),
    })
}

async fn run_turn(State(state): St, headers: HeaderMap, Body(body): Body<TurnBody>) -> ApiResult {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this instance is shutting down; send the turn to another",
        ));
    }
    let stream = body.stream
        || headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
    let (p, use_preview) = turn_pipeline(&state, &body)?;
    let (pipeline_id, runner) = (p.id().to_owned(), p.runner_name().to_owned());
    let turn = turn_from(&state, body)?;
    let turn_id = turn.trace.turn_id().to_owned();
    let (tx, rx) = mpsc::channel::<TurnEvent>(64);
    if stream {
        state.approver.watch(&turn_id, tx.clone());
        let _ = tx
            .send(TurnEvent::Started(serde_json::json!({
                "turn_id": turn_id, "pipeline": pipeline_id, "runner": runner,
            })))
            .await;
    }
    let task = {
        let state = Arc::clone(&state);
        let turn_timeout = state.options.turn_timeout;
        // The turn runs to its end (and its reads reach the history) even when the
        // caller goes away; shutdown waits for it.
        state.turns.clone().spawn(async move {
            let p = if use_preview {
                state.preview.get(&pipeline_id)
            } else {
                state.app.pipelines.get(&pipeline_id)
            };
            let Some(p) = p else {
                return Err(ApiError::not_found("unknown_pipeline", pipeline_id));
            };
            let (sink, mut run_events) = EventSink::channel(64);
            let forward = {
                let tx = tx.clone();
                async move {
                    while let Some(e) = run_events.recv().await {
                        let _ = tx.send(TurnEvent::Run(e)).await;
                    }
                }
            };
            let stop = state.stop_turns.clone();
            let started = std::time::Instant::now();
            let deadline = started + turn_timeout;
            let run = async move {
                let tap = stream.then_some(&sink);
                // The pipeline ends the turn at its deadline, trace and history kept; the
                // outer bound only catches a stage that does not honour it.
                let bounded = p.run_turn_within(turn, tap, Some(deadline));
                tokio::select! {
                    r = tokio::time::timeout(turn_timeout + Duration::from_secs(5), bounded) => {
                        r.map_err(|_| TurnEnd::Timeout)
                    }
                    () = stop.cancelled() => Err(TurnEnd::ShuttingDown),
                }
            };
            let (outcome, ()) = tokio::join!(run, forward);
            state.approver.unwatch(&turn_id);
            let result = match &outcome {
                Ok(outcome) if outcome.failed() && std::time::Instant::now() >= deadline => {
                    tracing::warn!(
                        target: "hostpipe::turns",
                        turn_id, pipeline = pipeline_id, runner,
                        reads = outcome.trace.reads().count(),
                        "turn timed out; its reads so far are in the history"
                    );
                    Err(ApiError::new(
                        StatusCode::GATEWAY_TIMEOUT,
                        "turn_timeout",
                        format!(
                            "turn {turn_id} did not finish within {} ms ([serve] turn_timeout_ms); its reads so far are in the history",
                            turn_timeout.as_millis()
                        ),
                    ))
                }
                Ok(outcome) => {
                    tracing::info!(
                        target: "hostpipe::turns",
                        turn_id, pipeline = pipeline_id, runner,
                        failed = outcome.failed(), ended_by = outcome.ended_by,
                        reads = outcome.trace.reads().count(),
                        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "turn finished"
                    );
                    Ok(outcome_json(outcome, &pipeline_id, &runner))
                }
                Err(TurnEnd::Timeout) => Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "turn_timeout",
                    format!(
                        "turn {turn_id} did not finish within {} ms ([serve] turn_timeout_ms)",
                        turn_timeout.as_millis()
                    ),
                )),
                Err(TurnEnd::ShuttingDown) => Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting_down",
                    format!(
                        "turn {turn_id} was stopped: the instance shut down before it finished ([serve] shutdown_timeout_ms)"
                    ),
                )),
            };
            if let (Err(e), Err(_)) = (&result, &outcome) {
                // The turn's reads so far went with it: the log is its only record.
                tracing::warn!(
                    target: "hostpipe::turns",
                    turn_id, pipeline = pipeline_id, runner, code = e.code,
                    "turn stopped before it finished; its reads are not in the history"
                );
            }
            if stream {
                let last = match &result {
                    Ok(doc) => TurnEvent::Done(doc.clone()),
                    Err(e) => TurnEvent::Error(e.clone()),
                };
                let _ = tx.send(last).await;
            }
            result
        })
    };
    if stream {
        let events = futures_util::stream::unfold(rx, |mut rx| async move {
            let e = rx.recv().await?;
            let (name, data) = e.encode();
            let event = Event::default().event(name).data(data);
            Some((Ok::<_, Infallible>(event), rx))
        });
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response());
    }
    drop(rx);
    match task.await {
        Ok(Ok(doc)) => Ok(json(doc)),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the turn's task failed: {e}"),
        )),
    }
}

// ---- consent ------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentParams {
    turn_id: Option<String>,
}

async fn list_consent_requests(
    State(state): St,
    params: Result<Query<ConsentParams>, QueryRejection>,
) -> ApiResult {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(json(serde_json::json!({
        "consent_requests": state.approver.pending(params.turn_id.as_deref()),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsentBody {
    answer: ConsentAnswer,
}

async fn answer_consent_request(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<ConsentBody>,
) -> ApiResult {
    state
        .approver
        .answer(&id.to_ascii_lowercase(), body.answer)
        .map_err(|_| {
            ApiError::not_found(
                "consent_request_not_pending",
                format!(
                    "no consent request {id} is waiting here: it was answered, it timed out (a denial), or another instance asked it"
                ),
            )
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeSet;

    /// Every `/v1` path routed here is in docs/openapi.json, and the other way round (the
    /// e2e tests check each documented method answers).
    #[test]
    fn the_openapi_document_lists_every_route() {
        let source = include_str!("api.rs");
        let start = source.find("pub(super) fn routes(").unwrap();
        let end = start + source[start..].find("\n}\n").unwrap();
        let routed: BTreeSet<&str> = source[start..end]
            .split('"')
            .filter(|s| s.starts_with("/v1/"))
            .collect();
        let doc: serde_json::Value = serde_json::from_str(super::super::OPENAPI).unwrap();
        let documented: BTreeSet<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|p| p.starts_with("/v1/"))
            .collect();
        assert_eq!(routed, documented);
        assert_eq!(routed.len(), 20);
    }

    #[test]
    fn read_only_tokens_may_look_and_nothing_else() {
        use axum::http::Method;

        use super::super::{Scope, needed_scope};
        assert_eq!(needed_scope(&Method::GET, "/v1/history"), Scope::Read);
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/resources/read"),
            Scope::Read
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/completion"),
            Scope::Read
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/prompts/{name}"),
            Scope::Read
        );
        // A tool call may change the world: admin only.
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/tools/{name}/call"),
            Scope::Admin
        );
        assert_eq!(needed_scope(&Method::POST, "/v1/turns"), Scope::Admin);
        // The raw path never decides: a consent id that looks like a read is not one.
        assert_eq!(
            needed_scope(&Method::POST, "/v1/consent-requests/{id}"),
            Scope::Admin
        );
        assert_eq!(
            needed_scope(
                &Method::DELETE,
                "/v1/conversations/{id}/attachments/{pin_id}"
            ),
            Scope::Admin
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/conversations/{id}/attachments"),
            Scope::Admin
        );
    }
}
