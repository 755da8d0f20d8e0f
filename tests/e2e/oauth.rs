//! OAuth 2.1 for remote servers, end to end, against an MCP server that is its own
//! authorization server on the official Python SDK's auth support
//! (`tests/servers/oauth_server.py`, mcp 2.3.0): `needs_login` without credentials,
//! `hostpipe login` once (the redirect pasted), then every later hostpipe process
//! reuses the token, refreshes it when the server rejects it and before it expires;
//! the credentials in SQLite are sealed; the client credentials grant needs no login;
//! `hostpipe serve` logs in through its callback route.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hostpipe_tests::{ADMIN_TOKEN, READ_TOKEN, Service, hostpipe_command, root};
use serde_json::Value;

/// A fixed key, base64 of 32 bytes.
const KEY: &str = "q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k=";

/// `tests/servers/oauth_server.py` on a free port, with its event log.
struct AuthServer {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl AuthServer {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let log = dir.join("as.log");
        let child = std::process::Command::new(root().join("tests/.venv/bin/python"))
            .arg(root().join("tests/servers/oauth_server.py"))
            .args([
                "--port",
                &port.to_string(),
                "--cc-client",
                "bot:bot-secret-123",
            ])
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "oauth_server.py did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The logged events.
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The tokens of events named `event`, in order.
    fn tokens(&self, event: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == event)
            .map(|e| e["token"].as_str().unwrap().to_owned())
            .collect()
    }

    fn post(&self, path: &str) {
        let status = raw_http::blocking_post(&self.url(path));
        assert_eq!(status, 200, "POST {path}");
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Blocking HTTP without a client library's runtime: enough for the test server.
mod raw_http {
    use std::io::{Read as _, Write as _};

    /// `POST url` with an empty body; the status.
    pub(super) fn blocking_post(url: &str) -> u16 {
        request("POST", url).0
    }

    /// `GET url` without following redirects: (status, `Location`).
    pub(super) fn get_no_redirect(url: &str) -> (u16, Option<String>) {
        let (status, head) = request("GET", url);
        let location = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("location")
                .then(|| v.trim().to_owned())
        });
        (status, location)
    }

    fn request(method: &str, url: &str) -> (u16, String) {
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut stream = std::net::TcpStream::connect(authority).unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response.split(' ').nth(1).unwrap().parse().unwrap();
        (status, response)
    }
}

fn write_servers(dir: &Path, server: &AuthServer) -> PathBuf {
    let path = dir.join("servers.json");
    let text = serde_json::json!({"mcpServers": {
        "secure": {"url": server.url("/mcp")},
        "bot": {"url": server.url("/mcp"), "auth": {
            "type": "client_credentials", "client_id": "bot",
            "client_secret_env": "BOT_SECRET", "scopes": ["mcp"]}}
    }});
    std::fs::write(&path, text.to_string()).unwrap();
    path
}

/// `hostpipe --mcp-config SERVERS ARGS` with `data` as its data directory and the key
/// (unless `key` is `None`): (success, stdout, stderr).
fn hostpipe(
    data: &Path,
    servers: &Path,
    key: Option<&str>,
    args: &[&str],
) -> (bool, String, String) {
    let mut cmd = hostpipe_command();
    cmd.env("HOSTPIPE_DATA_DIR", data)
        .env("BOT_SECRET", "bot-secret-123")
        .env_remove("HOSTPIPE_CREDENTIAL_KEY")
        .arg("--mcp-config")
        .arg(servers)
        .args(args);
    if let Some(key) = key {
        cmd.env("HOSTPIPE_CREDENTIAL_KEY", key);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn status_of(data: &Path, servers: &Path, key: Option<&str>, name: &str) -> Value {
    let (_, stdout, stderr) = hostpipe(data, servers, key, &["servers", "--json"]);
    let all: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    all.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()["status"]
        .clone()
}

/// `hostpipe login secure --paste`: reads the authorization URL it prints, follows it
/// to the authorization server (which approves at once) without following the
/// redirect, and pastes the redirect's `Location`.
fn login(data: &Path, servers: &Path) -> String {
    let mut child = hostpipe_command()
        .env("HOSTPIPE_DATA_DIR", data)
        .env("HOSTPIPE_CREDENTIAL_KEY", KEY)
        .env("BOT_SECRET", "bot-secret-123")
        .arg("--mcp-config")
        .arg(servers)
        .args(["login", "secure", "--paste", "--timeout", "60s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    while !url.starts_with("http") {
        url.clear();
        assert!(
            stdout.read_line(&mut url).unwrap() > 0,
            "no authorization URL printed"
        );
        url = url.trim().to_owned();
    }
    for needed in [
        "code_challenge_method=S256",
        "code_challenge=",
        "resource=",
        "state=",
    ] {
        assert!(url.contains(needed), "{needed} missing from {url}");
    }
    let (status, location) = raw_http::get_no_redirect(&url);
    assert_eq!(status, 302, "the authorization endpoint redirects");
    let location = location.unwrap();
    assert!(
        location.contains("code=") && location.contains("iss="),
        "{location}"
    );
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{location}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(
        out.status.success(),
        "login failed: {rest} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    rest
}

/// Every byte of the data directory (the database and its WAL).
fn data_bytes(data: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            all.extend(std::fs::read(path).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn oauth_login_once_then_restarts_reuse_and_refresh_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = AuthServer::start(dir.path());
    let servers = write_servers(dir.path(), &server);
    let data = dir.path().join("data");

    // No credentials: needs_login, not failed; the client credentials server connects.
    let status = status_of(&data, &servers, Some(KEY), "secure");
    assert_eq!(status["state"], "needs_login", "{status}");
    // `hostpipe servers` says so with its exit code too, as for a failed server.
    let (ok, _, _) = hostpipe(&data, &servers, Some(KEY), &["servers"]);
    assert!(
        !ok,
        "`hostpipe servers` exits 1 while a server needs a login"
    );
    assert_eq!(
        status_of(&data, &servers, Some(KEY), "bot")["state"],
        "connected"
    );
    let cc = server
        .events()
        .into_iter()
        .find(|e| e["event"] == "client_credentials");
    assert!(
        cc.is_some(),
        "the client credentials grant was used: {:?}",
        server.events()
    );
    // A turn that binds it says why it is missing.
    let (_, stdout, stderr) = hostpipe(
        &data,
        &servers,
        Some(KEY),
        &["read", "secure", "oauth://secret"],
    );
    assert!(
        format!("{stdout}{stderr}").contains("needs login"),
        "{stdout} {stderr}"
    );
    // Without a key, hostpipe says the credentials would not be kept, and login refuses.
    let (_, _, stderr) = hostpipe(&data, &servers, None, &["servers"]);
    assert!(
        stderr.contains("HOSTPIPE_CREDENTIAL_KEY is not set"),
        "{stderr}"
    );
    let (ok, _, stderr) = hostpipe(&data, &servers, None, &["login", "secure", "--paste"]);
    assert!(
        !ok && stderr.contains("HOSTPIPE_CREDENTIAL_KEY"),
        "{stderr}"
    );

    // Log in once.
    let said = login(&data, &servers);
    assert!(said.contains("Logged in to `secure`"), "{said}");
    assert!(said.contains("`secure` is connected"), "{said}");
    let issued = server.tokens("issued");
    assert_eq!(issued.len(), 1, "{:?}", server.events());
    let first = issued[0].clone();
    let refresh = server
        .events()
        .iter()
        .find(|e| e["event"] == "issued")
        .unwrap()["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();

    // The credentials are in the store, sealed: neither token appears in its files.
    let bytes = data_bytes(&data);
    assert!(contains(&bytes, "hostpipe_oauth_credentials"));
    assert!(
        !contains(&bytes, &first),
        "the access token is stored in plain text"
    );
    assert!(
        !contains(&bytes, &refresh),
        "the refresh token is stored in plain text"
    );

    // A new process reuses the token: the server sees the same one, nothing new issued.
    let (ok, stdout, stderr) = hostpipe(
        &data,
        &servers,
        Some(KEY),
        &["read", "secure", "oauth://secret"],
    );
    assert!(ok && stdout.contains("4711"), "{stdout} {stderr}");
    assert_eq!(server.tokens("issued").len(), 1);
    assert!(server.tokens("refreshed").is_empty());
    assert_eq!(server.tokens("verified").last(), Some(&first));
    // Tokens never reach the output or the log.
    assert!(!stderr.contains(&first) && !stdout.contains(&first));

    // The server stops accepting it: the next process refreshes once and goes on.
    server.post("/test/expire");
    let (ok, stdout, stderr) = hostpipe(
        &data,
        &servers,
        Some(KEY),
        &["read", "secure", "oauth://secret"],
    );
    assert!(ok && stdout.contains("4711"), "{stdout} {stderr}");
    let refreshed = server.tokens("refreshed");
    assert_eq!(refreshed.len(), 1, "{:?}", server.events());
    assert!(server.tokens("rejected").contains(&first));
    assert_eq!(server.tokens("verified").last(), Some(&refreshed[0]));

    // Tokens of 2 s from now on; one more refresh (the server rejects the current one),
    // then the stored token expires while no hostpipe runs: the next one refreshes
    // before it sends it (no rejection).
    server.post("/test/ttl?seconds=2");
    server.post("/test/expire");
    let (ok, _, stderr) = hostpipe(
        &data,
        &servers,
        Some(KEY),
        &["read", "secure", "oauth://secret"],
    );
    assert!(ok, "{stderr}");
    let short = server.tokens("refreshed").last().unwrap().clone();
    std::thread::sleep(Duration::from_millis(2500));
    let rejected_before = server.tokens("rejected").len();
    let (ok, stdout, stderr) = hostpipe(
        &data,
        &servers,
        Some(KEY),
        &["read", "secure", "oauth://secret"],
    );
    assert!(ok && stdout.contains("4711"), "{stdout} {stderr}");
    let after = server.tokens("refreshed");
    assert_eq!(after.len(), 3, "{:?}", server.events());
    assert_ne!(after[2], short);
    assert!(
        !server.tokens("rejected")[rejected_before..].contains(&short),
        "the expired token was sent instead of refreshed first"
    );

    // Another key cannot open the stored credentials: the status says so, and it is a
    // login that helps, not retrying.
    let other = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let status = status_of(&data, &servers, Some(other), "secure");
    assert_eq!(status["state"], "needs_login", "{status}");
    assert!(
        status
            .to_string()
            .contains("do not open with this HOSTPIPE_CREDENTIAL_KEY"),
        "{status}"
    );
}

#[tokio::test]
async fn serve_logs_in_through_its_callback_route() {
    let dir = tempfile::tempdir().unwrap();
    let server = AuthServer::start(dir.path());
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[mcp_servers.demo]\ncommand = {:?}\nargs = [\"demo-server\"]\n\n[mcp_servers.secure]\nurl = {:?}\n\n[mcp_servers.bot]\nurl = {:?}\nauth = {{ type = \"client_credentials\", client_id = \"bot\", client_secret_env = \"BOT_SECRET\" }}\n",
            hostpipe_cli::config::EMBEDDED_TOML,
            hostpipe_tests::hostpipe_bin(),
            server.url("/mcp"),
            server.url("/mcp")
        ),
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("serve.db").display());
    // Tokens of 3 s: the service must renew them while it runs.
    server.post("/test/ttl?seconds=3");
    let service = Service::start_with_env(
        &config,
        &store,
        &[],
        &[
            ("HOSTPIPE_CREDENTIAL_KEY", KEY),
            ("BOT_SECRET", "bot-secret-123"),
        ],
    )
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let servers = |token: &'static str| {
        let http = http.clone();
        let url = service.url("/v1/servers/secure");
        async move {
            http.get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    assert_eq!(servers(READ_TOKEN).await["status"]["state"], "needs_login");
    let ready: Value = http
        .get(service.url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(ready.to_string().contains("needs_login"), "{ready}");

    // Only an admin may start a login.
    let login = service.url("/v1/servers/secure/login");
    let refused = http
        .post(&login)
        .bearer_auth(READ_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let started: Value = http
        .post(&login)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(started["redirect_uri"], service.url("/oauth/callback"));
    assert_eq!(started["persistent"], true);
    let authorize = started["authorization_url"].as_str().unwrap();
    let approved = http.get(authorize).send().await.unwrap();
    assert_eq!(approved.status(), 302);
    let callback = approved.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        callback.starts_with(&service.url("/oauth/callback?")),
        "{callback}"
    );

    // A made-up state is refused; the real redirect logs in (no API token: a browser).
    let forged = http
        .get(service.url("/oauth/callback?code=x&state=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 400);
    let page = http.get(&callback).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Logged in"));
    // Used once only.
    assert_eq!(http.get(&callback).send().await.unwrap().status(), 400);

    let mut connected = false;
    for _ in 0..100 {
        if servers(READ_TOKEN).await["status"]["state"] == "connected" {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(connected, "{}", service.log_text());
    // Later than the first tokens' lifetime, both servers still answer: the login's token
    // was refreshed, the client credentials token granted anew before it expired.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for name in ["secure", "bot"] {
        let read = http
            .post(service.url(&format!("/v1/servers/{name}/resources/read")))
            .bearer_auth(READ_TOKEN)
            .json(&serde_json::json!({"uri": "oauth://secret"}))
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200, "{name}: {}", service.log_text());
        assert!(read.text().await.unwrap().contains("4711"));
    }
    let granted = server.tokens("client_credentials");
    assert!(granted.len() >= 2, "{:?}", server.events());
    let rejected = server.tokens("rejected");
    assert!(
        !granted.iter().any(|t| rejected.contains(t)),
        "an expired client credentials token was sent: {:?}",
        server.events()
    );
    let token = server.tokens("issued").pop().unwrap();
    let log = service.log_text();
    assert!(!log.contains(&token), "the token is in the service's log");
    assert!(
        !log.contains("code="),
        "the authorization code is in the service's log"
    );
}

#[test]
fn login_takes_the_redirect_on_a_loopback_port() {
    let dir = tempfile::tempdir().unwrap();
    let server = AuthServer::start(dir.path());
    let servers = write_servers(dir.path(), &server);
    let data = dir.path().join("data");
    let mut child = hostpipe_command()
        .env("HOSTPIPE_DATA_DIR", &data)
        .env("HOSTPIPE_CREDENTIAL_KEY", KEY)
        .env("BOT_SECRET", "bot-secret-123")
        .arg("--mcp-config")
        .arg(&servers)
        .args(["login", "secure", "--timeout", "60s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    while !url.starts_with("http") {
        url.clear();
        assert!(
            stdout.read_line(&mut url).unwrap() > 0,
            "no authorization URL printed"
        );
        url = url.trim().to_owned();
    }
    assert!(
        url.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A"),
        "{url}"
    );
    let (status, location) = raw_http::get_no_redirect(&url);
    assert_eq!(status, 302);
    let location = location.unwrap();
    // Someone else's request to the port changes nothing; the real redirect logs in.
    let origin = &location[..location.find("/callback").unwrap()];
    let (status, _) = raw_http::get_no_redirect(&format!("{origin}/callback?code=x&state=forged"));
    assert_eq!(status, 400);
    let (status, _) = raw_http::get_no_redirect(&format!("{origin}/favicon.ico"));
    assert_eq!(status, 404);
    let (status, _) = raw_http::get_no_redirect(&location);
    assert_eq!(status, 200);
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(
        out.status.success() && rest.contains("`secure` is connected"),
        "{rest} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        status_of(&data, &servers, Some(KEY), "secure")["state"],
        "connected"
    );
}
