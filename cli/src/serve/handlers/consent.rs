//! Consent questions of running turns: `GET /v1/consent-requests` and
//! `POST /v1/consent-requests/{id}` (the answer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hostpipe_engine::ConsentAnswer;
use serde::Deserialize;

use super::super::dto::ConsentRequestList;
use super::super::error::{ApiResult, Query};
use super::super::{ApiError, Body, Params};
use super::{St, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsentParams {
    turn_id: Option<String>,
}

/// `GET /v1/consent-requests[?turn_id=ID]`: the questions waiting here.
pub(crate) async fn list_consent_requests(
    State(state): St,
    Query(params): Query<ConsentParams>,
) -> ApiResult {
    Ok(json(ConsentRequestList {
        consent_requests: state.approver.pending(params.turn_id.as_deref()),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsentBody {
    answer: ConsentAnswer,
}

/// `POST /v1/consent-requests/{id}`: 204 once the answer reached the waiting turn.
pub(crate) async fn answer_consent_request(
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
