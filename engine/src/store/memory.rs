//! [`MemoryStore`]: every seam of an attachment store, in memory.

use std::sync::Mutex;

use async_trait::async_trait;

use hostpipe_core::AttachmentTarget;

use super::{
    AttachmentStore, ConsentGrant, GrantStore, HistoryQuery, HistorySink, InjectionRecord, NewPin,
    PRUNE_BATCH, Pin, PinOwner, PinQuery, PinSource, Pruned, StoreError, ToolCallEntry,
    history_page, new_pin_id, unix_ms_now,
};

/// An [`AttachmentStore`] in memory: nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    pins: Vec<Pin>,
    records: Vec<InjectionRecord>,
    calls: Vec<ToolCallEntry>,
    grants: std::collections::HashSet<ConsentGrant>,
    /// OAuth credentials by server: the issuer's row saved last.
    credentials: std::collections::BTreeMap<String, crate::SealedRow>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave the vectors half-updated (every
        // change is one push, retain or assignment), so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl PinSource for MemoryStore {
    async fn pins(&self, owners: &[PinOwner], now_ms: i64) -> Result<Vec<Pin>, StoreError> {
        Ok(self
            .lock()
            .pins
            .iter()
            .filter(|p| owners.contains(&p.owner) && p.is_live(now_ms))
            .cloned()
            .collect())
    }
}

#[async_trait]
impl HistorySink for MemoryStore {
    async fn record(&self, records: &[InjectionRecord]) -> Result<(), StoreError> {
        records.iter().try_for_each(InjectionRecord::validate)?;
        self.lock().records.extend_from_slice(records);
        Ok(())
    }
    async fn record_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        for c in calls {
            c.validate()?;
        }
        self.lock().calls.extend_from_slice(calls);
        Ok(())
    }
}

#[async_trait]
impl GrantStore for MemoryStore {
    async fn grant(&self, grant: &ConsentGrant, _now_ms: i64) -> Result<(), StoreError> {
        grant.validate()?;
        self.lock().grants.insert(grant.clone());
        Ok(())
    }
    async fn is_granted(&self, grant: &ConsentGrant) -> Result<bool, StoreError> {
        Ok(self.lock().grants.contains(grant))
    }
}

#[async_trait]
impl AttachmentStore for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }
    async fn pin(&self, pin: NewPin) -> Result<Pin, StoreError> {
        pin.validate()?;
        let mut inner = self.lock();
        if let Some(p) = inner
            .pins
            .iter_mut()
            .find(|p| p.owner == pin.owner && p.server == pin.server && p.target == pin.target)
        {
            p.expires_at_ms = pin.expires_at_ms;
            return Ok(p.clone());
        }
        let stored = Pin {
            id: new_pin_id(),
            owner: pin.owner,
            server: pin.server,
            target: pin.target,
            created_at_ms: unix_ms_now(),
            expires_at_ms: pin.expires_at_ms,
        };
        inner.pins.push(stored.clone());
        Ok(stored)
    }
    async fn unpin(
        &self,
        owner: &PinOwner,
        server: &str,
        target: &AttachmentTarget,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let before = inner.pins.len();
        inner
            .pins
            .retain(|p| !(&p.owner == owner && p.server == server && &p.target == target));
        Ok(inner.pins.len() < before)
    }
    async fn unpin_id(&self, owner: &PinOwner, id: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let before = inner.pins.len();
        inner.pins.retain(|p| !(&p.owner == owner && p.id == id));
        Ok(inner.pins.len() < before)
    }
    async fn list_pins(&self, query: &PinQuery, now_ms: i64) -> Result<Vec<Pin>, StoreError> {
        let mut pins: Vec<Pin> = self
            .lock()
            .pins
            .iter()
            .filter(|p| query.matches(p, now_ms))
            .cloned()
            .collect();
        pins.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(pins
            .into_iter()
            .skip(query.offset as usize)
            .take(query.limit.min(HistoryQuery::MAX_LIMIT) as usize)
            .collect())
    }
    async fn history(&self, query: &HistoryQuery) -> Result<Vec<InjectionRecord>, StoreError> {
        let inner = self.lock();
        Ok(history_page(
            &inner.records,
            query,
            |r| query.matches(r),
            |r| (r.at_ms, r.turn_id.as_str(), r.seq),
        ))
    }
    async fn call_history(&self, query: &HistoryQuery) -> Result<Vec<ToolCallEntry>, StoreError> {
        let inner = self.lock();
        Ok(history_page(
            &inner.calls,
            query,
            |c| query.matches_call(c),
            |c| (c.at_ms, c.turn_id.as_str(), c.seq),
        ))
    }
    async fn prune(
        &self,
        now_ms: i64,
        records_before_ms: Option<i64>,
    ) -> Result<Pruned, StoreError> {
        let mut inner = self.lock();
        if let Some(cut) = records_before_ms {
            inner.calls.retain(|c| c.at_ms >= cut);
        }
        let (pins, records) = (inner.pins.len(), inner.records.len());
        inner.pins.retain(|p| p.is_live(now_ms));
        if let Some(cut) = records_before_ms {
            let mut budget = PRUNE_BATCH;
            inner.records.retain(|r| {
                if r.at_ms < cut && budget > 0 {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
        }
        Ok(Pruned {
            pins: (pins - inner.pins.len()) as u64,
            records: (records - inner.records.len()) as u64,
        })
    }
}

#[async_trait]
impl crate::SealedRows for MemoryStore {
    async fn load_credentials(&self, server: &str) -> Result<Option<crate::SealedRow>, StoreError> {
        Ok(self.lock().credentials.get(server).cloned())
    }
    async fn save_credentials(
        &self,
        server: &str,
        row: &crate::SealedRow,
        _now_ms: i64,
    ) -> Result<(), StoreError> {
        self.lock()
            .credentials
            .insert(server.to_owned(), row.clone());
        Ok(())
    }
    async fn delete_credentials(&self, server: &str) -> Result<(), StoreError> {
        self.lock().credentials.remove(server);
        Ok(())
    }
}
