//! How hostpipe authenticates to a streamable HTTP server (`auth` in its config), after
//! the MCP authorization spec (2025-11-25 and 2026-07-28, "Authorization"): OAuth 2.1
//! with a pre-registered client, a client ID metadata document, or dynamic client
//! registration (RFC 7591) as the fallback; the client credentials grant (RFC 6749
//! §4.4, the MCP extension `io.modelcontextprotocol/oauth-client-credentials`) for
//! headless platforms; or none (static `headers`).
//!
//! ```json
//! "remote": { "url": "https://mcp.example.com/mcp",
//!   "auth": { "type": "oauth", "client_id": "hostpipe", "client_secret_env": "REMOTE_SECRET",
//!             "scopes": ["mcp:read"] } }
//! ```
//!
//! Secrets are never written in the config: `client_secret_env` names the environment
//! variable that holds one, read once when the config loads.

use hostpipe_core::ConfigError;
use serde::Deserialize;

/// A secret read from the environment. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret from elsewhere than the environment (a test harness, a vault).
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The `auth` of one HTTP server, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthConfig {
    /// No OAuth: the server gets only its static `headers` (the default when those
    /// include `Authorization`, or with `"type": "none"`).
    None,
    /// OAuth 2.1 authorization code with PKCE (the default without an `Authorization`
    /// header): an administrator logs in once (`hostpipe login`), and the credentials
    /// are reused and refreshed.
    OAuth(OAuthClient),
    /// The client credentials grant (RFC 6749 §4.4): hostpipe gets its own token at
    /// connect, no login.
    ClientCredentials(ClientCredentials),
}

impl AuthConfig {
    /// Whether the server may need an interactive login.
    pub fn is_interactive(&self) -> bool {
        matches!(self, Self::OAuth(_))
    }
}

/// The client hostpipe presents in the authorization code flow. Empty: dynamic client
/// registration (RFC 7591), when the authorization server offers it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OAuthClient {
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// Its secret (a confidential client), from `client_secret_env`.
    pub client_secret: Option<Secret>,
    /// An HTTPS URL of a client ID metadata document (used when the authorization server
    /// advertises `client_id_metadata_document_supported` and no `client_id` is given).
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; empty: those of the server's `WWW-Authenticate` challenge or
    /// protected resource metadata (RFC 9728 `scopes_supported`).
    pub scopes: Vec<String>,
    /// The redirect URI (default: `hostpipe login`'s loopback callback, or `hostpipe
    /// serve`'s `/oauth/callback`).
    pub redirect_uri: Option<String>,
    /// The `client_name` for dynamic registration (default `hostpipe`).
    pub client_name: Option<String>,
}

/// A confidential client using the client credentials grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The client id.
    pub client_id: String,
    /// Its secret, from `client_secret_env`.
    pub client_secret: Secret,
    /// Scopes to ask for.
    pub scopes: Vec<String>,
}

/// `auth` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// `oauth` (the default), `client_credentials` or `none`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A pre-registered client id.
    #[serde(alias = "clientId")]
    pub client_id: Option<String>,
    /// The environment variable that holds the client secret.
    #[serde(alias = "clientSecretEnv")]
    pub client_secret_env: Option<String>,
    /// Refused: secrets do not belong in config files.
    #[serde(alias = "clientSecret")]
    pub client_secret: Option<serde_json::Value>,
    /// A client ID metadata document URL (HTTPS).
    #[serde(alias = "clientMetadataUrl")]
    pub client_metadata_url: Option<String>,
    /// Scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The redirect URI.
    #[serde(alias = "redirectUri")]
    pub redirect_uri: Option<String>,
    /// The client name for dynamic registration.
    #[serde(alias = "clientName")]
    pub client_name: Option<String>,
}

/// Validates `raw` (key `auth` relative to the entry), with `has_authorization_header`
/// telling whether the static headers already authenticate. `env` reads an environment
/// variable (the process's, in production).
///
/// # Errors
/// [`ConfigError`] naming the key: an unknown type, an inline `client_secret`, an unset
/// secret variable, a metadata URL that is not HTTPS, client credentials without a
/// client id or secret, or OAuth next to an `Authorization` header.
pub fn validate(
    raw: Option<RawAuth>,
    has_authorization_header: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AuthConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(if has_authorization_header {
            AuthConfig::None
        } else {
            AuthConfig::OAuth(OAuthClient::default())
        });
    };
    if raw.client_secret.is_some() {
        return Err(ConfigError::new(
            "auth.client_secret",
            "secrets do not go in config files: put it in an environment variable and name that in `client_secret_env`",
        ));
    }
    let secret = match raw.client_secret_env.as_deref() {
        None => None,
        Some(var) => match env(var) {
            Some(v) if !v.is_empty() => Some(Secret(v)),
            _ => {
                return Err(ConfigError::new(
                    "auth.client_secret_env",
                    format!("the environment variable `{var}` is not set (or empty)"),
                ));
            }
        },
    };
    let kind = raw.kind.as_deref().unwrap_or("oauth");
    if kind != "none" && has_authorization_header {
        return Err(ConfigError::new(
            "auth",
            "an `Authorization` header and OAuth exclude each other: drop the header, or use `\"type\": \"none\"`",
        ));
    }
    let non_empty = |s: Option<String>, key: &str| -> Result<Option<String>, ConfigError> {
        match s {
            Some(v) if v.trim().is_empty() => {
                Err(ConfigError::new(format!("auth.{key}"), "must not be empty"))
            }
            v => Ok(v),
        }
    };
    match kind {
        "none" => Ok(AuthConfig::None),
        "oauth" => {
            if let Some(url) = raw.client_metadata_url.as_deref()
                && !(url.starts_with("https://") && url.len() > "https://".len())
            {
                return Err(ConfigError::new(
                    "auth.client_metadata_url",
                    format!("`{url}` must be an https:// URL (a client ID metadata document)"),
                ));
            }
            if let Some(uri) = raw.redirect_uri.as_deref()
                && !(uri.starts_with("http://") || uri.starts_with("https://"))
            {
                return Err(ConfigError::new(
                    "auth.redirect_uri",
                    format!("`{uri}` is not an http:// or https:// URL"),
                ));
            }
            let client_id = non_empty(raw.client_id, "client_id")?;
            if secret.is_some() && client_id.is_none() {
                return Err(ConfigError::new(
                    "auth.client_secret_env",
                    "a client secret needs the `client_id` it belongs to",
                ));
            }
            Ok(AuthConfig::OAuth(OAuthClient {
                client_id,
                client_secret: secret,
                client_metadata_url: raw.client_metadata_url,
                scopes: raw.scopes,
                redirect_uri: raw.redirect_uri,
                client_name: non_empty(raw.client_name, "client_name")?,
            }))
        }
        "client_credentials" => {
            let client_id = non_empty(raw.client_id, "client_id")?.ok_or_else(|| {
                ConfigError::new("auth.client_id", "client_credentials needs a `client_id`")
            })?;
            let client_secret = secret.ok_or_else(|| {
                ConfigError::new(
                    "auth.client_secret_env",
                    "client_credentials needs the environment variable holding the client secret",
                )
            })?;
            let interactive_only = [
                ("client_metadata_url", raw.client_metadata_url.is_some()),
                ("redirect_uri", raw.redirect_uri.is_some()),
                ("client_name", raw.client_name.is_some()),
            ];
            if let Some((key, _)) = interactive_only.iter().find(|(_, given)| *given) {
                return Err(ConfigError::new(
                    format!("auth.{key}"),
                    "is for `\"type\": \"oauth\"`; client_credentials has no login",
                ));
            }
            Ok(AuthConfig::ClientCredentials(ClientCredentials {
                client_id,
                client_secret,
                scopes: raw.scopes,
            }))
        }
        other => Err(ConfigError::new(
            "auth.type",
            format!("unknown auth type `{other}`; use `oauth`, `client_credentials` or `none`"),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn raw(v: serde_json::Value) -> RawAuth {
        serde_json::from_value(v).unwrap()
    }

    fn env(name: &str) -> Option<String> {
        (name == "SET").then(|| "s3cret".to_owned())
    }

    #[test]
    fn defaults_follow_the_authorization_header() {
        assert_eq!(validate(None, true, &env).unwrap(), AuthConfig::None);
        assert_eq!(
            validate(None, false, &env).unwrap(),
            AuthConfig::OAuth(OAuthClient::default())
        );
    }

    #[test]
    fn secrets_come_from_the_environment_and_never_show() {
        let c = validate(
            Some(raw(serde_json::json!({"type": "client_credentials", "client_id": "bot", "client_secret_env": "SET", "scopes": ["a"]}))),
            false,
            &env,
        )
        .unwrap();
        let AuthConfig::ClientCredentials(cc) = &c else {
            unreachable!()
        };
        assert_eq!(cc.client_secret.expose(), "s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = validate(
            Some(raw(
                serde_json::json!({"clientId": "app", "clientSecretEnv": "SET"}),
            )),
            false,
            &env,
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn errors_name_the_key() {
        let key = |v: serde_json::Value, header: bool| {
            validate(Some(raw(v)), header, &env).unwrap_err().key
        };
        assert_eq!(
            key(
                serde_json::json!({"client_secret": "x", "client_id": "a"}),
                false
            ),
            "auth.client_secret"
        );
        assert_eq!(
            key(
                serde_json::json!({"client_id": "a", "client_secret_env": "UNSET"}),
                false
            ),
            "auth.client_secret_env"
        );
        assert_eq!(
            key(
                serde_json::json!({"type": "client_credentials", "client_secret_env": "SET"}),
                false
            ),
            "auth.client_id"
        );
        assert_eq!(
            key(
                serde_json::json!({"type": "client_credentials", "client_id": "a"}),
                false
            ),
            "auth.client_secret_env"
        );
        assert_eq!(key(serde_json::json!({"type": "saml"}), false), "auth.type");
        assert_eq!(
            key(
                serde_json::json!({"client_metadata_url": "http://x/c.json"}),
                false
            ),
            "auth.client_metadata_url"
        );
        assert_eq!(key(serde_json::json!({"type": "oauth"}), true), "auth");
        assert_eq!(
            key(serde_json::json!({"client_secret_env": "SET"}), false),
            "auth.client_secret_env"
        );
        assert_eq!(
            validate(Some(raw(serde_json::json!({"type": "none"}))), true, &env).unwrap(),
            AuthConfig::None
        );
        assert!(serde_json::from_value::<RawAuth>(serde_json::json!({"clientid": "x"})).is_err());
    }
}
