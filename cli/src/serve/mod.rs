//! `hostpipe serve`: the HTTP API and the admin page, for platforms written in other
//! languages (docs/http-api.md; the OpenAPI document is docs/openapi.json, served at
//! `/openapi.json`).
//!
//! The service keeps no state of its own beyond the MCP sessions of its [`App`], the
//! pending consent questions of its running turns and its metrics (`GET /metrics`, per
//! instance: Prometheus sums them across instances): pins, conversation grants and the
//! read history live in the attachment store, so several instances behind a load
//! balancer can share one PostgreSQL store.

pub mod approver;
mod auth;
mod dify;
mod dto;
pub mod elicitor;
mod error;
mod handlers;
mod http_span;
mod mcp;
mod metrics;
mod openai;
mod reload;
mod router;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use hostpipe_core::RunEvent;
use tokio_util::task::TaskTracker;

use crate::App;
pub use approver::HttpApprover;
pub use elicitor::HttpElicitor;
pub use error::ApiError;
pub(crate) use error::{Body, Params};
pub use reload::ConfigSource;
pub(crate) use reload::Current;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// The default largest request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;
/// The longest error message sent, in bytes (longer ones are cut).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 2048;
/// How long a client may take to send a request's body once its head is in, unless the
/// token check set the route's limits (`[serve] request_timeout_ms`).
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

pub use auth::{Scope, Tokens};

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
    /// `[serve] public_url`, without a trailing `/`.
    pub public_url: Option<String>,
    /// `[serve] allow_stdio_servers`: whether `POST /v1/servers` may add a stdio server.
    pub allow_stdio_servers: bool,
    /// The key that seals the header and env values of servers added over the API
    /// (`HOSTPIPE_CREDENTIAL_KEY`); without it, such values are refused.
    pub credential_key: Option<hostpipe_engine::CredentialKey>,
    /// `[serve] metrics_listen`: where `GET /metrics` is served instead of on `listen`.
    pub metrics_listen: Option<String>,
}

impl ServeOptions {
    /// The options of `section`, with `listen` (the `--listen` flag) over its address.
    ///
    /// # Errors
    /// As [`Tokens::load`]; a zero limit; a `HOSTPIPE_CREDENTIAL_KEY` that is not base64
    /// of 32 bytes.
    pub fn from_config(
        section: &crate::config::ServeSection,
        listen: Option<String>,
    ) -> anyhow::Result<Self> {
        let tokens = Tokens::load(
            section,
            std::env::var("HOSTPIPE_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            std::env::var("HOSTPIPE_TURN_TOKEN")
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
        let credential_key = match std::env::var(hostpipe_engine::credentials::CREDENTIAL_KEY_ENV)
            .ok()
            .filter(|k| !k.trim().is_empty())
        {
            None => None,
            Some(k) => Some(
                hostpipe_engine::CredentialKey::from_base64(&k)
                    .context(hostpipe_engine::credentials::CREDENTIAL_KEY_ENV)?,
            ),
        };
        Ok(Self {
            allow_stdio_servers: section.allow_stdio_servers,
            credential_key,
            metrics_listen: section.metrics_listen.clone(),
            listen: listen
                .or_else(|| section.listen.clone())
                .unwrap_or_else(|| DEFAULT_LISTEN.to_owned()),
            tokens,
            max_body_bytes,
            request_timeout: ms(section.request_timeout_ms, 30_000, "request_timeout_ms")?,
            turn_timeout: ms(section.turn_timeout_ms, 120_000, "turn_timeout_ms")?,
            shutdown_timeout: ms(section.shutdown_timeout_ms, 60_000, "shutdown_timeout_ms")?,
            public_url: match section.public_url.as_deref() {
                None => None,
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    Some(u.trim_end_matches('/').to_owned())
                }
                Some(u) => {
                    anyhow::bail!("[serve] public_url: `{u}` is not an http:// or https:// URL")
                }
            },
        })
    }
}

/// What every handler shares.
pub(crate) struct ServeState {
    /// The MCP host, the store and the vault (its `config` and `pipelines` are those
    /// of the start: handlers take [`ServeState::current`]).
    app: App,
    /// The configuration and pipelines in effect, replaced whole by a reload. A turn
    /// keeps the one it started with.
    current: std::sync::RwLock<Arc<Current>>,
    /// Where the configuration is read again from on a reload.
    source: ConfigSource,
    /// One change of the servers or the configuration at a time (add, remove, reload).
    changing: tokio::sync::Mutex<()>,
    approver: HttpApprover,
    elicitor: HttpElicitor,
    options: ServeOptions,
    /// Set once the servers' first connection attempts are over.
    connected: AtomicBool,
    /// Set on SIGTERM or Ctrl-C: no new turns, `/readyz` says 503.
    draining: AtomicBool,
    turns: TaskTracker,
    /// Cancelled when the shutdown timeout passes with turns still running.
    stop_turns: tokio_util::sync::CancellationToken,
    /// OAuth logins started on `POST /v1/servers/{server}/login`, by their `state`.
    logins: handlers::login::PendingLogins,
    /// What `GET /metrics` answers, and what the pipelines count into.
    metrics: metrics::Metrics,
}

impl ServeState {
    /// Whether pipeline `id` has its `preview` runner (built for every pipeline at
    /// start): a preview turn without one would run the pipeline's own runner.
    pub(crate) fn has_preview(&self, id: &str) -> bool {
        self.current().preview.contains_key(id)
    }
}

/// One event of a streamed turn (`text/event-stream`); the SSE event name is
/// its `name`, the data its JSON.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// The turn started.
    Started(serde_json::Value),
    /// A runner event.
    Run(RunEvent),
    /// A consent question waits for an answer.
    ConsentRequest(approver::PendingConsent),
    /// An MCP server's question to the turn's user (elicitation) waits for an answer.
    ElicitationRequest(elicitor::PendingElicitation),
    /// The turn ended: the same document as the JSON response.
    Done(serde_json::Value),
    /// The turn could not end normally (timeout).
    Error(ApiError),
}

impl TurnEvent {
    /// The SSE event name and data, each event serialized once. The name is `turn`, a
    /// [`RunEvent`]'s tag (`message_delta`, `tool_call_started`, …), `consent_request`,
    /// `elicitation_request`, `done` or `error`; the data is one line of JSON.
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
            Self::ElicitationRequest(e) => {
                ("elicitation_request".to_owned(), serde_json::to_string(e))
            }
            Self::Done(v) => ("done".to_owned(), serde_json::to_string(v)),
            Self::Error(e) => ("error".to_owned(), serde_json::to_string(&e.body())),
        };
        // These types always serialize; should one not, the caller still gets JSON.
        let data =
            data.unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
        (name, data)
    }
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
            scope = scope.map(Scope::as_str),
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
            auth::authorize,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            state.options.max_body_bytes,
        ));
    let page = |body: &'static str, mime: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, mime)], body) })
    };
    // The MCP door: its own token check (401 with a `WWW-Authenticate` challenge) and
    // body limit (rmcp's).
    let mcp = mcp::routes(&state);
    let router = Router::new().merge(v1).merge(mcp);
    // With a listener of its own, `/metrics` is not on this one.
    let router = if state.options.metrics_listen.is_none() {
        router.route("/metrics", get(metrics::metrics))
    } else {
        router
    };
    router
        .route("/", page(ADMIN_HTML, "text/html; charset=utf-8"))
        .route(
            "/admin.js",
            page(ADMIN_JS, "text/javascript; charset=utf-8"),
        )
        .route("/admin.css", page(ADMIN_CSS, "text/css; charset=utf-8"))
        .route("/openapi.json", page(OPENAPI, "application/json"))
        .route("/healthz", get(handlers::health::healthz))
        .route("/readyz", get(handlers::health::readyz))
        .route("/oauth/callback", get(handlers::login::oauth_callback))
        .fallback(router::not_found)
        .method_not_allowed_fallback(router::method_not_allowed)
        .layer(axum::middleware::from_fn(http_span::http_span))
        .layer(axum::middleware::from_fn(security_headers))
        .layer(axum::middleware::from_fn(access_log))
        .with_state(state)
}

/// The router of `[serve] metrics_listen`: `GET /metrics` only.
fn metrics_router(state: Arc<ServeState>) -> Router {
    use axum::routing::get;
    Router::new()
        .route("/metrics", get(metrics::metrics))
        .fallback(router::not_found)
        .method_not_allowed_fallback(router::method_not_allowed)
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

/// Runs `hostpipe serve` until SIGTERM or Ctrl-C: adds the servers kept in the store
/// (added over the API) to `app`'s, builds the pipelines (`app`'s own are not used:
/// load it with [`App::load_unbuilt`]), listens, connects the servers, reloads the
/// configuration from `source` on SIGHUP, and on the shutdown signal stops accepting,
/// lets running turns finish (at most [`ServeOptions::shutdown_timeout`]), then stops
/// the MCP servers.
///
/// Prints `hostpipe: listening on http://ADDR` on stdout once it accepts connections.
///
/// # Errors
/// When the address (or `[serve] metrics_listen`'s) cannot be bound, or a pipeline or its preview runner cannot be
/// built (e.g. one binds a server that neither the files nor the store has).
pub async fn serve(
    mut app: App,
    approver: HttpApprover,
    elicitor: HttpElicitor,
    options: ServeOptions,
    source: ConfigSource,
    shutdown: impl std::future::Future<Output = &'static str> + Send + 'static,
) -> anyhow::Result<()> {
    let metrics = metrics::Metrics::new(Arc::clone(&app.host), approver.clone(), elicitor.clone());
    app.observer = Some(metrics.observer());
    let current = reload::start(&app, &options).await?;
    #[cfg(unix)]
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let listener = tokio::net::TcpListener::bind(&options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let addr: SocketAddr = listener.local_addr()?;
    let metrics_listener = match &options.metrics_listen {
        None => None,
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("[serve] metrics_listen: cannot listen on {a}"))?,
        ),
    };
    let state = Arc::new(ServeState {
        app,
        current: std::sync::RwLock::new(Arc::new(current)),
        source,
        changing: tokio::sync::Mutex::new(()),
        approver,
        elicitor,
        options,
        connected: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        turns: TaskTracker::new(),
        stop_turns: tokio_util::sync::CancellationToken::new(),
        logins: handlers::login::PendingLogins::default(),
        metrics,
    });
    let router = router(Arc::clone(&state));
    let stop_metrics = tokio_util::sync::CancellationToken::new();
    let metrics_serving = match metrics_listener {
        None => None,
        Some(l) => {
            let maddr = l.local_addr()?;
            tracing::info!(addr = %maddr, "metrics listening");
            let router = metrics_router(Arc::clone(&state));
            Some(tokio::spawn(accept_loop(
                l,
                router,
                stop_metrics.clone().cancelled_owned(),
            )))
        }
    };
    println!("hostpipe: listening on http://{addr}");
    tracing::info!(%addr, "listening");
    let connecting = tokio::spawn({
        let state = Arc::clone(&state);
        async move {
            state.app.connect().await;
            // A server that is not up yet (compose and Kubernetes start services in any
            // order) is retried with the reconnect backoff.
            state.app.host.keep_retrying_unreachable();
            state.connected.store(true, Ordering::SeqCst);
            tracing::info!("MCP servers connected (or failed); ready");
        }
    });
    // SIGHUP reloads the configuration, as `POST /v1/reload` does; a failure is logged
    // and changes nothing.
    #[cfg(unix)]
    let reloading = tokio::spawn({
        let state = Arc::clone(&state);
        async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration");
                if let Err(e) = reload::reload(&state).await {
                    tracing::error!(code = e.code, error = %e.message, "reload on SIGHUP failed");
                }
            }
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
    #[cfg(unix)]
    reloading.abort();
    stop_metrics.cancel();
    if let Some(serving) = metrics_serving {
        let _ = tokio::time::timeout(Duration::from_secs(5), serving).await;
    }
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
