//! The store checks: what every [`AttachmentStore`] must do, for implementers' tests
//! (the SQLite, PostgreSQL and in-memory stores pass them).

use hostpipe_core::{
    ArgumentValue, AttachmentTarget, CallOrigin, ReadOrigin, ReadOutcome, ReadRecord, Scope,
    ToolCallRecord, Treatment, VariableRef,
};

use crate::store::{
    AttachmentStore, ConsentGrant, GrantKind, HistoryQuery, InjectionRecord, MAX_ID_BYTES, NewPin,
    PinOwner, PinQuery, StoreError, ToolCallEntry, unix_ms_now,
};

/// Checks that `store` behaves as [`AttachmentStore`] says, on an empty store: pins and
/// re-pins, expiry, removal by target and by id, history filters, order and
/// pagination, pruning, tool calls, conversation grants. For implementers' tests:
/// `check_store(&my_store).await.unwrap()`.
///
/// # Errors
/// The first expectation that failed, or the store's own error.
pub async fn check_store(store: &dyn AttachmentStore) -> Result<(), String> {
    let now = unix_ms_now();
    let pinned = check_pins(store, now).await?;
    check_removal(store, now, &pinned).await?;
    check_history(store, now).await?;
    check_tool_calls(store, now).await?;
    check_grants(store, now).await
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

#[allow(clippy::needless_pass_by_value)]
fn e(e: StoreError) -> String {
    e.to_string()
}

fn conv() -> PinOwner {
    PinOwner::Conversation("c-1".into())
}

fn pipe() -> PinOwner {
    PinOwner::Pipeline("p-1".into())
}

fn uri(u: &str) -> AttachmentTarget {
    AttachmentTarget::Uri { uri: u.into() }
}

fn new(owner: &PinOwner, target: &AttachmentTarget, expires: Option<i64>) -> NewPin {
    NewPin {
        owner: owner.clone(),
        server: "kb".into(),
        target: target.clone(),
        expires_at_ms: expires,
    }
}

/// Pins: create, re-pin (same id, new expiry), template round trip, expiry, owners,
/// invalid pins. The id of the template pin, for [`check_removal`].
async fn check_pins(store: &dyn AttachmentStore, now: i64) -> Result<String, String> {
    let (conv, pipe) = (conv(), pipe());
    let template = AttachmentTarget::Template {
        template: "kb://tickets/{id}".into(),
        arguments: [
            ("id".to_owned(), ArgumentValue::Literal("7".into())),
            (
                "user".to_owned(),
                ArgumentValue::Variable(VariableRef {
                    var: "sender".into(),
                    default: None,
                }),
            ),
        ]
        .into_iter()
        .collect(),
    };
    let a = store
        .pin(new(&conv, &uri("kb://a"), None))
        .await
        .map_err(e)?;
    let again = store
        .pin(new(&conv, &uri("kb://a"), Some(now + 3_600_000)))
        .await
        .map_err(e)?;
    expect("re-pin keeps the id", &again.id, &a.id)?;
    expect(
        "re-pin sets the expiry",
        again.expires_at_ms,
        Some(now + 3_600_000),
    )?;
    let t = store.pin(new(&conv, &template, None)).await.map_err(e)?;
    expect("template round trip", &t.target, &template)?;
    store
        .pin(new(&conv, &uri("kb://expired"), Some(now - 1)))
        .await
        .map_err(e)?;
    store
        .pin(new(&pipe, &uri("kb://p"), None))
        .await
        .map_err(e)?;
    let live = store
        .pins(std::slice::from_ref(&conv), now)
        .await
        .map_err(e)?;
    let uris: Vec<AttachmentTarget> = live.iter().map(|p| p.target.clone()).collect();
    expect(
        "live conversation pins, oldest first",
        uris,
        vec![uri("kb://a"), template.clone()],
    )?;
    let both = store
        .pins(&[conv.clone(), pipe.clone()], now)
        .await
        .map_err(e)?;
    expect("pins of two owners", both.len(), 3)?;
    expect(
        "a pipeline pin's scope",
        both.iter()
            .find(|p| p.target == uri("kb://p"))
            .map(|p| p.attachment().scope),
        Some(Scope::Pipeline),
    )?;
    check_pin_listing(store, now, &template).await?;
    let other = store
        .pins(&[PinOwner::Conversation("c-2".into())], now)
        .await
        .map_err(e)?;
    expect("another conversation has none", other.len(), 0)?;
    match store
        .pin(NewPin {
            owner: conv.clone(),
            server: "kb".into(),
            target: AttachmentTarget::Uri { uri: " ".into() },
            expires_at_ms: None,
        })
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => return Err(format!("an empty URI: got {other:?}, want Invalid")),
    }

    match store
        .pin(NewPin {
            owner: PinOwner::Conversation("x".repeat(MAX_ID_BYTES + 1)),
            server: "kb".into(),
            target: uri("kb://a"),
            expires_at_ms: None,
        })
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => return Err(format!("an over-long id: got {other:?}, want Invalid")),
    }
    // A long URI is fine (it is not indexed).
    let long = uri(&format!("kb://{}", "u".repeat(20_000)));
    store.pin(new(&pipe, &long, None)).await.map_err(e)?;
    expect(
        "unpin a long URI",
        store.unpin(&pipe, "kb", &long).await.map_err(e)?,
        true,
    )?;

    Ok(t.id)
}

/// [`AttachmentStore::list_pins`] after [`check_pins`]' pins: every owner's live pins,
/// oldest first, by scope, in pages.
async fn check_pin_listing(
    store: &dyn AttachmentStore,
    now: i64,
    template: &AttachmentTarget,
) -> Result<(), String> {
    let listed = |query: PinQuery| async move {
        store
            .list_pins(&query, now)
            .await
            .map(|pins| {
                pins.iter()
                    .map(|p| (p.owner.clone(), p.target.clone()))
                    .collect::<Vec<_>>()
            })
            .map_err(e)
    };
    let all = listed(PinQuery::default()).await?;
    expect(
        "every live pin, oldest first",
        all.clone(),
        vec![
            (conv(), uri("kb://a")),
            (conv(), template.clone()),
            (pipe(), uri("kb://p")),
        ],
    )?;
    expect(
        "the pipeline scope",
        listed(PinQuery {
            scope: Some(Scope::Pipeline),
            ..PinQuery::default()
        })
        .await?,
        vec![(pipe(), uri("kb://p"))],
    )?;
    expect(
        "the conversation scope",
        listed(PinQuery {
            scope: Some(Scope::Conversation),
            ..PinQuery::default()
        })
        .await?,
        all[..2].to_vec(),
    )?;
    expect(
        "a page: limit 1 from offset 1",
        listed(PinQuery {
            limit: 1,
            offset: 1,
            ..PinQuery::default()
        })
        .await?,
        all[1..2].to_vec(),
    )?;
    expect(
        "the message scope has no stored pins",
        listed(PinQuery {
            scope: Some(Scope::Message),
            ..PinQuery::default()
        })
        .await?,
        Vec::new(),
    )
}

/// Removal by target and by id, and pruning the expired pin.
async fn check_removal(store: &dyn AttachmentStore, now: i64, t_id: &str) -> Result<(), String> {
    let (conv, pipe) = (conv(), pipe());
    expect(
        "unpin by target",
        store.unpin(&conv, "kb", &uri("kb://a")).await.map_err(e)?,
        true,
    )?;
    expect(
        "unpin again",
        store.unpin(&conv, "kb", &uri("kb://a")).await.map_err(e)?,
        false,
    )?;
    expect(
        "unpin by id of another owner",
        store.unpin_id(&pipe, t_id).await.map_err(e)?,
        false,
    )?;
    expect(
        "unpin by id",
        store.unpin_id(&conv, t_id).await.map_err(e)?,
        true,
    )?;
    let pruned = store.prune(now, None).await.map_err(e)?;
    expect("prune removes the expired pin", pruned.pins, 1)?;

    Ok(())
}

/// History: records round trip, newest turn first, filters, pages, pruning.
async fn check_history(store: &dyn AttachmentStore, now: i64) -> Result<(), String> {
    let read = |uri: &str, error: Option<&str>| ReadRecord {
        server: "kb".into(),
        uri: uri.into(),
        mime_type: Some("text/markdown".into()),
        scope: Scope::Conversation,
        bytes: 1234,
        tokens_before: 900,
        tokens_estimated: false,
        tokens_after: 300,
        treatment: Treatment::Chunked { kept: 2, total: 5 },
        elapsed_ms: 12,
        cache_hit: true,
        outcome: if error.is_some() {
            ReadOutcome::Withheld
        } else {
            ReadOutcome::Read
        },
        error: error.map(str::to_owned),
        origin: if error.is_some() {
            ReadOrigin::Model
        } else {
            ReadOrigin::Host
        },
        consent: error.map(|_| "denied by rule 1 (uri kb://z)".to_owned()),
        passages: Vec::new(),
        reason: None,
    };
    let turn = |id: &str, at_ms: i64, conversation: &str, reads: Vec<ReadRecord>| {
        reads
            .into_iter()
            .enumerate()
            .map(|(seq, read)| InjectionRecord {
                turn_id: id.into(),
                seq: seq as u32,
                at_ms,
                pipeline: "p-1".into(),
                conversation: Some(conversation.into()),
                message: Some("m".into()),
                read,
            })
            .collect::<Vec<_>>()
    };
    let t1 = turn(
        "t1",
        1_000,
        "c-1",
        vec![read("kb://x", None), read("kb://y", None)],
    );
    let t2 = turn("t2", 2_000, "c-2", vec![read("kb://z", Some("boom"))]);
    store.record(&t1).await.map_err(e)?;
    store.record(&t2).await.map_err(e)?;
    let all = store.history(&HistoryQuery::default()).await.map_err(e)?;
    let order: Vec<(&str, u32)> = all.iter().map(|r| (r.turn_id.as_str(), r.seq)).collect();
    expect(
        "newest turn first, reads in order",
        order,
        vec![("t2", 0), ("t1", 0), ("t1", 1)],
    )?;
    expect("a record round trip", &all[1], &t1[0])?;
    expect("a withheld read's round trip", &all[0], &t2[0])?;
    check_history_filters(store).await?;
    let pruned = store.prune(now, Some(2_000)).await.map_err(e)?;
    expect("prune history before 2000", pruned.records, 2)?;
    expect(
        "what is left",
        store
            .history(&HistoryQuery::default())
            .await
            .map_err(e)?
            .into_iter()
            .map(|r| r.read.uri)
            .collect::<Vec<_>>(),
        vec!["kb://z".to_owned()],
    )?;

    Ok(())
}

/// History filters (conversation, errors, time range, server and pipeline) and pages,
/// on the records [`check_history`] wrote.
async fn check_history_filters(store: &dyn AttachmentStore) -> Result<(), String> {
    let q = |f: fn(&mut HistoryQuery)| {
        let mut q = HistoryQuery::default();
        f(&mut q);
        q
    };
    let uris = |rs: Vec<InjectionRecord>| rs.into_iter().map(|r| r.read.uri).collect::<Vec<_>>();
    expect(
        "by conversation",
        uris(
            store
                .history(&q(|q| q.conversation = Some("c-1".into())))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned(), "kb://y".to_owned()],
    )?;
    expect(
        "errors only",
        uris(
            store
                .history(&q(|q| q.errors_only = true))
                .await
                .map_err(e)?,
        ),
        vec!["kb://z".to_owned()],
    )?;
    expect(
        "time range",
        uris(
            store
                .history(&q(|q| {
                    q.since_ms = Some(1_000);
                    q.until_ms = Some(2_000);
                }))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned(), "kb://y".to_owned()],
    )?;
    expect(
        "by server and pipeline",
        store
            .history(&q(|q| {
                q.server = Some("kb".into());
                q.pipeline = Some("p-1".into());
            }))
            .await
            .map_err(e)?
            .len(),
        3,
    )?;
    expect(
        "another server",
        store
            .history(&q(|q| q.server = Some("other".into())))
            .await
            .map_err(e)?
            .len(),
        0,
    )?;
    expect(
        "limit and offset",
        uris(
            store
                .history(&q(|q| {
                    q.limit = 1;
                    q.offset = 1;
                }))
                .await
                .map_err(e)?,
        ),
        vec!["kb://x".to_owned()],
    )?;
    Ok(())
}

/// Tool calls: kept with their arguments, filtered like reads, newest turn first.
async fn check_tool_calls(store: &dyn AttachmentStore, now: i64) -> Result<(), String> {
    let call = |turn: &str, at_ms: i64, seq: u32, conversation: &str, error: bool| ToolCallEntry {
        turn_id: turn.into(),
        seq,
        at_ms,
        pipeline: "p-1".into(),
        conversation: Some(conversation.into()),
        message: None,
        call: ToolCallRecord {
            server: "fs".into(),
            tool: "write_file".into(),
            name: "fs__write_file".into(),
            arguments: serde_json::json!({"path": "/tmp/x", "content": "é"}),
            result_bytes: 12,
            result_tokens: 4,
            is_error: error,
            error: error.then(|| "withheld: denied by rules[0] (server fs, tool write_*)".into()),
            withheld: error,
            elapsed_ms: 3,
            consent: error.then(|| "denied by rules[0] (server fs, tool write_*)".into()),
            origin: CallOrigin::Model,
        },
    };
    store
        .record_calls(&[
            call("t-a", now - 20, 0, "c-1", false),
            call("t-a", now - 20, 1, "c-1", true),
            call("t-b", now - 10, 0, "c-2", false),
        ])
        .await
        .map_err(e)?;
    let calls = store
        .call_history(&HistoryQuery::default())
        .await
        .map_err(e)?;
    expect(
        "tool calls, newest turn first, in call order",
        calls
            .iter()
            .map(|c| (c.turn_id.as_str(), c.seq))
            .collect::<Vec<_>>(),
        vec![("t-b", 0), ("t-a", 0), ("t-a", 1)],
    )?;
    expect(
        "a call kept whole",
        calls[2].clone(),
        call("t-a", now - 20, 1, "c-1", true),
    )?;
    let failed = store
        .call_history(&HistoryQuery {
            conversation: Some("c-1".into()),
            errors_only: true,
            ..HistoryQuery::default()
        })
        .await
        .map_err(e)?;
    expect("failed calls of c-1", failed.len(), 1)?;

    Ok(())
}

/// Conversation grants: kept once, for exactly that pipeline, conversation, server, URI
/// and origin.
async fn check_grants(store: &dyn AttachmentStore, now: i64) -> Result<(), String> {
    let grant = ConsentGrant {
        pipeline: "p-1".into(),
        conversation: "c-1".into(),
        server: "kb".into(),
        uri: format!("kb://secret/{}", "x".repeat(4000)),
        origin: ReadOrigin::Host,
        kind: GrantKind::Read,
    };
    expect(
        "not granted yet",
        store.is_granted(&grant).await.map_err(e)?,
        false,
    )?;
    store.grant(&grant, now).await.map_err(e)?;
    store.grant(&grant, now).await.map_err(e)?;
    expect("granted", store.is_granted(&grant).await.map_err(e)?, true)?;
    for other in [
        ConsentGrant {
            conversation: "c-2".into(),
            ..grant.clone()
        },
        ConsentGrant {
            pipeline: "p-2".into(),
            ..grant.clone()
        },
        ConsentGrant {
            origin: ReadOrigin::Model,
            ..grant.clone()
        },
        ConsentGrant {
            uri: "kb://secret/y".into(),
            ..grant.clone()
        },
        // Calling a tool named like the URI is another grant.
        ConsentGrant {
            kind: GrantKind::Call,
            ..grant.clone()
        },
    ] {
        expect(
            &format!("not granted: {other:?}"),
            store.is_granted(&other).await.map_err(e)?,
            false,
        )?;
    }
    let too_long = ConsentGrant {
        conversation: "c".repeat(MAX_ID_BYTES + 1),
        ..grant.clone()
    };
    expect(
        "an over-long conversation id is refused",
        matches!(
            store.grant(&too_long, now).await,
            Err(StoreError::Invalid(_))
        ),
        true,
    )?;
    Ok(())
}

/// What every [`SealedRows`](crate::SealedRows) store must do: one row per server and
/// issuer, the last saved wins, another issuer's save replaces the old issuer's row,
/// and delete forgets them all. Leaves the store as it found it.
///
/// # Errors
/// The first failed check, described.
pub async fn check_sealed_rows(rows: &dyn crate::SealedRows) -> Result<(), String> {
    use crate::SealedRow;
    let e = |e: crate::StoreError| e.to_string();
    let row = |issuer: &str, sealed: &str| SealedRow {
        issuer: issuer.into(),
        sealed: sealed.into(),
    };
    let server = "testkit-oauth";
    if rows.load_credentials(server).await.map_err(e)?.is_some() {
        return Err("a new store has credentials".into());
    }
    rows.save_credentials(server, &row("https://as-1", "v1.aaa"), 1)
        .await
        .map_err(e)?;
    rows.save_credentials(server, &row("https://as-1", "v1.bbb"), 2)
        .await
        .map_err(e)?;
    rows.save_credentials("testkit-other", &row("", "v1.zzz"), 2)
        .await
        .map_err(e)?;
    let got = rows.load_credentials(server).await.map_err(e)?;
    if got != Some(row("https://as-1", "v1.bbb")) {
        return Err(format!("the second save is not what loads: {got:?}"));
    }
    rows.save_credentials(server, &row("https://as-2", "v1.ccc"), 3)
        .await
        .map_err(e)?;
    let got = rows.load_credentials(server).await.map_err(e)?;
    if got != Some(row("https://as-2", "v1.ccc")) {
        return Err(format!(
            "another issuer's save does not replace the row: {got:?}"
        ));
    }
    rows.delete_credentials(server).await.map_err(e)?;
    if let Some(left) = rows.load_credentials(server).await.map_err(e)? {
        return Err(format!("delete left a row: {left:?}"));
    }
    let other = rows.load_credentials("testkit-other").await.map_err(e)?;
    if other != Some(row("", "v1.zzz")) {
        return Err(format!("delete of one server touched another: {other:?}"));
    }
    rows.delete_credentials("testkit-other").await.map_err(e)?;
    Ok(())
}

/// What every [`ServerEntries`](crate::ServerEntries) store must do: a name is stored
/// once (a second add of it changes nothing and says so), rows come back whole (a `NULL`
/// `sealed` too) sorted by name, and remove forgets one server only. Leaves the store
/// as it found it.
///
/// # Errors
/// The first failed check, described.
pub async fn check_server_entries(store: &dyn crate::ServerEntries) -> Result<(), String> {
    use crate::StoredServer;
    let e = |e: crate::StoreError| e.to_string();
    let row = |name: &str, entry: &str, sealed: Option<&str>| StoredServer {
        name: name.into(),
        entry: entry.into(),
        sealed: sealed.map(Into::into),
        created_at_ms: 7,
    };
    let before = store.stored_servers().await.map_err(e)?;
    let b = row("testkit-b", r#"{"url":"http://x/mcp"}"#, Some("v1.abc"));
    let a = row("testkit-a", r#"{"command":"x"}"#, None);
    if !store.add_stored_server(&b).await.map_err(e)? {
        return Err("a new name was not added".into());
    }
    if !store.add_stored_server(&a).await.map_err(e)? {
        return Err("a second new name was not added".into());
    }
    if store
        .add_stored_server(&row("testkit-b", "{}", None))
        .await
        .map_err(e)?
    {
        return Err("a name was added twice".into());
    }
    let got: Vec<StoredServer> = store
        .stored_servers()
        .await
        .map_err(e)?
        .into_iter()
        .filter(|s| s.name.starts_with("testkit-"))
        .collect();
    if got != [a.clone(), b.clone()] {
        return Err(format!(
            "the rows do not come back whole and sorted: {got:?}"
        ));
    }
    if !store.remove_stored_server("testkit-b").await.map_err(e)? {
        return Err("remove did not find a stored server".into());
    }
    if store.remove_stored_server("testkit-b").await.map_err(e)? {
        return Err("a second remove found it again".into());
    }
    let left = store.stored_servers().await.map_err(e)?;
    if !left.contains(&a) || left.iter().any(|s| s.name == "testkit-b") {
        return Err(format!("remove of one server touched another: {left:?}"));
    }
    store.remove_stored_server("testkit-a").await.map_err(e)?;
    if store.stored_servers().await.map_err(e)? != before {
        return Err("the store is not as it was".into());
    }
    Ok(())
}
