#![allow(clippy::unwrap_used)]

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
    assert!(
        e.starts_with("cannot open the attachment store postgres://me:***@127.0.0.1:1/db: "),
        "{e}"
    );
}

#[test]
fn sqlite_urls_keep_special_characters_in_the_file_name() {
    assert_eq!(
        sqlite_url(Path::new("/a b/x?y#z%.db")),
        "sqlite:///a b/x%3Fy%23z%25.db"
    );
}
