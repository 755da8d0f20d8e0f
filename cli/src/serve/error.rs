//! How the API says what went wrong: [`ApiResult`], the query extractor [`Query`] whose
//! rejection is an [`ApiError`], and the errors several handlers give. [`ApiError`]
//! itself and the body and path extractors (`Body`, `Params`) are in the parent module.

use crate::ops::TargetError;

use super::ApiError;

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

/// A `uri` that is a template: said so, rather than guessed.
pub(crate) fn uri_with_brace() -> ApiError {
    ApiError::bad_request("a `uri` with `{` is a template: give it as `template`, with `arguments`")
}
