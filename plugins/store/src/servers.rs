//! MCP servers added over the API, in SQL ([`ServerEntries`]): one row per server, its
//! secret values sealed (`hostpipe_mcp_servers`, migration 0007).

use async_trait::async_trait;
use hostpipe_engine::store::StoreError;
use hostpipe_engine::{ServerEntries, StoredServer};
use sqlx::Row as _;

use crate::SqlStore;

#[async_trait]
impl ServerEntries for SqlStore {
    async fn stored_servers(&self) -> Result<Vec<StoredServer>, StoreError> {
        let query = sqlx::query(
            "SELECT name, entry, sealed, created_at_ms FROM hostpipe_mcp_servers ORDER BY name",
        );
        let rows = self
            .timed("list stored servers", query.fetch_all(&self.pool))
            .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredServer {
                    name: row.try_get("name")?,
                    entry: row.try_get("entry")?,
                    sealed: row.try_get("sealed")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| self.corrupt("stored server", e.to_string()))
    }

    async fn add_stored_server(&self, server: &StoredServer) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "INSERT INTO hostpipe_mcp_servers (name, entry, sealed, created_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
        )
        .bind(server.name.clone())
        .bind(server.entry.clone())
        .bind(server.sealed.clone())
        .bind(server.created_at_ms);
        let done = self
            .timed("add a stored server", query.execute(&self.pool))
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn remove_stored_server(&self, name: &str) -> Result<bool, StoreError> {
        let query =
            sqlx::query("DELETE FROM hostpipe_mcp_servers WHERE name = $1").bind(name.to_owned());
        let done = self
            .timed("remove a stored server", query.execute(&self.pool))
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
