//! A server's resources: `GET …/resources`, `GET …/resource-templates` and
//! `POST …/resources/read` (the read as a pipeline's model would get it).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use hostpipe_core::{ArgumentValue, AttachmentTarget, McpSource as _, Variables};
use serde::Deserialize;

use super::super::dto::{
    ContentItem, ModelSummary, ReadResponse, ResourceList, ResourceTemplateList,
};
use super::super::error::{ApiResult, target_error};
use super::super::{ApiError, Body, Params};
use super::{St, json, pipeline};
use crate::ops::pin_target;

/// `GET /v1/servers/{server}/resources`.
pub(crate) async fn list_resources(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let resources = state.app.host.list_resources(&server).await?;
    Ok(json(ResourceList {
        resources: &resources,
    }))
}

/// `GET /v1/servers/{server}/resource-templates`.
pub(crate) async fn list_resource_templates(
    State(state): St,
    Params(server): Params<String>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let templates = state.app.host.list_resource_templates(&server).await?;
    Ok(json(ResourceTemplateList {
        resource_templates: &templates,
    }))
}

/// `POST /v1/servers/{server}/resources/read`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadBody {
    /// The resource URI; or `template` and `arguments`.
    uri: Option<String>,
    /// An RFC 6570 URI template, expanded with `arguments`.
    template: Option<String>,
    #[serde(default)]
    arguments: BTreeMap<String, String>,
    /// Convert for this pipeline's model (default: `[model]`).
    pipeline: Option<String>,
}

/// `POST /v1/servers/{server}/resources/read`: a URI, or a template and its arguments,
/// read and converted for a pipeline's model (no budget, no consent).
pub(crate) async fn read_resource(
    State(state): St,
    Params(server): Params<String>,
    Body(body): Body<ReadBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let from_template = body.template.clone();
    let uri = match (body.uri, body.template) {
        (Some(uri), None) if body.arguments.is_empty() => uri,
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "`arguments` are for `template`; give `uri` alone",
            ));
        }
        (None, Some(template)) => {
            let arguments = body
                .arguments
                .into_iter()
                .map(|(k, v)| (k, ArgumentValue::Literal(v)))
                .collect();
            let AttachmentTarget::Template {
                template,
                arguments,
            } = pin_target(&template, arguments).map_err(target_error)?
            else {
                return Err(ApiError::bad_request(format!(
                    "`{template}` is not a URI template (no {{variable}}); give it as `uri`"
                )));
            };
            hostpipe_stages::uri_template::expand(&template, &arguments, &Variables::default())
                .map_err(|e| ApiError::bad_request(format!("URI template `{template}`: {e}")))?
                .0
        }
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of `uri` and `template`",
            ));
        }
    };
    if uri.is_empty() {
        return Err(ApiError::bad_request("`uri` is empty"));
    }
    let model = match &body.pipeline {
        Some(id) => Arc::clone(pipeline(&state, id)?.model()),
        None => Arc::new(state.app.config.model.clone()),
    };
    let items = state
        .app
        .preview_read(&server, &uri, from_template.as_deref(), &model)
        .await?;
    Ok(json(ReadResponse {
        uri,
        model: ModelSummary {
            name: model.name.clone(),
            vision: model.vision,
        },
        contents: items.into_iter().map(ContentItem::from).collect(),
    }))
}
