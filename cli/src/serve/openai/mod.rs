//! The OpenAI-compatible door: `POST /v1/chat/completions` and `GET /v1/models`, in the
//! shapes of the OpenAI API reference ("Chat Completions", "Models", "Error codes"), so
//! that any platform with an "OpenAI-compatible provider" (a base URL, a key, a model
//! name) runs a hostpipe pipeline by naming it as the model.
//!
//! A request becomes a [`Turn`] of the pipeline its `model` names ([`turn_from`]); the
//! turn runs as a `/v1/turns` turn does (the same stages, runner, timeouts, history and
//! shutdown: [`TurnRun`]), and its outcome is answered as a `chat.completion`, or as
//! `chat.completion.chunk`s while it runs ([`stream`]). The caller's own `tools` join
//! the turn's, namespaced; a call of one comes back to the caller ([`tools`]). Errors
//! are OpenAI-shaped ([`wire::OpenAiError`]), the bearer tokens those of the rest of
//! `/v1`.

mod stream;
mod tools;
pub(crate) mod wire;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hostpipe_core::{HistoryMessage, MessageImage, Role, Turn};
use hostpipe_engine::{RunnerFailure, TurnOutcome, TurnStatus};
use tracing::Instrument as _;

use self::wire::{
    ChatCompletion, ChatRequest, Choice, Content, FinishReason, InMessage, Model, ModelList,
    OpenAiError, OutMessage, Part,
};
use super::handlers::turns::{MAX_MESSAGE_BYTES, TurnRun};
use super::{ApiError, Body, ServeState};

/// The routes of this door, whose errors are OpenAI-shaped (the token check's too).
pub(crate) const ROUTES: [&str; 3] = ["/v1/chat/completions", "/v1/models", "/v1/models/{model}"];

/// The header that names the conversation.
const CONVERSATION_HEADER: &str = "x-conversation-id";

/// Unix seconds now.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// When the pipelines became models: the first time this process listed them (the API
/// reference's `created`, Unix seconds; the same on every call, as for a real model).
fn models_created() -> u64 {
    static CREATED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CREATED.get_or_init(unix_now)
}

/// `GET /v1/models`: every pipeline, as a model (API reference: "List models").
pub(crate) async fn list_models(State(state): State<Arc<ServeState>>) -> Response {
    let created = models_created();
    let current = state.current();
    let data = current
        .pipelines
        .keys()
        .map(|id| Model {
            id,
            object: "model",
            created,
            owned_by: "hostpipe",
        })
        .collect();
    axum::Json(ModelList {
        object: "list",
        data,
    })
    .into_response()
}

/// `GET /v1/models/{model}`: one pipeline, as a model (API reference: "Retrieve model");
/// 404 `model_not_found` for an id that is not a pipeline's.
pub(crate) async fn retrieve_model(
    State(state): State<Arc<ServeState>>,
    axum::extract::Path(model): axum::extract::Path<String>,
) -> Result<Response, OpenAiError> {
    let current = state.current();
    let Some((id, _)) = current.pipelines.get_key_value(&model) else {
        return Err(OpenAiError::from(ApiError::not_found(
            "model_not_found",
            format!(
                "The model `{model}` does not exist: a model is a pipeline id (GET /v1/models lists them)"
            ),
        ))
        .with_param("model"));
    };
    Ok(axum::Json(Model {
        id,
        object: "model",
        created: models_created(),
        owned_by: "hostpipe",
    })
    .into_response())
}

/// `POST /v1/chat/completions` (API reference: "Create chat completion"): runs a turn
/// of the pipeline `model` names and answers with a `chat.completion`, or streams
/// `chat.completion.chunk`s (`stream: true`).
pub(crate) async fn chat_completions(
    State(state): State<Arc<ServeState>>,
    headers: HeaderMap,
    body: Result<Body<ChatRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let Body(body) = body?;
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this instance is shutting down; send the request to another",
        )
        .into());
    }
    let Some(p) = state.current().pipelines.get(&body.model).cloned() else {
        return Err(OpenAiError::from(ApiError::not_found(
            "model_not_found",
            format!(
                "The model `{}` does not exist: a model is a pipeline id (GET /v1/models lists them)",
                body.model
            ),
        ))
        .with_param("model"));
    };
    if !body.ignored.is_empty() {
        let fields: Vec<&str> = body.ignored.keys().map(String::as_str).collect();
        tracing::debug!(
            target: "hostpipe::openai",
            ?fields,
            "request fields ignored: the pipeline's runner section decides them"
        );
    }
    if !body.tools.is_empty() && p.runner_name() != "local" {
        return Err(OpenAiError::invalid(
            "tools",
            format!(
                "pipeline `{}` runs with runner `{}`: the caller's own tools need the `local` runner",
                p.id(),
                p.runner_name()
            ),
        ));
    }
    let pipeline_id = p.id().to_owned();
    let runner = p.runner_name().to_owned();
    let include_usage = body
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let stream = body.stream;
    let turn = turn_from(&p, &headers, body)?;
    let offered: Vec<String> = turn.caller_tools.iter().map(|t| t.name.clone()).collect();
    let turn_id = turn.trace.turn_id().to_owned();
    let completion_id = format!("chatcmpl-{turn_id}");
    if stream {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let run = TurnRun::own_runner(
            Arc::clone(&state),
            pipeline_id.clone(),
            runner,
            turn_id,
            Some(tx),
        );
        let task = state
            .turns
            .clone()
            .spawn(async move { run.outcome(turn).await }.in_current_span());
        let chunks = stream::Chunks {
            id: completion_id,
            model: pipeline_id,
            created: unix_now(),
            include_usage,
            offered,
        };
        return chunks.start(rx, task).await;
    }
    let run = TurnRun::own_runner(
        Arc::clone(&state),
        pipeline_id.clone(),
        runner,
        turn_id,
        None,
    );
    let task = state
        .turns
        .clone()
        .spawn(async move { run.outcome(turn).await }.in_current_span());
    let outcome = joined(task.await)?;
    answerable(&outcome)?;
    let tool_calls = tools::calls(&outcome, &offered);
    let finish_reason = if tool_calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolCalls
    };
    let completion = ChatCompletion {
        id: &completion_id,
        object: "chat.completion",
        created: unix_now(),
        model: &pipeline_id,
        choices: [Choice {
            index: 0,
            message: OutMessage {
                role: "assistant",
                content: Some(outcome.reply.as_str())
                    .filter(|r| tool_calls.is_empty() || !r.is_empty()),
                tool_calls,
                refusal: None,
            },
            finish_reason,
        }],
        usage: outcome.run.as_ref().and_then(|r| r.usage).map(Into::into),
    };
    Ok(axum::Json(completion).into_response())
}

/// The outcome of a turn's task, or the error to answer with.
fn joined(
    result: Result<Result<TurnOutcome, ApiError>, tokio::task::JoinError>,
) -> Result<TurnOutcome, OpenAiError> {
    match result {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the turn's task failed: {e}"),
        )
        .into()),
    }
}

/// Whether `outcome` is an answer (the runner's, or a stage's that ended the turn), or
/// the error it is: when the runner failed, 429 `rate_limit_exceeded` (its upstream
/// kept answering 429; `Retry-After` passed on), 400 `context_length_exceeded`, 504
/// `upstream_timeout`, else 502 `upstream_error` (the upstream's refusal of the
/// pipeline's own key too: the caller's key was fine); 500 `stage_failed`; 504
/// `turn_timeout`.
fn answerable(outcome: &TurnOutcome) -> Result<(), OpenAiError> {
    let (status, code) = match (outcome.status, outcome.runner_failure) {
        (TurnStatus::Completed | TurnStatus::Ended, _) => return Ok(()),
        (TurnStatus::RunnerFailed, Some(RunnerFailure::RateLimited { .. })) => {
            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded")
        }
        (TurnStatus::RunnerFailed, Some(RunnerFailure::ContextTooLong)) => {
            (StatusCode::BAD_REQUEST, "context_length_exceeded")
        }
        (TurnStatus::RunnerFailed, Some(RunnerFailure::Timeout)) => {
            (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
        }
        (TurnStatus::RunnerFailed, _) => (StatusCode::BAD_GATEWAY, "upstream_error"),
        (TurnStatus::StageFailed, _) => (StatusCode::INTERNAL_SERVER_ERROR, "stage_failed"),
        (TurnStatus::TimedOut, _) => (StatusCode::GATEWAY_TIMEOUT, "turn_timeout"),
    };
    // The caller is told what kind of failure it was, never the runner's own error: it
    // names the upstream endpoint (which the pipeline keeps from its callers) and quotes
    // the upstream. The turn's trace and the service log have it.
    let message = match outcome.status {
        TurnStatus::RunnerFailed => match code {
            "rate_limit_exceeded" => "the pipeline's model is rate-limited; retry later".to_owned(),
            "context_length_exceeded" => {
                "the conversation does not fit the pipeline's model context window".to_owned()
            }
            "upstream_timeout" => "the pipeline's model did not answer in time".to_owned(),
            _ => "the pipeline's model could not answer; the service log and the turn's trace say why"
                .to_owned(),
        },
        _ => outcome.reply.clone(),
    };
    let error = OpenAiError::from(ApiError::new(status, code, message));
    Err(match outcome.runner_failure {
        Some(RunnerFailure::RateLimited {
            retry_after: Some(after),
        }) => error.retry_after(after),
        _ => error,
    })
}

/// The conversation id: the `X-Conversation-Id` header, else `metadata.conversation_id`,
/// else `user` (most specific first); none means no conversation pins apply.
fn conversation_id(headers: &HeaderMap, body: &ChatRequest) -> Result<Option<String>, OpenAiError> {
    let header = match headers.get(CONVERSATION_HEADER) {
        None => None,
        Some(v) => Some(v.to_str().map(str::to_owned).map_err(|_| {
            OpenAiError::invalid(
                "X-Conversation-Id",
                "X-Conversation-Id is not visible ASCII",
            )
        })?),
    };
    let (param, id) = if let Some(h) = header {
        ("X-Conversation-Id", Some(h))
    } else if let Some(m) = body
        .metadata
        .as_ref()
        .and_then(|m| m.get("conversation_id"))
    {
        ("metadata.conversation_id", Some(m.clone()))
    } else {
        ("user", body.user.clone())
    };
    if let Some(v) = &id
        && (v.trim().is_empty() || v.len() > hostpipe_engine::store::MAX_ID_BYTES)
    {
        return Err(OpenAiError::invalid(
            param,
            format!(
                "`{param}` must be 1 to {} bytes, not blank",
                hostpipe_engine::store::MAX_ID_BYTES
            ),
        ));
    }
    Ok(id)
}

/// The text of `content`; `param` names it in errors. Image parts are left to
/// [`images_of`] (only the turn's message carries images: an earlier message's are
/// dropped, its text kept); other parts are refused.
fn text_of(content: &Content, param: &str) -> Result<String, OpenAiError> {
    match content {
        Content::Text(t) => Ok(t.clone()),
        Content::Parts(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match part {
                    Part::Text { text } | Part::Refusal { refusal: text } => {
                        texts.push(text.as_str())
                    }
                    Part::ImageUrl { .. } => {}
                    Part::Other => {
                        return Err(OpenAiError::invalid(
                            format!("{param}[{j}]"),
                            format!(
                                "{param}[{j}]: only `text` and `image_url` parts are supported"
                            ),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// The turn a request asks for: the last message (a user's) is the message, the
/// earlier user and assistant messages the history, the system and developer messages
/// follow the pipeline's own system prompt.
fn turn_from(
    p: &hostpipe_engine::Pipeline,
    headers: &HeaderMap,
    body: ChatRequest,
) -> Result<Turn, OpenAiError> {
    if body.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::invalid("n", "only `n: 1` is supported"));
    }
    if body
        .user
        .as_ref()
        .is_some_and(|u| u.len() > hostpipe_engine::store::MAX_ID_BYTES)
    {
        return Err(OpenAiError::invalid(
            "user",
            format!(
                "`user` must be at most {} bytes",
                hostpipe_engine::store::MAX_ID_BYTES
            ),
        ));
    }
    let conversation = conversation_id(headers, &body)?;
    let Some(at) = body
        .messages
        .iter()
        .rposition(|m| matches!(m, InMessage::User { .. }))
    else {
        return Err(OpenAiError::invalid(
            "messages",
            "`messages` has no user message",
        ));
    };
    let message = user_message(&body.messages[at], at)?;
    let images = match &body.messages[at] {
        InMessage::User { content } => images_of(content, &format!("messages[{at}].content"))?,
        _ => Vec::new(),
    };
    if !images.is_empty()
        && !p
            .stage_names()
            .any(|s| s == hostpipe_stages::ResourceContextInjection::NAME)
    {
        return Err(OpenAiError::invalid(
            format!("messages[{at}].content"),
            format!(
                "pipeline `{}` has no resource_context_injection stage, which carries a message's images to the model; send text only",
                p.id()
            ),
        ));
    }
    let (system, history) = earlier_messages(&body.messages[..at])?;
    let caller_tools = tools::offered(&body.tools)?;
    let caller_rounds = tools::rounds(&body.messages[at + 1..], at + 1, &caller_tools)?;
    let mut turn = Turn::new(p.id(), message);
    turn.message.images = images;
    turn.ids.conversation = conversation;
    turn.ids.message = format!("openai-{}", uuid::Uuid::new_v4());
    turn.sender = body.user;
    turn.history = history;
    turn.caller_tools = caller_tools;
    turn.caller_rounds = caller_rounds;
    if !system.is_empty() {
        // The pipeline's instructions first: the caller's cannot replace them.
        let own = p.system_prompt().map(str::to_owned);
        turn.system_prompt = Some(
            own.into_iter()
                .chain(system)
                .collect::<Vec<_>>()
                .join("\n\n"),
        );
    }
    Ok(turn)
}

/// The text of the last user message, `messages[index]`: not blank, at most
/// [`MAX_MESSAGE_BYTES`] (else 413 `message_too_large`).
fn user_message(last: &InMessage, index: usize) -> Result<String, OpenAiError> {
    let InMessage::User { content } = last else {
        return Err(OpenAiError::invalid(
            format!("messages[{index}]"),
            format!("messages[{index}]: not a user message"),
        ));
    };
    let param = format!("messages[{index}].content");
    let message = text_of(content, &param)?;
    if message.trim().is_empty() && images_of(content, &param)?.is_empty() {
        return Err(OpenAiError::invalid(param, "the user's message is empty"));
    }
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(OpenAiError::from(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "message_too_large",
            format!(
                "the user's message is {} bytes; at most {MAX_MESSAGE_BYTES}",
                message.len()
            ),
        ))
        .with_param(param));
    }
    Ok(message)
}

/// Most images in one message.
const MAX_IMAGES: usize = 16;

/// The images of `content`'s `image_url` parts, decoded. Only `data:` URLs of the
/// image types hostpipe decodes (PNG, JPEG, GIF, WebP) with base64 data are taken: an
/// `https` URL is refused, since hostpipe fetches nothing a caller names (a server-side
/// request forgery), and so is anything that does not decode. Errors name the part.
fn images_of(content: &Content, param: &str) -> Result<Vec<MessageImage>, OpenAiError> {
    use base64::Engine as _;
    let Content::Parts(parts) = content else {
        return Ok(Vec::new());
    };
    let mut images = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let Part::ImageUrl { image_url } = part else {
            continue;
        };
        let at = format!("{param}[{j}].image_url.url");
        let bad = |why: &str| OpenAiError::invalid(at.clone(), format!("{at}: {why}"));
        let Some(rest) = image_url.url.strip_prefix("data:") else {
            return Err(bad(
                "only `data:` URLs are taken (send the image inline, base64); hostpipe does not fetch URLs",
            ));
        };
        let Some((header, data)) = rest.split_once(',') else {
            return Err(bad("a `data:` URL needs a comma before its data"));
        };
        let Some(mime) = header.strip_suffix(";base64") else {
            return Err(bad("the image must be base64 (`data:image/png;base64,…`)"));
        };
        let mime = mime.trim().to_ascii_lowercase();
        if !hostpipe_stages::convert::is_image(&mime) {
            return Err(bad(&format!(
                "`{mime}` is not an image type hostpipe decodes (image/png, image/jpeg, image/gif, image/webp)"
            )));
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| bad(&format!("the base64 data does not decode: {e}")))?;
        images.push(MessageImage {
            mime_type: mime,
            data,
        });
        if images.len() > MAX_IMAGES {
            return Err(OpenAiError::invalid(
                param.to_owned(),
                format!("{param}: at most {MAX_IMAGES} images in one message"),
            ));
        }
    }
    Ok(images)
}

/// The messages before the last user message: the system and developer texts, in
/// order, and the history. Tool exchanges of earlier turns are left out of the history
/// (an assistant message's `tool_calls`, `tool` messages): the text answers stay.
fn earlier_messages(
    earlier: &[InMessage],
) -> Result<(Vec<String>, Vec<HistoryMessage>), OpenAiError> {
    let mut system = Vec::new();
    let mut history = Vec::new();
    for (i, m) in earlier.iter().enumerate() {
        let param = format!("messages[{i}].content");
        match m {
            InMessage::System { content } | InMessage::Developer { content } => {
                system.push(text_of(content, &param)?);
            }
            InMessage::User { content } => history.push(HistoryMessage {
                role: Role::User,
                text: text_of(content, &param)?,
            }),
            InMessage::Assistant { content, .. } => {
                let text = match content {
                    Some(c) => text_of(c, &param)?,
                    None => String::new(),
                };
                if !text.is_empty() {
                    history.push(HistoryMessage {
                        role: Role::Assistant,
                        text,
                    });
                }
            }
            InMessage::Tool { .. } => {}
        }
    }
    Ok((system, history))
}

#[cfg(test)]
mod tests;
