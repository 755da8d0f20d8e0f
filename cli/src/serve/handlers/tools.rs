//! A server's tools: `GET …/tools` (with a pipeline's offer) and
//! `POST …/tools/{name}/call` (a call as in a turn of a pipeline).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use hostpipe_core::{CallOrigin, McpSource as _, ToolError, Turn, Variables};
use serde::Deserialize;
use tracing::Instrument as _;

use super::super::dto::{OfferedTool, PipelineToolList, ToolCallResponse, ToolList};
use super::super::error::{ApiResult, Query};
use super::super::{ApiError, Body, Params};
use super::{St, check_ids, json, pipeline};

/// `GET /v1/servers/{server}/tools` query: `pipeline` names the pipeline whose offer to
/// show (`offered_as`: the name its model sees, or null when its `tool_assembly`
/// leaves the tool out or the server is not bound for it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsParams {
    pipeline: Option<String>,
}

/// `GET /v1/servers/{server}/tools[?pipeline=ID]`.
pub(crate) async fn list_tools(
    State(state): St,
    Params(server): Params<String>,
    Query(params): Query<ToolsParams>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let tools = state.app.host.list_tools(&server).await?;
    let Some(id) = params.pipeline else {
        return Ok(json(ToolList { tools: &tools }));
    };
    let offered = pipeline(&state, &id)?
        .offered_tools(Turn::new(id.as_str(), ""))
        .await
        .map_err(|outcome| ended(&outcome))?;
    let tools = tools
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
            OfferedTool {
                tool: t,
                offered_as,
            }
        })
        .collect();
    Ok(json(PipelineToolList {
        pipeline: id,
        tools,
    }))
}

/// A turn a stage ended before the tools were assembled (a required server down, a
/// stage failing): 409 with the stage's reply.
fn ended(outcome: &hostpipe_engine::TurnOutcome) -> ApiError {
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
/// call is made as in a turn of `pipeline` (see [`hostpipe_engine::Pipeline::call_tool`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCallBody {
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

/// `POST /v1/servers/{server}/tools/{name}/call`: the call, through the pipeline's
/// consent gate and trace; bounded by the turn timeout.
pub(crate) async fn call_tool(
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
        state.turns.clone().spawn(
            async move {
                let p = state.current().pipelines.get(&pipeline_id).cloned()?;
                Some(
                    p.call_tool(turn, &server, &name, body.arguments, CallOrigin::Api)
                        .await,
                )
            }
            .in_current_span(),
        )
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
    let result = outcome
        .result
        .map_err(|e| tool_error(e, &pipeline_id, &server, &name))?;
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
    Ok(json(ToolCallResponse {
        turn_id,
        pipeline: pipeline_id,
        server,
        tool: name,
        offered_as: outcome.name,
        result: hostpipe_runners::mcp_json::call_tool_result(&result),
        call: record,
    }))
}

/// A tool call that was not made, as its answer: 403 `tool_not_offered`, 404
/// `unknown_tool`, 409 `server_not_bound`, the server's error, or the status
/// `hostpipe_runners::mcp_json` gives the rest (502 `server_error` by default).
fn tool_error(e: ToolError, pipeline_id: &str, server: &str, name: &str) -> ApiError {
    match e {
        ToolError::NotOffered { .. } => ApiError::new(
            StatusCode::FORBIDDEN,
            "tool_not_offered",
            format!(
                "pipeline `{pipeline_id}` does not offer tool `{name}` of `{server}` ([pipelines.{pipeline_id}.tool_assembly] include and exclude)"
            ),
        ),
        ToolError::UnknownTool { .. } => {
            ApiError::not_found("unknown_tool", format!("`{server}` lists no tool `{name}`"))
        }
        ToolError::ServerNotBound { allowed, .. } => ApiError::new(
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
        ),
        ToolError::Source(e) => e.into(),
        e => {
            let (status, code) =
                hostpipe_runners::mcp_json::tool_error_status(&e).unwrap_or((502, "server_error"));
            ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                code,
                e.to_string(),
            )
        }
    }
}

/// How `v`'s JSON type reads in a message ("an array").
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
