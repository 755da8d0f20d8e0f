//! MCP servers added while `hostpipe serve` runs (`POST /v1/servers`): the request's
//! `mcpServers` entry checked by the parser of the config files, then kept in the store
//! ([`hostpipe_engine::ServerEntries`]) so that every instance on it, and the next
//! start, has the server.
//!
//! The body is what a Claude Desktop, Cursor or VS Code config holds, with one server:
//!
//! ```json
//! { "mcpServers": { "kb": { "url": "https://kb.example/mcp",
//!                           "headers": { "Authorization": "Bearer …" } } } }
//! ```
//!
//! Rules, beyond those of a config file's entry ([`ServerConfig::from_entry`]):
//! - a name is 1 to [`MAX_NAME_BYTES`] ASCII letters, digits, `_`, `-` and `.` (it is a
//!   path segment of the API);
//! - a stdio entry (`command`) runs a program on the host: refused unless
//!   `[serve] allow_stdio_servers = true` ([`EntryError::StdioNotAllowed`]);
//! - the values of `headers` and `env` may be credentials: they are stored only sealed
//!   with `HOSTPIPE_CREDENTIAL_KEY` (XChaCha20-Poly1305,
//!   [`CredentialKey::seal_entry_secrets`]); without the key, an entry that has any is
//!   refused. A URL with credentials in it (`https://user:pass@…`) is refused: put
//!   them in a header. `auth.client_secret` is refused as in a config file
//!   (`client_secret_env` names a variable each instance reads).

use std::collections::BTreeMap;

use hostpipe_core::ConfigError;
use hostpipe_engine::{CredentialKey, StoredServer};
use hostpipe_mcp::{RawServerEntry, ServerConfig, TransportConfig};
use serde_json::Value;

/// The longest server name accepted over the API, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Why an entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The body or entry is invalid; the key names the field
    /// (`mcpServers.NAME.url`).
    #[error("{0}")]
    Invalid(ConfigError),
    /// A stdio entry while `[serve] allow_stdio_servers` is off.
    #[error(
        "mcpServers.{0}.command: a stdio server runs a program on this host, so adding one over HTTP is off; use a streamable HTTP server (`url`), or set `[serve] allow_stdio_servers = true`"
    )]
    StdioNotAllowed(String),
    /// `headers` or `env` values to keep, and no key to seal them with.
    #[error(
        "{0}: header and env values may be credentials and are stored only sealed: set HOSTPIPE_CREDENTIAL_KEY (base64 of 32 bytes) on every instance, or leave them out"
    )]
    NeedsKey(String),
}

/// A checked entry: the server to add and the row to store.
#[derive(Debug, Clone)]
pub struct NewServer {
    /// The server, as the host runs it.
    pub config: ServerConfig,
    /// The row to store.
    pub row: StoredServer,
}

/// The secret part of an entry, sealed as one JSON document.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Secrets {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> EntryError {
    EntryError::Invalid(ConfigError::new(key, message))
}

/// Checks a `POST /v1/servers` body (`{"mcpServers": {"NAME": {…}}}`, or VS Code's
/// `servers`) and makes the server and its row. `now_ms` is the row's creation time.
///
/// # Errors
/// [`EntryError`] naming the field.
pub fn from_body(
    body: Value,
    allow_stdio: bool,
    key: Option<&CredentialKey>,
    now_ms: i64,
) -> Result<NewServer, EntryError> {
    let Value::Object(mut body) = body else {
        return Err(invalid(
            "",
            "expected a JSON object: {\"mcpServers\": {\"NAME\": {…}}}",
        ));
    };
    let (top, entries) = match (body.remove("mcpServers"), body.remove("servers")) {
        (Some(e), None) => ("mcpServers", e),
        (None, Some(e)) => ("servers", e),
        (Some(_), Some(_)) => return Err(invalid("", "give `mcpServers` or `servers`, not both")),
        (None, None) => {
            return Err(invalid(
                "",
                "expected {\"mcpServers\": {\"NAME\": {…}}}, as in a Claude Desktop config",
            ));
        }
    };
    if let Some(k) = body.keys().next() {
        return Err(invalid(
            k.clone(),
            "unknown key; the body holds only `mcpServers`",
        ));
    }
    let Value::Object(entries) = entries else {
        return Err(invalid(top, "expected an object: {\"NAME\": {…}}"));
    };
    if entries.len() != 1 {
        return Err(invalid(
            top,
            format!(
                "give exactly one server per request (got {})",
                entries.len()
            ),
        ));
    }
    let Some((name, entry)) = entries.into_iter().next() else {
        return Err(invalid(top, "give exactly one server per request"));
    };
    check_name(&name).map_err(|m| invalid(format!("{top}.{name}"), m))?;
    let at = format!("{top}.{name}");
    let config = parse(&name, entry.clone()).map_err(|e| EntryError::Invalid(e.under(&at)))?;
    match &config.transport {
        TransportConfig::Stdio { .. } if !allow_stdio => {
            return Err(EntryError::StdioNotAllowed(name));
        }
        TransportConfig::StreamableHttp { url, .. } if has_userinfo(url) => {
            return Err(invalid(
                format!("{at}.url"),
                "credentials in the URL would be stored in plain text: put them in a header (stored sealed)",
            ));
        }
        _ => {}
    }
    let Value::Object(mut clear) = entry else {
        return Err(invalid(at, "expected an object"));
    };
    let mut secrets = Secrets::default();
    for (field, into) in [("headers", &mut secrets.headers), ("env", &mut secrets.env)] {
        if let Some(v) = clear.remove(field) {
            // The parser took it: a map of strings.
            *into = serde_json::from_value(v).unwrap_or_default();
        }
    }
    let sealed = if secrets.headers.is_empty() && secrets.env.is_empty() {
        None
    } else {
        let Some(key) = key else {
            let field = if secrets.headers.is_empty() {
                "env"
            } else {
                "headers"
            };
            return Err(EntryError::NeedsKey(format!("{at}.{field}")));
        };
        let text = serde_json::to_vec(&secrets).unwrap_or_default();
        Some(
            key.seal_entry_secrets(&name, &text)
                .map_err(|e| invalid(at.clone(), e.to_string()))?,
        )
    };
    let row = StoredServer {
        name: name.clone(),
        entry: Value::Object(clear).to_string(),
        sealed,
        created_at_ms: now_ms,
    };
    Ok(NewServer { config, row })
}

/// The server a stored row describes, its sealed values opened with `key`.
///
/// # Errors
/// A message for the log: the row does not parse (any more), or its sealed values do
/// not open (no key, another key).
pub fn from_row(row: &StoredServer, key: Option<&CredentialKey>) -> Result<ServerConfig, String> {
    let mut entry: serde_json::Map<String, Value> =
        serde_json::from_str(&row.entry).map_err(|e| {
            format!(
                "stored server `{}`: its entry is not a JSON object: {e}",
                row.name
            )
        })?;
    if let Some(sealed) = &row.sealed {
        let key = key.ok_or_else(|| {
            format!(
                "stored server `{}` has sealed header or env values and HOSTPIPE_CREDENTIAL_KEY is not set",
                row.name
            )
        })?;
        let opened = key
            .open_entry_secrets(&row.name, sealed)
            .map_err(|e| e.to_string())?;
        let secrets: Secrets = serde_json::from_slice(&opened).map_err(|_| {
            format!(
                "stored server `{}`: its sealed values are not readable",
                row.name
            )
        })?;
        for (field, values) in [("headers", secrets.headers), ("env", secrets.env)] {
            if !values.is_empty() {
                entry.insert(
                    field.into(),
                    serde_json::to_value(values).unwrap_or_default(),
                );
            }
        }
    }
    parse(&row.name, Value::Object(entry)).map_err(|e| format!("stored server `{}`: {e}", row.name))
}

/// One entry through the config files' parser. Error keys are relative to the entry.
fn parse(name: &str, entry: Value) -> Result<ServerConfig, ConfigError> {
    let raw: RawServerEntry = serde_path_to_error::deserialize(entry).map_err(|e| {
        let path = e.path().to_string();
        // serde quotes the value it refused: never one of `headers` or `env`, which may
        // be a secret.
        let message = if path.starts_with("headers") || path.starts_with("env") {
            "expected an object of names to string values".to_owned()
        } else {
            e.into_inner().to_string()
        };
        ConfigError::new(if path == "." { String::new() } else { path }, message)
    })?;
    ServerConfig::from_entry(name, raw)
}

/// 1 to [`MAX_NAME_BYTES`] of `A-Z a-z 0-9 _ - .`, not `.` or `..`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a server name added over the API is 1 to {MAX_NAME_BYTES} letters, digits, `_`, `-` or `.`"
        ))
    }
}

/// Whether an `http(s)://` URL carries `user[:password]@` before its host.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn key() -> CredentialKey {
        CredentialKey::from_base64(KEY).unwrap()
    }

    fn err(body: Value, allow_stdio: bool, key: Option<&CredentialKey>) -> EntryError {
        from_body(body, allow_stdio, key, 1).unwrap_err()
    }

    fn key_of(e: EntryError) -> String {
        match e {
            EntryError::Invalid(c) => c.key,
            other => panic!("not Invalid: {other:?}"),
        }
    }

    #[test]
    fn a_pasted_http_entry_is_stored_with_its_headers_sealed() {
        let body = json!({"mcpServers": {"kb": {
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer s3cret-token"},
            "autoApprove": []
        }}});
        let new = from_body(body, false, Some(&key()), 5).unwrap();
        assert_eq!(new.config.name, "kb");
        assert_eq!(new.config.ignored_keys, ["autoApprove"]);
        assert_eq!(new.row.name, "kb");
        assert_eq!(new.row.created_at_ms, 5);
        assert!(!new.row.entry.contains("s3cret"), "{}", new.row.entry);
        assert!(!new.row.entry.contains("headers"), "{}", new.row.entry);
        let sealed = new.row.sealed.clone().unwrap();
        assert!(!sealed.contains("s3cret"));
        // Back from the store: the same server, headers and all.
        let back = from_row(&new.row, Some(&key())).unwrap();
        assert_eq!(back, new.config);
        // Without the key, or with another one, it does not open, and says why.
        let e = from_row(&new.row, None).unwrap_err();
        assert!(e.contains("HOSTPIPE_CREDENTIAL_KEY is not set"), "{e}");
        let other = CredentialKey::from_base64(&"A".repeat(43)).unwrap();
        let e = from_row(&new.row, Some(&other)).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn an_entry_without_secrets_needs_no_key() {
        let body = json!({"mcpServers": {"open": {"url": "http://127.0.0.1:9/mcp"}}});
        let new = from_body(body, false, None, 1).unwrap();
        assert_eq!(new.row.sealed, None);
        assert_eq!(from_row(&new.row, None).unwrap(), new.config);
    }

    #[test]
    fn header_or_env_values_without_a_key_are_refused_naming_the_field() {
        let body =
            json!({"mcpServers": {"kb": {"url": "http://h/mcp", "headers": {"X-Api-Key": "k"}}}});
        assert_eq!(
            err(body, false, None),
            EntryError::NeedsKey("mcpServers.kb.headers".into())
        );
        let body = json!({"mcpServers": {"local": {"command": "x", "env": {"TOKEN": "t"}}}});
        let e = err(body, true, None);
        assert_eq!(e, EntryError::NeedsKey("mcpServers.local.env".into()));
        assert!(!e.to_string().contains("TOKEN"));
    }

    #[test]
    fn stdio_is_refused_unless_allowed() {
        let body = json!({"mcpServers": {"local": {"command": "npx", "args": ["-y", "x"]}}});
        let e = err(body.clone(), false, None);
        assert_eq!(e, EntryError::StdioNotAllowed("local".into()));
        assert!(e.to_string().contains("allow_stdio_servers"), "{e}");
        let new = from_body(body, true, None, 1).unwrap();
        assert!(matches!(
            new.config.transport,
            TransportConfig::Stdio { .. }
        ));
        assert_eq!(from_row(&new.row, None).unwrap(), new.config);
    }

    #[test]
    fn bad_bodies_name_the_field() {
        assert_eq!(key_of(err(json!([]), false, None)), "");
        assert_eq!(key_of(err(json!({"x": 1}), false, None)), "");
        assert_eq!(
            key_of(err(json!({"mcpServers": {}, "extra": 1}), false, None)),
            "extra"
        );
        assert_eq!(
            key_of(err(json!({"mcpServers": {}}), false, None)),
            "mcpServers"
        );
        assert_eq!(
            key_of(err(
                json!({"mcpServers": {"a": {"url": "http://h"}, "b": {"url": "http://h"}}}),
                false,
                None
            )),
            "mcpServers"
        );
        assert_eq!(
            key_of(err(
                json!({"mcpServers": {"a/b": {"url": "http://h"}}}),
                false,
                None
            )),
            "mcpServers.a/b"
        );
        assert_eq!(
            key_of(err(
                json!({"mcpServers": {"kb": {"url": "ftp://h"}}}),
                false,
                None
            )),
            "mcpServers.kb.url"
        );
        assert_eq!(
            key_of(err(json!({"mcpServers": {"kb": {"url": 7}}}), false, None)),
            "mcpServers.kb.url"
        );
        assert_eq!(
            key_of(err(
                json!({"mcpServers": {"kb": {"url": "https://u:p@h/mcp"}}}),
                false,
                None
            )),
            "mcpServers.kb.url"
        );
        assert_eq!(
            key_of(err(
                json!({"mcpServers": {"kb": {"url": "https://h/mcp", "auth": {"client_secret": "x", "client_id": "c"}}}}),
                false,
                None
            )),
            "mcpServers.kb.auth.client_secret"
        );
        assert_eq!(
            key_of(err(
                json!({"servers": {"kb": {"type": "sse", "url": "http://h"}}}),
                false,
                None
            )),
            "servers.kb.type"
        );
    }

    #[test]
    fn a_malformed_header_or_env_value_is_not_quoted_back() {
        for body in [
            json!({"mcpServers": {"kb": {"url": "http://h/mcp", "headers": "Bearer s3cret"}}}),
            json!({"mcpServers": {"kb": {"url": "http://h/mcp", "headers": {"A": ["s3cret"]}}}}),
            json!({"mcpServers": {"kb": {"command": "x", "env": {"T": 12345678}}}}),
        ] {
            let e = err(body, true, Some(&key()));
            assert!(e.to_string().starts_with("mcpServers.kb."), "{e}");
            assert!(
                !e.to_string().contains("s3cret") && !e.to_string().contains("12345678"),
                "{e}"
            );
        }
    }

    #[test]
    fn userinfo_is_found_only_before_the_host() {
        assert!(has_userinfo("https://u:p@h/mcp"));
        assert!(has_userinfo("http://token@h"));
        assert!(!has_userinfo("https://h/mcp?who=a@b"));
        assert!(!has_userinfo("https://h/a@b"));
    }
}
