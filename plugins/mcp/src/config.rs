//! MCP server configuration: the standard `mcpServers` JSON that Claude Desktop, Cursor
//! and VS Code users already have, and the same entries inline in hostpipe's TOML.
//!
//! ```json
//! { "mcpServers": {
//!     "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] },
//!     "remote":     { "url": "https://example.com/mcp", "headers": { "Authorization": "Bearer …" } },
//!     "off":        { "command": "x", "disabled": true } } }
//! ```
//!
//! VS Code's `{"servers": {…}}` with `"type": "stdio" | "http"` is accepted too.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hostpipe_core::ConfigError;
use serde::Deserialize;

/// The environment variables a stdio server inherits from hostpipe without being named
/// in its config: what the official MCP SDKs pass by default (the Python SDK's
/// `get_default_environment`, the TypeScript SDK's `DEFAULT_INHERITED_ENV_VARS`). Nothing
/// else of hostpipe's environment (API keys, tokens, the store's URL) reaches a server
/// unless its config names it in `inherit_env` or sets it in `env`.
#[cfg(not(windows))]
pub const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// See the non-Windows [`INHERITED_ENV`]; on Windows, the SDKs' Windows list.
#[cfg(windows)]
pub const INHERITED_ENV: &[&str] = &[
    "APPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "LOCALAPPDATA",
    "PATH",
    "PROCESSOR_ARCHITECTURE",
    "SYSTEMDRIVE",
    "SYSTEMROOT",
    "TEMP",
    "USERNAME",
    "USERPROFILE",
];

/// One entry as written in a config file. Unknown keys are kept in `other` and reported
/// as warnings, since other clients add their own (`autoApprove`, `description`, …).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawServerEntry {
    /// `stdio`, `http` / `streamable-http` / `streamableHttp`; inferred when absent.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// stdio: the program.
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: environment variables for the server, besides the few it inherits
    /// ([`INHERITED_ENV`] and `inherit_env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: names of hostpipe's environment variables the server may see, besides
    /// [`INHERITED_ENV`] (`inheritEnv` in JSON, `inherit_env` in TOML).
    #[serde(default, alias = "inherit_env")]
    pub inherit_env: Vec<String>,
    /// stdio: working directory.
    pub cwd: Option<PathBuf>,
    /// streamable HTTP: the endpoint URL.
    pub url: Option<String>,
    /// streamable HTTP: extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// streamable HTTP: how to authenticate ([`crate::auth_config`]); default OAuth
    /// when the server asks for it, none when `headers` has `Authorization`.
    pub auth: Option<crate::auth_config::RawAuth>,
    /// Never start this server.
    #[serde(default)]
    pub disabled: bool,
    /// hostpipe: connect (spawn + `initialize`) timeout in milliseconds.
    #[serde(alias = "connect_timeout_ms")]
    pub connect_timeout_ms: Option<u64>,
    /// hostpipe: timeout of each request in milliseconds.
    #[serde(alias = "request_timeout_ms")]
    pub request_timeout_ms: Option<u64>,
    /// hostpipe: the protocol era, `auto` (the default), `2025-11-25` or `2026-07-28`
    /// ([`ProtocolMode`]).
    pub protocol: Option<String>,
    /// Keys hostpipe does not know.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportConfig {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout
    /// (MCP spec 2025-11-25, "Transports / stdio").
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Environment variables given to the server.
        env: BTreeMap<String, String>,
        /// Names of hostpipe's own environment variables passed on, besides
        /// [`INHERITED_ENV`].
        inherit_env: Vec<String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP (MCP spec 2025-11-25, "Transports / Streamable HTTP").
    StreamableHttp {
        /// Endpoint URL, `http://` or `https://`.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
        /// How hostpipe authenticates (OAuth, client credentials, or only `headers`).
        auth: crate::auth_config::AuthConfig,
    },
}

/// Which protocol revision hostpipe speaks with a server (`protocol` in its config).
///
/// MCP 2026-07-28 has no `initialize` handshake: a client probes with `server/discover`
/// and falls back to `initialize` when the server answers like a legacy one (spec
/// 2026-07-28, "Transports", backward compatibility). Some older servers exit on any
/// request before `initialize`; pinning `2025-11-25` is their way out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProtocolMode {
    /// Probe with `server/discover` (10 s at most), fall back to `initialize`; the answer
    /// is remembered for the server's later connections.
    #[default]
    Auto,
    /// `initialize`, protocol 2025-11-25.
    Legacy,
    /// `server/discover` and per-request `_meta`, protocol 2026-07-28; no fallback.
    Modern,
}

impl ProtocolMode {
    /// `auto`, `2025-11-25` or `2026-07-28`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Legacy => "2025-11-25",
            Self::Modern => "2026-07-28",
        }
    }
}

impl std::str::FromStr for ProtocolMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "auto" => Ok(Self::Auto),
            "2025-11-25" => Ok(Self::Legacy),
            "2026-07-28" => Ok(Self::Modern),
            _ => Err(ConfigError::new(
                "protocol",
                format!(
                    "`{s}` is not a protocol hostpipe speaks: use `auto`, `2025-11-25` or `2026-07-28`"
                ),
            )),
        }
    }
}

/// A validated server configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The configured name.
    pub name: String,
    /// Transport.
    pub transport: TransportConfig,
    /// Whether it is disabled.
    pub disabled: bool,
    /// Connect timeout override.
    pub connect_timeout: Option<Duration>,
    /// Request timeout override.
    pub request_timeout: Option<Duration>,
    /// Which protocol era to speak.
    pub protocol: ProtocolMode,
    /// Unknown keys that were ignored, for warnings.
    pub ignored_keys: Vec<String>,
}

impl ServerConfig {
    /// A stdio server.
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            transport: TransportConfig::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                inherit_env: Vec::new(),
                cwd: None,
            },
            disabled: false,
            connect_timeout: None,
            request_timeout: None,
            protocol: ProtocolMode::default(),
            ignored_keys: Vec::new(),
        }
    }

    /// A streamable HTTP server.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: TransportConfig::StreamableHttp {
                url: url.into(),
                headers: BTreeMap::new(),
                auth: crate::auth_config::AuthConfig::OAuth(Default::default()),
            },
            disabled: false,
            connect_timeout: None,
            request_timeout: None,
            protocol: ProtocolMode::default(),
            ignored_keys: Vec::new(),
        }
    }

    /// Validates one entry named `name`. Error keys are relative to the entry.
    ///
    /// # Errors
    /// [`ConfigError`] when neither or both of `command` and `url` are given, the `type`
    /// is unknown or unsupported (legacy `sse`), or the URL is not `http(s)://`.
    pub fn from_entry(name: &str, raw: RawServerEntry) -> Result<Self, ConfigError> {
        Self::from_entry_with_env(name, raw, &|var| std::env::var(var).ok())
    }

    /// [`ServerConfig::from_entry`], reading environment variables (the secrets `auth`
    /// names) through `env`.
    ///
    /// # Errors
    /// As [`ServerConfig::from_entry`], and the `auth` errors of
    /// [`crate::auth_config::validate`].
    pub fn from_entry_with_env(
        name: &str,
        raw: RawServerEntry,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        if name.is_empty() {
            return Err(ConfigError::new("", "a server name must not be empty"));
        }
        let kind = raw.kind.as_deref().map(str::to_ascii_lowercase);
        let transport = match (kind.as_deref(), raw.command, raw.url) {
            (Some("sse"), _, _) => {
                return Err(ConfigError::new(
                    "type",
                    "the legacy HTTP+SSE transport (MCP 2024-11-05) is not supported; use the server's streamable HTTP endpoint (`\"type\": \"http\"`)",
                ));
            }
            (None | Some("stdio"), Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(ConfigError::new("command", "must not be empty"));
                }
                if raw.auth.is_some() {
                    return Err(ConfigError::new(
                        "auth",
                        "is for HTTP servers; a stdio server gets credentials only through its `env`",
                    ));
                }
                if let Some((i, name)) = raw
                    .inherit_env
                    .iter()
                    .enumerate()
                    .find(|(_, n)| n.is_empty() || n.contains(['=', '\0']))
                {
                    return Err(ConfigError::new(
                        format!("inherit_env[{i}]"),
                        format!("`{name}` is not an environment variable name"),
                    ));
                }
                TransportConfig::Stdio {
                    command,
                    args: raw.args,
                    env: raw.env,
                    inherit_env: raw.inherit_env,
                    cwd: raw.cwd,
                }
            }
            (None | Some("http" | "streamable-http" | "streamablehttp"), None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ConfigError::new(
                        "url",
                        format!("`{url}` is not an http:// or https:// URL"),
                    ));
                }
                let has_authorization = raw
                    .headers
                    .keys()
                    .any(|k| k.eq_ignore_ascii_case("authorization"));
                let auth = crate::auth_config::validate(raw.auth, has_authorization, env)?;
                TransportConfig::StreamableHttp {
                    url,
                    headers: raw.headers,
                    auth,
                }
            }
            (Some(k @ ("stdio" | "http" | "streamable-http" | "streamablehttp")), _, _) => {
                let need = if k == "stdio" {
                    "`command` (and no `url`)"
                } else {
                    "`url` (and no `command`)"
                };
                return Err(ConfigError::new("", format!("type `{k}` needs {need}")));
            }
            (Some(k), _, _) => {
                return Err(ConfigError::new(
                    "type",
                    format!("unknown transport type `{k}`; use `stdio` or `http`"),
                ));
            }
            (None, Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "",
                    "give either `command` (stdio) or `url` (streamable HTTP), not both",
                ));
            }
            (None, None, None) => {
                return Err(ConfigError::new(
                    "",
                    "give `command` (stdio) or `url` (streamable HTTP)",
                ));
            }
        };
        let protocol = match raw.protocol.as_deref() {
            None => ProtocolMode::default(),
            Some(p) => p.parse()?,
        };
        Ok(Self {
            name: name.to_owned(),
            transport,
            disabled: raw.disabled,
            connect_timeout: raw.connect_timeout_ms.map(Duration::from_millis),
            request_timeout: raw.request_timeout_ms.map(Duration::from_millis),
            protocol,
            ignored_keys: raw.other.into_keys().collect(),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpServersFile {
    mcp_servers: Option<BTreeMap<String, RawServerEntry>>,
    servers: Option<BTreeMap<String, RawServerEntry>>,
}

/// Parses a standard `mcpServers` JSON document (or VS Code's `servers`). Error keys are
/// `mcpServers.NAME.KEY`; the caller adds the file name.
///
/// # Errors
/// [`ConfigError`] for invalid JSON (with line and column), a document with neither
/// key, or an invalid entry.
pub fn parse_mcp_servers_json(text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let file: McpServersFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ConfigError::new("", format!("invalid JSON: {inner}"))
        } else {
            ConfigError::new(
                if path == "." { String::new() } else { path },
                inner.to_string(),
            )
        }
    })?;
    let (key, entries) = match (file.mcp_servers, file.servers) {
        (Some(m), _) => ("mcpServers", m),
        (None, Some(s)) => ("servers", s),
        (None, None) => {
            return Err(ConfigError::new(
                "",
                "expected an object with an `mcpServers` (or VS Code `servers`) key",
            ));
        }
    };
    entries
        .into_iter()
        .map(|(name, raw)| {
            ServerConfig::from_entry(&name, raw).map_err(|e| e.under(&format!("{key}.{name}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_claude_desktop_shape() {
        let text = r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "pkg"], "env": {"A": "1"}, "autoApprove": []},
            "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"}},
            "off": {"command": "x", "disabled": true}}}"#;
        let servers = parse_mcp_servers_json(text).unwrap_or_default();
        assert_eq!(servers.len(), 3);
        assert_eq!(servers[0].name, "fs");
        assert_eq!(servers[0].ignored_keys, ["autoApprove"]);
        assert!(servers[1].disabled);
        assert!(
            matches!(&servers[2].transport, TransportConfig::StreamableHttp { url, .. } if url == "https://example.com/mcp")
        );
    }

    #[test]
    fn vs_code_shape_and_errors_name_the_key() {
        let ok = parse_mcp_servers_json(r#"{"servers": {"a": {"type": "stdio", "command": "x"}}}"#);
        assert_eq!(ok.map(|v| v.len()), Ok(1));
        let err = parse_mcp_servers_json(r#"{"mcpServers": {"bad": {"url": "ftp://x"}}}"#).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("mcpServers.bad.url: `ftp://x` is not an http:// or https:// URL")
        );
        let err = parse_mcp_servers_json(
            r#"{"mcpServers": {"old": {"type": "sse", "url": "http://x"}}}"#,
        )
        .err();
        assert!(err.is_some_and(|e| e.key == "mcpServers.old.type"));
        let err = parse_mcp_servers_json("{\"mcpServers\": ").err();
        assert!(err.is_some_and(|e| e.message.starts_with("invalid JSON: EOF while parsing")));
        let err =
            parse_mcp_servers_json(r#"{"mcpServers": {"x": {"command": "a", "args": "a b"}}}"#)
                .err();
        assert_eq!(err.map(|e| e.key).as_deref(), Some("mcpServers.x.args"));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod protocol_tests {
    use super::*;

    #[test]
    fn protocol_takes_three_values_and_names_them_when_wrong() {
        let entry = |p: &str| -> RawServerEntry {
            serde_json::from_value(serde_json::json!({"command": "x", "protocol": p})).unwrap()
        };
        assert_eq!(
            ServerConfig::from_entry("s", entry("2025-11-25"))
                .unwrap()
                .protocol,
            ProtocolMode::Legacy
        );
        assert_eq!(
            ServerConfig::from_entry("s", entry("2026-07-28"))
                .unwrap()
                .protocol,
            ProtocolMode::Modern
        );
        assert_eq!(
            ServerConfig::from_entry("s", entry("auto"))
                .unwrap()
                .protocol,
            ProtocolMode::Auto
        );
        let e = ServerConfig::from_entry("s", entry("2024-11-05")).unwrap_err();
        assert_eq!(e.key, "protocol");
        assert!(
            e.message.contains("`auto`, `2025-11-25` or `2026-07-28`"),
            "{e}"
        );
    }
}
