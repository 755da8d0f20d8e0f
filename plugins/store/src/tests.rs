#![allow(clippy::unwrap_used, clippy::panic)]

use hostpipe_core::store::check_store;

use super::*;

#[tokio::test]
async fn sqlite_passes_the_store_checks() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_sqlite(&dir.path().join("a dir/hostpipe?#%.db"))
        .await
        .unwrap();
    check_store(&store).await.unwrap();
    assert!(
        dir.path().join("a dir/hostpipe?#%.db").is_file(),
        "the file keeps its name"
    );
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
