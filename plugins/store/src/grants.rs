//! Conversation grants in SQL ([`GrantStore`]).

use async_trait::async_trait;
use hostpipe_engine::consent::{ConsentGrant, GrantKind, GrantStore};
use hostpipe_engine::store::StoreError;

use crate::{SqlStore, origin_str};

/// The key of a consent grant: XXH3-128 over its parts, each length-prefixed.
fn grant_key(grant: &ConsentGrant) -> String {
    let mut input = Vec::new();
    // A read's key is as it was before calls had grants (migration 4).
    let kind = match grant.kind {
        GrantKind::Read => None,
        GrantKind::Call => Some("call"),
    };
    for part in [
        grant.pipeline.as_str(),
        grant.conversation.as_str(),
        grant.server.as_str(),
        grant.uri.as_str(),
        origin_str(grant.origin),
    ]
    .into_iter()
    .chain(kind)
    {
        input.extend_from_slice(&(part.len() as u64).to_le_bytes());
        input.extend_from_slice(part.as_bytes());
    }
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&input))
}

#[async_trait]
impl GrantStore for SqlStore {
    async fn grant(&self, grant: &ConsentGrant, now_ms: i64) -> Result<(), StoreError> {
        grant.validate()?;
        let query = sqlx::query(
            "INSERT INTO hostpipe_consent_grants \
             (grant_key, pipeline, conversation, server, uri, origin, granted_at_ms, kind) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (grant_key) DO NOTHING",
        )
        .bind(grant_key(grant))
        .bind(grant.pipeline.clone())
        .bind(grant.conversation.clone())
        .bind(grant.server.clone())
        .bind(grant.uri.clone())
        .bind(origin_str(grant.origin))
        .bind(now_ms)
        .bind(grant.kind.as_str());
        self.timed("grant", query.execute(&self.pool)).await?;
        Ok(())
    }
    async fn is_granted(&self, grant: &ConsentGrant) -> Result<bool, StoreError> {
        let query = sqlx::query("SELECT 1 FROM hostpipe_consent_grants WHERE grant_key = $1")
            .bind(grant_key(grant));
        let row = self
            .timed("is_granted", query.fetch_optional(&self.pool))
            .await?;
        Ok(row.is_some())
    }
}
