//! The MCP door of `hostpipe serve`: hostpipe as an MCP server over streamable HTTP
//! (MCP spec 2025-11-25, "Transports / Streamable HTTP"), for platforms that speak MCP
//! tools and nothing else (docs/platforms.md, "MCP server").
//!
//! - `POST /mcp` serves the default pipeline (`default`, or the only one), `POST
//!   /mcp/{pipeline}` one pipeline; both with the `/v1` bearer tokens.
//! - One tool, `fit_context` ([`fit`]): a turn of the pipeline through its stages and its
//!   `preview` runner (no model runs), answered with the fitted context exactly as the
//!   model would get it, fenced; its reads go to the history as a turn's do.
//! - A gateway ([`gateway`]): the resources, resource templates and prompts of the servers
//!   the pipeline binds, under `hostpipe://SERVER/ORIGINAL-URI` and `SERVER__name`; reads
//!   go through the pipeline's policy as the model's `read_resource` does.
//!
//! rmcp's `StreamableHttpService` answers stateless (no `Mcp-Session-Id`), one JSON
//! document per request: every request stands alone, so any instance behind a load
//! balancer can answer it, and no session outlives a request.
//!
//! Who may call what ([`Caller`]): a missing or unknown token is 401 with
//! `WWW-Authenticate: Bearer` (RFC 6750 §3; MCP spec 2025-11-25, "Authorization"); a
//! read-only token may list, read and get prompts, as it may on `/v1`; `fit_context`
//! runs the pipeline's stages and writes the history, like `POST /v1/turns`, so it needs
//! an admin token (a read token gets a tool error saying so).

mod fit;
mod gateway;
mod handler;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::auth::token_scope;
use super::{ApiError, Scope, ScopeCell, ServeState};

/// The paths of the door (as routed).
pub(crate) const ROUTES: [&str; 2] = ["/mcp", "/mcp/{pipeline}"];

/// Who called the door, and which pipeline its path names (set by [`authorize`], read by
/// the handler from the request's `http::request::Parts`).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The token's scope.
    pub(crate) scope: Scope,
    /// The pipeline of `/mcp/{pipeline}`; `None` on `/mcp`.
    pub(crate) pipeline: Option<String>,
}

/// The routes `/mcp` and `/mcp/{pipeline}` (every method: rmcp answers `GET` and
/// `DELETE` itself), behind the token check.
pub(super) fn routes(state: &Arc<ServeState>) -> Router<Arc<ServeState>> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(state.options.max_body_bytes)
        // The door needs a bearer token on every request, which a page a DNS-rebinding
        // attack runs cannot send: the `Host` check rmcp defaults to (loopback names
        // only) would only refuse the names operators deploy under (compose service
        // names, public hosts).
        .disable_allowed_hosts()
        .with_cancellation_token(state.stop_turns.child_token());
    let service = {
        let state = Arc::clone(state);
        StreamableHttpService::new(
            move || Ok(handler::McpDoor::new(Arc::clone(&state))),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    };
    Router::new()
        .route_service(ROUTES[0], service.clone())
        .route_service(ROUTES[1], service)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(state),
            authorize,
        ))
}

/// The token check of the door: 401 with `WWW-Authenticate: Bearer realm="hostpipe"`
/// (RFC 6750 §3; `error="invalid_token"` for a token that is not ours), 404 `unknown_pipeline` for a
/// path that names no pipeline; else the request goes on with its [`Caller`].
async fn authorize(State(state): State<Arc<ServeState>>, mut req: Request, next: Next) -> Response {
    // A 401 carries the RFC 6750 challenge ([`ApiError`]'s response).
    let scope = match token_scope(&state, req.headers()) {
        Ok(scope) => scope,
        Err(e) => return e.into_response(),
    };
    if let Some(cell) = req.extensions().get::<ScopeCell>() {
        let _ = cell.0.set(scope);
    }
    let pipeline = req
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .filter(|p| !p.is_empty())
        .map(|p| percent_decode(p).unwrap_or_else(|| p.to_owned()));
    let current = state.current();
    let endpoints = || {
        current
            .pipelines
            .keys()
            .map(|i| format!("/mcp/{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &pipeline {
        Some(id) if !current.pipelines.contains_key(id) => {
            return ApiError::not_found(
                "unknown_pipeline",
                format!("no pipeline `{id}`; MCP endpoints: /mcp, {}", endpoints()),
            )
            .into_response();
        }
        // `/mcp` serves the default pipeline: without one it serves nothing, and says
        // so before a client connects to an empty server.
        None if default_pipeline(&state).is_none() => {
            return ApiError::not_found(
                "unknown_pipeline",
                format!(
                    "/mcp serves the pipeline `default` (or the only one), and there is none: connect to one of {}",
                    endpoints()
                ),
            )
            .into_response();
        }
        _ => {}
    }
    req.extensions_mut().insert(Caller { scope, pipeline });
    next.run(req).await
}

/// The default pipeline of `/mcp`: `default`, else the only pipeline; `None` when there
/// are several and none is called `default`.
pub(crate) fn default_pipeline(state: &ServeState) -> Option<String> {
    let current = state.current();
    let pipelines = &current.pipelines;
    if pipelines.contains_key("default") {
        return Some("default".to_owned());
    }
    match pipelines.len() {
        1 => pipelines.keys().next().cloned(),
        _ => None,
    }
}

/// `s` with its `%XX` escapes decoded (RFC 3986 §2.1); `None` when an escape is not two
/// hex digits or the result is not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}
