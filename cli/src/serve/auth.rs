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

/// What a bearer token may do. Ordered: each scope may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Look: every `GET`, the `POST`s that only look (`resources/read`, `completion`,
    /// `prompts/{name}`) and Dify's `/retrieval`.
    Read,
    /// Look, and run turns (`POST /v1/turns`, `POST /v1/chat/completions`): what a bot
    /// platform needs, and nothing that changes what others see (pins, consent answers,
    /// servers).
    Turn,
    /// Everything: also attach and detach, call tools, answer consent and elicitation
    /// requests, log in.
    Admin,
}

impl Scope {
    /// `read`, `turn` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Turn => "turn",
            Self::Admin => "admin",
        }
    }
}

/// The tokens `hostpipe serve` accepts.
#[derive(Clone, Default)]
pub struct Tokens {
    admin: Vec<Vec<u8>>,
    turn: Vec<Vec<u8>>,
    read: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens {{ admin: {} tokens, turn: {} tokens, read: {} tokens }}",
            self.admin.len(),
            self.turn.len(),
            self.read.len()
        )
    }
}

/// Fewest distinct bytes a token may have: a random 16-byte hex token has about 11.
pub(super) const MIN_DISTINCT_BYTES: usize = 8;

/// Why `token` is guessable, if it is: too few distinct bytes (`aaaa…`), or the
/// placeholder of an example left in (`replace-with-…`, `changeme`). Random hex or base64
/// never holds those words.
fn guessable(token: &str) -> Option<String> {
    let distinct = token
        .bytes()
        .collect::<std::collections::BTreeSet<u8>>()
        .len();
    if distinct < MIN_DISTINCT_BYTES {
        return Some(format!(
            "has {distinct} distinct characters; use at least {MIN_DISTINCT_BYTES}"
        ));
    }
    let lower = token.to_ascii_lowercase();
    [
        "replace",
        "changeme",
        "change-me",
        "placeholder",
        "your-token",
    ]
    .iter()
    .find(|word| lower.contains(*word))
    .map(|word| format!("holds `{word}`: it looks like an example's placeholder left in"))
}

impl Tokens {
    /// The tokens of `[serve] admin_tokens`, `turn_tokens` and `read_tokens`, plus
    /// `HOSTPIPE_TOKEN` (admin), `HOSTPIPE_TURN_TOKEN` (turn) and `HOSTPIPE_READ_TOKEN`
    /// (read) when set.
    ///
    /// # Errors
    /// When there is no token at all (every `/v1` route needs one), or a token is
    /// shorter than [`MIN_TOKEN_BYTES`] or has surrounding whitespace (it names where it
    /// came from, never the token).
    pub fn load(
        section: &crate::config::ServeSection,
        env_admin: Option<String>,
        env_turn: Option<String>,
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
                    if let Some(why) = guessable(&token) {
                        anyhow::bail!(
                            "{source}: the token {why}; use a random one (e.g. `openssl rand -hex 32`)"
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
            turn: checked(
                "turn_tokens",
                &section.turn_tokens,
                "HOSTPIPE_TURN_TOKEN",
                env_turn,
            )?,
            read: checked(
                "read_tokens",
                &section.read_tokens,
                "HOSTPIPE_READ_TOKEN",
                env_read,
            )?,
        };
        if tokens.admin.is_empty() && tokens.turn.is_empty() && tokens.read.is_empty() {
            anyhow::bail!(
                "no API token: every /v1 route needs one. Set HOSTPIPE_TOKEN (admin) and optionally HOSTPIPE_TURN_TOKEN (turns, for bot platforms) and HOSTPIPE_READ_TOKEN (read-only), or [serve] admin_tokens / turn_tokens / read_tokens"
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
        // Every list is checked, so the time does not tell the scope either.
        let (admin, turn, read) = (is(&self.admin), is(&self.turn), is(&self.read));
        if admin {
            Some(Scope::Admin)
        } else if turn {
            Some(Scope::Turn)
        } else if read {
            Some(Scope::Read)
        } else {
            None
        }
    }
}

/// The message of a 401 for an `Authorization` header that is not `Bearer TOKEN`.
pub(super) const NOT_BEARER: &str = "the Authorization header is not `Bearer TOKEN`";

/// Which scope a request to the route `route` (as routed: `/v1/servers/{server}/…`)
/// needs: [`Scope::Read`] for `GET` and the `POST`s that only look, [`Scope::Turn`] for
/// running a turn, [`Scope::Admin`] for the rest.
pub(super) fn needed_scope(method: &Method, route: &str) -> Scope {
    if method == Method::POST && matches!(route, "/v1/turns" | "/v1/chat/completions") {
        return Scope::Turn;
    }
    let looks = method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST
            && matches!(
                route,
                "/v1/servers/{server}/resources/read"
                    | "/v1/servers/{server}/completion"
                    | "/v1/servers/{server}/prompts/{name}"
                    | super::dify::ROUTE
            ));
    if looks { Scope::Read } else { Scope::Admin }
}

/// The bearer-token check of every `/v1` route and `/retrieval` (RFC 6750); the
/// OpenAI-compatible routes get its errors in OpenAI's shape, `/retrieval` in Dify's.
pub(super) async fn authorize(
    State(state): State<Arc<ServeState>>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    match check(&state, req, next).await {
        Ok(response) => response,
        Err(e) if super::openai::ROUTES.contains(&route.as_str()) => {
            super::openai::wire::OpenAiError::from(e).into_response()
        }
        Err(e) if route == super::dify::ROUTE => super::dify::DifyError::from(e).into_response(),
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
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "invalid_token", NOT_BEARER))?;
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
            // The caller knows the route it called: the message names the scopes only
            // (a client that prefixes the route says it once).
            format!(
                "this route needs {} token; this one is a {} token",
                match needed {
                    Scope::Admin => "an admin",
                    Scope::Turn => "a turn or admin",
                    Scope::Read => "a",
                },
                scope.as_str()
            ),
        )
        .needing(needed));
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
