//! OAuth 2.1 for streamable HTTP servers, through rmcp's `AuthClient` and
//! `AuthorizationManager` (MCP spec 2025-11-25 and 2026-07-28, "Authorization"): PKCE
//! S256, the RFC 8707 `resource` parameter, RFC 9728 / RFC 8414 discovery, RFC 9207
//! issuer checks and scope step-up are rmcp's; hostpipe adds:
//! - [`VaultStore`]: rmcp's `CredentialStore` over hostpipe's [`CredentialVault`] (one
//!   secret per server, bound to its issuer, sealed at rest by the engine's vault);
//! - [`manager`]: the manager of one server at connect, its stored credentials loaded
//!   (the configured client secret restored, which rmcp does not store), or a fresh
//!   client credentials token (RFC 6749 §4.4);
//! - [`start_login`] / [`PendingLogin::finish`]: the authorization code flow for
//!   `hostpipe login` and `hostpipe serve`'s login route.
//!
//! rmcp refreshes a token that is within 30 s (or half its lifetime) of expiry before
//! each request, and once more when the server rejects it; a server that still answers
//! 401 makes the server `needs_login`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{CredentialVault, StoredSecret};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, ClientCredentialsConfig,
    CredentialStore, OAuthClientConfig, OAuthState, StoredCredentials,
};

use crate::auth_config::{AuthConfig, ClientCredentials, OAuthClient};

/// The longest a whole OAuth step (discovery, registration, a token request) may take;
/// each HTTP request inside has rmcp's own 30 s timeout.
pub(crate) const OAUTH_STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// rmcp's `CredentialStore` for one server over a [`CredentialVault`], with the last
/// loaded or saved credentials kept in memory (rmcp loads them before every request).
pub(crate) struct VaultStore {
    server: String,
    vault: Arc<dyn CredentialVault>,
    cached: tokio::sync::Mutex<Option<Option<StoredCredentials>>>,
}

impl VaultStore {
    pub(crate) fn new(server: &str, vault: Arc<dyn CredentialVault>) -> Self {
        Self {
            server: server.to_owned(),
            vault,
            cached: tokio::sync::Mutex::new(None),
        }
    }
}

fn store_error(e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait]
impl CredentialStore for VaultStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            return Ok(c.clone());
        }
        let loaded = match self.vault.load(&self.server).await.map_err(store_error)? {
            None => None,
            Some(s) => Some(
                serde_json::from_slice::<StoredCredentials>(&s.secret).map_err(|e| {
                    store_error(format!(
                        "stored credentials of `{}` are unreadable: {e}",
                        self.server
                    ))
                })?,
            ),
        };
        *cached = Some(loaded.clone());
        Ok(loaded)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let secret = serde_json::to_vec(&credentials).map_err(store_error)?;
        let mut cached = self.cached.lock().await;
        self.vault
            .save(
                &self.server,
                StoredSecret {
                    issuer: credentials.issuer.clone(),
                    secret,
                },
            )
            .await
            .map_err(store_error)?;
        *cached = Some(Some(credentials));
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let mut cached = self.cached.lock().await;
        self.vault.delete(&self.server).await.map_err(store_error)?;
        *cached = Some(None);
        Ok(())
    }

    /// Before a refresh, rmcp loads the credentials again: they come from the vault,
    /// not the cache, so a refresh token another worker sharing the store has rotated
    /// since is the one used. (Two workers refreshing at the same moment can still
    /// race; the loser's server becomes `needs_login`.)
    async fn acquire_refresh_guard(
        &self,
    ) -> Result<Option<rmcp::transport::auth::CredentialRefreshGuard>, AuthError> {
        *self.cached.lock().await = None;
        Ok(None)
    }
}

/// Whether `e` means "log in" rather than "something broke".
pub(crate) fn needs_login(e: &AuthError) -> bool {
    matches!(
        e,
        AuthError::AuthorizationRequired
            | AuthError::TokenRefreshRejected(_)
            | AuthError::TokenExpired
    )
}

/// What went wrong preparing OAuth for a connect.
pub(crate) enum Prepare {
    /// Log in first (no credentials, or the refresh token was refused).
    NeedsLogin(String),
    /// Anything else (discovery or the token endpoint failed), described.
    Failed(String),
}

fn prepare_err(what: &str, e: AuthError) -> Prepare {
    if needs_login(&e) {
        Prepare::NeedsLogin(format!("{what}: {e}"))
    } else {
        Prepare::Failed(format!("{what}: {e}"))
    }
}

/// The manager of a server at `url` whose auth is `auth` (not [`AuthConfig::None`]),
/// with its credentials from `vault`: stored ones for OAuth (none is fine: the first
/// request then goes without a token, and the server's 401 says to log in), a fresh
/// token for client credentials.
pub(crate) async fn manager(
    server: &str,
    url: &str,
    auth: &AuthConfig,
    vault: Arc<dyn CredentialVault>,
) -> Result<AuthorizationManager, Prepare> {
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| Prepare::Failed(format!("OAuth: {e}")))?;
    manager.set_credential_store(VaultStore::new(server, Arc::clone(&vault)));
    match auth {
        AuthConfig::None => {}
        AuthConfig::OAuth(client) => {
            // Only when something is stored: discovery is a network round trip.
            let stored = vault.load(server).await.map_err(|e| {
                // A secret sealed with another key stays unreadable: only a login helps.
                if e.needs_login() {
                    Prepare::NeedsLogin(e.to_string())
                } else {
                    Prepare::Failed(e.to_string())
                }
            })?;
            if stored.is_some() {
                let found =
                    tokio::time::timeout(OAUTH_STEP_TIMEOUT, manager.initialize_from_store())
                        .await
                        .map_err(|_| Prepare::Failed("OAuth metadata discovery timed out".into()))?
                        .map_err(|e| prepare_err("loading the stored OAuth credentials", e))?;
                if found {
                    restore_client_secret(&mut manager, client, server, &vault).await?;
                }
            }
        }
        AuthConfig::ClientCredentials(cc) => {
            tokio::time::timeout(
                OAUTH_STEP_TIMEOUT,
                client_credentials(&mut manager, url, cc),
            )
            .await
            .map_err(|_| Prepare::Failed("the client credentials grant timed out".into()))?
            .map_err(|e| {
                Prepare::Failed(format!("client credentials grant (RFC 6749 §4.4): {e}"))
            })?;
        }
    }
    Ok(manager)
}

/// rmcp keeps only the client id with the tokens; a confidential pre-registered client
/// needs its secret on refresh (RFC 6749 §6) too.
async fn restore_client_secret(
    manager: &mut AuthorizationManager,
    client: &OAuthClient,
    server: &str,
    vault: &Arc<dyn CredentialVault>,
) -> Result<(), Prepare> {
    let (Some(id), Some(secret)) = (&client.client_id, &client.client_secret) else {
        return Ok(());
    };
    let stored_id = vault
        .load(server)
        .await
        .ok()
        .flatten()
        .and_then(|s| serde_json::from_slice::<StoredCredentials>(&s.secret).ok())
        .map(|c| c.client_id);
    if stored_id.as_deref() == Some(id.as_str()) {
        let redirect = client
            .redirect_uri
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1/callback".into());
        manager
            .configure_client(
                OAuthClientConfig::new(id.clone(), redirect).with_client_secret(secret.expose()),
            )
            .map_err(|e| Prepare::Failed(format!("OAuth client: {e}")))?;
    }
    Ok(())
}

/// The client credentials request of `cc` for the server at `url`.
fn client_credentials_config(url: &str, cc: &ClientCredentials) -> ClientCredentialsConfig {
    ClientCredentialsConfig::ClientSecret {
        client_id: cc.client_id.clone(),
        client_secret: cc.client_secret.expose().to_owned(),
        scopes: cc.scopes.clone(),
        // RFC 8707: the server's canonical URI.
        resource: Some(url.to_owned()),
    }
}

/// The client credentials grant: discovery, then a token (saved in the vault).
async fn client_credentials(
    manager: &mut AuthorizationManager,
    url: &str,
    cc: &ClientCredentials,
) -> Result<(), AuthError> {
    let resolution = manager.resolve_metadata().await?;
    manager.set_metadata(resolution.metadata);
    let config = client_credentials_config(url, cc);
    manager.validate_client_credentials_metadata(&config)?;
    manager.configure_client_credentials(&config)?;
    manager.exchange_client_credentials(&config).await?;
    Ok(())
}

/// When the current client credentials token should be replaced: at three quarters of
/// its lifetime (RFC 6749 §4.4.3 issues no refresh token for this grant, so rmcp cannot
/// refresh it), `None` when the server gave no `expires_in`.
async fn renew_after(manager: &AuthorizationManager) -> Option<Duration> {
    let (_, token) = manager.get_credentials().await.ok()?;
    let seconds = serde_json::to_value(token?)
        .ok()?
        .get("expires_in")?
        .as_u64()?;
    Some(Duration::from_secs(seconds.saturating_mul(3) / 4).max(Duration::from_secs(1)))
}

/// Keeps a client credentials connection's token fresh: a new grant at three quarters
/// of each token's lifetime, for as long as the connection's `AuthClient` lives (the task
/// holds only a weak reference). A failed grant is retried after 5 s; the server's 401
/// on an expired token would otherwise end the session and its reconnect would run the
/// grant.
pub(crate) fn keep_renewing(
    server: &str,
    url: &str,
    cc: &ClientCredentials,
    manager: &Arc<tokio::sync::Mutex<AuthorizationManager>>,
) {
    let weak = Arc::downgrade(manager);
    let config = client_credentials_config(url, cc);
    let server = server.to_owned();
    tokio::spawn(async move {
        loop {
            let wait = {
                let Some(manager) = weak.upgrade() else {
                    return;
                };
                let manager = manager.lock().await;
                renew_after(&manager).await
            };
            let Some(wait) = wait else { return };
            tokio::time::sleep(wait).await;
            let Some(manager) = weak.upgrade() else {
                return;
            };
            let manager = manager.lock().await;
            let renewed = tokio::time::timeout(
                OAUTH_STEP_TIMEOUT,
                manager.exchange_client_credentials(&config),
            )
            .await;
            match renewed {
                Ok(Ok(_)) => tracing::debug!(%server, "client credentials token renewed"),
                Ok(Err(e)) => {
                    tracing::warn!(%server, error = %e, "renewing the client credentials token failed");
                    drop(manager);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Err(_) => {
                    tracing::warn!(%server, "renewing the client credentials token timed out")
                }
            }
        }
    });
}

/// Why a login could not start or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// No server has that name.
    #[error("no server `{0}`")]
    UnknownServer(String),
    /// The server does not log in interactively (stdio, static headers, or client
    /// credentials).
    #[error("`{server}` does not log in with OAuth: {why}")]
    NotOAuth {
        /// The server.
        server: String,
        /// Why.
        why: &'static str,
    },
    /// The OAuth flow failed (discovery, registration, the callback, the token
    /// request), described.
    #[error("OAuth login to `{server}` failed: {message}")]
    Failed {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
}

/// An authorization code flow in progress (RFC 6749 §4.1 with PKCE, RFC 7636): show
/// [`PendingLogin::authorization_url`] to a person, then hand the redirect to
/// [`PendingLogin::finish`]. `Debug` shows the server only.
pub struct PendingLogin {
    server: String,
    state: OAuthState,
    url: String,
}

impl std::fmt::Debug for PendingLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingLogin")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl PendingLogin {
    /// The server it logs in to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Where the person logs in (the authorization server's authorization endpoint,
    /// with `client_id`, `redirect_uri`, `state`, `code_challenge` (S256), `scope` and
    /// `resource`).
    pub fn authorization_url(&self) -> &str {
        &self.url
    }

    /// The `state` parameter of the authorization URL, which the redirect carries back.
    pub fn state(&self) -> Option<String> {
        url_query(&self.url, "state")
    }

    /// Takes the redirect (`REDIRECT_URI?code=…&state=…[&iss=…]`): checks `state` and
    /// `iss` (RFC 9207), exchanges the code with the PKCE verifier and the `resource`,
    /// and saves the credentials in the vault.
    ///
    /// # Errors
    /// [`LoginError::Failed`] with the authorization server's error (`error=` in the
    /// redirect), a state mismatch, an issuer mismatch, or a failed token request.
    pub async fn finish(mut self, redirect: &str) -> Result<(), LoginError> {
        let failed = |message: String| LoginError::Failed {
            server: self.server.clone(),
            message,
        };
        if let Some(error) = url_query(redirect, "error") {
            let detail = url_query(redirect, "error_description").unwrap_or_default();
            return Err(failed(format!(
                "the authorization server answered `{error}` {detail}"
            )));
        }
        let finished =
            tokio::time::timeout(OAUTH_STEP_TIMEOUT, self.state.handle_callback_url(redirect))
                .await
                .map_err(|_| failed("the token request timed out".into()))?;
        finished.map_err(|e| failed(e.to_string()))
    }
}

/// The `state` of an authorization redirect (RFC 6749 §4.1.2), decoded.
pub fn redirect_state(redirect: &str) -> Option<String> {
    url_query(redirect, "state")
}

/// The `error` of an authorization redirect that refused (RFC 6749 §4.1.2.1).
pub fn redirect_error(redirect: &str) -> Option<String> {
    url_query(redirect, "error")
}

/// The scopes a `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`
/// challenge asks for (RFC 6750 §3); `None` for any other challenge.
pub(crate) fn step_up_scopes(challenge: &str) -> Option<Vec<String>> {
    let param = |name: &str| -> Option<String> {
        let lower = challenge.to_ascii_lowercase();
        let mut from = 0;
        while let Some(i) = lower[from..].find(name) {
            let at = from + i;
            let before = lower[..at].chars().last();
            let rest = &challenge[at + name.len()..];
            if matches!(before, None | Some(' ' | ',')) && rest.trim_start().starts_with('=') {
                let value = rest.trim_start()[1..].trim_start();
                return Some(match value.strip_prefix('"') {
                    Some(quoted) => quoted.split('"').next().unwrap_or("").to_owned(),
                    None => value.split([',', ' ']).next().unwrap_or("").to_owned(),
                });
            }
            from = at + name.len();
        }
        None
    };
    if param("error").as_deref() != Some("insufficient_scope") {
        return None;
    }
    Some(
        param("scope")?
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

/// The first `key` in `url`'s query, decoded.
pub(crate) fn url_query(url: &str, key: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Starts the authorization code flow for `server` at `url`: discovery (from the
/// server's last `WWW-Authenticate` challenge when there was one), then the client by
/// the spec's order (pre-registered, client ID metadata document, dynamic
/// registration), and the authorization URL.
pub(crate) async fn start_login(
    server: &str,
    url: &str,
    client: &OAuthClient,
    redirect_uri: &str,
    challenge: Option<String>,
    vault: Arc<dyn CredentialVault>,
) -> Result<PendingLogin, LoginError> {
    let failed = |message: String| LoginError::Failed {
        server: server.to_owned(),
        message,
    };
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| failed(e.to_string()))?;
    // A step-up (a 403 `insufficient_scope`, MCP spec "Scope Challenge Handling"; SEP-2350):
    // ask for what was granted before plus what the challenge names.
    let mut scopes = client.scopes.clone();
    if let Some(wanted) = challenge.as_deref().and_then(step_up_scopes) {
        let granted = vault
            .load(server)
            .await
            .ok()
            .flatten()
            .and_then(|s| serde_json::from_slice::<StoredCredentials>(&s.secret).ok())
            .map(|c| c.granted_scopes)
            .unwrap_or_default();
        for scope in granted.into_iter().chain(wanted) {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
    }
    manager.set_credential_store(VaultStore::new(server, vault));
    let mut request = AuthorizationRequest::new(redirect_uri).with_client_name(
        client
            .client_name
            .clone()
            .unwrap_or_else(|| "hostpipe".into()),
    );
    if let Some(id) = &client.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &client.client_secret {
            request = request.with_client_secret(secret.expose());
        }
    }
    if let Some(cimd) = &client.client_metadata_url {
        request = request.with_client_metadata_url(cimd.clone());
    }
    if !scopes.is_empty() {
        request = request.with_scopes(scopes);
    }
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    let mut state = OAuthState::Unauthorized(manager);
    tokio::time::timeout(OAUTH_STEP_TIMEOUT, state.start_authorization(request))
        .await
        .map_err(|_| failed("discovery or client registration timed out".into()))?
        .map_err(|e| failed(e.to_string()))?;
    let url = state
        .get_authorization_url()
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(PendingLogin {
        server: server.to_owned(),
        state,
        url,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_found_and_decoded() {
        let url = "http://127.0.0.1:9/callback?code=a%2Bb&state=x+y&iss=https%3A%2F%2Fas#frag";
        assert_eq!(url_query(url, "code").as_deref(), Some("a+b"));
        assert_eq!(url_query(url, "state").as_deref(), Some("x y"));
        assert_eq!(url_query(url, "iss").as_deref(), Some("https://as"));
        assert_eq!(url_query(url, "error"), None);
        assert_eq!(url_query("http://x/%", "a"), None);
        assert_eq!(url_query("http://x/?a=%4", "a").as_deref(), Some("%4"));
    }

    #[test]
    fn step_up_challenges_give_their_scopes() {
        let c = r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write", resource_metadata="https://x/.well-known/oauth-protected-resource""#;
        assert_eq!(
            step_up_scopes(c),
            Some(vec!["mcp:read".to_owned(), "mcp:write".to_owned()])
        );
        assert_eq!(
            step_up_scopes(r#"Bearer resource_metadata="https://x", scope="a""#),
            None
        );
        assert_eq!(
            step_up_scopes("Bearer error=insufficient_scope, scope=a"),
            Some(vec!["a".to_owned()])
        );
    }

    #[tokio::test]
    async fn the_vault_store_round_trips_and_caches() {
        let vault: Arc<dyn CredentialVault> = Arc::new(hostpipe_core::MemoryVault::new());
        let store = VaultStore::new("s", Arc::clone(&vault));
        assert!(store.load().await.unwrap().is_none());
        let creds = StoredCredentials::new("client".into(), None, vec!["a".into()], Some(1))
            .with_issuer(Some("https://as".into()));
        store.save(creds).await.unwrap();
        let raw = vault.load("s").await.unwrap().unwrap();
        assert_eq!(raw.issuer.as_deref(), Some("https://as"));
        // A second store (a reconnect) reads what the first saved.
        let again = VaultStore::new("s", Arc::clone(&vault));
        assert_eq!(
            again.load().await.unwrap().map(|c| c.client_id).as_deref(),
            Some("client")
        );
        // Another worker saves newer credentials: a refresh reads them, not the cache.
        let newer = StoredCredentials::new("rotated".into(), None, vec![], Some(2));
        VaultStore::new("s", Arc::clone(&vault))
            .save(newer)
            .await
            .unwrap();
        assert_eq!(
            again.load().await.unwrap().map(|c| c.client_id).as_deref(),
            Some("client")
        );
        assert!(again.acquire_refresh_guard().await.unwrap().is_none());
        assert_eq!(
            again.load().await.unwrap().map(|c| c.client_id).as_deref(),
            Some("rotated")
        );
        again.clear().await.unwrap();
        assert!(vault.load("s").await.unwrap().is_none());
    }
}
