//! `hostpipe login SERVER`: the OAuth authorization code flow for one remote MCP server
//! (MCP spec 2025-11-25, "Authorization"; RFC 6749 §4.1 with PKCE, RFC 7636). Prints
//! the authorization URL, takes the redirect on a loopback listener (RFC 8252 §7.3) or
//! pasted (`--paste`), and saves the credentials, sealed, in the store.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use hostpipe_cli::{App, VaultUse};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

// The arguments of `hostpipe login` (its help is the doc of `SessionCommand::Login`).
#[derive(clap::Args)]
pub(crate) struct LoginArgs {
    /// The MCP server (its configured name).
    pub(crate) server: String,
    /// Read the URL the browser was redirected to from standard input instead of
    /// listening for it (for a browser on another machine).
    #[arg(long)]
    pub(crate) paste: bool,
    /// The loopback port of the redirect URI `http://127.0.0.1:PORT/callback` (default:
    /// a free one; a `redirect_uri` in the server's `auth` wins).
    #[arg(long, default_value_t = 0)]
    pub(crate) port: u16,
    /// How long to wait for the redirect (e.g. 90s, 5m).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub(crate) timeout: Duration,
}

pub(crate) async fn login(app: &App, args: LoginArgs) -> anyhow::Result<ExitCode> {
    let LoginArgs {
        server,
        paste,
        port,
        timeout,
    } = args;
    let store = match &app.vault {
        VaultUse::Persistent(store) => store.clone(),
        VaultUse::MemoryOnly(why) => bail!(
            "{why}: the credentials would be lost when `hostpipe login` exits. Set HOSTPIPE_CREDENTIAL_KEY (base64 of 32 random bytes, e.g. `openssl rand -base64 32`) for hostpipe login and every hostpipe that uses `{server}`"
        ),
        VaultUse::NotNeeded => bail!(
            "no enabled HTTP server uses OAuth in {}; `{server}` is not one",
            app.config.source
        ),
    };
    let configured = configured_redirect(app, &server);
    let (listener, redirect) = match (&configured, paste) {
        (Some(uri), true) => (None, uri.clone()),
        (Some(uri), false) => {
            let Some(addr) = loopback_addr(uri) else {
                bail!(
                    "the redirect_uri of `{server}` ({uri}) is not a loopback http:// URL with a port hostpipe can listen on: use --paste"
                );
            };
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for the redirect"))?;
            (Some(listener), uri.clone())
        }
        (None, _) => {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .with_context(|| format!("cannot listen on 127.0.0.1:{port} for the redirect"))?;
            let redirect = format!(
                "http://127.0.0.1:{}/callback",
                listener.local_addr()?.port()
            );
            (if paste { None } else { Some(listener) }, redirect)
        }
    };
    let pending = app.host.start_login(&server, &redirect).await?;
    outln!(
        "Open this URL in a browser to log in to `{server}`:\n\n  {}\n",
        pending.authorization_url()
    );
    let state = pending.state();
    let waited = match listener {
        Some(listener) => {
            eprintln!(
                "Waiting for the redirect to {redirect} (up to {})…",
                humantime::format_duration(timeout)
            );
            tokio::time::timeout(
                timeout,
                take_redirect(listener, &redirect, state.as_deref()),
            )
            .await
        }
        None => {
            eprintln!("Paste the URL your browser was redirected to (it starts with {redirect}):");
            tokio::time::timeout(timeout, read_pasted()).await
        }
    };
    let redirected = waited.map_err(|_| {
        anyhow::anyhow!(
            "no redirect within {}: log in again (--timeout to wait longer)",
            humantime::format_duration(timeout)
        )
    })??;
    pending.finish(&redirected).await?;
    outln!("Logged in to `{server}`: the credentials are saved, encrypted, in {store}.");
    let status = app.host.reconnect(&server).await?;
    if status.is_connected() {
        outln!("`{server}` is connected.");
        Ok(ExitCode::SUCCESS)
    } else {
        outln!("`{server}` does not connect yet: {}", status.describe());
        Ok(ExitCode::FAILURE)
    }
}

/// The `redirect_uri` in `server`'s `auth`, if any.
fn configured_redirect(app: &App, server: &str) -> Option<String> {
    app.config
        .servers
        .iter()
        .find(|s| s.name == server)
        .and_then(|s| match &s.transport {
            hostpipe_mcp::TransportConfig::StreamableHttp {
                auth: hostpipe_mcp::auth_config::AuthConfig::OAuth(client),
                ..
            } => client.redirect_uri.clone(),
            _ => None,
        })
}

/// `127.0.0.1:PORT` of an `http://127.0.0.1:PORT/…` or `http://localhost:PORT/…` URI.
fn loopback_addr(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    matches!(host, "127.0.0.1" | "localhost" | "[::1]").then(|| {
        if host == "[::1]" {
            format!("[::1]:{port}")
        } else {
            format!("127.0.0.1:{port}")
        }
    })
}

/// One line from standard input, trimmed.
async fn read_pasted() -> anyhow::Result<String> {
    let mut line = String::new();
    tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await
        .context("cannot read the pasted URL")?;
    let line = line.trim().to_owned();
    if line.is_empty() {
        bail!("nothing was pasted");
    }
    Ok(line)
}

/// Answers requests on `listener` until one comes to the redirect's path with the
/// login's `state`; returns its full URL. Others get a 404 or 400 and the wait goes on.
async fn take_redirect(
    listener: tokio::net::TcpListener,
    redirect: &str,
    state: Option<&str>,
) -> anyhow::Result<String> {
    let path = redirect
        .strip_prefix("http://")
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("/callback")
        .split('?')
        .next()
        .unwrap_or("/callback")
        .to_owned();
    let origin = redirect
        .strip_suffix(path.as_str())
        .unwrap_or(redirect)
        .to_owned();
    loop {
        let (mut stream, _) = listener.accept().await.context("accepting the redirect")?;
        let Ok(Some(head)) = tokio::time::timeout(Duration::from_secs(10), read_head(&mut stream))
            .await
            .map(Result::ok)
            .map(Option::flatten)
        else {
            continue;
        };
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("")
            .to_owned();
        let url = format!("{origin}{target}");
        let (code, body, done) = if target.split('?').next() != Some(path.as_str()) {
            ("404 Not Found", "Not the login redirect.", false)
        } else if hostpipe_mcp::redirect_state(&url).as_deref() != state {
            (
                "400 Bad Request",
                "This redirect belongs to another login.",
                false,
            )
        } else if hostpipe_mcp::redirect_error(&url).is_some() {
            (
                "200 OK",
                "The authorization server refused the login; see the terminal.",
                true,
            )
        } else {
            (
                "200 OK",
                "Logged in: you can close this tab and go back to hostpipe.",
                true,
            )
        };
        let page = format!(
            "<!doctype html><meta charset=utf-8><title>hostpipe login</title><p>{body}</p>"
        );
        let response = format!(
            "HTTP/1.1 {code}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
        if done {
            return Ok(url);
        }
    }
}

/// A request's head (up to the blank line, at most 8 KiB); `None` if the peer closed
/// first.
async fn read_head(stream: &mut tokio::net::TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_redirects_give_their_address() {
        assert_eq!(
            loopback_addr("http://127.0.0.1:8976/callback").as_deref(),
            Some("127.0.0.1:8976")
        );
        assert_eq!(
            loopback_addr("http://localhost:9/cb").as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(loopback_addr("https://app.example/cb"), None);
        assert_eq!(loopback_addr("http://127.0.0.1/cb"), None);
    }
}
