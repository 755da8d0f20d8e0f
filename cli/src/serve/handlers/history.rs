//! The read and tool-call history: `GET /v1/history` and `GET /v1/history/tool-calls`.

use axum::extract::State;
use hostpipe_engine::HistoryQuery;
use serde::Deserialize;

use super::super::ApiError;
use super::super::dto::{HistoryPage, ToolCallPage};
use super::super::error::{ApiResult, Query};
use super::{St, json, store};

/// `GET /v1/history` query parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryParams {
    conversation: Option<String>,
    pipeline: Option<String>,
    server: Option<String>,
    /// RFC 3339.
    since: Option<String>,
    /// RFC 3339.
    until: Option<String>,
    #[serde(default)]
    errors: bool,
    limit: Option<u32>,
    #[serde(default)]
    offset: u32,
}

/// Most records in one page.
const MAX_HISTORY_LIMIT: u32 = 1000;

fn rfc3339(name: &str, value: Option<String>) -> ApiResult<Option<i64>> {
    value
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(&v)
                .map(|t| t.timestamp_millis())
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "`{name}`: `{v}` is not an RFC 3339 time (2026-11-30T09:00:00Z): {e}"
                    ))
                })
        })
        .transpose()
}

/// The store query of `params` (asking one record more than the page, to tell whether
/// there is a next one), and the page size.
fn history_query(params: HistoryParams) -> ApiResult<(HistoryQuery, u32)> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_HISTORY_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "`limit` is {limit}; give 1 to {MAX_HISTORY_LIMIT}"
        )));
    }
    let since_ms = rfc3339("since", params.since)?;
    let until_ms = rfc3339("until", params.until)?;
    if let (Some(s), Some(u)) = (since_ms, until_ms)
        && s >= u
    {
        return Err(ApiError::bad_request(
            "`since` is not before `until`: no turn can match",
        ));
    }
    let query = HistoryQuery {
        conversation: params.conversation,
        pipeline: params.pipeline,
        server: params.server,
        since_ms,
        until_ms,
        errors_only: params.errors,
        // One more than asked, to tell whether there is a next page.
        limit: limit + 1,
        offset: params.offset,
    };
    Ok((query, limit))
}

/// `GET /v1/history`: one page of the reads that match the query.
pub(crate) async fn history(State(state): St, Query(params): Query<HistoryParams>) -> ApiResult {
    let (query, limit) = history_query(params)?;
    let records = store(&state)?.history(&query).await?;
    let (records, next_offset) = page(records, &query, limit);
    Ok(json(HistoryPage {
        records,
        next_offset,
    }))
}

/// A history page: the first `limit` of `items` (the store was asked for one more), and
/// the offset of the next page, `None` on the last.
fn page<T>(mut items: Vec<T>, query: &HistoryQuery, limit: u32) -> (Vec<T>, Option<u32>) {
    let next_offset = (items.len() > limit as usize).then(|| query.offset + limit);
    items.truncate(limit as usize);
    (items, next_offset)
}

/// `GET /v1/history/tool-calls`: the tool calls, with the read history's filters
/// (`errors`: calls that failed, were withheld or that the tool reported as errors).
pub(crate) async fn tool_call_history(
    State(state): St,
    Query(params): Query<HistoryParams>,
) -> ApiResult {
    let (query, limit) = history_query(params)?;
    let calls = store(&state)?.call_history(&query).await?;
    let (calls, next_offset) = page(calls, &query, limit);
    Ok(json(ToolCallPage { calls, next_offset }))
}
