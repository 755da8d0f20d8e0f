//! MCP servers added while hostpipe runs (`POST /v1/servers`), kept in the store so that
//! every instance on it, and the next start, has them: [`ServerEntries`].
//!
//! A row is the server's name, its `mcpServers` entry as JSON *without* the values of
//! its `headers` and `env` (which may be credentials), and those values sealed with the
//! credential key ([`CredentialKey::seal_entry_secrets`](crate::CredentialKey::seal_entry_secrets)),
//! so a database file or dump never holds them in plain text. What the entry means is
//! the command line's business (`hostpipe_mcp::config`); the store keeps text.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::store::StoreError;

/// One server added over the API, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredServer {
    /// The server's name (unique).
    pub name: String,
    /// Its `mcpServers` entry, JSON, with the values of `headers` and `env` left out.
    pub entry: String,
    /// Those values, sealed (`v1.` + base64url); `None` when the entry has none.
    pub sealed: Option<String>,
    /// When it was added, Unix ms.
    pub created_at_ms: i64,
}

/// Where servers added over the API are kept.
#[async_trait]
pub trait ServerEntries: Send + Sync {
    /// Every stored server, by name.
    ///
    /// # Errors
    /// A database error.
    async fn stored_servers(&self) -> Result<Vec<StoredServer>, StoreError>;
    /// Adds `server`; `false` (and nothing changes) when a server of its name is stored.
    ///
    /// # Errors
    /// A database error.
    async fn add_stored_server(&self, server: &StoredServer) -> Result<bool, StoreError>;
    /// Removes the server `name`; whether it was stored.
    ///
    /// # Errors
    /// A database error.
    async fn remove_stored_server(&self, name: &str) -> Result<bool, StoreError>;
}

/// [`ServerEntries`] in memory: for `--store memory`, where they last as long as the
/// process.
#[derive(Debug, Default)]
pub struct MemoryServerEntries(Mutex<BTreeMap<String, StoredServer>>);

impl MemoryServerEntries {
    fn rows(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, StoredServer>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl ServerEntries for MemoryServerEntries {
    async fn stored_servers(&self) -> Result<Vec<StoredServer>, StoreError> {
        Ok(self.rows().values().cloned().collect())
    }

    async fn add_stored_server(&self, server: &StoredServer) -> Result<bool, StoreError> {
        let mut rows = self.rows();
        if rows.contains_key(&server.name) {
            return Ok(false);
        }
        rows.insert(server.name.clone(), server.clone());
        Ok(true)
    }

    async fn remove_stored_server(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self.rows().remove(name).is_some())
    }
}
