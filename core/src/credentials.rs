//! Where OAuth credentials for remote MCP servers are kept, in hostpipe's own terms:
//! [`CredentialVault`] loads, saves and deletes one opaque secret per server, bound to
//! the authorization server (its issuer) that minted it.
//!
//! The MCP crate serializes the SDK's credentials into the secret; the engine's
//! `EncryptedVault` seals it (an AEAD keyed from the environment) before any store sees
//! it; [`MemoryVault`] keeps it in memory only. Credentials are keyed by server and
//! issuer because the MCP authorization spec (2026-07-28, "Authorization Server
//! Discovery") forbids reusing credentials with another authorization server.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

/// One server's stored credentials: the issuer they belong to and the secret bytes.
/// `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret {
    /// The authorization server's issuer identifier (RFC 8414 `issuer`), when known.
    pub issuer: Option<String>,
    /// The secret (serialized tokens and client registration), in plain text.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSecret")
            .field("issuer", &self.issuer)
            .field(
                "secret",
                &format_args!("[{} bytes redacted]", self.secret.len()),
            )
            .finish()
    }
}

/// A vault failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// The store or the sealing failed; trying again later may work.
    #[error("credential vault: {0}")]
    Store(String),
    /// A stored secret cannot be opened (sealed with another key, or changed): only a
    /// new login replaces it, so the server needs one.
    #[error("credential vault: {0}")]
    Unreadable(String),
}

impl VaultError {
    /// Whether only a new login can help ([`VaultError::Unreadable`]).
    pub fn needs_login(&self) -> bool {
        matches!(self, Self::Unreadable(_))
    }
}

/// Where OAuth credentials live, one secret per configured server (see the module
/// docs). Implementations must be safe to share between tasks; a persistent one must
/// never write the secret in plain text.
#[async_trait]
pub trait CredentialVault: Send + Sync {
    /// The secret last saved for `server` (whatever its issuer), if any.
    ///
    /// # Errors
    /// [`VaultError`] when the store fails or the secret cannot be opened.
    async fn load(&self, server: &str) -> Result<Option<StoredSecret>, VaultError>;
    /// Saves `secret` as `server`'s credentials, replacing any earlier ones.
    ///
    /// # Errors
    /// [`VaultError`] when the store fails.
    async fn save(&self, server: &str, secret: StoredSecret) -> Result<(), VaultError>;
    /// Forgets `server`'s credentials (every issuer).
    ///
    /// # Errors
    /// [`VaultError`] when the store fails.
    async fn delete(&self, server: &str) -> Result<(), VaultError>;
    /// Whether saved credentials outlive the process (for messages).
    fn is_persistent(&self) -> bool;
}

/// A [`CredentialVault`] in memory: nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryVault {
    secrets: Mutex<BTreeMap<String, StoredSecret>>,
}

impl MemoryVault {
    /// An empty vault.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, StoredSecret>> {
        // Every change is one insert or remove: a poisoned map is still whole.
        self.secrets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl CredentialVault for MemoryVault {
    async fn load(&self, server: &str) -> Result<Option<StoredSecret>, VaultError> {
        Ok(self.lock().get(server).cloned())
    }
    async fn save(&self, server: &str, secret: StoredSecret) -> Result<(), VaultError> {
        self.lock().insert(server.to_owned(), secret);
        Ok(())
    }
    async fn delete(&self, server: &str) -> Result<(), VaultError> {
        self.lock().remove(server);
        Ok(())
    }
    fn is_persistent(&self) -> bool {
        false
    }
}
