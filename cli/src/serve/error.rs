//! How the API says what went wrong: [`ApiResult`], and the errors several handlers
//! give. [`ApiError`] itself and the body and path extractors, whose rejections become
//! [`ApiError`]s, are in the parent module.

use crate::ops::TargetError;

use super::ApiError;

/// A handler's result: its response, or an [`ApiError`].
pub(crate) type ApiResult<T = axum::response::Response> = Result<T, ApiError>;

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
