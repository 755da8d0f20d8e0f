//! The route table of `/v1` and the answers for what it does not route (paths and
//! methods). The token check and the other routes are added by the parent module.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};

use super::handlers::completion::complete;
use super::handlers::consent::{answer_consent_request, list_consent_requests};
use super::handlers::elicitation::{answer_elicitation_request, list_elicitation_requests};
use super::handlers::history::{history, tool_call_history};
use super::handlers::login::start_login;
use super::handlers::manage::{add_server, reload_config, remove_server};
use super::handlers::pins::{
    add_conversation_pin, add_pipeline_pin, list_all_pins, list_conversation_pins,
    list_pipeline_pins, remove_conversation_pin, remove_pipeline_pin,
};
use super::handlers::pipelines::list_pipelines;
use super::handlers::prompts::{get_prompt, list_prompts};
use super::handlers::resources::{list_resource_templates, list_resources, read_resource};
use super::handlers::servers::{get_server, list_servers};
use super::handlers::tools::{call_tool, list_tools};
use super::handlers::turns::run_turn;
use super::openai::{chat_completions, list_models, retrieve_model};
use super::{ApiError, ServeState};

/// The `/v1` routes (the caller adds the token check). Every route but a turn is bounded
/// by `request_timeout` (then 504); a turn has its own bound, `[serve] turn_timeout_ms`,
/// which also holds while it streams.
pub(super) fn routes(request_timeout: Duration) -> Router<Arc<ServeState>> {
    Router::new()
        .route("/v1/servers", get(list_servers).post(add_server))
        .route(
            "/v1/servers/{server}",
            get(get_server).delete(remove_server),
        )
        .route("/v1/reload", post(reload_config))
        .route("/v1/servers/{server}/resources", get(list_resources))
        .route(
            "/v1/servers/{server}/resource-templates",
            get(list_resource_templates),
        )
        .route("/v1/servers/{server}/prompts", get(list_prompts))
        .route("/v1/servers/{server}/prompts/{name}", post(get_prompt))
        .route("/v1/servers/{server}/tools", get(list_tools))
        .route("/v1/servers/{server}/resources/read", post(read_resource))
        .route("/v1/servers/{server}/completion", post(complete))
        .route("/v1/servers/{server}/login", post(start_login))
        .route("/v1/pipelines", get(list_pipelines))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(retrieve_model))
        .route(super::dify::ROUTE, post(super::dify::retrieval))
        .route(
            "/v1/pipelines/{id}/attachments",
            get(list_pipeline_pins).post(add_pipeline_pin),
        )
        .route(
            "/v1/pipelines/{id}/attachments/{pin_id}",
            axum::routing::delete(remove_pipeline_pin),
        )
        .route(
            "/v1/conversations/{id}/attachments",
            get(list_conversation_pins).post(add_conversation_pin),
        )
        .route(
            "/v1/conversations/{id}/attachments/{pin_id}",
            axum::routing::delete(remove_conversation_pin),
        )
        .route("/v1/pins", get(list_all_pins))
        .route("/v1/history", get(history))
        .route("/v1/history/tool-calls", get(tool_call_history))
        .route("/v1/consent-requests", get(list_consent_requests))
        .route("/v1/consent-requests/{id}", post(answer_consent_request))
        .route("/v1/elicitation-requests", get(list_elicitation_requests))
        .route(
            "/v1/elicitation-requests/{id}",
            post(answer_elicitation_request),
        )
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                let dify = req.uri().path() == super::dify::ROUTE;
                match tokio::time::timeout(request_timeout, next.run(req)).await {
                    Ok(response) => response,
                    Err(_) => {
                        let e = ApiError::new(
                            StatusCode::GATEWAY_TIMEOUT,
                            "request_timeout",
                            format!(
                                "no answer within {} ms ([serve] request_timeout_ms)",
                                request_timeout.as_millis()
                            ),
                        );
                        if dify {
                            super::dify::DifyError::from(e).into_response()
                        } else {
                            e.into_response()
                        }
                    }
                }
            },
        ))
        .route("/v1/turns", post(run_turn))
        // The OpenAI-compatible door runs turns: bounded like one.
        .route("/v1/chat/completions", post(chat_completions))
        // A tool call may wait for a consent answer: bounded like a turn.
        .route("/v1/servers/{server}/tools/{name}/call", post(call_tool))
}

/// Any other path.
pub(super) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(
        "not_found",
        format!(
            "no route {}; the API is described at /openapi.json",
            uri.path()
        ),
    )
}

/// A known path with another method.
pub(super) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeSet;

    /// Every `/v1` path routed here is in docs/openapi.json, and the other way round (the
    /// e2e tests check each documented method answers).
    #[test]
    fn the_openapi_document_lists_every_route() {
        let source = include_str!("router.rs");
        let start = source.find("pub(super) fn routes(").unwrap();
        let end = start + source[start..].find("\n}\n").unwrap();
        let routed: BTreeSet<&str> = source[start..end]
            .split('"')
            .filter(|s| s.starts_with("/v1/"))
            .collect();
        let doc: serde_json::Value = serde_json::from_str(super::super::OPENAPI).unwrap();
        let documented: BTreeSet<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|p| p.starts_with("/v1/"))
            .collect();
        assert_eq!(routed, documented);
        assert_eq!(routed.len(), 28);
    }

    #[test]
    fn read_only_tokens_may_look_and_nothing_else() {
        use axum::http::Method;

        use super::super::Scope;
        use super::super::auth::needed_scope;
        assert_eq!(needed_scope(&Method::GET, "/v1/history"), Scope::Read);
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/resources/read"),
            Scope::Read
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/completion"),
            Scope::Read
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/prompts/{name}"),
            Scope::Read
        );
        // A tool call may change the world: admin only.
        assert_eq!(
            needed_scope(&Method::POST, "/v1/servers/{server}/tools/{name}/call"),
            Scope::Admin
        );
        // Running a turn is what a bot platform's turn token may do.
        assert_eq!(needed_scope(&Method::POST, "/v1/turns"), Scope::Turn);
        // The OpenAI-compatible door: a completion runs a turn, the model list looks.
        assert_eq!(
            needed_scope(&Method::POST, "/v1/chat/completions"),
            Scope::Turn
        );
        assert_eq!(needed_scope(&Method::GET, "/v1/models"), Scope::Read);
        // Dify's door retrieves: it looks.
        assert_eq!(needed_scope(&Method::POST, "/retrieval"), Scope::Read);
        // The raw path never decides: a consent id that looks like a read is not one.
        assert_eq!(
            needed_scope(&Method::POST, "/v1/consent-requests/{id}"),
            Scope::Admin
        );
        assert_eq!(
            needed_scope(
                &Method::DELETE,
                "/v1/conversations/{id}/attachments/{pin_id}"
            ),
            Scope::Admin
        );
        assert_eq!(
            needed_scope(&Method::POST, "/v1/conversations/{id}/attachments"),
            Scope::Admin
        );
        // Servers that come and go, and reloads: admin only.
        assert_eq!(needed_scope(&Method::POST, "/v1/servers"), Scope::Admin);
        assert_eq!(
            needed_scope(&Method::DELETE, "/v1/servers/{server}"),
            Scope::Admin
        );
        assert_eq!(needed_scope(&Method::POST, "/v1/reload"), Scope::Admin);
    }
}
