//! Elicitation against an in-process rmcp server speaking 2026-07-28: its tool `ask`
//! answers `input_required` with an `elicitation/create` input request (a
//! multi-round-trip request, SEP-2322) and, on the retry, says what it was told.

use std::sync::Arc;

use async_trait::async_trait;
use hostpipe_core::{
    ElicitScope, ElicitationAnswer, ElicitationRequest, ElicitationSettings, Elicitor,
    McpSource as _, ToolContent, Turn,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitResult,
    Implementation, InputRequests, InputRequiredResult, ServerCapabilities as WireCapabilities,
    ServerConfig as WireServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::tests::connected_to;
use super::{Elicitation, HostOptions, McpHost};
use crate::config::ProtocolMode;

#[derive(Clone, Default)]
struct Asker;

impl ServerHandler for Asker {
    fn get_info(&self) -> WireServerConfig {
        WireServerConfig::new(WireCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("asker", "1.0"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(answer) = request.input_responses.as_ref().and_then(|r| r.get("who")) else {
            let requests: InputRequests = serde_json::from_value(json!({
                "who": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Who are you?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"name": {"type": "string", "minLength": 1}},
                            "required": ["name"]
                        }
                    }
                }
            }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                Some(requests),
                Some("asked".into()),
            )));
        };
        let result: ElicitResult = serde_json::from_value(answer.clone())
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let text = match (result.action, result.content) {
            (rmcp::model::ElicitationAction::Accept, Some(c)) => format!("hello {}", c["name"]),
            (action, _) => format!("no name: {action:?}"),
        };
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

struct Answers(ElicitationAnswer);

#[async_trait]
impl Elicitor for Answers {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        assert_eq!(request.message, "Who are you?");
        self.0.clone()
    }
}

async fn host() -> McpHost {
    let options = HostOptions {
        elicitation: Elicitation::Form,
        ..HostOptions::default()
    };
    connected_to(Asker, ProtocolMode::Modern, options).await
}

async fn ask(host: &McpHost, answer: Option<ElicitationAnswer>) -> String {
    let call = host.call_tool("docs", "ask", None);
    let result = match answer {
        Some(answer) => {
            let mut turn = Turn::new("p", "hi");
            turn.ids.conversation = Some("c".into());
            let scope = ElicitScope::new(
                Arc::new(Answers(answer)),
                &turn,
                ElicitationSettings::default(),
            );
            scope.run(call).await
        }
        None => call.await,
    };
    match result.map(|r| r.content) {
        Ok(content) => match content.first() {
            Some(ToolContent::Text { text }) => text.clone(),
            other => format!("{other:?}"),
        },
        Err(e) => format!("error: {e}"),
    }
}

#[tokio::test]
async fn a_2026_07_28_input_request_is_put_to_the_turns_user() {
    let host = host().await;
    assert_eq!(
        host.servers()[0].protocol_version.as_deref(),
        Some("2026-07-28")
    );
    let mut content = serde_json::Map::new();
    content.insert("name".into(), json!("Ann"));
    assert_eq!(
        ask(&host, Some(ElicitationAnswer::Accept { content })).await,
        "hello \"Ann\""
    );
    assert_eq!(
        ask(&host, Some(ElicitationAnswer::Decline)).await,
        "no name: Decline"
    );
    assert_eq!(
        ask(&host, Some(ElicitationAnswer::Cancel)).await,
        "no name: Cancel"
    );
    // Content that does not fit the form is never sent: a decline.
    let mut empty = serde_json::Map::new();
    empty.insert("name".into(), json!(""));
    assert_eq!(
        ask(&host, Some(ElicitationAnswer::Accept { content: empty })).await,
        "no name: Decline"
    );
    // Outside any turn's scope nobody can be asked.
    assert_eq!(ask(&host, None).await, "no name: Decline");
}

/// Answers after longer than the request timeout.
struct Late;

#[async_trait]
impl Elicitor for Late {
    async fn elicit(&self, _request: &ElicitationRequest) -> ElicitationAnswer {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        let mut content = serde_json::Map::new();
        content.insert("name".into(), json!("Slow"));
        ElicitationAnswer::Accept { content }
    }
}

#[tokio::test]
async fn the_request_timeout_does_not_run_while_the_user_is_asked() {
    let options = HostOptions {
        elicitation: Elicitation::Form,
        request_timeout: std::time::Duration::from_millis(200),
        ..HostOptions::default()
    };
    let host = connected_to(Asker, ProtocolMode::Modern, options).await;
    let turn = Turn::new("p", "hi");
    let scope = ElicitScope::new(Arc::new(Late), &turn, ElicitationSettings::default());
    let result = scope.run(host.call_tool("docs", "ask", None)).await;
    let text = match result.map(|r| r.content) {
        Ok(content) => format!("{:?}", content.first()),
        Err(e) => format!("error: {e}"),
    };
    assert!(text.contains("hello \\\"Slow\\\""), "{text}");
}
