//! `POST /v1/servers/{server}/completion`.

use std::collections::BTreeMap;

use axum::extract::State;
use hostpipe_core::{CompletionRef, McpSource as _};
use serde::Deserialize;

use super::super::dto::CompletionResponse;
use super::super::error::ApiResult;
use super::super::{Body, Params};
use super::{St, json};

/// `POST /v1/servers/{server}/completion`: MCP `completion/complete` (spec 2025-11-25,
/// "Utilities / Completion"), with the spec's request shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompleteBody {
    #[serde(rename = "ref")]
    reference: CompleteRef,
    argument: CompleteArgument,
    #[serde(default)]
    context: CompleteContext,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum CompleteRef {
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteArgument {
    name: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteContext {
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

/// `POST /v1/servers/{server}/completion`.
pub(crate) async fn complete(
    State(state): St,
    Params(server): Params<String>,
    Body(body): Body<CompleteBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let reference = match body.reference {
        CompleteRef::Resource { uri } => CompletionRef::ResourceTemplate { uri_template: uri },
        CompleteRef::Prompt { name } => CompletionRef::Prompt { name },
    };
    let c = state
        .app
        .host
        .complete(
            &server,
            &reference,
            &body.argument.name,
            &body.argument.value,
            &body.context.arguments,
        )
        .await?;
    Ok(json(CompletionResponse::from(c)))
}
