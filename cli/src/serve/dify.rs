//! The Dify door: `POST /retrieval`, Dify's External Knowledge API (Dify docs,
//! "External Knowledge API"), so that a Dify app retrieves from a hostpipe pipeline's
//! MCP resources as from any external knowledge base: register hostpipe's base URL as
//! the endpoint (Dify appends `/retrieval`), a hostpipe token as the API key, and a
//! pipeline id as the external knowledge ID.
//!
//! The query runs as a turn of that pipeline that wants passages instead of a context
//! ([`PassageRequest`]): the same attachments, policy, consent, cache, history and
//! ranking as a turn's injection, cut at `top_k` and `score_threshold`
//! (`hostpipe_stages::fit::passages`). Records carry the passage's text, its score in
//! [0, 1], the resource's title, and `metadata` (always an object, as the docs require):
//! `server`, `uri`, `mime_type`, `heading`, `first_line`, `last_line`, `rank`.
//!
//! Errors are `{"error_code", "error_msg"}`: Dify's documented codes 1001 (the
//! `Authorization` header is not `Bearer KEY`, 401), 1002 (the key is not valid, 403)
//! and 2001 (no such knowledge, that is pipeline, 404); otherwise the HTTP status as
//! the code (400 a request that does not match the schema, naming the field; 503
//! shutting down; 504 out of time). Dify shows a non-200 answer to its user.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hostpipe_core::{PassageRequest, RetrievedPassage, Turn};
use hostpipe_engine::Prepared;
use serde::{Deserialize, Serialize};

use super::error::Body;
use super::{ApiError, ServeState};

/// The route of this door, whose errors are Dify-shaped (the token check's too).
pub(crate) const ROUTE: &str = "/retrieval";

/// Most records one request may ask for.
pub(crate) const MAX_TOP_K: usize = 100;

/// The request body (Dify docs: "Request", "Body").
#[derive(Debug, Deserialize)]
pub(crate) struct RetrievalRequest {
    /// The pipeline id.
    knowledge_id: String,
    /// The user's query.
    query: String,
    /// `top_k`, `score_threshold`.
    retrieval_setting: RetrievalSetting,
    /// Filters on the records' metadata.
    #[serde(default)]
    metadata_condition: Option<MetadataCondition>,
}

/// `retrieval_setting`.
#[derive(Debug, Deserialize)]
struct RetrievalSetting {
    /// Most records, 1 to [`MAX_TOP_K`].
    top_k: usize,
    /// Least score, in [0, 1] (0.0 when the threshold is off in Dify).
    #[serde(default)]
    score_threshold: f64,
}

/// `metadata_condition`: conditions on the records' `metadata`, joined by
/// `logical_operator` (`and`, the default, or `or`).
#[derive(Debug, Deserialize)]
struct MetadataCondition {
    #[serde(default)]
    logical_operator: LogicalOperator,
    conditions: Vec<Condition>,
}

#[derive(Debug, Default, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum LogicalOperator {
    #[default]
    And,
    Or,
}

/// One condition. Dify's docs give `name` as a string (older versions: a list of
/// names, any of which may match); both are taken.
#[derive(Debug, Deserialize)]
struct Condition {
    name: Names,
    comparison_operator: String,
    #[serde(default)]
    value: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Names {
    One(String),
    Many(Vec<String>),
}

impl Names {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            Self::One(n) => (Some(n.as_str()), &[][..]),
            Self::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

/// The answer (Dify docs: "Response").
#[derive(Debug, Serialize)]
pub(crate) struct RetrievalResponse {
    records: Vec<Record>,
}

/// One record.
#[derive(Debug, Serialize)]
struct Record {
    content: String,
    score: f64,
    title: String,
    metadata: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    fn of(p: RetrievedPassage) -> Self {
        let mut metadata = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            metadata.insert(k.to_owned(), v);
        };
        put("server", p.server.into());
        put("uri", p.uri.clone().into());
        if let Some(m) = p.mime_type {
            put("mime_type", m.into());
        }
        put("heading", p.heading.into());
        put("first_line", p.first_line.into());
        put("last_line", p.last_line.into());
        put("rank", p.rank.into());
        Self {
            content: p.text,
            score: p.score,
            title: p.title.unwrap_or(p.uri),
            metadata,
        }
    }
}

/// An error in Dify's shape: `{"error_code", "error_msg"}` with the HTTP status.
#[derive(Debug)]
pub(crate) struct DifyError {
    status: StatusCode,
    code: u32,
    message: String,
}

impl DifyError {
    fn new(status: StatusCode, code: u32, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 400, message)
    }
}

impl From<ApiError> for DifyError {
    fn from(e: ApiError) -> Self {
        let code = match e.code {
            "missing_token" => 1001,
            "invalid_token" if e.message == super::auth::NOT_BEARER => 1001,
            "invalid_token" => 1002,
            "unknown_pipeline" => 2001,
            _ => u32::from(e.status().as_u16()),
        };
        // Dify's codes 1001 and 1002 come with 401 and 403.
        let status = if code == 1002 {
            StatusCode::FORBIDDEN
        } else {
            e.status()
        };
        Self::new(status, code, e.message)
    }
}

impl IntoResponse for DifyError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error_code": self.code, "error_msg": self.message});
        (self.status, axum::Json(body)).into_response()
    }
}

/// `POST /retrieval` (see the module docs).
pub(crate) async fn retrieval(
    State(state): State<Arc<ServeState>>,
    body: Result<Body<RetrievalRequest>, ApiError>,
) -> Result<axum::Json<RetrievalResponse>, DifyError> {
    let Body(request) = body?;
    if state.draining.load(Ordering::SeqCst) {
        return Err(DifyError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            503,
            "this instance is shutting down; send the request to another",
        ));
    }
    let setting = &request.retrieval_setting;
    if !(1..=MAX_TOP_K).contains(&setting.top_k) {
        return Err(DifyError::bad_request(format!(
            "`retrieval_setting.top_k` is {}; it must be 1 to {MAX_TOP_K}",
            setting.top_k
        )));
    }
    if !(0.0..=1.0).contains(&setting.score_threshold) {
        return Err(DifyError::bad_request(format!(
            "`retrieval_setting.score_threshold` is {}; it must be in [0, 1]",
            setting.score_threshold
        )));
    }
    if request.query.trim().is_empty() {
        return Err(DifyError::bad_request("`query` is empty"));
    }
    if request.query.len() > super::handlers::turns::MAX_MESSAGE_BYTES {
        return Err(DifyError::bad_request(format!(
            "`query` is {} bytes; at most {}",
            request.query.len(),
            super::handlers::turns::MAX_MESSAGE_BYTES
        )));
    }
    let filter = match &request.metadata_condition {
        Some(c) => Some(Filter::new(c)?),
        None => None,
    };
    let pipeline = super::handlers::pipeline(&state, &request.knowledge_id)
        .map_err(|_| {
            DifyError::new(
                StatusCode::NOT_FOUND,
                2001,
                format!(
                    "the knowledge `{}` does not exist (the external knowledge ID names a hostpipe pipeline)",
                    request.knowledge_id
                ),
            )
        })?;
    // Dify asks for top_k after its own filtering; filtered records are fetched past it.
    let wanted = if filter.is_some() {
        MAX_TOP_K
    } else {
        setting.top_k
    };
    let ask = Arc::new(PassageRequest::new(wanted, setting.score_threshold));
    let mut turn = Turn::new(pipeline.id(), request.query.clone());
    turn.ids.message = format!("dify-{}", uuid::Uuid::new_v4());
    turn.extensions.insert(Arc::clone(&ask));
    match pipeline.prepare(turn).await {
        Prepared::Request(..) => {}
        Prepared::Ended(outcome) => {
            // A stage before the injection ended the turn (a required server is down):
            // there is nothing to retrieve from.
            tracing::warn!(
                pipeline = pipeline.id(),
                turn_id = outcome.trace.turn_id(),
                "a retrieval's turn ended before its resources were read"
            );
            return Err(DifyError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                503,
                format!(
                    "pipeline `{}` could not read its resources now; try again later",
                    pipeline.id()
                ),
            ));
        }
    }
    let Some(found) = ask.take() else {
        return Err(DifyError::new(
            StatusCode::CONFLICT,
            409,
            format!(
                "pipeline `{}` has no resource_context_injection stage: it has nothing to retrieve from",
                pipeline.id()
            ),
        ));
    };
    let records = found
        .into_iter()
        .map(Record::of)
        .filter(|r| filter.as_ref().is_none_or(|f| f.keeps(&r.metadata)))
        .take(setting.top_k)
        .collect();
    Ok(axum::Json(RetrievalResponse { records }))
}

/// A checked `metadata_condition`.
struct Filter {
    or: bool,
    conditions: Vec<(Vec<String>, Op, Option<serde_json::Value>)>,
}

/// The comparison operators of Dify's docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Contains,
    NotContains,
    StartWith,
    EndWith,
    Is,
    IsNot,
    In,
    NotIn,
    Empty,
    NotEmpty,
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
}

impl Op {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "contains" => Self::Contains,
            "not contains" => Self::NotContains,
            "start with" => Self::StartWith,
            "end with" => Self::EndWith,
            "is" => Self::Is,
            "is not" => Self::IsNot,
            "in" => Self::In,
            "not in" => Self::NotIn,
            "empty" => Self::Empty,
            "not empty" => Self::NotEmpty,
            "=" => Self::Eq,
            "≠" | "!=" => Self::Ne,
            ">" => Self::Gt,
            "<" => Self::Lt,
            "≥" | ">=" => Self::Ge,
            "≤" | "<=" => Self::Le,
            _ => return None,
        })
    }
}

impl Filter {
    fn new(c: &MetadataCondition) -> Result<Self, DifyError> {
        let mut conditions = Vec::with_capacity(c.conditions.len());
        for (i, cond) in c.conditions.iter().enumerate() {
            let op = Op::parse(&cond.comparison_operator).ok_or_else(|| {
                DifyError::bad_request(format!(
                    "`metadata_condition.conditions[{i}].comparison_operator` `{}` is not supported (before and after are not: records have no dates)",
                    cond.comparison_operator
                ))
            })?;
            if cond.value.is_none() && !matches!(op, Op::Empty | Op::NotEmpty) {
                return Err(DifyError::bad_request(format!(
                    "`metadata_condition.conditions[{i}].value` is missing"
                )));
            }
            conditions.push((
                cond.name.iter().map(str::to_owned).collect(),
                op,
                cond.value.clone(),
            ));
        }
        Ok(Self {
            or: c.logical_operator == LogicalOperator::Or,
            conditions,
        })
    }

    /// Whether a record with `metadata` passes (no condition: it does).
    fn keeps(&self, metadata: &serde_json::Map<String, serde_json::Value>) -> bool {
        let mut results = self.conditions.iter().map(|(names, op, value)| {
            names
                .iter()
                .any(|n| holds(metadata.get(n), *op, value.as_ref()))
        });
        if self.or {
            self.conditions.is_empty() || results.any(|r| r)
        } else {
            results.all(|r| r)
        }
    }
}

/// Whether `field` (absent: `None`) satisfies `op value`.
fn holds(field: Option<&serde_json::Value>, op: Op, value: Option<&serde_json::Value>) -> bool {
    use serde_json::Value;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let field_text = field.map(text).unwrap_or_default();
    let want = value.map(text).unwrap_or_default();
    let list = || -> Vec<String> {
        match value {
            Some(Value::Array(a)) => a.iter().map(text).collect(),
            Some(v) => vec![text(v)],
            None => Vec::new(),
        }
    };
    let number = |v: Option<&Value>| v.and_then(|v| text(v).trim().parse::<f64>().ok());
    let compare = |f: fn(f64, f64) -> bool| match (number(field), number(value)) {
        (Some(a), Some(b)) => f(a, b),
        _ => false,
    };
    match op {
        Op::Contains => field.is_some() && field_text.contains(&want),
        Op::NotContains => !field_text.contains(&want),
        Op::StartWith => field.is_some() && field_text.starts_with(&want),
        Op::EndWith => field.is_some() && field_text.ends_with(&want),
        Op::Is => field.is_some() && field_text == want,
        Op::IsNot => field_text != want || field.is_none(),
        Op::In => field.is_some() && list().contains(&field_text),
        Op::NotIn => !list().contains(&field_text),
        Op::Empty => field_text.is_empty(),
        Op::NotEmpty => !field_text.is_empty(),
        Op::Eq => compare(|a, b| a == b),
        Op::Ne => compare(|a, b| a != b),
        Op::Gt => compare(|a, b| a > b),
        Op::Lt => compare(|a, b| a < b),
        Op::Ge => compare(|a, b| a >= b),
        Op::Le => compare(|a, b| a <= b),
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn filter(c: serde_json::Value) -> Result<Filter, DifyError> {
        let c: MetadataCondition = serde_json::from_value(c).unwrap_or_else(|e| panic!("{e}"));
        Filter::new(&c)
    }

    fn meta() -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(m) = json!({
            "server": "kb", "uri": "kb://faq.md", "heading": "FAQ > Proxy",
            "first_line": 12, "last_line": 20, "rank": 1
        }) else {
            unreachable!()
        };
        m
    }

    #[test]
    fn metadata_conditions_follow_difys_operators() {
        let m = meta();
        let keeps = |c| {
            filter(c)
                .map(|f| f.keeps(&m))
                .unwrap_or_else(|e| panic!("{e:?}"))
        };
        assert!(keeps(
            json!({"conditions": [{"name": "server", "comparison_operator": "is", "value": "kb"}]})
        ));
        assert!(!keeps(
            json!({"conditions": [{"name": "server", "comparison_operator": "is", "value": "docs"}]})
        ));
        assert!(keeps(
            json!({"conditions": [{"name": "uri", "comparison_operator": "start with", "value": "kb://"}]})
        ));
        assert!(keeps(
            json!({"conditions": [{"name": ["title", "heading"], "comparison_operator": "contains", "value": "Proxy"}]})
        ));
        assert!(keeps(
            json!({"conditions": [{"name": "first_line", "comparison_operator": "≥", "value": 12}]})
        ));
        assert!(!keeps(
            json!({"conditions": [{"name": "first_line", "comparison_operator": ">", "value": "12"}]})
        ));
        assert!(keeps(
            json!({"conditions": [{"name": "server", "comparison_operator": "in", "value": ["a", "kb"]}]})
        ));
        assert!(keeps(
            json!({"conditions": [{"name": "missing", "comparison_operator": "empty"}]})
        ));
        // `and` by default; `or` when asked.
        let both = |op: &str| {
            json!({"logical_operator": op, "conditions": [
                {"name": "server", "comparison_operator": "is", "value": "kb"},
                {"name": "rank", "comparison_operator": "=", "value": 2}
            ]})
        };
        assert!(!keeps(both("and")));
        assert!(keeps(both("or")));
    }

    #[test]
    fn an_unknown_operator_or_a_missing_value_is_a_400_naming_the_condition() {
        let e = filter(json!({"conditions": [{"name": "x", "comparison_operator": "before", "value": "2026"}]}))
            .err()
            .unwrap_or_else(|| panic!("accepted"));
        assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, 400));
        assert!(
            e.message.contains("conditions[0].comparison_operator"),
            "{}",
            e.message
        );
        let e = filter(json!({"conditions": [{"name": "x", "comparison_operator": "is"}]}))
            .err()
            .unwrap_or_else(|| panic!("accepted"));
        assert!(e.message.contains("conditions[0].value"), "{}", e.message);
    }

    #[test]
    fn token_errors_get_difys_codes() {
        let code = |e: ApiError| DifyError::from(e);
        let e = code(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_token",
            "x",
        ));
        assert_eq!((e.status, e.code), (StatusCode::UNAUTHORIZED, 1001));
        let e = code(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            crate::serve::auth::NOT_BEARER,
        ));
        assert_eq!((e.status, e.code), (StatusCode::UNAUTHORIZED, 1001));
        let e = code(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the token is not valid",
        ));
        assert_eq!((e.status, e.code), (StatusCode::FORBIDDEN, 1002));
        let e = code(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_pipeline",
            "x",
        ));
        assert_eq!(e.code, 2001);
    }
}
