//! The tool endpoint of protocol version 2: the agent calls the turn's tools through
//! hostpipe, under the pipeline's policy, with a token that is valid while its turn
//! runs.
//!
//! One endpoint per runner, started at its first version 2 turn on `tools_listen`
//! (default `127.0.0.1:0`, an ephemeral loopback port): `POST {url}` with
//! `Authorization: Bearer TOKEN` and `{"name": "server__tool", "arguments": {...}}`.
//! The answer is the MCP `CallToolResult` (spec 2025-11-25, "Tools"), or
//! `{"error": {"code", "message"}}`: 401 `invalid_token` (unknown, or its turn ended),
//! 400 `invalid_body`, `invalid_arguments`, `invalid_params`, 403 `tool_not_offered`,
//! 404 `unknown_tool`, 409 `server_not_bound`, 429 `too_many_tool_calls` (over the
//! runner's `max_tool_calls` in one turn), 502 `server_error`, 503
//! `server_unavailable`, 504 `server_timeout`. A call the consent policy withholds is a
//! 200 whose result says so (`isError`), as the model is told in a local turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hostpipe_core::{CallOrigin, SourceError, ToolError, ToolExecutor};
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

/// The path the endpoint answers on.
pub const PATH: &str = "/v2/tool-calls";

/// Largest request body, in bytes.
const MAX_BODY_BYTES: usize = 1024 * 1024;

struct Grant {
    secret: String,
    executor: Arc<dyn ToolExecutor>,
    calls: AtomicU32,
    /// The turn's elicitation scope: the agent's calls run on the endpoint's tasks, so
    /// a server's question to the user needs it handed over.
    scope: Option<hostpipe_core::ElicitScope>,
}

type Grants = Arc<Mutex<HashMap<String, Arc<Grant>>>>;

fn lock(grants: &Grants) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Grant>>> {
    // Every critical section leaves the map consistent.
    grants.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone)]
struct Shared {
    grants: Grants,
    max_calls: u32,
}

/// A running tool endpoint; stops when dropped.
pub(crate) struct ToolEndpoint {
    url: String,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ToolEndpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A turn's access to the endpoint: its token is valid until this is dropped.
pub(crate) struct TurnAccess {
    id: String,
    grants: Grants,
    /// `ID.SECRET`: the id names the grant, the secret (compared in constant time)
    /// proves it.
    pub(crate) token: String,
}

impl Drop for TurnAccess {
    fn drop(&mut self) {
        lock(&self.grants).remove(&self.id);
    }
}

impl ToolEndpoint {
    /// Listens on `listen`; the agent is told `public_url` (a base URL) + [`PATH`], or
    /// the bound address's.
    ///
    /// # Errors
    /// The bind error, e.g. the address is in use.
    pub(crate) async fn start(
        listen: std::net::SocketAddr,
        public_url: Option<&str>,
        max_calls: u32,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let bound = listener.local_addr()?;
        let url = match public_url {
            Some(base) => format!("{}{PATH}", base.trim_end_matches('/')),
            None => format!("http://{bound}{PATH}"),
        };
        let shared = Shared {
            grants: Grants::default(),
            max_calls,
        };
        let app = Router::new()
            .route(PATH, axum::routing::post(call))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the remote runner's tool endpoint stopped");
            }
        });
        tracing::info!(url, "remote runner tool endpoint listening");
        Ok(Self {
            url,
            shared,
            server,
        })
    }

    /// The URL the agent POSTs to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Access to `executor` for one turn (called in the turn's task: its elicitation
    /// scope goes with the grant).
    pub(crate) fn grant(&self, executor: Arc<dyn ToolExecutor>) -> TurnAccess {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let secret = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let token = format!("{id}.{secret}");
        lock(&self.shared.grants).insert(
            id.clone(),
            Arc::new(Grant {
                secret,
                executor,
                calls: AtomicU32::new(0),
                scope: hostpipe_core::ElicitScope::current(),
            }),
        );
        TurnAccess {
            id,
            grants: Arc::clone(&self.shared.grants),
            token,
        }
    }
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"error": {"code": code, "message": message.into()}});
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer error=\"invalid_token\""),
        );
    }
    response
}

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    /// The tool's name as the request's `tools` list it.
    name: String,
    /// A JSON object; absent or null for none.
    #[serde(default)]
    arguments: serde_json::Value,
}

fn grant_of(shared: &Shared, headers: &HeaderMap) -> Option<Arc<Grant>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("bearer "))
        .map(|_| &value[7..])?;
    let (id, secret) = token.split_once('.')?;
    let grant = lock(&shared.grants).get(id).cloned()?;
    bool::from(grant.secret.as_bytes().ct_eq(secret.as_bytes())).then_some(grant)
}

async fn call(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: Result<axum::Json<CallBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(grant) = grant_of(&shared, &headers) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "no turn has this token: give `Authorization: Bearer` with the request's tool_endpoint.token; it is valid only while its turn runs",
        );
    };
    let body = match body {
        Ok(axum::Json(body)) => body,
        Err(rejection) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                rejection.body_text(),
            );
        }
    };
    if grant.calls.fetch_add(1, Ordering::SeqCst) >= shared.max_calls {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_tool_calls",
            format!(
                "this turn made its {} tool calls (max_tool_calls of the remote runner)",
                shared.max_calls
            ),
        );
    }
    let calling = grant
        .executor
        .call_from(&body.name, body.arguments, CallOrigin::Agent);
    let called = match grant.scope.clone() {
        Some(scope) => scope.run(calling).await,
        None => calling.await,
    };
    match called {
        Ok(result) => axum::Json(crate::mcp_json::call_tool_result(&result)).into_response(),
        Err(ToolError::Source(e)) => {
            let (status, code) = match &e {
                SourceError::Unavailable { .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, "server_unavailable")
                }
                SourceError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "server_timeout"),
                SourceError::Protocol { code: -32602, .. } => {
                    (StatusCode::BAD_REQUEST, "invalid_params")
                }
                _ => (StatusCode::BAD_GATEWAY, "server_error"),
            };
            error(status, code, e.to_string())
        }
        Err(e) => {
            let (status, code) =
                crate::mcp_json::tool_error_status(&e).unwrap_or((502, "server_error"));
            error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                code,
                e.to_string(),
            )
        }
    }
}
