//! How the API says what went wrong: [`ApiError`] (status, code, message, as a JSON
//! error body), [`ApiResult`], the extractors whose rejections are [`ApiError`]s
//! ([`Body`], [`Params`], [`Query`]), and the errors several handlers give.

use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hostpipe_core::SourceError;
use hostpipe_engine::StoreError;

use super::{BODY_READ_TIMEOUT, BodyLimits, MAX_ERROR_MESSAGE_BYTES};
use crate::ops::TargetError;

/// A handler's result: its response, or an [`ApiError`].
pub(crate) type ApiResult<T = axum::response::Response> = Result<T, ApiError>;

/// `axum::extract::Query`, with its rejection (an unknown parameter, a value that does
/// not parse) as a 400 `invalid_request` [`ApiError`] carrying axum's text.
pub(crate) struct Query<T>(pub(crate) T);

impl<S, T> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Self(v)),
            Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
        }
    }
}

/// A pin or attachment target that is not one: 400, saying what to give instead.
pub(crate) fn target_error(e: TargetError) -> ApiError {
    match &e {
        TargetError::ArgumentsWithoutTemplate(t) => ApiError::bad_request(format!(
            "`arguments` are for a URI template (`{t}` has no {{variable}}); give `uri` alone"
        )),
        TargetError::MissingVariable { name, .. } => ApiError::bad_request(format!(
            "{e}: give `arguments.{name}` a value, or {{\"var\": \"NAME\"}} to take turn variable NAME"
        )),
        _ => ApiError::bad_request(e.to_string()),
    }
}

/// An API error: an HTTP status and `{"error": {"code", "message"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// For `insufficient_scope`: the scope the route needs (the challenge names it).
    needed: Option<super::Scope>,
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
            needed: None,
        }
    }

    /// The error, saying that the route needs `scope` (RFC 6750 §3: the challenge's
    /// `scope`).
    pub(crate) fn needing(mut self, scope: super::Scope) -> Self {
        self.needed = Some(scope);
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub(crate) fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code, "message": self.message}})
    }
}

impl ApiError {
    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The error's status and headers (the RFC 6750 challenge of a 401 or 403) with
    /// `body`: its own ([`ApiError::body`]) or another door's shape of it.
    pub(crate) fn respond(&self, body: serde_json::Value) -> Response {
        let mut response = (self.status, axum::Json(body)).into_response();
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
        } else if self.status == StatusCode::FORBIDDEN
            && let Some(needed) = self.needed
        {
            let value = format!(
                "Bearer realm=\"hostpipe\", error=\"insufficient_scope\", scope=\"{}\"",
                needed.as_str()
            );
            if let Ok(v) = HeaderValue::from_str(&value) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.respond(self.body())
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
