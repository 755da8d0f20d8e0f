//! The turn's resource budget, in tokens: `budget_tokens`, or `budget_share` (default
//! 0.5) of what the model has left for input once the system prompt, the history, the
//! message and the bound servers' tool definitions are counted; never more than what it
//! has left (a larger `budget_tokens` is lowered, with a trace warning). A caller's
//! [`BudgetOverride`] in the turn's extensions (the MCP door's `fit_context`) takes the
//! place of both, under the same cap.

use hostpipe_core::{BudgetOverride, McpSource, Tokenizer, Turn};

use super::config::InjectConfig;

/// The turn's budget in tokens (see the module docs).
pub(super) async fn budget(
    config: &InjectConfig,
    mcp: &dyn McpSource,
    turn: &mut Turn,
    tk: &Tokenizer,
) -> usize {
    let used = used_tokens(mcp, turn, tk).await;
    let left = turn.model.input_tokens().saturating_sub(used);
    let caller = turn.extensions.get::<BudgetOverride>().map(|b| b.0);
    let (given, name) = match caller {
        Some(b) => (Some(b), "the caller's budget"),
        None => (config.budget_tokens, "budget_tokens"),
    };
    match given {
        Some(b) if b > left => {
            turn.trace.warn(format!(
                "{name} = {b} is more than the {left} input tokens model `{}` has left; using {left}",
                turn.model.name
            ));
            left
        }
        Some(b) => b,
        // Float maths on token counts (< 2^53) is exact enough; floor keeps the bound.
        None => (left as f64 * config.budget_share.unwrap_or(0.5)).floor() as usize,
    }
}

/// Tokens of what the model gets besides the resources: system prompt, history,
/// message, and the tool definitions of the connected bound servers.
async fn used_tokens(mcp: &dyn McpSource, turn: &Turn, tk: &Tokenizer) -> usize {
    let mut used = turn.system_prompt.as_deref().map_or(0, |s| tk.count(s))
        + turn
            .history
            .iter()
            .map(|m| tk.count(&m.text))
            .sum::<usize>()
        + tk.count(&turn.message.text);
    for server in turn.connected_servers() {
        if let Ok(tools) = mcp.list_tools(server).await {
            for t in tools.iter() {
                used += tk.count(&t.name)
                    + t.description.as_deref().map_or(0, |d| tk.count(d))
                    + tk.count(&t.input_schema.to_string());
            }
        }
    }
    used
}
