//! hostpipe's [`AttachmentStore`] on SQL, through sqlx: SQLite (the embedded default, one
//! file in the data directory) and PostgreSQL (for platforms that run many workers on
//! one database). One implementation, [`SqlStore`], serves both.
//!
//! The schema (`migrations/`) is created and migrated on first use; the applied
//! versions are kept in `hostpipe_migrations`, and every table is prefixed `hostpipe_`,
//! so a database shared with the platform's own tables is safe. Several processes may
//! open one store at once: SQLite runs in WAL mode with a 5 s busy timeout, and
//! PostgreSQL migrations take an advisory lock.
//!
//! ```no_run
//! # async fn f() -> Result<(), hostpipe_engine::StoreError> {
//! use hostpipe_core::AttachmentTarget;
//! use hostpipe_engine::{AttachmentStore as _, NewPin, PinOwner};
//!
//! let store = hostpipe_store::SqlStore::open("sqlite:/var/lib/hostpipe/hostpipe.db").await?;
//! store
//!     .pin(NewPin {
//!         owner: PinOwner::Conversation("chat-42".into()),
//!         server: "kb".into(),
//!         target: AttachmentTarget::Uri { uri: "kb://tickets/1234".into() },
//!         expires_at_ms: None,
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use async_trait::async_trait;
use hostpipe_core::{ArgumentValue, AttachmentTarget, ReadOrigin, ReadOutcome, ReadRecord, Scope};
use hostpipe_engine::store::{
    AttachmentStore, HistoryQuery, HistorySink, InjectionRecord, NewPin, Pin, PinOwner, PinQuery,
    PinSource, Pruned, StoreError, ToolCallEntry, new_pin_id, unix_ms_now,
};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{
    AnyConnection, AnyPool, AssertSqlSafe, Connection as _, Executor as _, Row as _,
    SqlSafeStr as _,
};

/// The schema migrations, in order. Never edit one that has shipped: add the next.
const MIGRATIONS: [(i64, &str, &str); 7] = [
    (
        1,
        "pins and read history",
        include_str!("../migrations/0001_pins_and_reads.sql"),
    ),
    (
        2,
        "consent grants",
        include_str!("../migrations/0002_consent_grants.sql"),
    ),
    (
        3,
        "read passages",
        include_str!("../migrations/0003_read_passages.sql"),
    ),
    (
        4,
        "tool calls",
        include_str!("../migrations/0004_tool_calls.sql"),
    ),
    (
        5,
        "read outcome",
        include_str!("../migrations/0005_read_outcome.sql"),
    ),
    (
        6,
        "oauth credentials",
        include_str!("../migrations/0006_oauth_credentials.sql"),
    ),
    (
        7,
        "mcp servers",
        include_str!("../migrations/0007_mcp_servers.sql"),
    ),
];

/// The migrator of `migrations` (a prefix of [`MIGRATIONS`]), keeping its record in
/// [`MIGRATIONS_TABLE`].
fn migrator(migrations: &[(i64, &'static str, &'static str)]) -> Migrator {
    let mut migrator = Migrator::with_migrations(
        migrations
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    Cow::Borrowed(*description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// The table that records applied migrations (not sqlx's default `_sqlx_migrations`,
/// which the platform's own migrations may use in a shared database).
const MIGRATIONS_TABLE: &str = "hostpipe_migrations";

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite (bundled; no server).
    Sqlite,
    /// PostgreSQL (version 12 or later).
    Postgres,
}

/// An [`AttachmentStore`] on SQLite or PostgreSQL.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    described: String,
    timeout: Duration,
}

/// How long one store operation may take by default (pool wait included): 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl SqlStore {
    /// Opens (creating and migrating on first use) the store at `url`:
    /// - `sqlite:PATH` or `sqlite://PATH` — a file, created with its directory if
    ///   missing (`sqlite::memory:` is an in-memory database);
    /// - `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (or `postgresql://`), with the
    ///   query parameters sqlx's PostgreSQL driver takes (`sslmode`, …).
    ///
    /// # Errors
    /// [`StoreError::Open`]: an unknown scheme, a directory that cannot be created, a
    /// server that cannot be reached within 5 s, a failed migration, or a database
    /// migrated by a newer hostpipe.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let (backend, url) = normalize_url(url)?;
        let described = describe_url(&url);
        let open_err = |message: String| StoreError::Open {
            store: described.clone(),
            message,
        };
        sqlx::any::install_default_drivers();
        let options = AnyConnectOptions::from_str(&url).map_err(|e| {
            open_err(format!(
                "{e} (percent-encode `/`, `#`, `?`, `@` and `%` in a user name or password)"
            ))
        })?;
        // One connection first, so that its error is the one reported ("file is not a
        // database", "connection refused", "password authentication failed"), not the
        // pool's "timed out waiting for an open connection".
        let first = tokio::time::timeout(DEFAULT_TIMEOUT, AnyConnection::connect_with(&options))
            .await
            .map_err(|_| {
                open_err(format!(
                    "no connection within {} ms",
                    DEFAULT_TIMEOUT.as_millis()
                ))
            })?
            .map_err(|e| open_err(error_text(&e)))?;
        let mut first = first;
        set_up_connection(&mut first, backend)
            .await
            .map_err(|e| open_err(error_text(&e)))?;
        let _ = first.close().await;
        let pool = AnyPoolOptions::new()
            .max_connections(match backend {
                Backend::Sqlite => 4,
                Backend::Postgres => 8,
            })
            .acquire_timeout(DEFAULT_TIMEOUT)
            .after_connect(move |conn, _| Box::pin(set_up_connection(conn, backend)))
            .connect_with(options)
            .await
            .map_err(|e| open_err(error_text(&e)))?;
        let migrator = migrator(&MIGRATIONS);
        tokio::time::timeout(Duration::from_secs(30), migrator.run(&pool))
            .await
            .map_err(|_| open_err("the schema migration did not finish within 30 s".into()))?
            .map_err(|e| open_err(format!("schema migration failed: {e}")))?;
        Ok(Self {
            pool,
            backend,
            described,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Opens the SQLite store in file `path` (see [`SqlStore::open`]).
    ///
    /// # Errors
    /// As [`SqlStore::open`].
    pub async fn open_sqlite(path: &Path) -> Result<Self, StoreError> {
        Self::open(&sqlite_url(path)).await
    }

    /// Sets how long one operation may take (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection (waits for those in use).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    fn db_err(&self, operation: &'static str, e: &sqlx::Error) -> StoreError {
        StoreError::Database {
            store: self.described.clone(),
            operation,
            message: error_text(e),
        }
    }

    /// Runs `work` under the store's timeout.
    async fn timed<T>(
        &self,
        operation: &'static str,
        work: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result.map_err(|e| self.db_err(operation, &e)),
            Err(_) => Err(StoreError::Database {
                store: self.described.clone(),
                operation,
                message: format!("no answer within {} ms", self.timeout.as_millis()),
            }),
        }
    }

    fn corrupt(&self, what: &'static str, message: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            store: self.described.clone(),
            what,
            message: message.into(),
        }
    }

    fn pin_from_row(&self, row: &AnyRow) -> Result<Pin, StoreError> {
        let get = |e: sqlx::Error| self.corrupt("pin", e.to_string());
        let scope: String = row.try_get("scope").map_err(get)?;
        let owner: String = row.try_get("owner").map_err(get)?;
        let owner = match scope.as_str() {
            "pipeline" => PinOwner::Pipeline(owner),
            "conversation" => PinOwner::Conversation(owner),
            other => return Err(self.corrupt("pin", format!("unknown scope `{other}`"))),
        };
        let kind: String = row.try_get("kind").map_err(get)?;
        let target: String = row.try_get("target").map_err(get)?;
        let target = match kind.as_str() {
            "uri" => AttachmentTarget::Uri { uri: target },
            "template" => {
                let arguments: String = row.try_get("arguments").map_err(get)?;
                let arguments: BTreeMap<String, ArgumentValue> =
                    serde_json::from_str(&arguments)
                        .map_err(|e| self.corrupt("pin", format!("arguments: {e}")))?;
                AttachmentTarget::Template {
                    template: target,
                    arguments,
                }
            }
            other => return Err(self.corrupt("pin", format!("unknown kind `{other}`"))),
        };
        Ok(Pin {
            id: row.try_get("id").map_err(get)?,
            owner,
            server: row.try_get("server").map_err(get)?,
            target,
            created_at_ms: row.try_get("created_at_ms").map_err(get)?,
            expires_at_ms: row.try_get("expires_at_ms").map_err(get)?,
        })
    }

    fn record_from_row(&self, row: &AnyRow) -> Result<InjectionRecord, StoreError> {
        let get = |e: sqlx::Error| self.corrupt("record", e.to_string());
        let scope: String = row.try_get("scope").map_err(get)?;
        let scope = match scope.as_str() {
            "pipeline" => Scope::Pipeline,
            "conversation" => Scope::Conversation,
            "message" => Scope::Message,
            other => return Err(self.corrupt("record", format!("unknown scope `{other}`"))),
        };
        let treatment: String = row.try_get("treatment").map_err(get)?;
        let treatment = serde_json::from_str(&treatment)
            .map_err(|e| self.corrupt("record", format!("treatment: {e}")))?;
        let count = |column: &str| -> Result<usize, StoreError> {
            let v: i64 = row.try_get(column).map_err(get)?;
            usize::try_from(v).map_err(|_| self.corrupt("record", format!("{column} = {v}")))
        };
        let seq: i64 = row.try_get("seq").map_err(get)?;
        Ok(InjectionRecord {
            turn_id: row.try_get("turn_id").map_err(get)?,
            seq: u32::try_from(seq).map_err(|_| self.corrupt("record", format!("seq = {seq}")))?,
            at_ms: row.try_get("at_ms").map_err(get)?,
            pipeline: row.try_get("pipeline").map_err(get)?,
            conversation: row.try_get("conversation").map_err(get)?,
            message: row.try_get("message").map_err(get)?,
            read: ReadRecord {
                server: row.try_get("server").map_err(get)?,
                uri: row.try_get("uri").map_err(get)?,
                mime_type: row.try_get("mime_type").map_err(get)?,
                scope,
                bytes: count("bytes")?,
                tokens_before: count("tokens_before")?,
                tokens_estimated: count("tokens_estimated")? != 0,
                tokens_after: count("tokens_after")?,
                treatment,
                elapsed_ms: u64::try_from(count("duration_ms")?).unwrap_or(u64::MAX),
                cache_hit: count("cache_hit")? != 0,
                outcome: {
                    let outcome: String = row.try_get("outcome").map_err(get)?;
                    ReadOutcome::parse(&outcome).ok_or_else(|| {
                        self.corrupt("record", format!("unknown outcome `{outcome}`"))
                    })?
                },
                error: row.try_get("error").map_err(get)?,
                origin: match row.try_get::<String, _>("origin").map_err(get)?.as_str() {
                    "host" => ReadOrigin::Host,
                    "model" => ReadOrigin::Model,
                    other => {
                        return Err(self.corrupt("record", format!("unknown origin `{other}`")));
                    }
                },
                consent: row.try_get("consent").map_err(get)?,
                passages: match row.try_get::<Option<String>, _>("passages").map_err(get)? {
                    Some(json) => serde_json::from_str(&json)
                        .map_err(|e| self.corrupt("record", format!("passages: {e}")))?,
                    None => Vec::new(),
                },
                reason: row.try_get("reason").map_err(get)?,
            },
        })
    }
}

/// Settings every connection gets. SQLite: WAL, so that readers never wait for the
/// writer (a running bot and `hostpipe history` in another process do not block each
/// other), with `synchronous = NORMAL` (durable at checkpoints, never corrupt).
async fn set_up_connection(conn: &mut AnyConnection, backend: Backend) -> Result<(), sqlx::Error> {
    if backend == Backend::Sqlite {
        conn.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .await?;
    }
    Ok(())
}

/// The unique key of a pin: XXH3-128 over its owner, server and target, each part
/// length-prefixed so that no two different pins give the same input.
fn pin_key(owner: &PinOwner, server: &str, kind: &str, target: &str, arguments: &str) -> String {
    let mut input = Vec::new();
    for part in [
        owner.scope().as_str(),
        owner.id(),
        server,
        kind,
        target,
        arguments,
    ] {
        input.extend_from_slice(&(part.len() as u64).to_le_bytes());
        input.extend_from_slice(part.as_bytes());
    }
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&input))
}

pub(crate) fn origin_str(origin: ReadOrigin) -> &'static str {
    match origin {
        ReadOrigin::Host => "host",
        ReadOrigin::Model => "model",
    }
}

/// `(kind, target, arguments JSON)` of a pin target.
fn target_columns(target: &AttachmentTarget) -> Result<(&'static str, &str, String), StoreError> {
    match target {
        AttachmentTarget::Uri { uri } => Ok(("uri", uri, "{}".to_owned())),
        AttachmentTarget::Template {
            template,
            arguments,
        } => Ok((
            "template",
            template,
            // A BTreeMap serializes in key order, so equal arguments give equal text and
            // the unique index sees a re-pin as the same pin.
            serde_json::to_string(arguments)
                .map_err(|e| StoreError::invalid(format!("template arguments: {e}")))?,
        )),
        AttachmentTarget::Embedded { .. } => Err(StoreError::invalid(
            "embedded contents cannot be pinned: pin a URI or a template",
        )),
    }
}

/// Columns of `hostpipe_reads` that [`SqlStore::record`] binds.
const RECORD_COLUMNS: usize = 23;

/// Rows per INSERT statement.
const RECORD_BATCH: usize = 500;

/// One INSERT of `batch` (at most [`RECORD_BATCH`] records).
fn insert_records(
    batch: &[InjectionRecord],
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    let mut sql = String::from(
        "INSERT INTO hostpipe_reads (turn_id, seq, at_ms, pipeline, conversation, message, \
         server, uri, mime_type, scope, bytes, tokens_before, tokens_estimated, tokens_after, \
         treatment, duration_ms, cache_hit, error, origin, consent, passages, reason, \
         outcome) VALUES ",
    );
    for i in 0..batch.len() {
        sql.push_str(if i > 0 { ", (" } else { "(" });
        for c in 0..RECORD_COLUMNS {
            if c > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", i * RECORD_COLUMNS + c + 1));
        }
        sql.push(')');
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for r in batch {
        let treatment = serde_json::to_string(&r.read.treatment)
            .unwrap_or_else(|_| "{\"kind\":\"omitted\"}".into());
        q = q
            .bind(r.turn_id.clone())
            .bind(i64::from(r.seq))
            .bind(r.at_ms)
            .bind(r.pipeline.clone())
            .bind(r.conversation.clone())
            .bind(r.message.clone())
            .bind(r.read.server.clone())
            .bind(r.read.uri.clone())
            .bind(r.read.mime_type.clone())
            .bind(r.read.scope.as_str())
            .bind(to_i64(r.read.bytes))
            .bind(to_i64(r.read.tokens_before))
            .bind(i64::from(r.read.tokens_estimated))
            .bind(to_i64(r.read.tokens_after))
            .bind(treatment)
            .bind(i64::try_from(r.read.elapsed_ms).unwrap_or(i64::MAX))
            .bind(i64::from(r.read.cache_hit))
            .bind(r.read.error.clone())
            .bind(r.read.origin.as_str())
            .bind(r.read.consent.clone())
            .bind(
                (!r.read.passages.is_empty())
                    .then(|| serde_json::to_string(&r.read.passages).ok())
                    .flatten(),
            )
            .bind(r.read.reason.clone())
            .bind(r.read.outcome.as_str());
    }
    q
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A bind value of a dynamically built query.
enum Bind {
    Text(String),
    Int(i64),
}

#[async_trait]
impl PinSource for SqlStore {
    async fn pins(&self, owners: &[PinOwner], now_ms: i64) -> Result<Vec<Pin>, StoreError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = String::from(
            "SELECT id, scope, owner, server, kind, target, arguments, created_at_ms, expires_at_ms \
             FROM hostpipe_pins WHERE (expires_at_ms IS NULL OR expires_at_ms > $1) AND (",
        );
        let mut binds = vec![Bind::Int(now_ms)];
        for (i, owner) in owners.iter().enumerate() {
            if i > 0 {
                sql.push_str(" OR ");
            }
            let n = binds.len();
            sql.push_str(&format!("(scope = ${} AND owner = ${})", n + 1, n + 2));
            binds.push(Bind::Text(owner.scope().as_str().to_owned()));
            binds.push(Bind::Text(owner.id().to_owned()));
        }
        sql.push_str(") ORDER BY created_at_ms, id");
        let rows = self
            .timed("load pins", bind_all(&sql, binds).fetch_all(&self.pool))
            .await?;
        rows.iter().map(|r| self.pin_from_row(r)).collect()
    }
}

#[async_trait]
impl HistorySink for SqlStore {
    async fn record(&self, records: &[InjectionRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        records.iter().try_for_each(InjectionRecord::validate)?;
        // One multi-row INSERT per batch of 500 (20 columns × 500 rows stays under every
        // driver's bind limit): a turn's reads are one statement, atomic on its own;
        // more batches share a transaction.
        if records.len() <= RECORD_BATCH {
            let q = insert_records(records);
            return self
                .timed("record reads", q.execute(&self.pool))
                .await
                .map(|_| ());
        }
        let work = async {
            let mut tx = self.pool.begin().await?;
            for batch in records.chunks(RECORD_BATCH) {
                insert_records(batch).execute(&mut *tx).await?;
            }
            tx.commit().await
        };
        self.timed("record reads", work).await
    }
    async fn record_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        self.insert_calls(calls).await
    }
}

#[async_trait]
impl AttachmentStore for SqlStore {
    fn describe(&self) -> String {
        self.described.clone()
    }
    async fn pin(&self, pin: NewPin) -> Result<Pin, StoreError> {
        pin.validate()?;
        let (kind, target, arguments) = target_columns(&pin.target)?;
        let id = new_pin_id();
        let now = unix_ms_now();
        let key = pin_key(&pin.owner, &pin.server, kind, target, &arguments);
        let query = sqlx::query(
            "INSERT INTO hostpipe_pins (id, scope, owner, server, kind, target, arguments, \
             created_at_ms, expires_at_ms, pin_key) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (pin_key) DO UPDATE SET expires_at_ms = excluded.expires_at_ms \
             RETURNING id, scope, owner, server, kind, target, arguments, created_at_ms, expires_at_ms",
        )
        .bind(id)
        .bind(pin.owner.scope().as_str())
        .bind(pin.owner.id().to_owned())
        .bind(pin.server.clone())
        .bind(kind)
        .bind(target.to_owned())
        .bind(arguments)
        .bind(now)
        .bind(pin.expires_at_ms)
        .bind(key);
        let row = self.timed("pin", query.fetch_one(&self.pool)).await?;
        self.pin_from_row(&row)
    }
    async fn unpin(
        &self,
        owner: &PinOwner,
        server: &str,
        target: &AttachmentTarget,
    ) -> Result<bool, StoreError> {
        let (kind, target, arguments) = target_columns(target)?;
        let query = sqlx::query("DELETE FROM hostpipe_pins WHERE pin_key = $1")
            .bind(pin_key(owner, server, kind, target, &arguments));
        let done = self.timed("unpin", query.execute(&self.pool)).await?;
        Ok(done.rows_affected() > 0)
    }
    async fn unpin_id(&self, owner: &PinOwner, id: &str) -> Result<bool, StoreError> {
        let query =
            sqlx::query("DELETE FROM hostpipe_pins WHERE scope = $1 AND owner = $2 AND id = $3")
                .bind(owner.scope().as_str())
                .bind(owner.id().to_owned())
                .bind(id.to_owned());
        let done = self.timed("unpin", query.execute(&self.pool)).await?;
        Ok(done.rows_affected() > 0)
    }
    async fn list_pins(&self, query: &PinQuery, now_ms: i64) -> Result<Vec<Pin>, StoreError> {
        let mut sql = String::from(
            "SELECT id, scope, owner, server, kind, target, arguments, created_at_ms, expires_at_ms \
             FROM hostpipe_pins WHERE (expires_at_ms IS NULL OR expires_at_ms > $1)",
        );
        let mut binds = vec![Bind::Int(now_ms)];
        if let Some(scope) = query.scope {
            binds.push(Bind::Text(scope.as_str().to_owned()));
            sql.push_str(&format!(" AND scope = ${}", binds.len()));
        }
        let n = binds.len();
        sql.push_str(&format!(
            " ORDER BY created_at_ms, id LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2
        ));
        binds.push(Bind::Int(i64::from(
            query.limit.min(HistoryQuery::MAX_LIMIT),
        )));
        binds.push(Bind::Int(i64::from(query.offset)));
        let rows = self
            .timed("list pins", bind_all(&sql, binds).fetch_all(&self.pool))
            .await?;
        rows.iter().map(|r| self.pin_from_row(r)).collect()
    }
    async fn history(&self, query: &HistoryQuery) -> Result<Vec<InjectionRecord>, StoreError> {
        let (sql, binds) = history_select("hostpipe_reads", "outcome <> 'read'", query);
        let rows = self
            .timed("read history", bind_all(&sql, binds).fetch_all(&self.pool))
            .await?;
        rows.iter().map(|r| self.record_from_row(r)).collect()
    }
    async fn call_history(&self, query: &HistoryQuery) -> Result<Vec<ToolCallEntry>, StoreError> {
        self.select_calls(query).await
    }
    async fn prune(
        &self,
        now_ms: i64,
        records_before_ms: Option<i64>,
    ) -> Result<Pruned, StoreError> {
        let pins = sqlx::query(
            "DELETE FROM hostpipe_pins WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= $1",
        )
        .bind(now_ms);
        let pins = self.timed("prune", pins.execute(&self.pool)).await?;
        let records = match records_before_ms {
            Some(cut) => {
                // In batches (PRUNE_BATCH): a long backlog never holds the write lock long.
                let q = sqlx::query(
                    "DELETE FROM hostpipe_reads WHERE (turn_id, seq) IN \
                     (SELECT turn_id, seq FROM hostpipe_reads WHERE at_ms < $1 LIMIT $2)",
                )
                .bind(cut)
                .bind(i64::try_from(hostpipe_engine::store::PRUNE_BATCH).unwrap_or(i64::MAX));
                self.timed("prune", q.execute(&self.pool))
                    .await?
                    .rows_affected()
            }
            None => 0,
        };
        if let Some(cut) = records_before_ms {
            let q = sqlx::query(
                "DELETE FROM hostpipe_tool_calls WHERE (turn_id, seq) IN \
                 (SELECT turn_id, seq FROM hostpipe_tool_calls WHERE at_ms < $1 LIMIT $2)",
            )
            .bind(cut)
            .bind(i64::try_from(hostpipe_engine::store::PRUNE_BATCH).unwrap_or(i64::MAX));
            self.timed("prune", q.execute(&self.pool)).await?;
        }
        Ok(Pruned {
            pins: pins.rows_affected(),
            records,
        })
    }
}

/// The `SELECT` of one history page from `table` (`hostpipe_reads` or
/// `hostpipe_tool_calls`, which share the id and time columns) with `query`'s filters,
/// newest turn first, and its binds; `errors_only` adds `AND {error_clause}`.
fn history_select(table: &str, error_clause: &str, query: &HistoryQuery) -> (String, Vec<Bind>) {
    let mut sql = format!("SELECT * FROM {table} WHERE 1 = 1");
    let mut binds = Vec::new();
    let mut filter = |column: &str, op: &str, value: Bind| {
        binds.push(value);
        sql.push_str(&format!(" AND {column} {op} ${}", binds.len()));
    };
    if let Some(c) = &query.conversation {
        filter("conversation", "=", Bind::Text(c.clone()));
    }
    if let Some(p) = &query.pipeline {
        filter("pipeline", "=", Bind::Text(p.clone()));
    }
    if let Some(s) = &query.server {
        filter("server", "=", Bind::Text(s.clone()));
    }
    if let Some(t) = query.since_ms {
        filter("at_ms", ">=", Bind::Int(t));
    }
    if let Some(t) = query.until_ms {
        filter("at_ms", "<", Bind::Int(t));
    }
    if query.errors_only {
        sql.push_str(&format!(" AND {error_clause}"));
    }
    let n = binds.len();
    sql.push_str(&format!(
        " ORDER BY at_ms DESC, turn_id DESC, seq ASC LIMIT ${} OFFSET ${}",
        n + 1,
        n + 2
    ));
    binds.push(Bind::Int(i64::from(
        query.limit.min(HistoryQuery::MAX_LIMIT),
    )));
    binds.push(Bind::Int(i64::from(query.offset)));
    (sql, binds)
}

fn bind_all(
    sql: &str,
    binds: Vec<Bind>,
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    let mut q = sqlx::query(AssertSqlSafe(sql.to_owned()));
    for b in binds {
        q = match b {
            Bind::Text(s) => q.bind(s),
            Bind::Int(i) => q.bind(i),
        };
    }
    q
}

/// docs/attachments.md, its examples compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/attachments.md")]
pub struct AttachmentsGuide;

mod calls;
mod credentials;
mod grants;
mod servers;
mod url;

pub use url::sqlite_url;
use url::{describe_url, error_text, normalize_url};
#[cfg(test)]
mod tests;
