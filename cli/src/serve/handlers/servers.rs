//! `GET /v1/servers` and `GET /v1/servers/{server}`.

use axum::extract::State;
use axum::response::Response;
use hostpipe_core::McpSource as _;

use super::super::Params;
use super::super::dto::ServerList;
use super::super::error::ApiResult;
use super::{St, json};

/// `GET /v1/servers`: every configured server and its status, and which of them were
/// added over the API.
pub(crate) async fn list_servers(State(state): St) -> Response {
    json(ServerList {
        servers: state.app.host.servers(),
        added: state.current().added.iter().cloned().collect(),
    })
}

/// `GET /v1/servers/{server}`: one server (null when it went away since the check).
pub(crate) async fn get_server(State(state): St, Params(server): Params<String>) -> ApiResult {
    state.app.check_server(&server)?;
    let info = state
        .app
        .host
        .servers()
        .into_iter()
        .find(|s| s.name == server);
    Ok(json(info))
}
