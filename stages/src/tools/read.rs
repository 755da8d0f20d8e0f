//! The reads of [`BoundTools`]: the model's `read_resource` ([`BoundTools::read`]) and
//! a caller's read outside the model's turn ([`ToolExecutor::read_for_caller`], the MCP
//! door's gateway). Each checks that the server is bound for the turn, then both go
//! through [`BoundTools::fetch`]: the listing's audience, MIME type and size
//! ([`ReadPolicy::refuse_listed`]), the consent gate, the read; then each item is judged
//! ([`ItemReader`]). The model gets converted content,
//! texts truncated to `max_read_tokens`; a caller gets the items as the server sent them.
//!
//! [`ReadPolicy::refuse_listed`]: crate::reader::ReadPolicy::refuse_listed

use std::time::Instant;

use hostpipe_core::{
    CallOrigin, CallerRead, ReadOrigin, ReadOutcome, ReadRecord, ResourceContents, ResourceRead,
    Scope, Tokenizer, ToolCallRecord, ToolCallResult, ToolContent, ToolError, Treatment,
    TruncationSide,
};

use super::READ_RESOURCE;
use super::executor::{BoundTools, error_result};
use crate::convert::Converted;
use crate::reader::{
    Gate, ItemProblem, ItemReader, Listed, ReadItem, not_read, refused_note, withheld_note,
    withhold,
};

/// What checking and sending one read came to ([`BoundTools::fetch`]).
pub(super) enum Fetched {
    /// The policy refused it before the read: what the reader is told (the record says
    /// why).
    Refused(String),
    /// The server's answer, the gate that allowed it and what the listing says.
    Read {
        gate: Box<Gate>,
        listed: Box<Listed>,
        read: ResourceRead,
    },
}

impl BoundTools {
    /// A record of reading `uri` of `server` for the model (or a caller reading as it).
    fn read_record(server: &str, uri: &str) -> ReadRecord {
        ReadRecord {
            server: server.to_owned(),
            uri: uri.to_owned(),
            mime_type: None,
            scope: Scope::Message,
            bytes: 0,
            tokens_before: 0,
            tokens_estimated: false,
            tokens_after: 0,
            treatment: Treatment::Whole,
            elapsed_ms: 0,
            cache_hit: false,
            outcome: ReadOutcome::Read,
            error: None,
            origin: ReadOrigin::Model,
            consent: None,
            passages: Vec::new(),
            reason: None,
        }
    }

    /// Checks a read of `uri` of `server` (bound for the turn: the caller checked) under
    /// the pipeline's rules, as for an attachment (audience, MIME type, size), then the
    /// consent gate (told `reason`, else the model's), then reads it. `record` and `call`
    /// get the decision, the time and, on a failed read, the error.
    ///
    /// # Errors
    /// The server's error (`record` says it failed).
    pub(super) async fn fetch(
        &self,
        server: &str,
        uri: &str,
        reason: Option<String>,
        record: &mut ReadRecord,
        call: &mut ToolCallRecord,
    ) -> Result<Fetched, ToolError> {
        let started = Instant::now();
        let listed = Listed::of(self.mcp.as_ref(), server, uri, None).await;
        if let Some(why) = self.policy.refuse_listed(&listed) {
            let told = if listed.user_only {
                "it is meant for the user, not the model"
            } else {
                "the pipeline's policy does not allow it"
            };
            record.mime_type.clone_from(&listed.meta.listed_mime);
            not_read(record, &why);
            call.withheld = true;
            call.error.clone_from(&record.error);
            return Ok(Fetched::Refused(format!(
                "[resource {uri} from `{server}` not read: {told}]"
            )));
        }
        let gate = Gate::new(self.consent.clone(), self.asker.clone(), self.deadline);
        if let Some(verdict) = gate.ask(server, uri, reason).await {
            call.consent = Some(verdict.how.clone());
            if !verdict.allowed {
                withhold(record, &verdict.how);
                call.withheld = true;
                call.error.clone_from(&record.error);
                // Withheld, not missing: the reader must not conclude it does not exist.
                return Ok(Fetched::Refused(withheld_note(uri, server)));
            }
            record.consent = Some(verdict.how);
        }
        let read = self.mcp.read_resource(server, uri).await;
        record.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match read {
            Ok(read) => {
                record.cache_hit = read.cache_hit;
                Ok(Fetched::Read {
                    gate: Box::new(gate),
                    listed: Box::new(listed),
                    read,
                })
            }
            Err(e) => {
                record.outcome = ReadOutcome::Failed;
                record.error = Some(e.to_string());
                record.treatment = Treatment::Omitted;
                Err(e.into())
            }
        }
    }

    /// `read_resource`; `call` is the tool call's record, which gets the read's consent
    /// decision and says when the read was withheld.
    pub(super) async fn read(
        &self,
        args: &serde_json::Value,
        call: &mut ToolCallRecord,
    ) -> Result<ToolCallResult, ToolError> {
        let server = self.server_arg(READ_RESOURCE, args)?;
        let uri = args.get("uri").and_then(|v| v.as_str()).ok_or_else(|| {
            ToolError::InvalidArguments {
                tool: READ_RESOURCE.into(),
                message: "`uri` (a string) is required".into(),
            }
        })?;
        let mut record = Self::read_record(server, uri);
        let result = match self.fetch(server, uri, None, &mut record, call).await {
            Ok(Fetched::Refused(note)) => Ok(error_result(note)),
            Ok(Fetched::Read { gate, listed, read }) => {
                self.read_items(&gate, &listed, &read.contents, &mut record)
                    .await
            }
            Err(e) => Err(e),
        };
        self.reads.push(record);
        result
    }

    /// [`ToolExecutor::read_for_caller`](hostpipe_core::ToolExecutor::read_for_caller):
    /// the read, recorded as the model's `read_resource` made on behalf of `origin` (a
    /// read record and a call record).
    pub(super) async fn caller_read(
        &self,
        server: &str,
        uri: &str,
        origin: CallOrigin,
    ) -> Result<CallerRead, ToolError> {
        let started = Instant::now();
        let args = serde_json::json!({ "server": server, "uri": uri });
        let mut call = Self::record(server, READ_RESOURCE, READ_RESOURCE, &args, origin);
        let result = self
            .caller_read_recorded(server, uri, origin, &mut call)
            .await;
        // The call's record measures what the caller got.
        let got = result.as_ref().map(|r| match r {
            CallerRead::Withheld { note } => error_result(note.clone()),
            CallerRead::Contents { contents, withheld } => ToolCallResult {
                content: contents
                    .iter()
                    .map(|c| ToolContent::Resource {
                        contents: c.clone(),
                    })
                    .chain(
                        withheld
                            .iter()
                            .map(|n| ToolContent::Text { text: n.clone() }),
                    )
                    .collect(),
                structured_content: None,
                is_error: false,
            },
        });
        self.report(call, started, got.as_ref().map_err(|e| *e));
        result
    }

    async fn caller_read_recorded(
        &self,
        server: &str,
        uri: &str,
        origin: CallOrigin,
        call: &mut ToolCallRecord,
    ) -> Result<CallerRead, ToolError> {
        if !self.bound.iter().any(|b| b == server) {
            call.withheld = true;
            return Err(ToolError::ServerNotBound {
                server: server.to_owned(),
                allowed: self.bound.clone(),
            });
        }
        let reason = match origin {
            CallOrigin::Api => format!("an MCP client read {uri} through hostpipe's gateway"),
            CallOrigin::Agent => format!("the remote agent read {uri}"),
            CallOrigin::Model => format!("the model read {uri}"),
        };
        let mut record = Self::read_record(server, uri);
        let fetched = self
            .fetch(server, uri, Some(reason.clone()), &mut record, call)
            .await;
        let result = match fetched {
            Ok(Fetched::Refused(note)) => Ok(CallerRead::Withheld { note }),
            Ok(Fetched::Read { gate, listed, read }) => Ok(self
                .caller_items(&gate, &listed, &read.contents, &reason, &mut record)
                .await),
            Err(e) => Err(e),
        };
        self.reads.push(record);
        result
    }

    /// The items of a read of `record.uri` a caller gets: each judged under the
    /// pipeline's policy like the model's, and kept as the server sent it when it
    /// passes; `record` gets the bytes, tokens (of the texts kept) and the last problem.
    async fn caller_items(
        &self,
        gate: &Gate,
        listed: &Listed,
        contents: &[ResourceContents],
        reason: &str,
        record: &mut ReadRecord,
    ) -> CallerRead {
        record.bytes = contents.iter().map(ResourceContents::byte_len).sum();
        record.mime_type = contents
            .first()
            .and_then(|c| c.mime_type())
            .map(str::to_owned);
        let tk = Tokenizer::new(self.model.encoding).ok();
        let (server, uri) = (record.server.clone(), record.uri.clone());
        let mut reader = ItemReader::new(&self.policy, &self.model, gate);
        let (mut kept, mut withheld) = (Vec::new(), Vec::new());
        for item in contents.iter().cloned() {
            let judged = reader
                .judge(
                    &server,
                    &uri,
                    listed,
                    || format!("returned by the read of {uri} ({reason})"),
                    item.clone(),
                )
                .await;
            match &judged.problem {
                // What the model could not be given (an image it cannot decode) is no
                // reason to keep the item from a caller, who gets it as it came.
                None | Some(ItemProblem::ConversionFailed { .. }) => {
                    if let (Some(tk), ResourceContents::Text { text, .. }) = (&tk, &item) {
                        let tokens = tk.count(text);
                        record.tokens_before += tokens;
                        record.tokens_after += tokens;
                    }
                    kept.push(item);
                }
                Some(problem @ ItemProblem::Withheld { how }) => {
                    record.outcome = problem.outcome();
                    record.error = Some(format!("withheld ({}): {how}", judged.uri));
                    withheld.push(withheld_note(&judged.uri, &server));
                }
                Some(problem @ ItemProblem::Refused { error }) => {
                    record.outcome = problem.outcome();
                    record.error = Some(format!("refused ({}): {error}", judged.uri));
                    withheld.push(refused_note(&judged.uri, &server));
                }
            }
        }
        if kept.is_empty() && !withheld.is_empty() {
            record.treatment = Treatment::Omitted;
            return CallerRead::Withheld {
                note: withheld.join("\n"),
            };
        }
        CallerRead::Contents {
            contents: kept,
            withheld,
        }
    }

    /// What the model gets of the `contents` of a read of `record.uri` (`listed`
    /// describes it): each item judged under the pipeline's policy, texts truncated to
    /// `max_read_tokens`; `record` gets the bytes, tokens and the last problem.
    async fn read_items(
        &self,
        gate: &Gate,
        listed: &Listed,
        contents: &[ResourceContents],
        record: &mut ReadRecord,
    ) -> Result<ToolCallResult, ToolError> {
        record.bytes = contents.iter().map(ResourceContents::byte_len).sum();
        record.mime_type = contents
            .first()
            .and_then(|c| c.mime_type())
            .map(str::to_owned);
        let tk = Tokenizer::new(self.model.encoding).map_err(|e| ToolError::InvalidArguments {
            tool: READ_RESOURCE.into(),
            message: e.to_string(),
        })?;
        let (server, uri) = (record.server.clone(), record.uri.clone());
        let mut reader = ItemReader::new(&self.policy, &self.model, gate);
        let mut content = Vec::with_capacity(contents.len());
        for item in contents.iter().cloned() {
            // An item under another URI is judged on its own (a denied URI never
            // reaches the model, whatever URI was asked for).
            let judged = reader
                .judge(
                    &server,
                    &uri,
                    listed,
                    || format!("returned by read_resource of {uri}"),
                    item,
                )
                .await;
            if let Some(problem) = &judged.problem {
                record.outcome = problem.outcome();
            }
            match &judged.problem {
                Some(ItemProblem::Withheld { how }) => {
                    record.error = Some(format!("withheld ({}): {how}", judged.uri));
                }
                Some(ItemProblem::Refused { error } | ItemProblem::ConversionFailed { error }) => {
                    record.error = Some(format!("refused ({}): {error}", judged.uri));
                }
                None => {}
            }
            content.push(self.tool_content(judged, &tk, record));
        }
        Ok(ToolCallResult {
            content,
            structured_content: None,
            is_error: false,
        })
    }

    /// A judged item as the model gets it: resource text (truncated to
    /// `max_read_tokens`, counted in `record`), an image, or a note.
    fn tool_content(
        &self,
        judged: ReadItem,
        tk: &Tokenizer,
        record: &mut ReadRecord,
    ) -> ToolContent {
        match judged.converted {
            Converted::Text(text) => {
                let before = tk.count(&text);
                record.tokens_before += before;
                let text = match tk.truncate(&text, self.max_read_tokens, TruncationSide::Head) {
                    Some(t) if before > self.max_read_tokens => {
                        record.tokens_after += t.tokens;
                        record.treatment = Treatment::Truncated {
                            side: TruncationSide::Head,
                            omitted_tokens: t.omitted_tokens,
                        };
                        t.text
                    }
                    _ => {
                        record.tokens_after += before;
                        text
                    }
                };
                // Resource text: the runner puts it in the turn's fence.
                ToolContent::Resource {
                    contents: ResourceContents::Text {
                        uri: judged.uri,
                        mime_type: judged.item_mime,
                        text,
                    },
                }
            }
            Converted::Image {
                mime_type, data, ..
            } => ToolContent::Image { mime_type, data },
            Converted::Fallback { note, .. } | Converted::Refused { note, .. } => {
                ToolContent::Text { text: note }
            }
        }
    }
}
