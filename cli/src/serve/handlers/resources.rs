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
use crate::ops::{AttachmentSpec, TargetError};
use crate::serve::Scope;

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
    axum::Extension(scope): axum::Extension<super::super::ScopeCell>,
    Body(body): Body<ReadBody>,
) -> ApiResult {
    state.app.check_server(&server)?;
    let from_template = body.template.clone();
    let spec = AttachmentSpec {
        server: server.clone(),
        uri: body.uri,
        template: body.template,
        arguments: body
            .arguments
            .into_iter()
            .map(|(k, v)| (k, ArgumentValue::Literal(v)))
            .collect(),
    };
    // A read has no turn: its arguments are values only (no `{"var": …}`).
    let target = AttachmentTarget::try_from(&spec).map_err(|e| match &e {
        TargetError::MissingVariable { name, .. } => {
            ApiError::bad_request(format!("{e}: give `arguments.{name}` a value"))
        }
        _ => target_error(e),
    })?;
    let uri = match target {
        AttachmentTarget::Template {
            template,
            arguments,
        } => {
            hostpipe_stages::uri_template::expand(&template, &arguments, &Variables::default())
                .map_err(|e| ApiError::bad_request(format!("URI template `{template}`: {e}")))?
                .0
        }
        AttachmentTarget::Uri { uri } => uri,
        AttachmentTarget::Embedded { .. } => {
            return Err(ApiError::bad_request(
                "give `uri`, or `template` and `arguments`",
            ));
        }
    };
    if uri.is_empty() {
        return Err(ApiError::bad_request("`uri` is empty"));
    }
    if scope.0.get().is_none_or(|s| *s < Scope::Admin) {
        held_to_policy(&state, &server, &uri, body.pipeline.as_deref())?;
    }
    let model = match &body.pipeline {
        Some(id) => Arc::clone(pipeline(&state, id)?.model()),
        None => Arc::new(state.current().config.model.clone()),
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

/// A read by a read or turn token (a platform's key) is held to the pipelines' consent
/// policies: the named pipeline's whole policy (for host and model reads), else every
/// rule of every pipeline that names this resource. Only an admin token reads past a
/// policy (an operator's look). 403 `read_withheld` names the pipeline and the rule.
pub(crate) fn held_to_policy(
    state: &super::super::ServeState,
    server: &str,
    uri: &str,
    named: Option<&str>,
) -> ApiResult<()> {
    use hostpipe_core::ReadOrigin;
    use hostpipe_engine::Decision;
    use hostpipe_engine::consent::DecidedBy;
    let pipelines: Vec<Arc<hostpipe_engine::Pipeline>> = match named {
        Some(id) => vec![pipeline(state, id)?],
        None => state.current().pipelines.values().cloned().collect(),
    };
    for p in pipelines {
        let Some(consent) = p.consent() else {
            continue;
        };
        for origin in [ReadOrigin::Host, ReadOrigin::Model] {
            let (decision, by) = consent.policy().decide(server, uri, origin);
            let applies = named.is_some() || matches!(by, DecidedBy::Rule(_));
            if applies && decision != Decision::Allow {
                let why = match by {
                    DecidedBy::Rule(i) => format!("rules[{i}]"),
                    _ => "its default".to_owned(),
                };
                return Err(ApiError::new(
                    axum::http::StatusCode::FORBIDDEN,
                    "read_withheld",
                    format!(
                        "pipeline `{}` does not allow reading `{uri}` from `{server}` ({why} of [pipelines.{}.consent]); only an admin token reads past a pipeline's policy",
                        p.id(),
                        p.id()
                    ),
                ));
            }
        }
    }
    Ok(())
}
