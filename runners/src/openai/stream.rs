//! What one model call produced ([`Turned`]), from a stream of chat completion chunks
//! (server-sent events ending with `data: [DONE]`; [`StreamAnswer`]) or from one whole
//! chat completion object (a call without streaming, or a server that answers a
//! streaming request with one JSON body; [`Turned::from_completion`]).

use std::collections::BTreeMap;

use hostpipe_core::{RunError, TokenUsage};

use super::wire::{ChatCompletion, ChatCompletionChunk};
use crate::lenient;

/// A tool call as the model made it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ToolCall {
    /// The call's id, to answer with a `tool` message.
    pub(super) id: String,
    /// The tool's name as offered.
    pub(super) name: String,
    /// JSON text, as the model wrote it.
    pub(super) arguments: String,
}

/// What one model call produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Turned {
    /// The text (every delta, joined).
    pub(super) text: String,
    /// The tool calls, in order.
    pub(super) calls: Vec<ToolCall>,
    /// Usage, when the server reported it.
    pub(super) usage: Option<TokenUsage>,
    /// `finish_reason: "length"`: the answer hit the token limit.
    pub(super) cut: bool,
}

impl Turned {
    /// The answer of a whole chat completion object. Tool calls without `id` or
    /// `function.name` are left out; arguments that are not a string read as `{}`.
    ///
    /// # Errors
    /// [`RunError::Backend`] for an error object (`chat/completions: MESSAGE`) or an
    /// answer without `choices[0].message`.
    pub(super) fn from_completion(completion: ChatCompletion) -> Result<Self, RunError> {
        if let Some(err) = completion.error {
            return Err(RunError::backend(format!(
                "chat/completions: {}",
                err.message.as_deref().unwrap_or("error")
            )));
        }
        let Some((message, finish)) = completion
            .choices
            .into_iter()
            .next()
            .and_then(|c| Some((c.message?, c.finish_reason)))
        else {
            return Err(RunError::backend(
                "chat/completions: the answer has no choices[0].message",
            ));
        };
        let calls = message
            .tool_calls
            .into_iter()
            .filter_map(|c| {
                Some(ToolCall {
                    id: c.id?,
                    name: c.function.name?,
                    arguments: c.function.arguments.unwrap_or_else(|| "{}".to_owned()),
                })
            })
            .collect();
        Ok(Self {
            text: message.content.unwrap_or_default(),
            calls,
            usage: completion.usage.map(TokenUsage::from),
            cut: finish.as_deref() == Some("length"),
        })
    }
}

/// A streamed answer, assembled chunk by chunk ([`StreamAnswer::push`]) and then
/// taken ([`StreamAnswer::finish`]).
#[derive(Debug, Default)]
pub(super) struct StreamAnswer {
    text: String,
    calls: Vec<ToolCall>,
    /// Stream `index` → position in `calls`.
    by_index: BTreeMap<u64, usize>,
    usage: Option<TokenUsage>,
    finish: Option<String>,
    done: bool,
}

impl StreamAnswer {
    /// Takes the `data` of one event: the piece of text it adds, if any (to report as
    /// a delta). After `[DONE]`, [`StreamAnswer::is_done`] is true.
    ///
    /// Tool call pieces are joined by `index` (OpenAI); a server without it starts a
    /// new call with each new `id`. A call's name is its first; `arguments` pieces are
    /// appended. The last `usage` and `finish_reason` count.
    ///
    /// # Errors
    /// [`RunError::Backend`] when the data is not JSON (`chat/completions: invalid
    /// stream chunk: …`) or is an error object (`chat/completions stream error: …`).
    pub(super) fn push(&mut self, data: &str) -> Result<Option<String>, RunError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        let chunk: ChatCompletionChunk = lenient::parse(data).map_err(|e| {
            RunError::backend(format!("chat/completions: invalid stream chunk: {e}"))
        })?;
        if let Some(err) = chunk.error {
            return Err(RunError::backend(format!(
                "chat/completions stream error: {}",
                err.message.as_deref().unwrap_or("?")
            )));
        }
        self.usage = chunk.usage.map(TokenUsage::from).or(self.usage);
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(None);
        };
        if let Some(f) = choice.finish_reason {
            self.finish = Some(f);
        }
        let Some(delta) = choice.delta else {
            return Ok(None);
        };
        for piece in delta.tool_calls {
            let id = piece.id.filter(|i| !i.is_empty());
            let at = self.call_at(piece.index, id.as_deref());
            let call = &mut self.calls[at];
            if let Some(id) = id {
                call.id = id;
            }
            if let Some(name) = piece.function.name
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(args) = piece.function.arguments {
                call.arguments.push_str(&args);
            }
        }
        let piece = delta.content.filter(|p| !p.is_empty());
        if let Some(p) = &piece {
            self.text.push_str(p);
        }
        Ok(piece)
    }

    /// The position in `calls` of the call a piece with `index` and `id` belongs to,
    /// adding a call when it starts one.
    fn call_at(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        let calls = &mut self.calls;
        match index {
            Some(index) => *self.by_index.entry(index).or_insert_with(|| {
                calls.push(ToolCall::default());
                calls.len() - 1
            }),
            None => match (id, calls.last()) {
                (Some(id), Some(last)) if last.id != id => {
                    calls.push(ToolCall::default());
                    calls.len() - 1
                }
                (_, Some(_)) => calls.len() - 1,
                (_, None) => {
                    calls.push(ToolCall::default());
                    0
                }
            },
        }
    }

    /// Whether `[DONE]` came.
    pub(super) fn is_done(&self) -> bool {
        self.done
    }

    /// The answer, once the stream has ended.
    ///
    /// # Errors
    /// [`RunError::Backend`] when the stream ended with neither a `finish_reason` nor
    /// `[DONE]`: the answer is cut off.
    pub(super) fn finish(self) -> Result<Turned, RunError> {
        if !self.done && self.finish.is_none() {
            return Err(RunError::backend(
                "chat/completions: the stream ended without a finish_reason or [DONE] (the answer is cut off)",
            ));
        }
        Ok(Turned {
            text: self.text,
            calls: self.calls,
            usage: self.usage,
            cut: self.finish.as_deref() == Some("length"),
        })
    }
}
