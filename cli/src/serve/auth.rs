//! Who may call what: bearer tokens ([`Tokens`]), each route's [`Scope`], and the check
//! on the matched route.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use serde::Serialize;
use subtle::ConstantTimeEq as _;

use super::{ApiError, BodyLimits, MIN_TOKEN_BYTES, ScopeCell, ServeState};

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

/// Which scope a request to the route `route` (as routed: `/v1/servers/{server}/…`)
/// needs: [`Scope::Read`] for `GET` and the two `POST`s that only look.
pub(super) fn needed_scope(method: &Method, route: &str) -> Scope {
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

/// The bearer-token check of every `/v1` route (RFC 6750); the OpenAI-compatible
/// routes get its errors in OpenAI's shape.
pub(super) async fn authorize(
    State(state): State<Arc<ServeState>>,
    req: Request,
    next: Next,
) -> Response {
    let openai = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|p| super::openai::ROUTES.contains(&p.as_str()));
    match check(&state, req, next).await {
        Ok(response) => response,
        Err(e) if openai => super::openai::wire::OpenAiError::from(e).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The scope of the bearer token in `headers` (RFC 6750 §2.1), or 401 `missing_token`
/// or `invalid_token`.
pub(super) fn token_scope(
    state: &ServeState,
    headers: &axum::http::HeaderMap,
) -> Result<Scope, ApiError> {
    let Some(given) = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()) else {
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
    state.options.tokens.scope_of(token).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the token is not valid",
        )
    })
}

/// [`authorize`], its errors as [`ApiError`]s.
async fn check(state: &ServeState, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let scope = token_scope(state, req.headers())?;
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
