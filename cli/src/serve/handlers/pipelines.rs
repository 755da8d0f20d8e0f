//! `GET /v1/pipelines`.

use axum::extract::State;
use axum::response::Response;

use super::super::dto::{PipelineList, PipelineSummary};
use super::{St, json};

/// `GET /v1/pipelines`: each pipeline's runner, stages, model and bound servers.
pub(crate) async fn list_pipelines(State(state): St) -> Response {
    let current = state.current();
    let pipelines = current
        .pipelines
        .values()
        .map(|p| PipelineSummary {
            id: p.id(),
            runner: p.runner_name(),
            stages: p.stage_names().collect(),
            model: &p.model().name,
            bound_servers: current.config.bound_servers(p.id()),
        })
        .collect();
    json(PipelineList { pipelines })
}
