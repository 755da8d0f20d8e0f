//! The `/v1` handlers and the health routes, one file per resource of the API; what
//! they share (the state, looking up a pipeline or the store, checking ids) is here.

pub(crate) mod completion;
pub(crate) mod consent;
pub(crate) mod elicitation;
pub(crate) mod health;
pub(crate) mod history;
pub(crate) mod login;
pub(crate) mod manage;
pub(crate) mod pins;
pub(crate) mod pipelines;
pub(crate) mod prompts;
pub(crate) mod resources;
pub(crate) mod servers;
pub(crate) mod tools;
pub(crate) mod turns;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hostpipe_engine::Pipeline;

use super::error::ApiResult;
use super::{ApiError, ServeState};

/// The state every handler takes.
type St = State<Arc<ServeState>>;

/// `value` as a `200 application/json` response.
fn json(value: impl serde::Serialize) -> Response {
    axum::Json(value).into_response()
}

/// Ids given in a body: 1 to [`hostpipe_engine::store::MAX_ID_BYTES`] bytes, not blank.
fn check_ids(ids: &[(&str, &Option<String>)]) -> ApiResult<()> {
    for (name, value) in ids {
        if let Some(v) = value
            && (v.trim().is_empty() || v.len() > hostpipe_engine::store::MAX_ID_BYTES)
        {
            return Err(ApiError::bad_request(format!(
                "`{name}` must be 1 to {} bytes, not blank",
                hostpipe_engine::store::MAX_ID_BYTES
            )));
        }
    }
    Ok(())
}

/// The configured pipeline `id` (as the configuration in effect has it), or 404
/// `unknown_pipeline` naming the others.
pub(super) fn pipeline(state: &ServeState, id: &str) -> ApiResult<Arc<Pipeline>> {
    let current = state.current();
    current.pipelines.get(id).cloned().ok_or_else(|| {
        let ids: Vec<&str> = current.pipelines.keys().map(String::as_str).collect();
        ApiError::not_found(
            "unknown_pipeline",
            format!("no pipeline `{id}`; pipelines: {}", ids.join(", ")),
        )
    })
}

/// The attachment store, or 409 `no_store`.
fn store(state: &ServeState) -> ApiResult<&dyn hostpipe_engine::AttachmentStore> {
    state.app.store.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_store",
            "this instance has no attachment store (--store none): pins and history need one",
        )
    })
}
