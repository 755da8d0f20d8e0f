//! A server's prompts: `GET …/prompts` and `POST …/prompts/{name}`.

use std::collections::BTreeMap;

use axum::extract::State;
use hostpipe_core::{McpSource as _, ToolContent};
use serde::Deserialize;

use super::super::dto::PromptList;
use super::super::error::ApiResult;
use super::super::{ApiError, Body, Params};
use super::resources::held_to_policy;
use super::{St, json};

/// `GET /v1/servers/{server}/prompts`.
pub(crate) async fn list_prompts(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let prompts = state.app.host.list_prompts(&server).await?;
    Ok(json(PromptList { prompts: &prompts }))
}

/// `POST /v1/servers/{server}/prompts/{name}`: MCP `prompts/get` (spec 2025-11-25,
/// "Prompts") with string `arguments`; the answer is the spec's `GetPromptResult`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PromptBody {
    #[serde(default)]
    arguments: BTreeMap<String, String>,
}

/// `POST /v1/servers/{server}/prompts/{name}`: the prompt, or 404 `unknown_prompt`.
///
/// With a read or turn token, the resources the prompt embeds are held to the pipelines'
/// consent policies as a read is ([`held_to_policy`]): a prompt that embeds one a policy
/// does not allow is a 403 `read_withheld`.
pub(crate) async fn get_prompt(
    State(state): St,
    Params((server, name)): Params<(String, String)>,
    axum::Extension(scope): axum::Extension<super::super::ScopeCell>,
    Body(body): Body<PromptBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let result = match state
        .app
        .host
        .get_prompt(&server, &name, &body.arguments)
        .await
    {
        Ok(result) => result,
        // Servers answer an unknown prompt with -32602, like a bad argument: the list
        // tells them apart.
        Err(e @ hostpipe_core::SourceError::Protocol { code: -32602, .. }) => {
            let listed = state.app.host.list_prompts(&server).await?;
            if listed.iter().any(|p| p.name == name) {
                return Err(e.into());
            }
            return Err(ApiError::not_found(
                "unknown_prompt",
                format!("`{server}` lists no prompt `{name}`"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    if scope
        .0
        .get()
        .is_none_or(|s| *s < super::super::Scope::Admin)
    {
        for m in &result.messages {
            if let ToolContent::Resource { contents } = &m.content {
                held_to_policy(&state, &server, contents.uri(), None)?;
            }
        }
    }
    Ok(json(hostpipe_runners::mcp_json::get_prompt_result(&result)))
}
