//! The trace records of one injection: a [`ReadRecord`] per attachment or content item,
//! completed with what fitting did to it, and the fitting's notes and warnings.

use hostpipe_core::{
    BlockSource, ReadOrigin, ReadOutcome, ReadRecord, TraceEvent, Treatment, Turn,
};

use crate::fit::FitOutcome;

/// The record of a host read of `source` that went through, not yet fitted.
pub(super) fn record(
    source: &BlockSource,
    mime: Option<String>,
    bytes: usize,
    elapsed_ms: u64,
) -> ReadRecord {
    ReadRecord {
        server: source.server.clone(),
        uri: source.uri.clone(),
        mime_type: mime,
        scope: source.scope,
        bytes,
        tokens_before: 0,
        tokens_estimated: false,
        tokens_after: 0,
        treatment: Treatment::Omitted,
        elapsed_ms,
        cache_hit: false,
        outcome: ReadOutcome::Read,
        error: None,
        origin: ReadOrigin::Host,
        consent: None,
        passages: Vec::new(),
        reason: None,
    }
}

/// Puts what fitting did into the turn: each item's block into the context and its
/// `item_records` entry (same order as the fitted items) completed into the trace,
/// after the `records` of reads refused before reading; then the fitting's warnings and
/// notes.
pub(super) fn finish(
    turn: &mut Turn,
    outcome: FitOutcome,
    item_records: Vec<ReadRecord>,
    mut records: Vec<ReadRecord>,
) {
    for (f, mut r) in outcome.fitted.into_iter().zip(item_records) {
        r.tokens_before = f.tokens_before;
        r.tokens_estimated = f.estimated;
        r.tokens_after = f.block.as_ref().map_or(0, |b| b.tokens_after);
        r.treatment = f.treatment;
        r.passages = f.passages;
        r.reason = f.reason;
        if let Some(w) = f.warning {
            // What the policy or the conversion refused says why in the warning.
            if r.error.is_none() && !r.outcome.is_read() {
                r.error = Some(w.clone());
            }
            turn.trace.warn(w);
        }
        records.push(r);
        turn.context.extend(f.block);
    }
    for w in outcome.warnings {
        turn.trace.warn(w);
    }
    for n in outcome.notes {
        turn.trace.note(n);
    }
    for r in records {
        turn.trace.record(TraceEvent::ResourceRead(r));
    }
}
