//! `hostpipe serve`: the HTTP API and the admin page, for platforms written in other
//! languages (docs/http-api.md; the OpenAPI document is docs/openapi.json, served at
//! `/openapi.json`).
//!
//! The service keeps no state of its own beyond the MCP sessions of its [`App`] and the
//! pending consent questions of its running turns: pins, conversation grants and the
//! read history live in the attachment store, so several instances behind a load
//! balancer can share one PostgreSQL store.

pub mod approver;
mod dto;
mod error;
mod handlers;
mod router;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hostpipe_core::{RunEvent, SourceError, StoreError};
use serde::Serialize;
use subtle::ConstantTimeEq as _;
use tokio_util::task::TaskTracker;

use crate::App;
pub use approver::HttpApprover;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// The default largest request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;
/// The longest error message sent, in bytes (longer ones are cut).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 2048;
/// How long a client may take to send a request's body once its head is in, unless the
/// token check set [`BodyLimits`] (`[serve] request_timeout_ms`).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The body limits of a request, in its extensions (set by the token check).
#[derive(Debug, Clone, Copy)]
struct BodyLimits {
    /// How long the body may take to arrive.
    timeout: Duration,
    /// Its largest size, bytes.
    max_bytes: usize,
}
/// How long a client may take to send a request's head (slow clients that never finish
/// one hold a connection each).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The OpenAPI 3.1 document of the API, as checked in (docs/openapi.json).
pub const OPENAPI: &str = include_str!("../../../docs/openapi.json");

const ADMIN_HTML: &str = include_str!("admin/index.html");
const ADMIN_JS: &str = include_str!("admin/admin.js");
const ADMIN_CSS: &str = include_str!("admin/admin.css");

/// What a bearer token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Look: every `GET`, and the two `POST`s that only look (`resources/read`,
    /// `completion`).
    Read,
    /// Everything: also attach and detach, run turns, answer consent requests.
    Admin,
}

/// The tokens `hostpipe serve` accepts.
#[derive(Clone, Default)]
pub struct Tokens {
    admin: Vec<Vec<u8>>,
    read: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens {{ admin: {} tokens, read: {} tokens }}",
            self.admin.len(),
            self.read.len()
        )
    }
}

impl Tokens {
    /// The tokens of `[serve] admin_tokens` and `read_tokens`, plus `HOSTPIPE_TOKEN`
    /// (admin) and `HOSTPIPE_READ_TOKEN` (read) when set.
    ///
    /// # Errors
    /// When there is no token at all (every `/v1` route needs one), or a token is
    /// shorter than [`MIN_TOKEN_BYTES`] or has surrounding whitespace (it names where it
    /// came from, never the token).
    pub fn load(
        section: &crate::config::ServeSection,
        env_admin: Option<String>,
        env_read: Option<String>,
    ) -> anyhow::Result<Self> {
        /// The checked tokens of one scope: `[serve] KEY[i]`, then `env` (named `env_name`).
        fn checked(
            key: &str,
            configured: &[String],
            env_name: &str,
            env: Option<String>,
        ) -> anyhow::Result<Vec<Vec<u8>>> {
            let sources = configured
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("[serve] {key}[{i}]"), t.clone()))
                .chain(env.map(|t| (env_name.to_owned(), t)));
            sources
                .map(|(source, token)| {
                    if token.trim() != token {
                        anyhow::bail!("{source}: the token has leading or trailing whitespace");
                    }
                    if token.len() < MIN_TOKEN_BYTES {
                        anyhow::bail!(
                            "{source}: the token is {} bytes; use at least {MIN_TOKEN_BYTES} (e.g. `openssl rand -hex 32`)",
                            token.len()
                        );
                    }
                    Ok(token.into_bytes())
                })
                .collect()
        }
        let tokens = Self {
            admin: checked(
                "admin_tokens",
                &section.admin_tokens,
                "HOSTPIPE_TOKEN",
                env_admin,
            )?,
            read: checked(
                "read_tokens",
                &section.read_tokens,
                "HOSTPIPE_READ_TOKEN",
                env_read,
            )?,
        };
        if tokens.admin.is_empty() && tokens.read.is_empty() {
            anyhow::bail!(
                "no API token: every /v1 route needs one. Set HOSTPIPE_TOKEN (admin) and optionally HOSTPIPE_READ_TOKEN (read-only), or [serve] admin_tokens / read_tokens"
            );
        }
        Ok(tokens)
    }

    /// The scope of `token`, if it is one of ours. Compared in constant time.
    pub fn scope_of(&self, token: &[u8]) -> Option<Scope> {
        let is = |list: &[Vec<u8>]| {
            // Check every token, so the time does not tell which one matched.
            list.iter().fold(false, |found, t| {
                found | bool::from(t.as_slice().ct_eq(token))
            })
        };
        if is(&self.admin) {
            Some(Scope::Admin)
        } else if is(&self.read) {
            Some(Scope::Read)
        } else {
            None
        }
    }
}

/// The settings of one `hostpipe serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: String,
    /// Who may call `/v1`.
    pub tokens: Tokens,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Time for any request but a turn.
    pub request_timeout: Duration,
    /// Time for a turn.
    pub turn_timeout: Duration,
    /// How long running turns may take to finish after SIGTERM or Ctrl-C.
    pub shutdown_timeout: Duration,
}

impl ServeOptions {
    /// The options of `section`, with `listen` (the `--listen` flag) over its address.
    ///
    /// # Errors
    /// As [`Tokens::load`]; a zero limit.
    pub fn from_config(
        section: &crate::config::ServeSection,
        listen: Option<String>,
    ) -> anyhow::Result<Self> {
        let tokens = Tokens::load(
            section,
            std::env::var("HOSTPIPE_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            std::env::var("HOSTPIPE_READ_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
        )?;
        let ms = |v: Option<u64>, default: u64, key: &str| match v {
            Some(0) => anyhow::bail!("[serve] {key}: must be above 0"),
            v => Ok(Duration::from_millis(v.unwrap_or(default))),
        };
        let max_body_bytes = match section.max_body_bytes {
            Some(0) => anyhow::bail!("[serve] max_body_bytes: must be above 0"),
            v => v.unwrap_or(DEFAULT_MAX_BODY_BYTES),
        };
        Ok(Self {
            listen: listen
                .or_else(|| section.listen.clone())
                .unwrap_or_else(|| DEFAULT_LISTEN.to_owned()),
            tokens,
            max_body_bytes,
            request_timeout: ms(section.request_timeout_ms, 30_000, "request_timeout_ms")?,
            turn_timeout: ms(section.turn_timeout_ms, 120_000, "turn_timeout_ms")?,
            shutdown_timeout: ms(section.shutdown_timeout_ms, 60_000, "shutdown_timeout_ms")?,
        })
    }
}

/// What every handler shares.
pub(crate) struct ServeState {
    app: App,
    /// Each pipeline's `preview` runner, for a turn's `"runner": "preview"` (the
    /// pipeline runs it instead of its own: [`Pipeline::run_turn_on`]).
    preview: BTreeMap<String, Box<dyn hostpipe_core::Runner>>,
    approver: HttpApprover,
    options: ServeOptions,
    /// Set once the servers' first connection attempts are over.
    connected: AtomicBool,
    /// Set on SIGTERM or Ctrl-C: no new turns, `/readyz` says 503.
    draining: AtomicBool,
    turns: TaskTracker,
    /// Cancelled when the shutdown timeout passes with turns still running.
    stop_turns: tokio_util::sync::CancellationToken,
}

/// One event of a streamed turn (`text/event-stream`); the SSE event name is
/// [`TurnEvent::name`], the data its JSON.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// The turn started.
    Started(serde_json::Value),
    /// A runner event.
    Run(RunEvent),
    /// A consent question waits for an answer.
    ConsentRequest(approver::PendingConsent),
    /// The turn ended: the same document as the JSON response.
    Done(serde_json::Value),
    /// The turn could not end normally (timeout).
    Error(ApiError),
}

impl TurnEvent {
    /// The SSE event name and data, each event serialized once. The name is `turn`, a
    /// [`RunEvent`]'s tag (`message_delta`, `tool_call_started`, …), `consent_request`,
    /// `done` or `error`; the data is one line of JSON.
    pub fn encode(&self) -> (String, String) {
        let (name, data) = match self {
            Self::Started(v) => ("turn".to_owned(), serde_json::to_string(v)),
            Self::Run(e) => match serde_json::to_value(e) {
                Ok(v) => {
                    let tag = v
                        .get("event")
                        .and_then(|t| t.as_str())
                        .unwrap_or("run_event");
                    (tag.to_owned(), Ok(v.to_string()))
                }
                Err(err) => ("run_event".to_owned(), Err(err)),
            },
            Self::ConsentRequest(c) => ("consent_request".to_owned(), serde_json::to_string(c)),
            Self::Done(v) => ("done".to_owned(), serde_json::to_string(v)),
            Self::Error(e) => ("error".to_owned(), serde_json::to_string(&e.body())),
        };
        // These types always serialize; should one not, the caller still gets JSON.
        let data =
            data.unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
        (name, data)
    }
}

/// An API error: an HTTP status and `{"error": {"code", "message"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with `status`, a stable machine-readable `code` and a message for people.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let mut message = message.into();
        // A message may quote the request (a URI, a server's error about it); a huge
        // request is not echoed whole.
        if message.len() > MAX_ERROR_MESSAGE_BYTES {
            let mut end = MAX_ERROR_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str(" […]");
        }
        Self {
            status,
            code,
            message,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code, "message": self.message}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750 §3.
            let value = if self.code == "missing_token" {
                HeaderValue::from_static("Bearer realm=\"hostpipe\"")
            } else {
                HeaderValue::from_static("Bearer realm=\"hostpipe\", error=\"invalid_token\"")
            };
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        } else if self.status == StatusCode::FORBIDDEN {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(
                    "Bearer realm=\"hostpipe\", error=\"insufficient_scope\", scope=\"admin\"",
                ),
            );
        }
        response
    }
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        let (status, code) = match &e {
            SourceError::UnknownServer { .. } => (StatusCode::NOT_FOUND, "unknown_server"),
            SourceError::Unavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "server_unavailable")
            }
            SourceError::NotSupported { .. } => (StatusCode::CONFLICT, "not_supported"),
            SourceError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "server_timeout"),
            SourceError::Protocol { operation, .. }
                if e.is_not_found() && operation == "resources/read" =>
            {
                (StatusCode::NOT_FOUND, "resource_not_found")
            }
            SourceError::Protocol { code: -32602, .. } => {
                (StatusCode::BAD_REQUEST, "invalid_params")
            }
            _ => (StatusCode::BAD_GATEWAY, "server_error"),
        };
        Self::new(status, code, e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(m) => Self::bad_request(m),
            e => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            ),
        }
    }
}

/// `axum::Json`, with its rejections as [`ApiError`]s: 400 for bad JSON or a body that
/// does not match (naming the field), 413 over the size limit, 415 without
/// `Content-Type: application/json`.
pub(crate) struct Body<T>(pub(crate) T);

impl<S, T> FromRequest<S> for Body<T>
where
    axum::Json<T>: FromRequest<S, Rejection = axum::extract::rejection::JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limits = req.extensions().get::<BodyLimits>().copied();
        let limit = limits.map_or(BODY_READ_TIMEOUT, |l| l.timeout);
        let read = axum::Json::<T>::from_request(req, state);
        let Ok(read) = tokio::time::timeout(limit, read).await else {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} ms ([serve] request_timeout_ms)",
                    limit.as_millis()
                ),
            ));
        };
        match read {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(rejection) => {
                let status = rejection.status();
                let code = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                    _ => "invalid_body",
                };
                let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
                    StatusCode::BAD_REQUEST
                } else {
                    status
                };
                let message = match (status, limits) {
                    (StatusCode::PAYLOAD_TOO_LARGE, Some(l)) => format!(
                        "the body is over {} bytes ([serve] max_body_bytes)",
                        l.max_bytes
                    ),
                    _ => rejection.body_text(),
                };
                Err(ApiError::new(status, code, message))
            }
        }
    }
}

/// `axum::extract::Path`, with its rejection (e.g. a `%ff` that is not UTF-8) as a 400
/// [`ApiError`].
pub(crate) struct Params<T>(pub(crate) T);

impl<S, T> axum::extract::FromRequestParts<S> for Params<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Self(v)),
            Err(rejection) => Err(ApiError::bad_request(format!(
                "the path: {}",
                rejection.body_text()
            ))),
        }
    }
}

/// Which scope a request to the route `route` (as routed: `/v1/servers/{server}/…`)
/// needs: [`Scope::Read`] for `GET` and the two `POST`s that only look.
fn needed_scope(method: &Method, route: &str) -> Scope {
    let looks = method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST
            && matches!(
                route,
                "/v1/servers/{server}/resources/read"
                    | "/v1/servers/{server}/completion"
                    | "/v1/servers/{server}/prompts/{name}"
            ));
    if looks { Scope::Read } else { Scope::Admin }
}

/// The bearer-token check of every `/v1` route (RFC 6750).
async fn authorize(
    State(state): State<Arc<ServeState>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let Some(given) = given else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_token",
            "this route needs `Authorization: Bearer TOKEN`",
        ));
    };
    // The scheme is case-insensitive (RFC 9110 §11.1); one space, then the token.
    let token = given
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| &given[7..])
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                "the Authorization header is not `Bearer TOKEN`",
            )
        })?;
    let scope = state.options.tokens.scope_of(token).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the token is not valid",
        )
    })?;
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("", axum::extract::MatchedPath::as_str);
    let needed = needed_scope(req.method(), route);
    if scope < needed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!(
                "{} {} needs an admin token; this one is read-only",
                req.method(),
                req.uri().path()
            ),
        ));
    }
    req.extensions_mut().insert(BodyLimits {
        timeout: state.options.request_timeout,
        max_bytes: state.options.max_body_bytes,
    });
    if let Some(cell) = req.extensions().get::<ScopeCell>() {
        let _ = cell.0.set(scope);
    }
    Ok(next.run(req).await)
}

/// One structured access-log line per request (target `hostpipe::access`, level INFO):
/// method, path, status, latency (ms, to the response head; a streamed turn goes on
/// after it), the token's scope, the client's address and the request id, which is the
/// caller's `x-request-id` or a new UUID, and is sent back. A request whose client went
/// away before the answer is logged with status 499.
async fn access_log(mut req: Request, next: Next) -> Response {
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        req.headers_mut().insert("x-request-id", v);
    }
    let scope = ScopeCell::default();
    req.extensions_mut().insert(scope.clone());
    let mut line = AccessLine {
        started: Instant::now(),
        method: req.method().clone(),
        path: req.uri().path().to_owned(),
        client: req
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0),
        request_id,
        scope,
        status: None,
    };
    let mut response = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&line.request_id) {
        response.headers_mut().insert("x-request-id", v);
    }
    line.status = Some(response.status().as_u16());
    response
}

/// The scope the token check found, for the access log (set once, read at the end).
#[derive(Clone, Default)]
struct ScopeCell(Arc<std::sync::OnceLock<Scope>>);

/// Writes the access-log line when the request ends, answered or dropped.
struct AccessLine {
    started: Instant,
    method: Method,
    path: String,
    client: Option<SocketAddr>,
    request_id: String,
    scope: ScopeCell,
    /// The status, once answered.
    status: Option<u16>,
}

impl Drop for AccessLine {
    fn drop(&mut self) {
        // 499: the client closed the connection first (nginx's convention).
        let status = self.status.unwrap_or(499);
        let scope = self.scope.0.get().copied();
        tracing::info!(
            target: "hostpipe::access",
            method = %self.method,
            path = self.path.as_str(),
            status,
            latency_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            scope = scope.map(|s| if s == Scope::Admin { "admin" } else { "read" }),
            client = self.client.map(|c| c.to_string()),
            request_id = self.request_id.as_str(),
            "request"
        );
    }
}

/// The router: the API under `/v1` (token required), the page, the OpenAPI document and
/// the health routes (no token).
pub(crate) fn router(state: Arc<ServeState>) -> Router {
    use axum::routing::get;
    let v1 = router::routes(state.options.request_timeout)
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            authorize,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            state.options.max_body_bytes,
        ));
    let page = |body: &'static str, mime: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, mime)], body) })
    };
    Router::new()
        .merge(v1)
        .route("/", page(ADMIN_HTML, "text/html; charset=utf-8"))
        .route(
            "/admin.js",
            page(ADMIN_JS, "text/javascript; charset=utf-8"),
        )
        .route("/admin.css", page(ADMIN_CSS, "text/css; charset=utf-8"))
        .route("/openapi.json", page(OPENAPI, "application/json"))
        .route("/healthz", get(handlers::health::healthz))
        .route("/readyz", get(handlers::health::readyz))
        .fallback(router::not_found)
        .method_not_allowed_fallback(router::method_not_allowed)
        .layer(axum::middleware::from_fn(security_headers))
        .layer(axum::middleware::from_fn(access_log))
        .with_state(state)
}

/// The page may load only its own script and style, and images from `data:` URLs (the
/// previews); nothing may frame it.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Runs `hostpipe serve` until SIGTERM or Ctrl-C: listens, connects the servers, and on
/// the signal stops accepting, lets running turns finish (at most
/// [`ServeOptions::shutdown_timeout`]), then stops the MCP servers.
///
/// Prints `hostpipe: listening on http://ADDR` on stdout once it accepts connections.
///
/// # Errors
/// When the address cannot be bound, or a pipeline's preview runner cannot be built.
pub async fn serve(
    app: App,
    approver: HttpApprover,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = &'static str> + Send + 'static,
) -> anyhow::Result<()> {
    let registry = crate::registry()?;
    let choice = crate::config::RunnerChoice::named("preview");
    let mut preview = BTreeMap::new();
    for id in app.pipelines.keys() {
        let runner = app
            .config
            .build_runner(&registry, app.host.clone(), id, &choice)?;
        preview.insert(id.clone(), runner);
    }
    let listener = tokio::net::TcpListener::bind(&options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let addr: SocketAddr = listener.local_addr()?;
    let state = Arc::new(ServeState {
        app,
        preview,
        approver,
        options,
        connected: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        turns: TaskTracker::new(),
        stop_turns: tokio_util::sync::CancellationToken::new(),
    });
    let router = router(Arc::clone(&state));
    println!("hostpipe: listening on http://{addr}");
    tracing::info!(%addr, "listening");
    let connecting = tokio::spawn({
        let state = Arc::clone(&state);
        async move {
            state.app.connect().await;
            state.connected.store(true, Ordering::SeqCst);
            tracing::info!("MCP servers connected (or failed); ready");
        }
    });
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let drain = {
        let state = Arc::clone(&state);
        async move {
            let why = shutdown.await;
            state.draining.store(true, Ordering::SeqCst);
            tracing::info!(
                signal = why,
                running_turns = state.turns.len(),
                "shutting down: no new connections; running turns finish"
            );
            let _ = signalled_tx.send(());
        }
    };
    let shutdown_timeout = state.options.shutdown_timeout;
    let served = async {
        accept_loop(listener, router, drain).await;
        state.turns.close();
        state.turns.wait().await;
    };
    tokio::pin!(served);
    tokio::select! {
        () = &mut served => {}
        () = async {
            let _ = signalled_rx.await;
            tokio::time::sleep(shutdown_timeout).await;
        } => {
            tracing::warn!(
                running_turns = state.turns.len(),
                "turns still running after the shutdown timeout; they end with `shutting_down`"
            );
            state.stop_turns.cancel();
            // Their callers get the error before the connections close.
            let _ = tokio::time::timeout(Duration::from_secs(5), &mut served).await;
        }
    }
    connecting.abort();
    state.app.shutdown().await;
    Ok(())
}

/// Serves HTTP/1.1 on `listener` until `shutdown` resolves, then stops accepting and
/// waits for the open connections' requests to finish. Each connection gets
/// [`HEADER_READ_TIMEOUT`] to send a request head, `TCP_NODELAY` (streamed events go
/// out at once), and its peer address as `ConnectInfo` for the access log.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait, then go on accepting.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(client));
            let mut router = router.clone();
            tower_service::Service::call(&mut router, req)
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %client, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
