//! `GET /healthz` and `GET /readyz` (no token).

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hostpipe_core::McpSource as _;
use hostpipe_engine::HistoryQuery;

use super::super::dto::{Health, Ready, ReadyStatus, ServerHealth, StoreHealth};
use super::{St, json};

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> Response {
    json(Health { status: "ok" })
}

/// `GET /readyz`: 200 once the servers' first connection attempts are over and the store
/// answers; 503 while starting, when the store fails, and while shutting down. A failed
/// MCP server does not make the instance unready (its status is in the body).
pub(crate) async fn readyz(State(state): St) -> Response {
    let servers: Vec<ServerHealth> = state
        .app
        .host
        .servers()
        .into_iter()
        .map(|s| ServerHealth {
            status: (&s.status).into(),
            name: s.name,
        })
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
                Ok(Err(e)) => {
                    // Without a token: the error (a path, a host) goes to the log only.
                    tracing::warn!(error = %e, "/readyz: the store failed to answer");
                    Err(format!(
                        "{} failed to answer (the log says why)",
                        store.describe()
                    ))
                }
                Err(_) => Err(format!("{} did not answer within 2 s", store.describe())),
            }
        }
    };
    let status = if state.draining.load(Ordering::SeqCst) {
        ReadyStatus::Draining
    } else if !state.connected.load(Ordering::SeqCst) {
        ReadyStatus::Starting
    } else if store.is_err() {
        ReadyStatus::StoreUnavailable
    } else {
        ReadyStatus::Ready
    };
    let code = if status == ReadyStatus::Ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Ready {
        status,
        store: StoreHealth::from(store),
        servers,
    };
    (code, axum::Json(body)).into_response()
}
