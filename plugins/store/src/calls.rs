//! The tool call history (`hostpipe_tool_calls`, migration 4): one row per call.

use hostpipe_core::{CallOrigin, ToolCallRecord};
use hostpipe_engine::store::{HistoryQuery, StoreError, ToolCallEntry};
use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::{SqlStore, bind_all, to_i64};

/// Columns of `hostpipe_tool_calls` that [`insert`] binds.
const COLUMNS: usize = 18;

/// Rows per INSERT statement (18 × 500 stays under every driver's bind limit).
const BATCH: usize = 500;

fn insert(
    batch: &[ToolCallEntry],
) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
    let mut sql = String::from(
        "INSERT INTO hostpipe_tool_calls (turn_id, seq, at_ms, pipeline, conversation, message, \
         server, tool, name, arguments, result_bytes, result_tokens, is_error, error, \
         withheld, duration_ms, consent, origin) VALUES ",
    );
    for i in 0..batch.len() {
        sql.push_str(if i > 0 { ", (" } else { "(" });
        for c in 0..COLUMNS {
            if c > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", i * COLUMNS + c + 1));
        }
        sql.push(')');
    }
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for e in batch {
        let c = &e.call;
        q = q
            .bind(e.turn_id.clone())
            .bind(i64::from(e.seq))
            .bind(e.at_ms)
            .bind(e.pipeline.clone())
            .bind(e.conversation.clone())
            .bind(e.message.clone())
            .bind(c.server.clone())
            .bind(c.tool.clone())
            .bind(c.name.clone())
            .bind(c.arguments.to_string())
            .bind(to_i64(c.result_bytes))
            .bind(to_i64(c.result_tokens))
            .bind(i64::from(c.is_error))
            .bind(c.error.clone())
            .bind(i64::from(c.withheld))
            .bind(i64::try_from(c.elapsed_ms).unwrap_or(i64::MAX))
            .bind(c.consent.clone())
            .bind(c.origin.as_str());
    }
    q
}

impl SqlStore {
    pub(crate) async fn insert_calls(&self, calls: &[ToolCallEntry]) -> Result<(), StoreError> {
        if calls.is_empty() {
            return Ok(());
        }
        calls.iter().try_for_each(ToolCallEntry::validate)?;
        if calls.len() <= BATCH {
            return self
                .timed("record tool calls", insert(calls).execute(&self.pool))
                .await
                .map(|_| ());
        }
        let work = async {
            let mut tx = self.pool.begin().await?;
            for batch in calls.chunks(BATCH) {
                insert(batch).execute(&mut *tx).await?;
            }
            tx.commit().await
        };
        self.timed("record tool calls", work).await
    }

    pub(crate) async fn select_calls(
        &self,
        query: &HistoryQuery,
    ) -> Result<Vec<ToolCallEntry>, StoreError> {
        let (sql, binds) = crate::history_select("hostpipe_tool_calls", "is_error = 1", query);
        let rows = self
            .timed(
                "read tool call history",
                bind_all(&sql, binds).fetch_all(&self.pool),
            )
            .await?;
        rows.iter().map(|r| self.call_from_row(r)).collect()
    }

    fn call_from_row(&self, row: &AnyRow) -> Result<ToolCallEntry, StoreError> {
        let get = |e: sqlx::Error| self.corrupt("tool call", e.to_string());
        let count = |column: &str| -> Result<usize, StoreError> {
            let v: i64 = row.try_get(column).map_err(get)?;
            usize::try_from(v).map_err(|_| self.corrupt("tool call", format!("{column} = {v}")))
        };
        let arguments: String = row.try_get("arguments").map_err(get)?;
        let origin = match row.try_get::<String, _>("origin").map_err(get)?.as_str() {
            "model" => CallOrigin::Model,
            "api" => CallOrigin::Api,
            "agent" => CallOrigin::Agent,
            other => {
                return Err(self.corrupt("tool call", format!("unknown origin `{other}`")));
            }
        };
        let seq: i64 = row.try_get("seq").map_err(get)?;
        Ok(ToolCallEntry {
            turn_id: row.try_get("turn_id").map_err(get)?,
            seq: u32::try_from(seq)
                .map_err(|_| self.corrupt("tool call", format!("seq = {seq}")))?,
            at_ms: row.try_get("at_ms").map_err(get)?,
            pipeline: row.try_get("pipeline").map_err(get)?,
            conversation: row.try_get("conversation").map_err(get)?,
            message: row.try_get("message").map_err(get)?,
            call: ToolCallRecord {
                server: row.try_get("server").map_err(get)?,
                tool: row.try_get("tool").map_err(get)?,
                name: row.try_get("name").map_err(get)?,
                arguments: serde_json::from_str(&arguments)
                    .map_err(|e| self.corrupt("tool call", format!("arguments: {e}")))?,
                result_bytes: count("result_bytes")?,
                result_tokens: count("result_tokens")?,
                is_error: count("is_error")? != 0,
                error: row.try_get("error").map_err(get)?,
                withheld: count("withheld")? != 0,
                elapsed_ms: u64::try_from(count("duration_ms")?).unwrap_or(u64::MAX),
                consent: row.try_get("consent").map_err(get)?,
                origin,
            },
        })
    }
}
