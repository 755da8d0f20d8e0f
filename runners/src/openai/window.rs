//! Keeping the conversation within the model's input tokens: what the messages cost
//! ([`message_tokens`]) and cutting tool results, oldest first, until they fit
//! ([`fit_messages`]).

use hostpipe_core::{RunError, Tokenizer, TruncationSide};

use super::wire::{ContentPart, Message, UserContent};

/// The newest tool result may take at least 1/N of the model's input tokens, however
/// full the window is (older results are cut for it).
pub(super) const NEWEST_RESULT_SHARE: usize = 4;

/// Tokens a `tool` message costs besides its content (role, id, separators), counted
/// generously.
pub(super) const TOOL_MESSAGE_OVERHEAD: usize = 16;

/// Tokens a message costs besides its content and tool calls.
const MESSAGE_OVERHEAD: usize = 4;

/// Tokens of the text in `messages`: content strings, text parts, and the tool calls
/// as their JSON text; images are not counted here (their cost is the provider's).
pub(super) fn message_tokens(messages: &[Message], tk: &Tokenizer) -> usize {
    messages
        .iter()
        .map(|m| {
            let (content, calls) = match m {
                Message::System { content } | Message::Tool { content, .. } => {
                    (tk.count(content), 0)
                }
                Message::User {
                    content: UserContent::Text(text),
                } => (tk.count(text), 0),
                Message::User {
                    content: UserContent::Parts(parts),
                } => (
                    parts
                        .iter()
                        .map(|p| match p {
                            ContentPart::Text { text } => tk.count(text),
                            ContentPart::ImageUrl { .. } => 0,
                        })
                        .sum(),
                    0,
                ),
                Message::Assistant {
                    content,
                    tool_calls,
                } => (
                    content.as_deref().map_or(0, |c| tk.count(c)),
                    // The calls as a JSON value's text (keys in `serde_json`'s map
                    // order), as they were always counted.
                    if tool_calls.is_empty() {
                        0
                    } else {
                        serde_json::to_value(tool_calls).map_or(0, |v| tk.count(&v.to_string()))
                    },
                ),
            };
            content + calls + MESSAGE_OVERHEAD
        })
        .sum()
}

/// Cuts tool results, oldest first, until `messages` fit `limit` tokens (each keeps
/// at least 16 tokens, with the omission marker).
///
/// # Errors
/// [`RunError::ContextTooLong`] when they do not fit even so.
pub(super) fn fit_messages(
    messages: &mut [Message],
    limit: usize,
    tk: &Tokenizer,
) -> Result<(), RunError> {
    let mut total = message_tokens(messages, tk);
    if total <= limit {
        return Ok(());
    }
    for m in messages.iter_mut() {
        if total <= limit {
            break;
        }
        let Message::Tool { content, .. } = m else {
            continue;
        };
        let tokens = tk.count(content);
        let over = total - limit;
        let keep = tokens.saturating_sub(over).max(16);
        if let Some(t) = tk.truncate(content, keep, TruncationSide::Head) {
            total = total - tokens + t.tokens;
            *content = t.text;
        }
    }
    if total > limit {
        return Err(RunError::ContextTooLong {
            message: format!(
                "the messages are {total} tokens, over the {limit} input tokens the model has, even with tool results cut"
            ),
        });
    }
    Ok(())
}
