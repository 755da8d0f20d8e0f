//! OAuth credentials at rest: [`EncryptedVault`] seals each server's secret with
//! XChaCha20-Poly1305 (RFC 8439 with the extended nonce of draft-irtf-cfrg-xchacha)
//! under a [`CredentialKey`] before a [`SealedRows`] store sees it, so a database file
//! or dump never holds a token in plain text.
//!
//! The key comes from the environment (`HOSTPIPE_CREDENTIAL_KEY`, read by the command
//! line, never here): 32 bytes, base64. Without it, hostpipe keeps credentials in memory
//! only ([`hostpipe_core::MemoryVault`]) and says so at start.
//!
//! A sealed secret is `v1.` + base64url(24-byte random nonce ‖ ciphertext ‖ tag); the
//! associated data binds it to its server and issuer, so a row copied to another server
//! or issuer does not open.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hostpipe_core::{CredentialVault, StoredSecret, VaultError};

use crate::store::StoreError;

/// The environment variable the command line reads the key from.
pub const CREDENTIAL_KEY_ENV: &str = "HOSTPIPE_CREDENTIAL_KEY";

const SEALED_PREFIX: &str = "v1.";
const NONCE_BYTES: usize = 24;

/// The 32-byte key that seals stored OAuth credentials. `Debug` never shows it.
#[derive(Clone)]
pub struct CredentialKey(XChaCha20Poly1305);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey([redacted])")
    }
}

/// What is wrong with a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not base64 (standard or URL-safe, padded or not).
    #[error("the credential key is not base64: {0}")]
    NotBase64(String),
    /// Base64 of another length than 32 bytes.
    #[error(
        "the credential key must be base64 of 32 bytes (`openssl rand -base64 32`); this one decodes to {0} bytes (a hex key, e.g. from `openssl rand -hex 32`, is not base64 of 32 bytes)"
    )]
    WrongLength(usize),
}

impl CredentialKey {
    /// Reads a key written as base64 of 32 bytes (`openssl rand -base64 32`).
    ///
    /// # Errors
    /// [`KeyError`] for text that is not base64, or not 32 bytes.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        let text = text.trim();
        let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|e| e.decode(text).ok())
            .ok_or_else(|| KeyError::NotBase64("invalid characters or padding".into()))?;
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
            .map_err(|_| KeyError::WrongLength(bytes.len()))?;
        Ok(Self(cipher))
    }

    /// Seals `secret` for `server` and `issuer`.
    ///
    /// # Errors
    /// When the system's random source fails.
    pub fn seal(
        &self,
        server: &str,
        issuer: Option<&str>,
        secret: &[u8],
    ) -> Result<String, VaultError> {
        self.seal_bound(&associated_data(OAUTH_DOMAIN, server, issuer), secret)
    }

    /// Opens what [`CredentialKey::seal`] sealed for the same server and issuer.
    ///
    /// # Errors
    /// [`VaultError`] when the text is not a sealed secret, or was sealed with another
    /// key, server or issuer (or changed since).
    pub fn open(
        &self,
        server: &str,
        issuer: Option<&str>,
        sealed: &str,
    ) -> Result<Vec<u8>, VaultError> {
        self.open_bound(&associated_data(OAUTH_DOMAIN, server, issuer), sealed)
            .map_err(|e| match e {
                OpenError::Format(m) => VaultError::Unreadable(m.into()),
                OpenError::Key => VaultError::Unreadable(format!(
                    "the stored credentials of `{server}` do not open with this {CREDENTIAL_KEY_ENV} (another key, or changed): log in again"
                )),
            })
    }

    /// Seals the secret values of server `server`'s stored entry (its `headers` and
    /// `env`, [`crate::servers`]), bound to the server's name and apart from OAuth
    /// credentials: one does not open as the other.
    ///
    /// # Errors
    /// When the system's random source fails.
    pub fn seal_entry_secrets(&self, server: &str, secret: &[u8]) -> Result<String, VaultError> {
        self.seal_bound(&associated_data(ENTRY_DOMAIN, server, None), secret)
    }

    /// Opens what [`CredentialKey::seal_entry_secrets`] sealed for `server`.
    ///
    /// # Errors
    /// [`VaultError::Unreadable`] when the text is not sealed, or was sealed with another
    /// key or for another server (or changed since).
    pub fn open_entry_secrets(&self, server: &str, sealed: &str) -> Result<Vec<u8>, VaultError> {
        self.open_bound(&associated_data(ENTRY_DOMAIN, server, None), sealed)
            .map_err(|e| match e {
                OpenError::Format(m) => VaultError::Unreadable(m.into()),
                OpenError::Key => VaultError::Unreadable(format!(
                    "the sealed headers and env of stored server `{server}` do not open with this {CREDENTIAL_KEY_ENV} (another key, or changed)"
                )),
            })
    }

    fn seal_bound(&self, aad: &[u8], secret: &[u8]) -> Result<String, VaultError> {
        let nonce = XNonce::try_generate()
            .map_err(|e| VaultError::Store(format!("no random nonce: {e}")))?;
        let sealed = self
            .0
            .encrypt(&nonce, Payload { msg: secret, aad })
            .map_err(|_| VaultError::Store("sealing failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!(
            "{SEALED_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
        ))
    }

    fn open_bound(&self, aad: &[u8], sealed: &str) -> Result<Vec<u8>, OpenError> {
        let body = sealed.strip_prefix(SEALED_PREFIX).ok_or(OpenError::Format(
            "a stored secret is not sealed in a known format",
        ))?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| OpenError::Format("a stored secret is not valid base64"))?;
        if bytes.len() < NONCE_BYTES {
            return Err(OpenError::Format("a stored secret is truncated"));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce)
            .map_err(|_| OpenError::Format("a stored secret is truncated"))?;
        self.0
            .decrypt(
                &nonce,
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .map_err(|_| OpenError::Key)
    }
}

/// Why sealed text did not open.
enum OpenError {
    /// Not sealed text at all.
    Format(&'static str),
    /// Another key, another row, or changed.
    Key,
}

/// The associated-data domain of OAuth credentials.
const OAUTH_DOMAIN: &[u8] = b"hostpipe-oauth-credentials-v1";
/// The associated-data domain of a stored server entry's secret values.
const ENTRY_DOMAIN: &[u8] = b"hostpipe-server-entry-v1";

/// Binds a sealed secret to its row: a domain tag, then server and issuer, each
/// length-prefixed.
fn associated_data(domain: &[u8], server: &str, issuer: Option<&str>) -> Vec<u8> {
    let mut aad = domain.to_vec();
    for part in [server, issuer.unwrap_or("")] {
        aad.extend_from_slice(&(part.len() as u64).to_le_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

/// One sealed row as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRow {
    /// The authorization server's issuer (`""` when unknown).
    pub issuer: String,
    /// [`CredentialKey::seal`]'s output.
    pub sealed: String,
}

/// What a store keeps for [`EncryptedVault`]: sealed text only, keyed by server and
/// issuer.
#[async_trait]
pub trait SealedRows: Send + Sync {
    /// The row of `server` saved last (whatever its issuer).
    ///
    /// # Errors
    /// A database error.
    async fn load_credentials(&self, server: &str) -> Result<Option<SealedRow>, StoreError>;
    /// Saves `row` for `server`, and drops the server's rows for other issuers (credentials
    /// are never reused with another authorization server).
    ///
    /// # Errors
    /// A database error.
    async fn save_credentials(
        &self,
        server: &str,
        row: &SealedRow,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// Drops every row of `server`.
    ///
    /// # Errors
    /// A database error.
    async fn delete_credentials(&self, server: &str) -> Result<(), StoreError>;
}

/// A [`CredentialVault`] that seals every secret before `rows` sees it.
pub struct EncryptedVault {
    key: CredentialKey,
    rows: Arc<dyn SealedRows>,
}

impl std::fmt::Debug for EncryptedVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedVault").finish_non_exhaustive()
    }
}

impl EncryptedVault {
    /// A vault over `rows`, sealed with `key`.
    pub fn new(key: CredentialKey, rows: Arc<dyn SealedRows>) -> Self {
        Self { key, rows }
    }
}

fn store_err(e: StoreError) -> VaultError {
    VaultError::Store(e.to_string())
}

#[async_trait]
impl CredentialVault for EncryptedVault {
    async fn load(&self, server: &str) -> Result<Option<StoredSecret>, VaultError> {
        let Some(row) = self
            .rows
            .load_credentials(server)
            .await
            .map_err(store_err)?
        else {
            return Ok(None);
        };
        let issuer = (!row.issuer.is_empty()).then_some(row.issuer);
        let secret = self.key.open(server, issuer.as_deref(), &row.sealed)?;
        Ok(Some(StoredSecret { issuer, secret }))
    }
    async fn save(&self, server: &str, secret: StoredSecret) -> Result<(), VaultError> {
        let sealed = self
            .key
            .seal(server, secret.issuer.as_deref(), &secret.secret)?;
        let row = SealedRow {
            issuer: secret.issuer.unwrap_or_default(),
            sealed,
        };
        self.rows
            .save_credentials(server, &row, hostpipe_core::unix_ms_now())
            .await
            .map_err(store_err)
    }
    async fn delete(&self, server: &str) -> Result<(), VaultError> {
        self.rows
            .delete_credentials(server)
            .await
            .map_err(store_err)
    }
    fn is_persistent(&self) -> bool {
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn entry_secrets_open_only_for_their_server_and_never_as_credentials() {
        let key = CredentialKey::from_base64(KEY).unwrap();
        let sealed = key
            .seal_entry_secrets("web", b"{\"h\":\"Bearer x\"}")
            .unwrap();
        assert!(!sealed.contains("Bearer"));
        assert_eq!(
            key.open_entry_secrets("web", &sealed).unwrap(),
            b"{\"h\":\"Bearer x\"}"
        );
        assert!(key.open_entry_secrets("other", &sealed).is_err());
        // Another domain: an entry's secrets are no OAuth credential, and back.
        assert!(key.open("web", None, &sealed).is_err());
        let credential = key.seal("web", None, b"t").unwrap();
        assert!(key.open_entry_secrets("web", &credential).is_err());
        let other = CredentialKey::from_base64(&"A".repeat(43)).unwrap();
        let e = other.open_entry_secrets("web", &sealed).unwrap_err();
        assert!(e.to_string().contains("stored server `web`"), "{e}");
    }

    #[test]
    fn a_secret_opens_only_with_its_key_server_and_issuer() {
        let key = CredentialKey::from_base64(KEY).unwrap();
        let sealed = key
            .seal("web", Some("https://as"), b"access-token-123")
            .unwrap();
        assert!(sealed.starts_with("v1."));
        assert!(!sealed.contains("access-token-123"));
        assert_eq!(
            key.open("web", Some("https://as"), &sealed).unwrap(),
            b"access-token-123"
        );
        // Another server, issuer or key: no.
        assert!(key.open("other", Some("https://as"), &sealed).is_err());
        assert!(key.open("web", Some("https://evil"), &sealed).is_err());
        assert!(key.open("web", None, &sealed).is_err());
        let other = CredentialKey::from_base64(&"A".repeat(43)).unwrap();
        let e = other.open("web", Some("https://as"), &sealed).unwrap_err();
        assert!(e.to_string().contains("log in again"), "{e}");
        assert!(e.needs_login(), "{e:?}");
        // A changed byte: no.
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            key.open(
                "web",
                Some("https://as"),
                &String::from_utf8(tampered).unwrap()
            )
            .is_err()
        );
        // Two seals of one secret differ (random nonces).
        assert_ne!(
            sealed,
            key.seal("web", Some("https://as"), b"access-token-123")
                .unwrap()
        );
    }

    #[test]
    fn keys_must_be_base64_of_32_bytes() {
        assert!(CredentialKey::from_base64(KEY).is_ok());
        assert!(CredentialKey::from_base64(&format!(" {KEY}\n")).is_ok());
        assert_eq!(
            CredentialKey::from_base64("AAEC").unwrap_err(),
            KeyError::WrongLength(3)
        );
        assert!(matches!(
            CredentialKey::from_base64("not base64!").unwrap_err(),
            KeyError::NotBase64(_)
        ));
        assert_eq!(
            format!("{:?}", CredentialKey::from_base64(KEY).unwrap()),
            "CredentialKey([redacted])"
        );
    }
}
