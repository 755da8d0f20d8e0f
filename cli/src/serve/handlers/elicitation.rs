//! MCP servers' questions to the users of running turns (elicitation):
//! `GET /v1/elicitation-requests` and `POST /v1/elicitation-requests/{id}` (the answer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hostpipe_core::ElicitationAnswer;
use serde::Deserialize;

use super::super::dto::ElicitationRequestList;
use super::super::elicitor::AnswerError;
use super::super::error::{ApiResult, Query};
use super::super::{ApiError, Body, Params};
use super::{St, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ElicitationParams {
    turn_id: Option<String>,
}

/// `GET /v1/elicitation-requests[?turn_id=ID]`: the questions waiting here.
pub(crate) async fn list_elicitation_requests(
    State(state): St,
    Query(params): Query<ElicitationParams>,
) -> ApiResult {
    Ok(json(ElicitationRequestList {
        elicitation_requests: state.elicitor.pending(params.turn_id.as_deref()),
    }))
}

/// The answer's action (MCP `accept`, `decline`, `cancel`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    Accept,
    Decline,
    Cancel,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ElicitationBody {
    action: Action,
    /// The form's values, for `accept` of a form (absent: none).
    #[serde(default)]
    content: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `POST /v1/elicitation-requests/{id}`: 204 once the answer reached the waiting turn;
/// 400 `invalid_content` naming the field when an `accept` does not fit the form (the
/// question stays pending); 404 when nothing with that id is waiting.
pub(crate) async fn answer_elicitation_request(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<ElicitationBody>,
) -> ApiResult {
    let answer = match body.action {
        Action::Accept => ElicitationAnswer::Accept {
            content: body.content.unwrap_or_default(),
        },
        Action::Decline => ElicitationAnswer::Decline,
        Action::Cancel => ElicitationAnswer::Cancel,
    };
    match state.elicitor.answer(&id.to_ascii_lowercase(), answer) {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(AnswerError::Invalid(e)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_content",
            format!("the answer does not fit the form: {e}"),
        )),
        Err(AnswerError::NotPending) => Err(ApiError::not_found(
            "elicitation_request_not_pending",
            format!(
                "no elicitation request {id} is waiting here: it was answered, it timed out (a decline), or another instance asked it"
            ),
        )),
    }
}
