//! OAuth credentials in SQL ([`SealedRows`]): sealed text only, one row per server and
//! issuer.

use async_trait::async_trait;
use hostpipe_engine::store::StoreError;
use hostpipe_engine::{SealedRow, SealedRows};
use sqlx::Row as _;

use crate::SqlStore;

#[async_trait]
impl SealedRows for SqlStore {
    async fn load_credentials(&self, server: &str) -> Result<Option<SealedRow>, StoreError> {
        let query = sqlx::query(
            "SELECT issuer, sealed FROM hostpipe_oauth_credentials WHERE server = $1 \
             ORDER BY updated_at_ms DESC LIMIT 1",
        )
        .bind(server.to_owned());
        let row = self
            .timed("load credentials", query.fetch_optional(&self.pool))
            .await?;
        row.map(|row| {
            Ok(SealedRow {
                issuer: row.try_get("issuer")?,
                sealed: row.try_get("sealed")?,
            })
        })
        .transpose()
        .map_err(|e: sqlx::Error| self.corrupt("credential", e.to_string()))
    }
    async fn save_credentials(
        &self,
        server: &str,
        row: &SealedRow,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let work = async {
            let mut tx = self.pool.begin().await?;
            sqlx::query(
                "DELETE FROM hostpipe_oauth_credentials WHERE server = $1 AND issuer <> $2",
            )
            .bind(server.to_owned())
            .bind(row.issuer.clone())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO hostpipe_oauth_credentials (server, issuer, sealed, updated_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (server, issuer) \
                 DO UPDATE SET sealed = excluded.sealed, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(server.to_owned())
            .bind(row.issuer.clone())
            .bind(row.sealed.clone())
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            tx.commit().await
        };
        self.timed("save credentials", work).await
    }
    async fn delete_credentials(&self, server: &str) -> Result<(), StoreError> {
        let query = sqlx::query("DELETE FROM hostpipe_oauth_credentials WHERE server = $1")
            .bind(server.to_owned());
        self.timed("delete credentials", query.execute(&self.pool))
            .await
            .map(|_| ())
    }
}
