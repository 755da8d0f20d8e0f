//! Reading the planned attachments, concurrently and within the turn's deadline, and
//! turning every content item that comes back into an [`Item`] to fit, with its read
//! record. Each item is judged on its own ([`crate::reader`]): consent for an item
//! under another URI than the one read, the byte and MIME limits, then conversion.

use std::sync::Arc;
use std::time::Instant;

use hostpipe_core::{
    BlockSource, FallbackReason, McpSource, ReadOrigin, ReadOutcome, ReadRecord, ResourceRead, Turn,
};

use super::plan::{Failure, Planned};
use super::record::record;
use crate::convert::Converted;
use crate::fit::{Item, content_hash};
use crate::reader::{Gate, ItemProblem, ItemReader, ReadItem, ReadPolicy, withheld_note, withhold};

/// One attachment after reading.
pub(super) struct Fetched {
    planned: Planned,
    result: Result<ResourceRead, Failure>,
    elapsed_ms: u64,
}

/// Reads every planned attachment at once, giving up at `deadline`.
pub(super) async fn read_all(
    mcp: &dyn McpSource,
    planned: Vec<Planned>,
    deadline: Option<Instant>,
) -> Vec<Fetched> {
    futures_util::future::join_all(planned.into_iter().map(|p| read(mcp, p, deadline))).await
}

/// Reads one planned attachment, giving up at the turn's `deadline` (dropping the read
/// cancels the MCP request).
async fn read(mcp: &dyn McpSource, planned: Planned, deadline: Option<Instant>) -> Fetched {
    let uri = match &planned.uri {
        Ok(uri) => uri.clone(),
        Err(_) => {
            return Fetched {
                planned,
                result: Ok(ResourceRead::fresh(Vec::new())),
                elapsed_ms: 0,
            };
        }
    };
    if let Some(contents) = &planned.embedded {
        let read = ResourceRead::fresh(vec![contents.clone()]);
        return Fetched {
            planned,
            result: Ok(read),
            elapsed_ms: 0,
        };
    }
    let started = Instant::now();
    let reading = mcp.read_resource(&planned.source.server, &uri);
    let result = match deadline {
        Some(d) => match tokio::time::timeout_at(d.into(), reading).await {
            Ok(r) => r.map_err(|e| Failure::read(&e)),
            Err(_) => Err(Failure {
                outcome: ReadOutcome::Failed,
                trace: format!(
                    "dropped: the turn's deadline passed after {} ms, before resources/read answered (the request was cancelled)",
                    started.elapsed().as_millis()
                ),
                model: "the server did not answer in time",
                reason: FallbackReason::ReadFailed {
                    error: "the turn's deadline passed".into(),
                },
            }),
        },
        None => reading.await.map_err(|e| Failure::read(&e)),
    };
    Fetched {
        planned,
        result,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// The items to fit and their read records, in the same order.
#[derive(Default)]
pub(super) struct Collected {
    pub(super) items: Vec<Item>,
    pub(super) records: Vec<ReadRecord>,
    /// Hashes of the texts so far, with the URI of the first of each.
    seen: Vec<(u64, String)>,
}

/// Turns what was `fetched` into items to fit, under `policy`.
pub(super) async fn collect(
    turn: &mut Turn,
    policy: &ReadPolicy,
    fetched: Vec<Fetched>,
) -> Collected {
    let model = Arc::clone(&turn.model);
    let gate = Gate::of_turn(turn, ReadOrigin::Host);
    let mut reader = ItemReader::new(policy, &model, &gate);
    let mut out = Collected::default();
    for f in fetched {
        out.add(turn, &mut reader, f).await;
    }
    out
}

/// An item of `p`'s read, with what ranking needs from the attachment.
fn item(
    p: &Planned,
    source: BlockSource,
    mime_type: Option<String>,
    converted: Converted,
    text_hash: Option<u64>,
) -> Item {
    Item {
        source,
        mime_type,
        converted,
        must: p.must || p.listed.priority() >= 1.0,
        must_scope: if p.must { p.must_scope } else { p.source.scope },
        priority: p.listed.priority(),
        strategy: p.strategy,
        text_hash,
    }
}

impl Collected {
    /// Adds one attachment's read: a note when it failed or was withheld, else each
    /// content item.
    async fn add(&mut self, turn: &mut Turn, reader: &mut ItemReader<'_>, f: Fetched) {
        let Fetched {
            planned: p,
            result,
            elapsed_ms,
        } = f;
        let read = match (&p.uri, result) {
            (Err(failure), _) => Err(Failure {
                outcome: failure.outcome,
                trace: failure.trace.clone(),
                model: failure.model,
                reason: failure.reason.clone(),
            }),
            (Ok(_), Err(failure)) => Err(failure),
            (Ok(_), Ok(read)) => Ok(read),
        };
        let read = match read {
            Ok(read) => read,
            Err(failure) => return self.failed(&p, failure, elapsed_ms),
        };
        if read.contents.is_empty() {
            turn.trace.warn(format!(
                "resources/read of {} on `{}` returned no contents",
                p.source.uri, p.source.server
            ));
        }
        for content in read.contents.iter().cloned() {
            // A server may answer with items under other URIs: each is judged on its
            // own, so an item labelled with a denied URI never reaches the model.
            let judged = reader
                .judge(
                    &p.source.server,
                    &p.source.uri,
                    &p.listed,
                    || format!("returned by the read of {}", p.source.uri),
                    content,
                )
                .await;
            self.add_item(turn, &p, judged, read.cache_hit, elapsed_ms);
        }
    }

    /// The attachment produced no content: a note for the model, and its record.
    fn failed(&mut self, p: &Planned, failure: Failure, elapsed_ms: u64) {
        let note = match failure.reason {
            // Not "not included": the model must not conclude it does not exist.
            FallbackReason::Withheld { .. } => withheld_note(&p.source.uri, &p.source.server),
            _ => format!(
                "[resource {} from `{}` not included: {}]",
                p.source.uri, p.source.server, failure.model
            ),
        };
        let mut r = record(&p.source, None, 0, elapsed_ms);
        r.outcome = failure.outcome;
        r.error = Some(failure.trace);
        r.consent.clone_from(&p.consent);
        self.records.push(r);
        let converted = Converted::Fallback {
            reason: failure.reason,
            note,
        };
        self.items
            .push(item(p, p.source.clone(), None, converted, None));
    }

    /// One content item of `p`'s read, judged.
    fn add_item(
        &mut self,
        turn: &mut Turn,
        p: &Planned,
        judged: ReadItem,
        cache_hit: bool,
        elapsed_ms: u64,
    ) {
        let mut source = p.source.clone();
        source.uri.clone_from(&judged.uri);
        if let Some(ItemProblem::Withheld { how }) = &judged.problem {
            let mut r = record(&source, judged.item_mime, 0, elapsed_ms);
            withhold(&mut r, how);
            self.records.push(r);
            self.items
                .push(item(p, source, None, judged.converted, None));
            return;
        }
        source.name.clone_from(&p.listed.meta.name);
        let mut text_hash = None;
        if let Converted::Text(text) = &judged.converted {
            let h = content_hash(text);
            text_hash = Some(h);
            if let Some((_, first)) = self.seen.iter().find(|(x, _)| *x == h) {
                turn.trace.warn(format!(
                    "{} from `{}` has the same text as {first}; injected once",
                    source.uri, source.server
                ));
                return;
            }
            self.seen.push((h, source.uri.clone()));
        }
        let mut r = record(&source, judged.mime_type.clone(), judged.bytes, elapsed_ms);
        // A refused or unconvertible item: fitting puts the why in its error.
        if let Some(problem) = &judged.problem {
            r.outcome = problem.outcome();
        }
        r.cache_hit = cache_hit;
        r.consent.clone_from(&p.consent);
        self.records.push(r);
        self.items.push(item(
            p,
            source,
            judged.mime_type,
            judged.converted,
            text_hash,
        ));
    }
}
