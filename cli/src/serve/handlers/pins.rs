//! Pins: `…/attachments` of a pipeline or a conversation (list, add, remove), and
//! `GET /v1/pins`, every owner's.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hostpipe_core::{ArgumentValue, Attachment, AttachmentTarget};
use hostpipe_engine::{NewPin, PinOwner, PinQuery};
use serde::{Deserialize, Serialize};

use super::super::dto::{Attachments, PinPage};
use super::super::error::{ApiResult, Query, target_error};
use super::super::{ApiError, Body, Params, ServeState};
use super::{St, json, pipeline, store};
use crate::ops::AttachmentSpec;

/// `POST …/attachments`: a URI, or a template with its arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PinBody {
    server: String,
    uri: Option<String>,
    template: Option<String>,
    #[serde(default)]
    arguments: BTreeMap<String, ArgumentValue>,
    /// Stop applying after this many milliseconds (default: never).
    expires_in_ms: Option<u64>,
}

/// `201` to `POST …/attachments`: the pin, and why its target could not be checked
/// against the server, when it could not (the server is not connected, or failed).
#[derive(Debug, Serialize)]
struct PinCreated {
    #[serde(flatten)]
    pin: hostpipe_engine::Pin,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// At most 100 years, as `hostpipe attach --expires-in`.
const MAX_EXPIRY_MS: u64 = 100 * 365 * 86_400_000;

/// The pins of `owner`, and a pipeline's configured attachments.
async fn list_pins(state: &ServeState, owner: PinOwner) -> ApiResult {
    let store = store(state)?;
    let pins = store
        .pins(
            std::slice::from_ref(&owner),
            hostpipe_engine::store::unix_ms_now(),
        )
        .await?;
    let configured: Vec<Attachment> = match &owner {
        PinOwner::Pipeline(id) => state
            .current()
            .config
            .pipeline_attachments(id)
            .unwrap_or_default(),
        PinOwner::Conversation(_) => Vec::new(),
    };
    Ok(json(Attachments { pins, configured }))
}

/// Pins a URI or a template for `owner`.
async fn add_pin(state: &ServeState, owner: PinOwner, body: PinBody) -> ApiResult {
    state.app.check_server(&body.server)?;
    let current = state.current();
    current
        .config
        .check_pin_owner(&owner, &body.server)
        .map_err(|e| match &owner {
            PinOwner::Pipeline(id) if !current.pipelines.contains_key(id) => {
                ApiError::not_found("unknown_pipeline", format!("{e:#}"))
            }
            _ => ApiError::new(StatusCode::CONFLICT, "server_not_bound", format!("{e:#}")),
        })?;
    let spec = AttachmentSpec {
        server: body.server.clone(),
        uri: body.uri,
        template: body.template,
        arguments: body.arguments,
    };
    let target = AttachmentTarget::try_from(&spec).map_err(target_error)?;
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
            hostpipe_engine::store::unix_ms_now()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
        ),
        None => None,
    };
    // Last: it asks the server (an operator's look, like an admin's read).
    let warnings: Vec<String> = state
        .app
        .check_pin_target(&body.server, &target)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "unknown_resource", e))?
        .into_iter()
        .collect();
    let pin = store(state)?
        .pin(NewPin {
            owner,
            server: body.server,
            target,
            expires_at_ms,
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(PinCreated { pin, warnings }),
    )
        .into_response())
}

/// Removes pin `pin_id` of `owner`, or 404 `pin_not_found`.
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

/// The owner of a conversation's pins; 400 for an empty id.
fn conversation_owner(id: String) -> ApiResult<PinOwner> {
    if id.trim().is_empty() {
        return Err(ApiError::bad_request("the conversation id is empty"));
    }
    Ok(PinOwner::Conversation(id))
}

/// `GET /v1/pipelines/{id}/attachments`.
pub(crate) async fn list_pipeline_pins(State(state): St, Params(id): Params<String>) -> ApiResult {
    pipeline(&state, &id)?;
    list_pins(&state, PinOwner::Pipeline(id)).await
}

/// `POST /v1/pipelines/{id}/attachments`: 201 and the pin.
pub(crate) async fn add_pipeline_pin(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<PinBody>,
) -> ApiResult {
    pipeline(&state, &id)?;
    add_pin(&state, PinOwner::Pipeline(id), body).await
}

/// `DELETE /v1/pipelines/{id}/attachments/{pin_id}`: 204.
pub(crate) async fn remove_pipeline_pin(
    State(state): St,
    Params((id, pin_id)): Params<(String, String)>,
) -> ApiResult {
    pipeline(&state, &id)?;
    remove_pin(&state, PinOwner::Pipeline(id), &pin_id).await
}

/// `GET /v1/conversations/{id}/attachments`.
pub(crate) async fn list_conversation_pins(
    State(state): St,
    Params(id): Params<String>,
) -> ApiResult {
    list_pins(&state, conversation_owner(id)?).await
}

/// `POST /v1/conversations/{id}/attachments`: 201 and the pin.
pub(crate) async fn add_conversation_pin(
    State(state): St,
    Params(id): Params<String>,
    Body(body): Body<PinBody>,
) -> ApiResult {
    add_pin(&state, conversation_owner(id)?, body).await
}

/// `DELETE /v1/conversations/{id}/attachments/{pin_id}`: 204.
pub(crate) async fn remove_conversation_pin(
    State(state): St,
    Params((id, pin_id)): Params<(String, String)>,
) -> ApiResult {
    remove_pin(&state, conversation_owner(id)?, &pin_id).await
}

/// The scopes pins are stored at (message attachments live one turn and are never pinned).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PinScope {
    Pipeline,
    Conversation,
}

/// `GET /v1/pins` query parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PinListParams {
    scope: Option<PinScope>,
    limit: Option<u32>,
    #[serde(default)]
    offset: u32,
}

/// Most pins in one page of `GET /v1/pins`.
const MAX_PIN_LIMIT: u32 = 1000;

/// `GET /v1/pins[?scope=pipeline|conversation&limit=N&offset=N]`: one page of the live
/// pins of every pipeline and conversation, oldest first; 400 for a `limit` outside
/// 1 to 1000.
pub(crate) async fn list_all_pins(
    State(state): St,
    Query(params): Query<PinListParams>,
) -> ApiResult {
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_PIN_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "`limit` is {limit}; give 1 to {MAX_PIN_LIMIT}"
        )));
    }
    let query = PinQuery {
        scope: params.scope.map(|s| match s {
            PinScope::Pipeline => hostpipe_core::Scope::Pipeline,
            PinScope::Conversation => hostpipe_core::Scope::Conversation,
        }),
        // One more than asked, to tell whether there is a next page.
        limit: limit + 1,
        offset: params.offset,
    };
    let mut pins = store(&state)?
        .list_pins(&query, hostpipe_engine::store::unix_ms_now())
        .await?;
    let next_offset = (pins.len() > limit as usize).then(|| params.offset.saturating_add(limit));
    pins.truncate(limit as usize);
    Ok(json(PinPage { pins, next_offset }))
}
