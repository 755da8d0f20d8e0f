//! `POST /v1/servers`, `DELETE /v1/servers/{server}` and `POST /v1/reload` (admin):
//! servers that come and go while the service runs (docs/http-api.md, "Adding and
//! removing servers"). One change at a time ([`ServeState::changing`]).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse as _;
use hostpipe_core::McpSource as _;

use super::super::dto::{AddedServer, RemovedServer};
use super::super::error::ApiResult;
use super::super::reload::reload;
use super::super::{ApiError, Body, Params, ServeState};
use super::{St, json};
use crate::added_servers::{EntryError, from_body};

/// Where added servers are kept, or 409 `no_store`.
fn entries(state: &ServeState) -> ApiResult<&dyn hostpipe_engine::ServerEntries> {
    state.app.server_entries.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_store",
            "this instance has no store (--store none): servers added over the API live there",
        )
    })
}

/// `POST /v1/servers`: adds one server from an `mcpServers` entry, stores it, and
/// connects it in the background; 201 with its status (`connecting`).
pub(crate) async fn add_server(State(state): St, Body(body): Body<serde_json::Value>) -> ApiResult {
    to_the_end(async move { add(&state, body).await }).await
}

async fn add(state: &ServeState, body: serde_json::Value) -> ApiResult {
    let entries = entries(state)?;
    let new = from_body(
        body,
        state.options.allow_stdio_servers,
        state.options.credential_key.as_ref(),
        hostpipe_engine::store::unix_ms_now(),
    )
    .map_err(|e| match e {
        EntryError::StdioNotAllowed(_) => {
            ApiError::new(StatusCode::FORBIDDEN, "stdio_not_allowed", e.to_string())
        }
        EntryError::NeedsKey(_) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "credential_key_required",
            e.to_string(),
        ),
        EntryError::Invalid(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_server", e.to_string())
        }
    })?;
    let name = new.config.name.clone();
    let _one = state.changing.lock().await;
    let current = state.current();
    if state.app.host.server_config(&name).is_some() {
        let whence = if current.added.contains(&name) {
            "added over the API".to_owned()
        } else {
            format!("configured in {}", current.config.source)
        };
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_exists",
            format!("an MCP server named `{name}` is already there ({whence})"),
        ));
    }
    if !entries.add_stored_server(&new.row).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_exists",
            format!(
                "an MCP server named `{name}` is already in the store (added through another instance): POST /v1/reload here to pick it up"
            ),
        ));
    }
    let ignored_keys = new.config.ignored_keys.clone();
    if let Err(e) = state.app.host.add_server(new.config) {
        // Not reachable under `changing`; undo the row all the same.
        let _ = entries.remove_stored_server(&name).await;
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "server_exists",
            e.to_string(),
        ));
    }
    state.update_current(|c| {
        c.added.insert(name.clone());
    });
    tracing::info!(server = %name, ignored_keys = ?ignored_keys, "MCP server added over the API");
    let mut response = (
        StatusCode::CREATED,
        axum::Json(AddedServer {
            server: state.app.host.server(&name),
            ignored_keys,
        }),
    )
        .into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/servers/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Runs `change` to its end on its own task: a request that times out (or whose client
/// leaves) must not leave a change half made.
async fn to_the_end<F>(change: F) -> ApiResult
where
    F: std::future::Future<Output = ApiResult> + Send + 'static,
{
    tokio::spawn(change).await.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the change's task failed: {e}"),
        ))
    })
}

/// `DELETE /v1/servers/{server}`: removes a server added over the API from the store and
/// closes its session; 409 `configured_in_file` for a server of the config files, 404
/// `unknown_server` for a name neither here nor in the store.
pub(crate) async fn remove_server(State(state): St, Params(server): Params<String>) -> ApiResult {
    to_the_end(async move { remove(&state, server).await }).await
}

async fn remove(state: &ServeState, server: String) -> ApiResult {
    let _one = state.changing.lock().await;
    let current = state.current();
    if current.config.servers.iter().any(|s| s.name == server) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "configured_in_file",
            format!(
                "`{server}` is configured in {}: remove it there, then reload (POST /v1/reload or SIGHUP)",
                current.config.source
            ),
        ));
    }
    let stored = match &state.app.server_entries {
        Some(entries) => entries.remove_stored_server(&server).await?,
        None => false,
    };
    let running = state.app.host.remove_server(&server).await;
    if !stored && !running {
        return Err(ApiError::not_found(
            "unknown_server",
            format!(
                "no MCP server `{server}` added over the API; servers: {}",
                state.app.server_names().join(", ")
            ),
        ));
    }
    state.update_current(|c| {
        c.added.remove(&server);
    });
    let bound_by = current.bound_by(&server);
    if bound_by.is_empty() {
        tracing::info!(%server, "MCP server removed over the API");
    } else {
        tracing::warn!(%server, pipelines = ?bound_by, "MCP server removed over the API while pipelines bind it: their turns find it unavailable, and the next reload or start fails until the bindings go");
    }
    Ok(json(RemovedServer {
        name: server,
        bound_by,
    }))
}

/// `POST /v1/reload`: reads the configuration files and the store again (as SIGHUP
/// does) and applies the difference, keeping the sessions of unchanged servers.
pub(crate) async fn reload_config(State(state): St) -> ApiResult {
    to_the_end(async move { Ok(json(reload(&state).await?)) }).await
}
