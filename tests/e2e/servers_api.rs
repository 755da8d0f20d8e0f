//! Servers that come and go while `hostpipe serve` runs (issue 19, part 5):
//! `POST /v1/servers`, `DELETE /v1/servers/{server}`, `POST /v1/reload` and SIGHUP,
//! against server-everything over streamable HTTP and hostpipe's demo server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hostpipe_tests::{ADMIN_TOKEN, HttpEverything, Service, eventually_async};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Base64 of 32 bytes: the credential key every instance here shares.
const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// A header value that must never be stored, logged or answered in plain text.
const SECRET: &str = "Bearer e2e-secret-header-value-4242";
const FEATURES: &str = "demo://resource/static/document/features.md";

async fn call(
    svc: &Service,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let mut req = reqwest::Client::new()
        .request(method, svc.url(path))
        .timeout(Duration::from_secs(60))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let text = res.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value, headers)
}

async fn get(svc: &Service, path: &str) -> (StatusCode, Value) {
    let (s, v, _) = call(svc, reqwest::Method::GET, path, None).await;
    (s, v)
}

async fn post(svc: &Service, path: &str, body: Value) -> (StatusCode, Value) {
    let (s, v, _) = call(svc, reqwest::Method::POST, path, Some(body)).await;
    (s, v)
}

async fn delete(svc: &Service, path: &str) -> (StatusCode, Value) {
    let (s, v, _) = call(svc, reqwest::Method::DELETE, path, None).await;
    (s, v)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

/// A config with the demo server (stdio, from the file) and pipeline `support` binding
/// it; `extra` appended.
fn write_config(path: &Path, extra: &str) {
    let text = format!(
        r#"[mcp_servers.demo]
command = {exe:?}
args = ["demo-server"]

[pipelines.support]
runner = "preview"
[pipelines.support.bind_mcp_servers]
servers = ["demo"]
{extra}"#,
        exe = hostpipe_tests::hostpipe_bin(),
    );
    std::fs::write(path, text).unwrap();
}

/// Pipeline `kb`, binding server `ev` (added over the API) as required, with its
/// features document attached.
const KB_PIPELINE: &str = r#"
[pipelines.kb]
runner = "preview"
[pipelines.kb.bind_mcp_servers]
servers = [{ name = "ev", required = true }]
[pipelines.kb.resource_context_injection]
budget_tokens = 6000
attachments = [{ server = "ev", uri = "demo://resource/static/document/features.md" }]
"#;

/// The `mcpServers` body for server-everything at `url` as `name`, with a secret header.
fn everything_entry(name: &str, url: &str) -> Value {
    json!({"mcpServers": {name: {
        "url": url,
        "headers": {"Authorization": SECRET},
        "autoApprove": ["echo"],
    }}})
}

async fn status_of(svc: &Service, server: &str) -> Value {
    get(svc, &format!("/v1/servers/{server}")).await.1["status"].clone()
}

async fn wait_connected(svc: &Service, server: &str) {
    eventually_async(
        &format!("`{server}` connected"),
        Duration::from_secs(60),
        move || async move { status_of(svc, server).await["state"] == "connected" },
    )
    .await;
}

/// Every byte of the SQLite store (the file and its WAL).
fn store_bytes(db: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(PathBuf::from(p)) {
            all.extend(b);
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_over_the_api_is_listed_read_bound_and_removed() {
    let everything = HttpEverything::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    write_config(&config, "");
    let db = dir.path().join("hostpipe.db");
    let store = format!("sqlite:{}", db.display());
    let svc =
        Service::start_with_env(&config, &store, &[], &[("HOSTPIPE_CREDENTIAL_KEY", KEY)]).await;

    // Add: 201 at once (the connect goes on in the background), the ignored key said.
    let (s, v, headers) = call(
        &svc,
        reqwest::Method::POST,
        "/v1/servers",
        Some(everything_entry("ev", &everything.url)),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(headers["location"], "/v1/servers/ev");
    assert_eq!(v["server"]["name"], "ev");
    assert_eq!(v["ignored_keys"], json!(["autoApprove"]));
    assert!(!v.to_string().contains("e2e-secret"), "{v}");
    wait_connected(&svc, "ev").await;
    let (_, list) = get(&svc, "/v1/servers").await;
    let names: Vec<&str> = list["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo", "ev"]);
    assert_eq!(list["added"], json!(["ev"]), "{list}");
    assert!(!list.to_string().contains("e2e-secret"));
    // Its resources, read through the API.
    let (s, v) = post(
        &svc,
        "/v1/servers/ev/resources/read",
        json!({"uri": FEATURES}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let features = v["contents"][0]["text"].as_str().unwrap().to_owned();
    assert!(features.len() > 20, "{features}");

    // The header value is stored sealed only, and never logged.
    let bytes = store_bytes(&db);
    assert!(
        contains(&bytes, "hostpipe_mcp_servers") && contains(&bytes, &everything.url),
        "the row is in the file"
    );
    assert!(
        !contains(&bytes, "e2e-secret-header-value"),
        "the header value is in the store in plain text"
    );

    // Refusals, each naming what is wrong.
    let (s, v) = post(&svc, "/v1/servers", everything_entry("ev", &everything.url)).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "server_exists"),
        "{v}"
    );
    assert!(message(&v).contains("added over the API"), "{v}");
    let (s, v) = post(
        &svc,
        "/v1/servers",
        json!({"mcpServers": {"demo": {"url": everything.url}}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "server_exists"),
        "{v}"
    );
    assert!(message(&v).contains("configured in"), "{v}");
    let (s, v) = post(
        &svc,
        "/v1/servers",
        json!({"mcpServers": {"bad": {"url": "ftp://x"}}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_server"),
        "{v}"
    );
    assert_eq!(
        message(&v),
        "mcpServers.bad.url: `ftp://x` is not an http:// or https:// URL"
    );
    let (s, v) = post(
        &svc,
        "/v1/servers",
        json!({"mcpServers": {"sh": {"command": "sh", "args": ["-c", "touch /tmp/pwned"]}}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::FORBIDDEN, "stdio_not_allowed"),
        "{v}"
    );
    assert!(message(&v).contains("allow_stdio_servers"), "{v}");
    let (s, v) = post(
        &svc,
        "/v1/servers",
        json!({"mcpServers": {"a": {"url": everything.url}, "b": {"url": everything.url}}}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_server"),
        "{v}"
    );
    let (_, list) = get(&svc, "/v1/servers").await;
    assert_eq!(
        list["servers"].as_array().unwrap().len(),
        2,
        "nothing refused was added: {list}"
    );

    // A pipeline binds it (in the file, then a reload) and a turn reads from it; the
    // servers' sessions are kept.
    write_config(&config, KB_PIPELINE);
    let (s, v) = post(&svc, "/v1/reload", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["servers"]["kept"], json!(["demo", "ev"]), "{v}");
    assert_eq!(v["pipelines"], json!(["kb", "support"]));
    let (s, turn) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "kb", "message": "what are the features?"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    assert_eq!(turn["failed"], false, "{turn}");
    let uris: Vec<&str> = turn["request"]["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, [FEATURES]);
    let first_line = features.lines().find(|l| !l.trim().is_empty()).unwrap();
    assert!(
        turn["request"]["fenced_context"]
            .as_str()
            .unwrap()
            .contains(first_line),
        "{turn}"
    );

    // Remove: not a server of the file; an added one goes, and the pipeline binding it
    // is named. Its turns then find it unavailable, as a server that is down.
    let (s, v) = delete(&svc, "/v1/servers/demo").await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "configured_in_file"),
        "{v}"
    );
    let (s, v) = delete(&svc, "/v1/servers/ev").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v, json!({"name": "ev", "bound_by": ["kb"]}));
    let (s, v) = get(&svc, "/v1/servers/ev").await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::NOT_FOUND, "unknown_server"),
        "{v}"
    );
    assert_eq!(get(&svc, "/v1/servers").await.1["added"], json!([]));
    let (s, v) = delete(&svc, "/v1/servers/ev").await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::NOT_FOUND, "unknown_server"),
        "{v}"
    );
    let (s, turn) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "kb", "message": "features?"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    assert_eq!(turn["ended_by"], "bind_mcp_servers", "{turn}");
    assert!(
        turn["reply"]
            .as_str()
            .unwrap()
            .contains("`ev` that this pipeline requires is unavailable"),
        "{turn}"
    );
    assert!(
        !contains(&store_bytes(&db), &everything.url) || {
            // SQLite may keep the deleted row's bytes in a free page: the row is gone.
            let (_, list) = get(&svc, "/v1/servers").await;
            list["servers"].as_array().unwrap().len() == 1
        }
    );

    // The file still binds `ev`: a reload now fails naming the file and key, and
    // changes nothing.
    let (s, v) = post(&svc, "/v1/reload", json!({})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_config"),
        "{v}"
    );
    assert!(
        message(&v).contains("hostpipe.toml")
            && message(&v).contains("pipelines.kb.bind_mcp_servers.servers[0]"),
        "{v}"
    );
    let (_, pipelines) = get(&svc, "/v1/pipelines").await;
    assert_eq!(pipelines["pipelines"].as_array().unwrap().len(), 2);

    let log = svc.log_text();
    assert!(
        !log.contains("e2e-secret"),
        "a secret reached the log: {log}"
    );
    everything.stop().await;
}

/// The processes `pid` started whose environment has `HP_ROLE=…`: role → (pid, HP_GEN).
fn children_by_role(pid: u32) -> std::collections::BTreeMap<String, (u32, String)> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let parent = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split(' ').nth(1)?.parse::<u32>().ok());
        if parent != Some(pid) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{child}/environ")) else {
            continue;
        };
        let vars: Vec<String> = environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let get = |k: &str| {
            vars.iter()
                .find_map(|v| v.strip_prefix(&format!("{k}=")).map(str::to_owned))
        };
        if let Some(role) = get("HP_ROLE") {
            out.insert(role, (child, get("HP_GEN").unwrap_or_default()));
        }
    }
    out
}

/// Three demo servers told apart by their environment; `gens` gives each one's `HP_GEN`
/// (none: not configured).
fn write_roles(path: &Path, gens: &[(&str, u32)], extra: &str) {
    let exe = hostpipe_tests::hostpipe_bin();
    let mut text = String::new();
    for (role, generation) in gens {
        text += &format!(
            "[mcp_servers.{role}]\ncommand = {exe:?}\nargs = [\"demo-server\"]\nenv = {{ HP_ROLE = \"{role}\", HP_GEN = \"{generation}\" }}\n\n"
        );
    }
    let bound: Vec<String> = gens.iter().map(|(r, _)| format!("{r:?}")).collect();
    text += &format!(
        "[pipelines.default]\nrunner = \"preview\"\n[pipelines.default.bind_mcp_servers]\nservers = [{}]\n{extra}",
        bound.join(", ")
    );
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_sessions_of_unchanged_servers_on_post_and_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    write_roles(&config, &[("keep", 1), ("change", 1), ("gone", 1)], "");
    let svc = Service::start(&config, "memory", &[]).await;
    let pid = svc.pid();
    let before = children_by_role(pid);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["change", "gone", "keep"],
        "{before:?}"
    );

    write_roles(&config, &[("keep", 1), ("change", 2), ("fresh", 1)], "");
    let (s, v) = post(&svc, "/v1/reload", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["servers"],
        json!({"kept": ["keep"], "added": ["fresh"], "changed": ["change"], "removed": ["gone"]})
    );
    assert_eq!(v["warnings"], json!([]));
    wait_connected(&svc, "fresh").await;
    wait_connected(&svc, "change").await;
    let after = children_by_role(pid);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        ["change", "fresh", "keep"],
        "{after:?}"
    );
    // The unchanged server is the same process: its session was not initialized again.
    assert_eq!(after["keep"], before["keep"]);
    assert_ne!(after["change"].0, before["change"].0);
    assert_eq!(after["change"].1, "2");
    let (_, turn) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "default", "message": "hi"}),
    )
    .await;
    assert_eq!(turn["failed"], false, "{turn}");

    // SIGHUP does the same.
    write_roles(&config, &[("keep", 1), ("change", 3)], "");
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    eventually_async(
        "the SIGHUP reload",
        Duration::from_secs(30),
        move || async move {
            let c = children_by_role(pid);
            c.len() == 2 && c.get("change").is_some_and(|(_, g)| g == "3")
        },
    )
    .await;
    assert_eq!(children_by_role(pid)["keep"], before["keep"]);
    assert!(svc.log_text().contains("configuration reloaded"));

    // A file that does not parse changes nothing: 400 naming file and key on POST, a
    // log line on SIGHUP.
    std::fs::write(&config, "[mcp_servers.keep]\ncommand = 7\n").unwrap();
    let (s, v) = post(&svc, "/v1/reload", json!({})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_config"),
        "{v}"
    );
    assert!(
        message(&v).contains("hostpipe.toml") && message(&v).contains("mcp_servers.keep.command"),
        "{v}"
    );
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let logged = &svc;
    eventually_async(
        "the failed SIGHUP reload logged",
        Duration::from_secs(10),
        move || async move { logged.log_text().contains("reload on SIGHUP failed") },
    )
    .await;
    let log = svc.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("reload on SIGHUP failed"))
        .unwrap();
    assert!(line.contains("mcp_servers.keep.command"), "{line}");
    let still = children_by_role(pid);
    assert_eq!(still["keep"], before["keep"]);
    assert_eq!(still.len(), 2, "{still:?}");
    let (_, turn) = post(
        &svc,
        "/v1/turns",
        json!({"pipeline": "default", "message": "hi"}),
    )
    .await;
    assert_eq!(
        turn["failed"], false,
        "the pipelines in effect still run: {turn}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_on_one_store_see_the_servers_added_through_another() {
    let everything = HttpEverything::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    write_config(&config, "");
    let store = format!("sqlite:{}", dir.path().join("shared.db").display());
    let env = [("HOSTPIPE_CREDENTIAL_KEY", KEY)];
    let a = Service::start_with_env(&config, &store, &[], &env).await;
    let b = Service::start_with_env(&config, &store, &[], &env).await;

    let (s, v) = post(&a, "/v1/servers", everything_entry("ev", &everything.url)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // B started before: it learns at its reload (or next start), and cannot add the
    // name meanwhile.
    assert_eq!(get(&b, "/v1/servers/ev").await.0, StatusCode::NOT_FOUND);
    let (s, v) = post(&b, "/v1/servers", everything_entry("ev", &everything.url)).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "server_exists"),
        "{v}"
    );
    assert!(message(&v).contains("POST /v1/reload"), "{v}");
    let (s, v) = post(&b, "/v1/reload", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["servers"]["added"], json!(["ev"]));
    wait_connected(&b, "ev").await;
    // Its sealed header opened there: server-everything answers a read.
    let (s, v) = post(
        &b,
        "/v1/servers/ev/resources/read",
        json!({"uri": FEATURES}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // A third instance has it from the start, so its config may bind it: a pipeline
    // binding a stored server builds, and its turn reads from it. One without the key
    // leaves it out and says why.
    let config_kb = dir.path().join("kb.toml");
    write_config(&config_kb, KB_PIPELINE);
    let c = Service::start_with_env(&config_kb, &store, &[], &env).await;
    wait_connected(&c, "ev").await;
    let (s, turn) = post(
        &c,
        "/v1/turns",
        json!({"pipeline": "kb", "message": "features?"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{turn}");
    assert_eq!(turn["failed"], false, "{turn}");
    assert_eq!(turn["request"]["context"][0]["uri"], FEATURES, "{turn}");
    // The command line on the same store has it too: its pipelines may bind it.
    let cli = |args: &[&str]| {
        let out = hostpipe_tests::hostpipe_command()
            .args(["--config", config_kb.to_str().unwrap(), "--store", &store])
            .args(args)
            .env("HOSTPIPE_CREDENTIAL_KEY", KEY)
            .env_remove("HOSTPIPE_LOG")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        stdout
    };
    let listed = cli(&["servers"]);
    assert!(
        listed.contains("ev") && listed.contains("connected"),
        "{listed}"
    );
    let ran = cli(&["run", "--pipeline", "kb", "features?"]);
    assert!(ran.contains(FEATURES), "{ran}");
    let keyless = Service::start(&config, &store, &[]).await;
    assert_eq!(
        get(&keyless, "/v1/servers/ev").await.0,
        StatusCode::NOT_FOUND
    );
    assert!(keyless.log_text().contains("stored server `ev` has sealed header or env values and HOSTPIPE_CREDENTIAL_KEY is not set"), "{}", keyless.log_text());

    // Removed through A: gone from the store; B drops it at its reload.
    let (s, v) = delete(&a, "/v1/servers/ev").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = post(&b, "/v1/reload", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["servers"]["removed"], json!(["ev"]));
    assert_eq!(get(&b, "/v1/servers/ev").await.0, StatusCode::NOT_FOUND);
    everything.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_is_added_only_when_allowed_and_gets_only_its_own_env() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    write_config(&config, "\n[serve]\nallow_stdio_servers = true\n");
    let svc =
        Service::start_with_env(&config, "memory", &[], &[("HOSTPIPE_CREDENTIAL_KEY", KEY)]).await;
    let entry = json!({"mcpServers": {"local": {
        "command": hostpipe_tests::hostpipe_bin(),
        "args": ["demo-server"],
        "env": {"HP_ROLE": "added", "HP_GEN": "1"},
    }}});
    let (s, v) = post(&svc, "/v1/servers", entry).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    wait_connected(&svc, "local").await;
    let children = children_by_role(svc.pid());
    let (pid, generation) = children["added"].clone();
    assert_eq!(generation, "1");
    let environ = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
        .into_owned();
    assert!(environ.contains("PATH="), "{environ}");
    assert!(
        !environ.contains("HOSTPIPE_") && !environ.contains(ADMIN_TOKEN),
        "hostpipe's secrets reached the server: {environ}"
    );
    let (s, v) = post(
        &svc,
        "/v1/servers/local/resources/read",
        json!({"uri": "demo://docs/handbook.md"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // A pin of a server that cannot tell (its command does not exist) is kept, with a
    // warning saying it could not be checked.
    let entry = json!({"mcpServers": {"ghost": {"command": "/nonexistent/hostpipe-test-server"}}});
    let (s, v) = post(&svc, "/v1/servers", entry).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // Whether still starting or failed, it is never connected.
    let (s, v) = post(
        &svc,
        "/v1/conversations/c1/attachments",
        json!({"server": "ghost", "uri": "g://a"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["uri"], "g://a");
    assert_eq!(
        v["warnings"],
        json!([
            "could not check that server `ghost` has it (the server is not connected); the pin is kept, and a turn that cannot read it says so in its trace"
        ])
    );
    // Removed: the process goes.
    let (s, v) = delete(&svc, "/v1/servers/local").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    eventually_async(
        "the removed server's process exits",
        Duration::from_secs(10),
        move || async move {
            !std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        },
    )
    .await;
}
