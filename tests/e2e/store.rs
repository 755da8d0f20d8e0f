//! Pins and the read history, persisted: SQLite through the `hostpipe` binary (each
//! command its own process, so every step is a restart), and PostgreSQL started for the
//! test, shared by two workers.

use std::path::Path;

use hostpipe_core::{AttachmentTarget, Turn};
use hostpipe_engine::testkit::check_store;
use hostpipe_engine::{HistoryQuery, NewPin, PinOwner};
use hostpipe_tests::{Postgres, hostpipe_command};
use serde_json::Value;

/// Runs `hostpipe ARGS` with `data` as its data directory: (success, stdout, stderr).
fn hostpipe(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = hostpipe_command()
        .env("HOSTPIPE_DATA_DIR", data)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `(uri, scope)` of every block of a `run --json` document.
fn blocks(doc: &Value) -> Vec<(String, String)> {
    doc["preview"]["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["uri"].as_str().unwrap().to_owned(),
                b["scope"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn run_json(data: &Path, args: &[&str]) -> Value {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = hostpipe(data, &all);
    assert!(ok, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn a_conversation_pin_survives_restarts_and_a_message_attachment_is_read_once() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let (ok, stdout, stderr) = hostpipe(
        data,
        &[
            "attach",
            "--conversation",
            "chat-1",
            "demo",
            "demo://docs/{topic}",
            "--arg",
            "topic=incident-runbook",
        ],
    );
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(
            "pinned demo://docs/{topic} (topic=incident-runbook) from server `demo` to conversation `chat-1` (id "
        ),
        "{stdout}"
    );
    assert!(
        data.join("hostpipe.db").is_file(),
        "the store is a file in the data directory"
    );

    // Turn 1 (a new process): the pin at conversation scope, plus a message attachment.
    let first = run_json(
        data,
        &[
            "--conversation",
            "chat-1",
            "--attach",
            "demo",
            "demo://data/sample.bin",
            "what now?",
        ],
    );
    let b = blocks(&first);
    assert!(
        b.contains(&("demo://docs/incident-runbook".into(), "conversation".into())),
        "{b:?}"
    );
    assert!(
        b.contains(&("demo://data/sample.bin".into(), "message".into())),
        "{b:?}"
    );

    // Turn 2: the pin again, the message attachment not.
    let second = run_json(data, &["--conversation", "chat-1", "and then?"]);
    let b = blocks(&second);
    assert!(
        b.contains(&("demo://docs/incident-runbook".into(), "conversation".into())),
        "{b:?}"
    );
    assert!(
        !b.iter().any(|(u, _)| u == "demo://data/sample.bin"),
        "{b:?}"
    );

    // Another conversation does not get it.
    let other = run_json(data, &["--conversation", "chat-2", "hi"]);
    assert!(
        !blocks(&other)
            .iter()
            .any(|(u, _)| u == "demo://docs/incident-runbook")
    );

    // The history has both turns of chat-1, newest first, with their reads.
    let (ok, stdout, stderr) = hostpipe(data, &["history", "--conversation", "chat-1", "--json"]);
    assert!(ok, "{stderr}");
    let records: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let mut turns: Vec<&str> = records
        .iter()
        .map(|r| r["turn_id"].as_str().unwrap())
        .collect();
    turns.dedup();
    assert_eq!(turns.len(), 2, "{stdout}");

    // `--limit` and `--offset` count turns: each page holds whole turns, newest first.
    let (ok, all, _) = hostpipe(data, &["history", "--json"]);
    assert!(ok);
    let all: Vec<Value> = serde_json::from_str(&all).unwrap();
    let mut order: Vec<&str> = all.iter().map(|r| r["turn_id"].as_str().unwrap()).collect();
    order.dedup();
    assert_eq!(order.len(), 3, "three turns: {order:?}");
    for (offset, turn) in order.iter().enumerate() {
        let offset = offset.to_string();
        let (ok, page, stderr) = hostpipe(
            data,
            &["history", "--limit", "1", "--offset", &offset, "--json"],
        );
        assert!(ok, "{stderr}");
        let page: Vec<Value> = serde_json::from_str(&page).unwrap();
        let whole: Vec<&Value> = all.iter().filter(|r| r["turn_id"] == *turn).collect();
        assert_eq!(page.iter().collect::<Vec<_>>(), whole, "turn {offset}");
    }
    // The table fits the terminal (`COLUMNS` here): cells wrap instead.
    let out = hostpipe_command()
        .env("HOSTPIPE_DATA_DIR", data)
        .env("COLUMNS", "90")
        .args(["history", "--limit", "2"])
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    // Two turns, each under a heading: when, which turn, where.
    let headings: Vec<&str> = table.lines().filter(|l| l.contains(" · turn ")).collect();
    assert_eq!(headings.len(), 2, "{table}");
    assert!(
        headings[0].ends_with(" · pipeline default · conversation chat-2"),
        "{table}"
    );
    assert!(
        headings[1].ends_with(" · pipeline default · conversation chat-1"),
        "{table}"
    );
    for line in table.lines() {
        assert!(
            line.chars().count() <= 90,
            "wider than 90 columns: {line}\n{table}"
        );
    }
    let reads_of = |uri: &str| records.iter().filter(|r| r["uri"] == uri).count();
    assert_eq!(reads_of("demo://docs/incident-runbook"), 2);
    assert_eq!(reads_of("demo://data/sample.bin"), 1);
    assert!(
        records[0]["turn_id"] != records.last().unwrap()["turn_id"]
            && records
                .iter()
                .filter(|r| r["turn_id"] == records[0]["turn_id"])
                .all(|r| r["uri"] != "demo://data/sample.bin"),
        "the newest turn (the second) comes first"
    );
    // The token counts are the ones the preview showed.
    let pinned = first["preview"]["context"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["uri"] == "demo://docs/incident-runbook")
        .unwrap();
    let recorded = records
        .iter()
        .rfind(|r| r["uri"] == "demo://docs/incident-runbook")
        .unwrap();
    assert_eq!(recorded["tokens_after"], pinned["tokens_after"]);
    assert_eq!(recorded["scope"], "conversation");
    assert_eq!(recorded["pipeline"], "default");

    // Detached: the next turn goes without it.
    let (ok, stdout, stderr) = hostpipe(
        data,
        &[
            "detach",
            "--conversation",
            "chat-1",
            "demo",
            "demo://docs/{topic}",
            "--arg",
            "topic=incident-runbook",
        ],
    );
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout,
        "detached demo://docs/{topic} (topic=incident-runbook) of server `demo` from conversation `chat-1`\n"
    );
    let third = run_json(data, &["--conversation", "chat-1", "still there?"]);
    assert!(
        !blocks(&third)
            .iter()
            .any(|(u, _)| u == "demo://docs/incident-runbook")
    );
    let (ok, stdout, _) = hostpipe(data, &["attachments", "--conversation", "chat-1"]);
    assert!(ok);
    assert_eq!(stdout, "conversation `chat-1` has no attachments\n");
}

#[test]
fn history_shows_each_turns_uris_and_token_counts_and_errors_shows_a_failed_read() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let (ok, _, stderr) = hostpipe(
        data,
        &[
            "run",
            "--conversation",
            "c",
            "--attach",
            "demo",
            "demo://no/such",
            "hello",
        ],
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains("demo://no/such"), "{stderr}");

    let (ok, table, stderr) = hostpipe(data, &["history"]);
    assert!(ok, "{stderr}");
    let (ok, json, _) = hostpipe(data, &["history", "--json"]);
    assert!(ok);
    let records: Vec<Value> = serde_json::from_str(&json).unwrap();
    // The embedded pipeline reads its four attachments, plus the failed one.
    assert_eq!(records.len(), 5, "{json}");
    for r in &records {
        let uri = r["uri"].as_str().unwrap();
        let tokens = format!("{} → {}", r["tokens_before"], r["tokens_after"]);
        let row = table
            .lines()
            .find(|l| l.contains(&format!(" {uri} ")))
            .unwrap_or_else(|| panic!("no row for {uri}:\n{table}"));
        assert!(row.contains(&tokens), "{row} lacks {tokens}");
    }
    let app_json = records
        .iter()
        .find(|r| r["uri"] == "demo://config/app.json")
        .unwrap();
    assert!(app_json["tokens_after"].as_u64().unwrap() > 0);
    assert_eq!(app_json["error"], Value::Null);

    let (ok, errors, _) = hostpipe(data, &["history", "--errors", "--json"]);
    assert!(ok);
    let errors: Vec<Value> = serde_json::from_str(&errors).unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["uri"], "demo://no/such");
    assert_eq!(errors[0]["scope"], "message");
    // The demo server speaks 2026-07-28, where not-found is -32602 (2025-11-25: -32002).
    assert_eq!(
        errors[0]["error"],
        "MCP server `demo`: resources/read failed with JSON-RPC error -32602: no resource `demo://no/such`"
    );
    let (ok, table, _) = hostpipe(data, &["history", "--errors"]);
    assert!(ok);
    assert!(table.contains("no resource `demo://no/such`"), "{table}");
    assert!(!table.contains("demo://config/app.json"), "{table}");

    // Filters that match nothing.
    let (ok, out, _) = hostpipe(data, &["history", "--conversation", "other"]);
    assert!(ok);
    assert_eq!(out, "no reads match\n");
    let (ok, out, _) = hostpipe(data, &["history", "--since", "2999-01-01T00:00:00Z"]);
    assert!(ok);
    assert_eq!(out, "no reads match\n");
}

#[test]
fn attach_mistakes_name_what_is_wrong() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let cases: [(&[&str], &str); 9] = [
        (
            &["attach", "--pipeline", "nosuch", "demo", "demo://x"],
            "error: <embedded default config>: no pipeline `nosuch`; pipelines: default\n",
        ),
        (
            &[
                "attach",
                "--conversation",
                "c",
                "demo",
                "demo://docs/{topic}",
                "--arg",
                "topic=a",
                "--arg-var",
                "topic=b",
            ],
            "error: template argument `topic` is given twice (--arg / --arg-var): give it once\n",
        ),
        (
            &["history", "--since", "1h", "--until", "2h"],
            "error: --since (",
        ),
        (
            &[
                "detach",
                "--pipeline",
                "default",
                "demo",
                "demo://config/app.json",
            ],
            "error: demo://config/app.json of server `demo` is attached by the config of pipeline `default` (<embedded default config>): remove it from [pipelines.default.resource_context_injection] attachments\n",
        ),
        (
            &["attach", "--conversation", "c", "nope", "demo://x"],
            "error: unknown MCP server `nope`; configured servers: demo\n",
        ),
        (
            &[
                "attach",
                "--conversation",
                "c",
                "demo",
                "demo://docs/{topic}",
            ],
            "error: URI template `demo://docs/{topic}` needs `topic`: give --arg topic=VALUE, or --arg-var topic=NAME to take turn variable NAME\n",
        ),
        (
            &[
                "attach",
                "--conversation",
                "c",
                "demo",
                "demo://docs/{topic}",
                "--arg",
                "topc=x",
            ],
            "error: URI template `demo://docs/{topic}` has no variable `topc`; its variables: topic\n",
        ),
        (
            &["attach", "--conversation", "c", "demo", "handbook.md"],
            "error: `handbook.md` is not a URI (no scheme, e.g. demo://docs/handbook.md)\n",
        ),
        (
            &["detach", "--conversation", "c", "--id", "0000"],
            "error: conversation `c` has no pin 0000 (see `hostpipe attachments --conversation c`)\n",
        ),
    ];
    for (args, want) in cases {
        let (ok, _, stderr) = hostpipe(data, args);
        assert!(!ok, "{args:?} succeeded");
        if want.ends_with('\n') {
            assert_eq!(stderr, want, "{args:?}");
        } else {
            assert!(stderr.starts_with(want), "{args:?}: {stderr}");
        }
    }
    for expires in ["0s", "200y"] {
        let (ok, _, stderr) = hostpipe(
            data,
            &[
                "attach",
                "--conversation",
                "c",
                "demo",
                "demo://x",
                "--expires-in",
                expires,
            ],
        );
        assert!(
            !ok && stderr.contains("--expires-in"),
            "{expires}: {stderr}"
        );
    }
    // A password in HOSTPIPE_STORE_URL is not shown by --help.
    let out = hostpipe_command()
        .env(
            "HOSTPIPE_STORE_URL",
            "postgres://bob:S3cretPW@127.0.0.1:1/db",
        )
        .args(["history", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("S3cretPW"));
    // A reader that goes away early is not an error (`run` prints only after the demo
    // server has answered, long after the pipe is closed here).
    let mut child = hostpipe_command()
        .env("HOSTPIPE_DATA_DIR", data)
        .args(["run", "hello"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let (ok, _, stderr) = hostpipe(
        data,
        &[
            "attach",
            "--conversation",
            "c",
            "--pipeline",
            "p",
            "demo",
            "demo://x",
        ],
    );
    assert!(!ok);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    // A store that cannot be opened: a turn goes on, with a warning; attach fails.
    let blocked = data.join("file");
    std::fs::write(&blocked, "").unwrap();
    let url = format!("sqlite:{}/sub/hostpipe.db", blocked.display());
    let (ok, stdout, stderr) = hostpipe(data, &["--store", &url, "run", "hello"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("== user\nhello"));
    assert!(
        stderr.starts_with(&format!(
            "warning: cannot open the attachment store sqlite:{}/sub/hostpipe.db: cannot create the directory",
            blocked.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("the turn goes on without pinned attachments"),
        "{stderr}"
    );
    let (ok, _, stderr) = hostpipe(
        data,
        &[
            "--store",
            &url,
            "attach",
            "--conversation",
            "c",
            "demo",
            "demo://x",
        ],
    );
    assert!(!ok);
    assert!(
        stderr.starts_with("error: cannot open the attachment store"),
        "{stderr}"
    );
}

#[tokio::test]
async fn postgres_passes_the_store_checks_and_two_workers_share_pins_and_history() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let checks = pg.database(&format!("hp_checks_{}", std::process::id()));
    let store = hostpipe_store::SqlStore::open(&checks).await.unwrap();
    assert_eq!(store.backend(), hostpipe_store::Backend::Postgres);
    check_store(&store).await.unwrap();
    hostpipe_engine::testkit::check_sealed_rows(&store)
        .await
        .unwrap();
    store.close().await;

    // Two workers on one database: the first pins, the second runs the turn.
    let shared = pg.database(&format!("hp_shared_{}", std::process::id()));
    // The embedded default, with the demo server spawned from the hostpipe binary.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hostpipe.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[mcp_servers.demo]\ncommand = {:?}\nargs = [\"demo-server\"]\n",
            hostpipe_cli::config::EMBEDDED_TOML,
            hostpipe_tests::hostpipe_bin().display().to_string()
        ),
    )
    .unwrap();
    let mut worker_a = hostpipe_cli::App::load(Some(&config), None).unwrap();
    let mut worker_b = hostpipe_cli::App::load(Some(&config), None).unwrap();
    let (a, b) = tokio::join!(
        worker_a.open_store(Some(&shared)),
        worker_b.open_store(Some(&shared))
    );
    let (a, _) = (a.unwrap().unwrap(), b.unwrap().unwrap());
    a.pin(NewPin {
        owner: PinOwner::Conversation("room-9".into()),
        server: "demo".into(),
        target: AttachmentTarget::Uri {
            uri: "demo://data/sample.bin".into(),
        },
        expires_at_ms: None,
    })
    .await
    .unwrap();
    worker_b.connect().await;
    let mut turn = Turn::new("default", "what is in the sample?");
    turn.ids.conversation = Some("room-9".into());
    let outcome = worker_b.pipeline("default").unwrap().run_turn(turn).await;
    worker_b.shutdown().await;
    assert_eq!(
        outcome.status,
        hostpipe_engine::TurnStatus::Completed,
        "{}",
        outcome.reply
    );
    let request = outcome.request.as_ref().unwrap();
    let pinned = crate::block(request, "demo://data/sample.bin");
    assert_eq!(pinned.source.scope, hostpipe_core::Scope::Conversation);

    // Worker A sees what worker B read.
    let history = a
        .history(&HistoryQuery {
            conversation: Some("room-9".into()),
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(history.len(), 5, "{history:?}");
    assert!(history.iter().all(|r| r.turn_id == outcome.trace.turn_id()));
    let sample = history
        .iter()
        .find(|r| r.read.uri == "demo://data/sample.bin")
        .unwrap();
    assert_eq!(sample.read.scope, hostpipe_core::Scope::Conversation);
    assert_eq!(sample.read.bytes, 2048);
    assert_eq!(sample.read.tokens_after, pinned.tokens_after);
}
