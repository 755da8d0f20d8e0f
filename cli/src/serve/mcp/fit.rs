//! The `fit_context` tool: a turn of a pipeline run as `POST /v1/turns` runs one with
//! `"runner": "preview"` ([`TurnRun::preview`]): pins loaded, the stages (bind, prompts,
//! mentions, injection, tools) run, the reads written to the history, the pipeline's
//! `preview` runner instead of its model. The answer is the context the model would get,
//! fenced as the `local` and `dify` runners send it
//! ([`hostpipe_runners::render::context_text`]), then the images it would get (a
//! model with vision), plus a structured summary of the turn.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use hostpipe_core::{BudgetOverride, RunRequest, Turn};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

use super::{Caller, default_pipeline};
use crate::serve::handlers::turns::{MAX_MESSAGE_BYTES, TurnRun};
use crate::serve::{Scope, ServeState};

/// The tool's name.
pub(super) const NAME: &str = "fit_context";

/// The arguments of `fit_context`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FitArgs {
    /// The user's message.
    query: String,
    /// The pipeline; default: the endpoint's, else the default pipeline.
    pipeline: Option<String>,
    /// The conversation: its pins apply, its reads are recorded under it.
    conversation: Option<String>,
    /// The resource budget, tokens.
    budget: Option<u64>,
}

/// The structured summary of a `fit_context` answer.
#[derive(Debug, Serialize)]
struct FitSummary<'a> {
    turn_id: &'a str,
    pipeline: &'a str,
    conversation: Option<&'a str>,
    /// The budget the context was fitted into, tokens.
    budget_tokens: Option<usize>,
    /// Tokens of the context blocks.
    used_tokens: usize,
    /// Context blocks.
    blocks: usize,
    /// The turn's reads, as in the history.
    reads: Vec<FitRead<'a>>,
}

/// One read of the turn.
#[derive(Debug, Serialize)]
struct FitRead<'a> {
    server: &'a str,
    uri: &'a str,
    /// `read`, `withheld`, `not_read` or `failed`.
    outcome: &'static str,
    /// What was done to it (`whole`, `chunked 2/9`, …).
    treatment: String,
    /// Tokens that went in.
    tokens: usize,
}

/// The tool as listed: its input schema (JSON Schema 2020-12) names the pipelines.
pub(super) fn tool(state: &ServeState) -> Tool {
    let current = state.current();
    let pipelines: Vec<&str> = current.pipelines.keys().map(String::as_str).collect();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "The user's message: the context is fitted to answer it."
            },
            "pipeline": {
                "type": "string",
                "enum": pipelines,
                "description": "The pipeline whose attachments, policy and budget apply. Default: the endpoint's (/mcp/PIPELINE), else `default`."
            },
            "conversation": {
                "type": "string",
                "description": "The conversation id: its pinned resources apply, and the reads are recorded under it."
            },
            "budget": {
                "type": "integer",
                "minimum": 0,
                "description": "The resource budget in tokens, over the pipeline's own (never more than the model has left)."
            }
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let schema: JsonObject = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        NAME,
        "Fit the context a hostpipe pipeline attaches (MCP resources of its servers, pinned or \
         mentioned) to a token budget for the user's message, and return it exactly as the \
         pipeline's model would get it: each resource in a fence with its provenance, after a \
         note that it is data, not instructions. Put the text before the model, e.g. in the \
         system prompt. The reads are recorded in hostpipe's history.",
        Arc::new(schema),
    )
    .with_title("Fit context for a message")
}

/// A tool error: `isError` with `message` (MCP spec 2025-11-25, "Tools / Error
/// handling": errors the model or user can act on).
fn refused(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// `fit_context` for `caller` with `arguments`; every failure is a tool error.
pub(super) async fn fit_context(
    state: &Arc<ServeState>,
    caller: &Caller,
    arguments: Option<JsonObject>,
) -> CallToolResult {
    if caller.scope < Scope::Turn {
        return refused(
            "fit_context runs the pipeline's stages and records its reads in the history, like POST /v1/turns: it needs a turn or admin token; this one is read-only",
        );
    }
    if state.draining.load(Ordering::SeqCst) {
        return refused("this hostpipe instance is shutting down; call another");
    }
    let args: FitArgs =
        match serde_json::from_value(serde_json::Value::Object(arguments.unwrap_or_default())) {
            Ok(a) => a,
            Err(e) => return refused(format!("invalid arguments: {e}")),
        };
    let (turn, pipeline_id) = match turn_of(state, caller, args) {
        Ok(t) => t,
        Err(message) => return refused(message),
    };
    let turn_id = turn.trace.turn_id().to_owned();
    let conversation = turn.ids.conversation.clone();
    let run = TurnRun::preview(Arc::clone(state), pipeline_id.clone(), turn_id.clone());
    // The turn runs to its end (and its reads reach the history) even if the caller
    // goes away; shutdown waits for it.
    let task = state
        .turns
        .clone()
        .spawn(async move { run.outcome(turn).await }.in_current_span());
    let outcome = match task.await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => return refused(format!("turn {turn_id}: {}", e.message)),
        Err(e) => return refused(format!("turn {turn_id}: its task failed: {e}")),
    };
    let request = match (&outcome.request, outcome.failed(), &outcome.ended_by) {
        (Some(request), false, _) => request,
        (_, _, Some(stage)) => {
            return refused(format!(
                "pipeline `{pipeline_id}`: stage `{stage}` ended the turn: {}",
                outcome.reply
            ));
        }
        _ => {
            return refused(format!(
                "pipeline `{pipeline_id}`: the turn failed: {}",
                outcome.reply
            ));
        }
    };
    answer(request, &turn_id, &pipeline_id, conversation.as_deref())
}

/// The turn `args` ask for, and its pipeline; or what is wrong with them.
fn turn_of(state: &ServeState, caller: &Caller, args: FitArgs) -> Result<(Turn, String), String> {
    if args.query.trim().is_empty() {
        return Err("`query` is empty".into());
    }
    if args.query.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "`query` is {} bytes; at most {MAX_MESSAGE_BYTES}",
            args.query.len()
        ));
    }
    let id = match (&args.pipeline, &caller.pipeline) {
        (Some(asked), Some(endpoint)) if asked != endpoint => {
            return Err(format!(
                "this endpoint (/mcp/{endpoint}) serves pipeline `{endpoint}`, not `{asked}`; call /mcp/{asked} or /mcp"
            ));
        }
        (Some(asked), _) => asked.clone(),
        (None, Some(endpoint)) => endpoint.clone(),
        (None, None) => default_pipeline(state).ok_or_else(|| {
            format!(
                "give `pipeline`: there is no pipeline `default`; pipelines: {}",
                pipeline_ids(state)
            )
        })?,
    };
    if !state.current().pipelines.contains_key(&id) {
        return Err(format!(
            "no pipeline `{id}`; pipelines: {}",
            pipeline_ids(state)
        ));
    }
    if !state.has_preview(&id) {
        return Err(format!(
            "pipeline `{id}` has no preview runner, so its context cannot be fitted without running its model"
        ));
    }
    if let Some(c) = &args.conversation
        && (c.trim().is_empty() || c.len() > hostpipe_engine::store::MAX_ID_BYTES)
    {
        return Err(format!(
            "`conversation` must be 1 to {} bytes, not blank",
            hostpipe_engine::store::MAX_ID_BYTES
        ));
    }
    let mut turn = Turn::new(id.as_str(), args.query);
    turn.ids.conversation = args.conversation;
    turn.ids.message = format!("mcp-{}", uuid::Uuid::new_v4());
    if let Some(budget) = args.budget {
        turn.extensions.insert(BudgetOverride(
            usize::try_from(budget).unwrap_or(usize::MAX),
        ));
    }
    Ok((turn, id))
}

/// The pipeline ids, comma-separated.
fn pipeline_ids(state: &ServeState) -> String {
    state
        .current()
        .pipelines
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The answer of a turn that reached its runner: the fenced context, the images a model
/// with vision gets, and the summary as `structuredContent`.
fn answer(
    request: &RunRequest,
    turn_id: &str,
    pipeline: &str,
    conversation: Option<&str>,
) -> CallToolResult {
    let mut content = vec![ContentBlock::text(hostpipe_runners::render::context_text(
        &request.context,
        request.model.vision,
        &request.fence,
    ))];
    if request.model.vision {
        for (_, mime, data) in hostpipe_runners::render::images(&request.context, &request.fence) {
            content.push(ContentBlock::image(
                base64::engine::general_purpose::STANDARD.encode(data),
                mime,
            ));
        }
    }
    let summary = FitSummary {
        turn_id,
        pipeline,
        conversation,
        budget_tokens: request.context_budget,
        used_tokens: request.context_tokens(),
        blocks: request.context.len(),
        reads: request
            .reads
            .iter()
            .map(|r| FitRead {
                server: &r.server,
                uri: &r.uri,
                outcome: r.outcome.as_str(),
                treatment: hostpipe_runners::render::treatment_label(&r.treatment),
                tokens: r.tokens_after,
            })
            .collect(),
    };
    let mut result = CallToolResult::success(content);
    result.structured_content = serde_json::to_value(&summary).ok();
    result
}
