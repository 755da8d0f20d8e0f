//! A tool call made outside a model's turn (the HTTP API), under the pipeline's policy.

use hostpipe_core::{RunRequest, Trace, Turn};

use super::{CallerReadOutcome, Pipeline, Prepared, ToolCallOutcome, TurnOutcome};

impl Pipeline {
    /// Calls MCP tool `tool` (its name as `server` lists it) with `arguments` (a JSON
    /// object, or null for none) under this pipeline's policy, as a turn's model would,
    /// on behalf of `origin`: the stages run over `turn` marked [`ToolsOnly`] (servers
    /// bound, tools assembled, no context read), then the turn's executor makes the call,
    /// which checks `tool_assembly.include`/`exclude` and the consent gate. The call and
    /// any reads it made are in the outcome's trace and in the store's history.
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn (a required server down, a
    /// stage failing): the call was not made.
    ///
    /// [`ToolsOnly`]: hostpipe_core::ToolsOnly
    ///
    /// The call runs in the pipeline's elicitation scope ([`Pipeline::with_elicitation`]):
    /// the tool's server may ask the caller's user.
    pub async fn call_tool(
        &self,
        mut turn: Turn,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        origin: hostpipe_core::trace::CallOrigin,
    ) -> Result<ToolCallOutcome, Box<TurnOutcome>> {
        turn.ids.pipeline.clone_from(&self.id);
        if turn.deadline.is_none() {
            turn.deadline = self.turn_timeout.map(|t| std::time::Instant::now() + t);
        }
        match self.elicit_scope(&turn) {
            Some(scope) => {
                scope
                    .run(self.call_tool_scoped(turn, server, tool, arguments, origin))
                    .await
            }
            None => {
                self.call_tool_scoped(turn, server, tool, arguments, origin)
                    .await
            }
        }
    }

    async fn call_tool_scoped(
        &self,
        turn: Turn,
        server: &str,
        tool: &str,
        arguments: serde_json::Value,
        origin: hostpipe_core::trace::CallOrigin,
    ) -> Result<ToolCallOutcome, Box<TurnOutcome>> {
        let (request, mut trace) = self.tools_turn(turn).await?;
        let offered = request.tools.iter().find(|t| {
            matches!(&t.origin, hostpipe_core::ToolOrigin::Mcp { server: s, tool: t } if s == server && t == tool)
        });
        let result = match &request.tool_executor {
            // Bounded inside: the approver by the turn's deadline, the server by its
            // request timeout. Refusals are recorded too.
            Some(executor) => {
                executor
                    .call_server_tool(server, tool, arguments, origin)
                    .await
            }
            // No tool_assembly stage: the pipeline offers no tool.
            None => Err(hostpipe_core::ToolError::NotOffered {
                name: format!("{server}/{tool}"),
            }),
        };
        trace.collect_reported();
        self.record_reads(&request.ids, &mut trace, 0).await;
        self.record_calls(&request.ids, &mut trace, 0).await;
        Ok(ToolCallOutcome {
            name: offered.map(|t| t.name.clone()),
            result,
            trace,
        })
    }

    /// Reads resource `uri` of `server` for a caller outside a model's turn (`hostpipe
    /// serve`'s MCP gateway) on behalf of `origin`, under this pipeline's policy: the
    /// stages run over `turn` marked [`ToolsOnly`] (servers bound, policies published,
    /// no context read), then the turn's executor reads as the model's `read_resource`
    /// would ([`ToolExecutor::read_for_caller`]): bound server, the listing's audience,
    /// MIME type and size, the consent gate (a model read), the byte and MIME limits on
    /// what came back. The read is in the outcome's trace and in the store's history.
    /// Runs in the pipeline's elicitation scope.
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn: nothing was read.
    ///
    /// [`ToolsOnly`]: hostpipe_core::ToolsOnly
    /// [`ToolExecutor::read_for_caller`]: hostpipe_core::ToolExecutor::read_for_caller
    pub async fn read_for_caller(
        &self,
        mut turn: Turn,
        server: &str,
        uri: &str,
        origin: hostpipe_core::trace::CallOrigin,
    ) -> Result<CallerReadOutcome, Box<TurnOutcome>> {
        turn.ids.pipeline.clone_from(&self.id);
        if turn.deadline.is_none() {
            turn.deadline = self.turn_timeout.map(|t| std::time::Instant::now() + t);
        }
        let scope = self.elicit_scope(&turn);
        let read = async move {
            let (request, mut trace) = self.tools_turn(turn).await?;
            let result = match &request.tool_executor {
                Some(executor) => executor.read_for_caller(server, uri, origin).await,
                // No tool_assembly stage: no executor holds the pipeline's read policy.
                None => Err(hostpipe_core::ToolError::NotOffered {
                    name: format!("read of {uri} (the pipeline has no tool_assembly stage)"),
                }),
            };
            trace.collect_reported();
            self.record_reads(&request.ids, &mut trace, 0).await;
            self.record_calls(&request.ids, &mut trace, 0).await;
            Ok(CallerReadOutcome { result, trace })
        };
        match scope {
            Some(scope) => scope.run(read).await,
            None => read.await,
        }
    }

    /// The servers this pipeline binds for `turn` (with their status), with the stages
    /// run as for [`Pipeline::call_tool`]: what a caller outside a turn (the MCP
    /// gateway) may list and read.
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn.
    pub async fn bound_servers(
        &self,
        mut turn: Turn,
    ) -> Result<Vec<hostpipe_core::BoundServer>, Box<TurnOutcome>> {
        turn.extensions.insert(hostpipe_core::ToolsOnly);
        self.begin(&mut turn);
        match self.run_stages(&mut turn).await {
            Prepared::Request(..) => Ok(turn.bound_servers),
            Prepared::Ended(outcome) => Err(Box::new(outcome)),
        }
    }

    /// The tools this pipeline offers in `turn`, as the model sees them, with the stages
    /// run as for [`Pipeline::call_tool`].
    ///
    /// # Errors
    /// The [`TurnOutcome`] of a stage that ended the turn.
    pub async fn offered_tools(
        &self,
        turn: Turn,
    ) -> Result<Vec<hostpipe_core::ToolSpec>, Box<TurnOutcome>> {
        Ok(self.tools_turn(turn).await?.0.tools)
    }

    /// Runs the stages over `turn` marked [`hostpipe_core::ToolsOnly`]: the request and the trace.
    pub(super) async fn tools_turn(
        &self,
        mut turn: Turn,
    ) -> Result<(RunRequest, Trace), Box<TurnOutcome>> {
        turn.extensions.insert(hostpipe_core::ToolsOnly);
        self.begin(&mut turn);
        match self.run_stages(&mut turn).await {
            Prepared::Request(request, trace) => Ok((request, trace)),
            Prepared::Ended(mut outcome) => {
                self.record_reads(&turn.ids, &mut outcome.trace, 0).await;
                Err(Box::new(outcome))
            }
        }
    }
}
