#![allow(clippy::unwrap_used, clippy::panic)]

use hostpipe_engine::testkit::{check_sealed_rows, check_server_entries, check_store};

use super::*;

#[tokio::test]
async fn sqlite_passes_the_store_checks() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_sqlite(&dir.path().join("a dir/hostpipe?#%.db"))
        .await
        .unwrap();
    check_store(&store).await.unwrap();
    check_sealed_rows(&store).await.unwrap();
    check_server_entries(&store).await.unwrap();
    assert!(
        dir.path().join("a dir/hostpipe?#%.db").is_file(),
        "the file keeps its name"
    );
}

#[tokio::test]
async fn memory_server_entries_pass_the_checks() {
    check_server_entries(&hostpipe_engine::MemoryServerEntries::default())
        .await
        .unwrap();
}

/// A server added by one process is there for another that opens the file later.
#[tokio::test]
async fn a_stored_server_survives_reopening_the_file() {
    use hostpipe_engine::{ServerEntries as _, StoredServer};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostpipe.db");
    let first = SqlStore::open_sqlite(&path).await.unwrap();
    let row = StoredServer {
        name: "kb".into(),
        entry: r#"{"url":"http://127.0.0.1:1/mcp"}"#.into(),
        sealed: None,
        created_at_ms: 1,
    };
    assert!(first.add_stored_server(&row).await.unwrap());
    let second = SqlStore::open_sqlite(&path).await.unwrap();
    assert_eq!(
        second.stored_servers().await.unwrap(),
        std::slice::from_ref(&row)
    );
    assert!(!second.add_stored_server(&row).await.unwrap());
    first.close().await;
    second.close().await;
}

#[tokio::test]
async fn a_pin_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostpipe.db");
    let owner = PinOwner::Conversation("chat-1".into());
    let first = SqlStore::open_sqlite(&path).await.unwrap();
    let pin = first
        .pin(NewPin {
            owner: owner.clone(),
            server: "kb".into(),
            target: AttachmentTarget::Uri {
                uri: "kb://t/1".into(),
            },
            expires_at_ms: None,
        })
        .await
        .unwrap();
    first.close().await;
    let second = SqlStore::open_sqlite(&path).await.unwrap();
    assert_eq!(second.pins(&[owner], unix_ms_now()).await.unwrap(), [pin]);
}

#[tokio::test]
async fn bad_urls_say_what_is_wrong() {
    let e = SqlStore::open("mysql://x").await.unwrap_err().to_string();
    assert_eq!(
        e,
        "cannot open the attachment store mysql://x: unknown scheme: use sqlite:PATH or postgres://USER@HOST/DATABASE"
    );
    let e = SqlStore::open("postgres://me:secret@127.0.0.1:1/db")
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains("secret"), "{e}");
    assert!(e.contains("Connection refused"), "the cause is named: {e}");
    assert!(
        e.starts_with("cannot open the attachment store postgres://me:***@127.0.0.1:1/db: "),
        "{e}"
    );
    for url in [
        "postgres://127.0.0.1:1/db?user=me&password=secret",
        "postgres://me:se/cr#et@127.0.0.1:1/db",
    ] {
        let e = SqlStore::open(url).await.unwrap_err().to_string();
        assert!(!e.contains("secret") && !e.contains("cr#et"), "{e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        "not a database, not at all, really not a database file",
    )
    .unwrap();
    let e = SqlStore::open_sqlite(&junk).await.unwrap_err().to_string();
    assert!(e.contains("file is not a database"), "{e}");
    let upper = format!("SQLITE:{}", dir.path().join("upper.db").display());
    if let Err(e) = SqlStore::open(&upper).await {
        panic!("schemes are case-insensitive: {e}");
    }
}

#[test]
fn sqlite_urls_keep_special_characters_in_the_file_name() {
    assert_eq!(
        sqlite_url(Path::new("/a b/x?y#z%.db")),
        "sqlite:///a b/x%3Fy%23z%25.db"
    );
}

#[tokio::test]
async fn a_turn_with_more_reads_than_one_statement_takes_is_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_sqlite(&dir.path().join("h.db"))
        .await
        .unwrap();
    let records: Vec<InjectionRecord> = (0..1201u32)
        .map(|seq| InjectionRecord {
            turn_id: "t".into(),
            seq,
            at_ms: 5,
            pipeline: "p".into(),
            conversation: None,
            message: None,
            read: ReadRecord {
                server: "kb".into(),
                uri: format!("kb://{seq}"),
                mime_type: None,
                scope: Scope::Pipeline,
                bytes: 1,
                tokens_before: 1,
                tokens_estimated: false,
                tokens_after: 1,
                treatment: hostpipe_core::Treatment::Whole,
                elapsed_ms: 0,
                cache_hit: false,
                outcome: hostpipe_core::ReadOutcome::Read,
                error: None,
                origin: hostpipe_core::ReadOrigin::Host,
                consent: None,
                passages: Vec::new(),
                reason: None,
            },
        })
        .collect();
    store.record(&records).await.unwrap();
    let back = store
        .history(&HistoryQuery {
            limit: HistoryQuery::MAX_LIMIT,
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(back, records);
    // A failing batch leaves nothing behind: the same keys again violate the primary key.
    assert!(store.record(&records).await.is_err());
    let again = store
        .history(&HistoryQuery {
            limit: HistoryQuery::MAX_LIMIT,
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(again.len(), 1201);
}

/// Reads written at schema version 4 (before `outcome`), then opened by this version:
/// each gets the outcome its error text tells.
async fn old_reads_get_their_outcome(url: &str) {
    sqlx::any::install_default_drivers();
    let (_, normalized) = normalize_url(url).unwrap();
    let pool = AnyPoolOptions::new()
        .max_connections(1)
        .connect(&normalized)
        .await
        .unwrap();
    migrator(&MIGRATIONS[..4]).run(&pool).await.unwrap();
    let errors = [
        ("kb://ok", None),
        (
            "kb://secret",
            Some("withheld: denied by rules[0] (server kb)"),
        ),
        (
            "kb://bundle",
            Some("withheld (kb://private/a): denied by rules[0] (uri kb://private/*)"),
        ),
        ("kb://mine", Some("not read: its audience is the user only")),
        (
            "other://x",
            Some("server `other` is not bound for this turn (bound: kb)"),
        ),
        (
            "kb://big",
            Some("kb://big from `kb` refused: 2048 bytes is over max_resource_bytes (1024)"),
        ),
        (
            "kb://many",
            Some(
                "refused (kb://many/2): MIME type image/png is not allowed by the pipeline's policy",
            ),
        ),
        (
            "kb://broken",
            Some("MCP server `kb`: resources/read failed with JSON-RPC error -32603: disk on fire"),
        ),
    ];
    for (seq, (uri, error)) in errors.iter().enumerate() {
        sqlx::query(
            "INSERT INTO hostpipe_reads (turn_id, seq, at_ms, pipeline, conversation, message, \
             server, uri, mime_type, scope, bytes, tokens_before, tokens_estimated, tokens_after, \
             treatment, duration_ms, cache_hit, error, origin, consent, passages, reason) \
             VALUES ('t', $1, 5, 'p', NULL, NULL, 'kb', $2, NULL, 'pipeline', 0, 0, 0, 0, \
             '{\"kind\":\"omitted\"}', 0, 0, $3, 'host', NULL, NULL, NULL)",
        )
        .bind(i64::try_from(seq).unwrap())
        .bind(*uri)
        .bind(error.map(str::to_owned))
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
    let store = SqlStore::open(url).await.unwrap();
    let outcomes = |records: Vec<InjectionRecord>| {
        records
            .into_iter()
            .map(|r| (r.read.uri, r.read.outcome))
            .collect::<Vec<_>>()
    };
    let all = store.history(&HistoryQuery::default()).await.unwrap();
    use ReadOutcome::{Failed, NotRead, Read, Withheld};
    let want: Vec<(String, ReadOutcome)> = [
        ("kb://ok", Read),
        ("kb://secret", Withheld),
        ("kb://bundle", Withheld),
        ("kb://mine", NotRead),
        ("other://x", NotRead),
        ("kb://big", Withheld),
        ("kb://many", Withheld),
        ("kb://broken", Failed),
    ]
    .into_iter()
    .map(|(u, o)| (u.to_owned(), o))
    .collect();
    assert_eq!(outcomes(all), want);
    let errors = store
        .history(&HistoryQuery {
            errors_only: true,
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(outcomes(errors), want[1..]);
    store.close().await;
}

#[tokio::test]
async fn sqlite_reads_written_before_the_outcome_column_get_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir.path().join("old.db"));
    old_reads_get_their_outcome(&url).await;
}

/// The URL of a new, empty database on the server of `HOSTPIPE_TEST_POSTGRES_URL` (one
/// the tests may create databases on, as for the end-to-end tests), and a connection
/// to drop it with; `None` when the variable is not set.
async fn postgres_database() -> Option<(String, String, AnyPool)> {
    let url = std::env::var("HOSTPIPE_TEST_POSTGRES_URL").ok()?;
    sqlx::any::install_default_drivers();
    let name = format!("hostpipe_test_{}", unique());
    let admin = AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .unwrap();
    let (base, _) = url.split_once('?').unwrap_or((&url, ""));
    let db_url = format!("{}/{name}", base.rsplit_once('/').unwrap().0);
    Some((db_url, name, admin))
}

async fn drop_database(name: &str, admin: AnyPool) {
    admin
        .execute(AssertSqlSafe(format!("DROP DATABASE {name}")))
        .await
        .unwrap();
}

/// With `HOSTPIPE_TEST_POSTGRES_URL`: the same upgrade on PostgreSQL.
#[tokio::test]
async fn postgres_reads_written_before_the_outcome_column_get_theirs() {
    let Some((url, name, admin)) = postgres_database().await else {
        return;
    };
    old_reads_get_their_outcome(&url).await;
    drop_database(&name, admin).await;
}

/// With `HOSTPIPE_TEST_POSTGRES_URL`: the store checks on PostgreSQL.
#[tokio::test]
async fn postgres_passes_the_store_checks() {
    let Some((url, name, admin)) = postgres_database().await else {
        return;
    };
    let store = SqlStore::open(&url).await.unwrap();
    check_store(&store).await.unwrap();
    check_sealed_rows(&store).await.unwrap();
    check_server_entries(&store).await.unwrap();
    store.close().await;
    drop_database(&name, admin).await;
}

/// A name part unique to this process and moment.
fn unique() -> String {
    format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )
}
