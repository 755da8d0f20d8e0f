//! OAuth logins to remote MCP servers through the service: `POST
//! /v1/servers/{server}/login` (admin) starts the authorization code flow and answers
//! the authorization URL; the authorization server sends the browser back to `GET
//! /oauth/callback` (no token: the `state` ties the redirect to the login, RFC 6749
//! §10.12), which exchanges the code, saves the credentials and reconnects the server.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hostpipe_mcp::{LoginError, PendingLogin};

use super::super::Params;
use super::super::dto::LoginStarted;
use super::super::error::ApiResult;
use super::super::{ApiError, ServeState};
use super::{St, json};

/// How long a started login waits for its redirect.
const LOGIN_TTL: Duration = Duration::from_secs(600);
/// Most logins waiting at once (older ones are dropped first).
const MAX_PENDING: usize = 32;

/// Logins waiting for their redirect, by `state`.
#[derive(Default)]
pub(crate) struct PendingLogins(tokio::sync::Mutex<HashMap<String, (Instant, PendingLogin)>>);

impl PendingLogins {
    async fn insert(&self, state: String, login: PendingLogin) {
        let mut map = self.0.lock().await;
        map.retain(|_, (at, _)| at.elapsed() < LOGIN_TTL);
        while map.len() >= MAX_PENDING {
            let oldest = map
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        map.insert(state, (Instant::now(), login));
    }

    async fn take(&self, state: &str) -> Option<PendingLogin> {
        let mut map = self.0.lock().await;
        map.remove(state)
            .filter(|(at, _)| at.elapsed() < LOGIN_TTL)
            .map(|(_, login)| login)
    }
}

/// The redirect URI: `[serve] public_url`, else `http://` + the request's `Host`.
fn redirect_uri(state: &ServeState, headers: &HeaderMap) -> ApiResult<String> {
    if let Some(base) = &state.options.public_url {
        return Ok(format!("{base}/oauth/callback"));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains(['/', ' ', '@']))
        .ok_or_else(|| {
            ApiError::bad_request(
                "no usable Host header to build the redirect URI from: set [serve] public_url",
            )
        })?;
    Ok(format!("http://{host}/oauth/callback"))
}

/// `POST /v1/servers/{server}/login`: starts an OAuth login; answers where a person
/// logs in.
pub(crate) async fn start_login(
    State(state): St,
    Params(server): Params<String>,
    headers: HeaderMap,
) -> ApiResult {
    state.app.check_server(&server)?;
    let redirect = redirect_uri(&state, &headers)?;
    let login = state
        .app
        .host
        .start_login(&server, &redirect)
        .await
        .map_err(|e| match &e {
            LoginError::NotOAuth { .. } => {
                ApiError::new(StatusCode::CONFLICT, "not_oauth", e.to_string())
            }
            LoginError::UnknownServer(_) => ApiError::not_found("unknown_server", e.to_string()),
            _ => ApiError::new(StatusCode::BAD_GATEWAY, "login_failed", e.to_string()),
        })?;
    let Some(key) = login.state() else {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "login_failed",
            "the authorization URL has no `state`",
        ));
    };
    let started = LoginStarted {
        server: server.clone(),
        authorization_url: login.authorization_url().to_owned(),
        redirect_uri: redirect,
        expires_in_s: LOGIN_TTL.as_secs(),
        persistent: matches!(state.app.vault, crate::VaultUse::Persistent(_)),
    };
    state.logins.insert(key, login).await;
    tracing::info!(%server, "OAuth login started");
    Ok(json(started))
}

/// A small HTML page (the callback is opened by a browser).
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=en><meta charset=utf-8><title>{t}</title><link rel=stylesheet href=/admin.css><main><h1>{t}</h1><p>{x}</p><p><a href=/>hostpipe admin page</a></p></main></html>",
        t = escape(title),
        x = escape(text)
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// `GET /oauth/callback?code=…&state=…[&iss=…]`: finishes the login whose `state` this
/// is, then reconnects its server.
pub(crate) async fn oauth_callback(State(state): St, RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    let url = format!("http://hostpipe/oauth/callback?{query}");
    let Some(key) = hostpipe_mcp::redirect_state(&url) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Login failed",
            "This is not an OAuth redirect (no `state`).",
        );
    };
    let Some(login) = state.logins.take(&key).await else {
        return page(
            StatusCode::BAD_REQUEST,
            "Login failed",
            "No login is waiting for this redirect (it expired after 10 minutes, or was used already): start the login again.",
        );
    };
    let server = login.server().to_owned();
    if let Err(e) = login.finish(&url).await {
        tracing::warn!(%server, error = %e, "OAuth login failed");
        return page(StatusCode::BAD_REQUEST, "Login failed", &e.to_string());
    }
    tracing::info!(%server, "OAuth login done; reconnecting");
    let reconnecting = Arc::clone(&state);
    let name = server.clone();
    tokio::spawn(async move {
        match reconnecting.app.host.reconnect(&name).await {
            Ok(status) => {
                tracing::info!(server = %name, status = %status.describe(), "reconnected after the login")
            }
            Err(e) => {
                tracing::warn!(server = %name, error = %e, "reconnect after the login failed")
            }
        }
    });
    page(
        StatusCode::OK,
        "Logged in",
        &format!(
            "hostpipe is logged in to `{server}` and connects to it now. You can close this tab."
        ),
    )
}
