//! `GET /healthz` and `GET /readyz` (no token).

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hostpipe_core::{HistoryQuery, McpSource as _};

use super::{St, json};

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> Response {
    json(serde_json::json!({"status": "ok"}))
}

/// `GET /readyz`: 200 once the servers' first connection attempts are over and the store
/// answers; 503 while starting, when the store fails, and while shutting down. A failed
/// MCP server does not make the instance unready (its status is in the body).
pub(crate) async fn readyz(State(state): St) -> Response {
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
