//! The caller's own tools (a request's `tools`): offered to the model under
//! `caller__NAME` beside the pipeline's tools (`server__tool`), so neither shadows the
//! other; a model's call to one ends the turn and goes back to the caller in OpenAI's
//! shape (`tool_calls`, `finish_reason: "tool_calls"`) under the caller's own name.
//! The caller's next request carries the assistant's `tool_calls` and the `tool`
//! results after the user's message; they become the turn's [`CallerRound`]s and the
//! runner goes on from there.

use hostpipe_core::{
    CallerRound, CallerToolCall, CallerToolResult, RunEvent, ToolOrigin, ToolSpec,
};
use hostpipe_engine::TurnOutcome;
use serde_json::Value;

use super::wire::{InMessage, InTool, OpenAiError, OutFunctionCall, OutToolCall};

/// The prefix of a caller's tool's name as offered to the model.
pub(crate) const PREFIX: &str = "caller__";

/// Longest function name (OpenAI API reference: `^[a-zA-Z0-9_-]{1,64}$`).
const MAX_NAME: usize = 64;

/// The caller's tools as offered to the model, namespaced, in order.
///
/// # Errors
/// 400 naming the field: a tool that is not a `function`, a name that breaks the
/// reference's rule (or is too long for the prefix), a name given twice, parameters
/// that are not an object.
pub(crate) fn offered(tools: &[InTool]) -> Result<Vec<ToolSpec>, OpenAiError> {
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        if t.kind != "function" {
            return Err(OpenAiError::invalid(
                format!("tools[{i}].type"),
                format!("tools[{i}].type: only `function` tools are supported"),
            ));
        }
        let name = &t.function.name;
        let valid = !name.is_empty()
            && name.len() + PREFIX.len() <= MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(OpenAiError::invalid(
                format!("tools[{i}].function.name"),
                format!(
                    "tools[{i}].function.name: 1 to {} of a-z, A-Z, 0-9, _ and - (it is offered as `{PREFIX}NAME`)",
                    MAX_NAME - PREFIX.len()
                ),
            ));
        }
        let offered = format!("{PREFIX}{name}");
        if specs.iter().any(|s| s.name == offered) {
            return Err(OpenAiError::invalid(
                format!("tools[{i}].function.name"),
                format!("tools[{i}].function.name: `{name}` is given twice"),
            ));
        }
        let schema = match &t.function.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(OpenAiError::invalid(
                    format!("tools[{i}].function.parameters"),
                    format!("tools[{i}].function.parameters: must be a JSON Schema object"),
                ));
            }
        };
        specs.push(ToolSpec {
            name: offered,
            description: t.function.description.clone().unwrap_or_default(),
            input_schema: schema,
            origin: ToolOrigin::Caller,
        });
    }
    Ok(specs)
}

/// The rounds of the caller's tools in `after` (the messages after the user's, the
/// first at `messages[offset]`): each an assistant message with `tool_calls` of
/// `offered` tools, then a `tool` message for each call.
///
/// # Errors
/// 400 naming the message: anything else after the user's message, a call of a tool
/// the request does not give, a result that answers no call of its round.
pub(crate) fn rounds(
    after: &[InMessage],
    offset: usize,
    offered: &[ToolSpec],
) -> Result<Vec<CallerRound>, OpenAiError> {
    let mut rounds: Vec<CallerRound> = Vec::new();
    for (k, m) in after.iter().enumerate() {
        let i = offset + k;
        match m {
            InMessage::Assistant {
                content,
                tool_calls: Some(calls),
            } if !calls.is_empty() => {
                let text = match content {
                    Some(c) => Some(super::text_of(c, &format!("messages[{i}].content"))?),
                    None => None,
                };
                let mut round = CallerRound {
                    text: text.filter(|t| !t.is_empty()),
                    ..CallerRound::default()
                };
                for (j, c) in calls.iter().enumerate() {
                    let name = format!("{PREFIX}{}", c.function.name);
                    if !offered.iter().any(|s| s.name == name) {
                        return Err(OpenAiError::invalid(
                            format!("messages[{i}].tool_calls[{j}].function.name"),
                            format!(
                                "messages[{i}].tool_calls[{j}]: `{}` is not one of the request's `tools`",
                                c.function.name
                            ),
                        ));
                    }
                    round.calls.push(CallerToolCall {
                        id: c.id.clone(),
                        name,
                        arguments: c.function.arguments.clone(),
                    });
                }
                rounds.push(round);
            }
            InMessage::Tool {
                tool_call_id,
                content,
            } => {
                let round = rounds
                    .last_mut()
                    .filter(|r| r.calls.iter().any(|c| &c.id == tool_call_id))
                    .ok_or_else(|| {
                        OpenAiError::invalid(
                            format!("messages[{i}].tool_call_id"),
                            format!(
                                "messages[{i}]: `{tool_call_id}` answers no call of the assistant message before it"
                            ),
                        )
                    })?;
                round.results.push(CallerToolResult {
                    call_id: tool_call_id.clone(),
                    text: super::text_of(content, &format!("messages[{i}].content"))?,
                });
            }
            _ => {
                return Err(OpenAiError::invalid(
                    format!("messages[{i}]"),
                    format!(
                        "messages[{i}]: after the last user message come only the assistant's calls of the request's tools and their `tool` results"
                    ),
                ));
            }
        }
    }
    Ok(rounds)
}

/// The model's calls of the caller's tools that ended the turn, under the caller's
/// names: the runner's `tool_call_started` events of `offered` tools.
pub(crate) fn calls(outcome: &TurnOutcome, offered: &[String]) -> Vec<OutToolCall> {
    let Some(run) = &outcome.run else {
        return Vec::new();
    };
    run.events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolCallStarted {
                id,
                name,
                arguments,
            } if offered.contains(name) => Some(OutToolCall {
                index: None,
                id: id.clone(),
                kind: "function",
                function: OutFunctionCall {
                    name: name.strip_prefix(PREFIX).unwrap_or(name).to_owned(),
                    arguments: match arguments {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    },
                },
            }),
            _ => None,
        })
        .collect()
}
