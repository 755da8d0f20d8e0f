//! [`McpDoor`]: the MCP server handler of the door, one per request (stateless). It
//! finds the [`Caller`] the token check left in the request, the pipeline it serves,
//! and hands the work to [`super::fit`] and [`super::gateway`], each bounded in time.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::{Caller, default_pipeline, fit, gateway};
use crate::serve::ServeState;

/// The handler of one MCP request.
pub(super) struct McpDoor {
    state: Arc<ServeState>,
}

impl McpDoor {
    /// A handler over `state`.
    pub(super) fn new(state: Arc<ServeState>) -> Self {
        Self { state }
    }

    /// The caller the token check found (the request's `Parts` carry it).
    fn caller(ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request was not authorized", None))
    }

    /// The pipeline the gateway serves to `caller`: its path's, else the default one;
    /// `None` on `/mcp` without a default pipeline.
    fn gateway_pipeline(&self, caller: &Caller) -> Option<Arc<hostpipe_engine::Pipeline>> {
        let id = caller
            .pipeline
            .clone()
            .or_else(|| default_pipeline(&self.state))?;
        self.state.current().pipelines.get(&id).cloned()
    }

    /// `work` within `[serve] request_timeout_ms`, else an internal error saying so.
    async fn bounded<T>(
        &self,
        what: &str,
        work: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        let limit: Duration = self.state.options.request_timeout;
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(ErrorData::internal_error(
                format!(
                    "{what}: no answer within {} ms ([serve] request_timeout_ms)",
                    limit.as_millis()
                ),
                None,
            ))
        })
    }
}

impl ServerHandler for McpDoor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("hostpipe", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "hostpipe puts MCP resources in front of a model. Call `fit_context` with the \
             user's message: it answers with the context the pipeline attaches, fitted to a \
             token budget and fenced, ready to put before the model. The resources, \
             templates and prompts of the pipeline's MCP servers are listed as \
             hostpipe://SERVER/URI and SERVER__name, and read under the pipeline's policy.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Self::caller(&ctx)?;
        Ok(ListToolsResult::with_all_items(vec![fit::tool(
            &self.state,
        )]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == fit::NAME).then(|| fit::tool(&self.state))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = Self::caller(&ctx)?;
        if request.name != fit::NAME {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool `{}`; this server has `{}`",
                    request.name,
                    fit::NAME
                ),
                None,
            ));
        }
        // Bounded by `[serve] turn_timeout_ms`, like a turn.
        Ok(fit::fit_context(&self.state, &caller, request.arguments)
            .await
            .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = Self::caller(&ctx)?;
        let Some(p) = self.gateway_pipeline(&caller) else {
            return Ok(ListResourcesResult::default());
        };
        let listed = self
            .bounded("resources/list", gateway::resources(&self.state, &p))
            .await?;
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let caller = Self::caller(&ctx)?;
        let Some(p) = self.gateway_pipeline(&caller) else {
            return Ok(ListResourceTemplatesResult::default());
        };
        let listed = self
            .bounded(
                "resources/templates/list",
                gateway::templates(&self.state, &p),
            )
            .await?;
        Ok(ListResourceTemplatesResult::with_all_items(listed))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = Self::caller(&ctx)?;
        let p = self
            .gateway_pipeline(&caller)
            .ok_or_else(|| no_pipeline(&self.state))?;
        let result = self
            .bounded(
                "resources/read",
                gateway::read(&self.state, &p, &request.uri),
            )
            .await?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let caller = Self::caller(&ctx)?;
        let Some(p) = self.gateway_pipeline(&caller) else {
            return Ok(ListPromptsResult::default());
        };
        let listed = self
            .bounded("prompts/list", gateway::prompts(&self.state, &p))
            .await?;
        Ok(ListPromptsResult::with_all_items(
            listed.into_iter().map(|(prompt, _)| prompt).collect(),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let caller = Self::caller(&ctx)?;
        let p = self
            .gateway_pipeline(&caller)
            .ok_or_else(|| no_pipeline(&self.state))?;
        let result = self
            .bounded(
                "prompts/get",
                gateway::get_prompt(&self.state, &p, &request.name, request.arguments),
            )
            .await?;
        Ok(result.into())
    }
}

/// `/mcp` was asked for a pipeline's resources or prompts, and has no default pipeline.
fn no_pipeline(state: &ServeState) -> ErrorData {
    let ids: Vec<String> = state
        .current()
        .pipelines
        .keys()
        .map(|i| format!("/mcp/{i}"))
        .collect();
    ErrorData::invalid_request(
        format!(
            "/mcp has no default pipeline (none is called `default`); connect to one of: {}",
            ids.join(", ")
        ),
        None,
    )
}
