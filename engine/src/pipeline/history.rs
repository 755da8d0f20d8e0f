//! Where a pipeline meets its store: pins before the stages, the history after the
//! runner, each call bounded (and where its observer sees the reads and tool calls).

use hostpipe_core::{Trace, Turn};

use super::Pipeline;
use crate::store::{AttachmentStore, InjectionRecord, PinOwner};

impl Pipeline {
    /// Adds the live pins of the turn's pipeline and conversation to its attachments.
    pub(super) async fn load_pins(&self, turn: &mut Turn) {
        let Some(store) = &self.store else { return };
        let mut owners = vec![PinOwner::Pipeline(self.id.clone())];
        owners.extend(turn.ids.conversation.clone().map(PinOwner::Conversation));
        let now = crate::store::unix_ms_now();
        let result = tokio::time::timeout(Self::STORE_TIMEOUT, store.pins(&owners, now)).await;
        match result {
            Ok(Ok(pins)) => {
                turn.attachments
                    .extend(pins.iter().map(crate::store::Pin::attachment));
            }
            Ok(Err(e)) => turn.trace.warn(format!(
                "the pinned attachments were not loaded, the turn goes on without them: {e}"
            )),
            Err(_) => turn.trace.warn(format!(
                "the pinned attachments were not loaded, the turn goes on without them: attachment store {} did not answer within {} ms",
                store.describe(),
                Self::STORE_TIMEOUT.as_millis()
            )),
        }
    }

    /// `write` to `store`, bounded by [`Self::STORE_TIMEOUT`]; the error as text.
    pub(super) async fn bounded(
        store: &dyn AttachmentStore,
        write: impl std::future::Future<Output = Result<(), crate::store::StoreError>>,
    ) -> Result<(), String> {
        match tokio::time::timeout(Self::STORE_TIMEOUT, write).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "attachment store {} did not answer within {} ms",
                store.describe(),
                Self::STORE_TIMEOUT.as_millis()
            )),
        }
    }

    /// Writes the turn's tool calls from the `from`-th on to the store's history, and
    /// reports them to the observer.
    pub(super) async fn record_calls(
        &self,
        ids: &hostpipe_core::turn::TurnIds,
        trace: &mut Trace,
        from: usize,
    ) {
        self.observe_calls(trace, from);
        let Some(store) = &self.store else { return };
        let calls: Vec<crate::store::ToolCallEntry> = trace
            .tool_calls()
            .enumerate()
            .skip(from)
            .map(|(seq, call)| crate::store::ToolCallEntry {
                turn_id: trace.turn_id().to_owned(),
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                at_ms: trace.started_at_ms(),
                pipeline: self.id.clone(),
                conversation: ids.conversation.clone(),
                message: Some(ids.message.clone()).filter(|m| !m.is_empty()),
                call: call.clone(),
            })
            .collect();
        if calls.is_empty() {
            return;
        }
        let Err(error) = Self::bounded(store.as_ref(), store.record_calls(&calls)).await else {
            return;
        };
        tracing::warn!(turn = trace.turn_id(), error = %error, "tool call history not written");
        trace.warn(format!(
            "{} tool calls were not written to the history: {error}",
            calls.len()
        ));
    }

    /// Writes the turn's resource reads from the `from`-th on to the store's history,
    /// and reports them to the observer.
    pub(super) async fn record_reads(
        &self,
        ids: &hostpipe_core::turn::TurnIds,
        trace: &mut Trace,
        from: usize,
    ) {
        self.observe_reads(trace, from);
        let Some(store) = &self.store else { return };
        let records: Vec<InjectionRecord> = trace
            .reads()
            .enumerate()
            .skip(from)
            .map(|(seq, read)| InjectionRecord {
                turn_id: trace.turn_id().to_owned(),
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                at_ms: trace.started_at_ms(),
                pipeline: self.id.clone(),
                conversation: ids.conversation.clone(),
                message: Some(ids.message.clone()).filter(|m| !m.is_empty()),
                read: read.clone(),
            })
            .collect();
        if records.is_empty() {
            return;
        }
        let Err(error) = Self::bounded(store.as_ref(), store.record(&records)).await else {
            return;
        };
        tracing::warn!(turn = trace.turn_id(), error = %error, "read history not written");
        let n = records.len();
        trace.warn(format!(
            "the read history of this turn ({n} read{}) was not written: {error}",
            if n == 1 { "" } else { "s" }
        ));
    }
}
