//! What the HTTP runners share: a client with timeouts and fixed headers, retries with
//! backoff that honour `Retry-After`, typed errors by status, and server-sent events.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use hostpipe_core::{ConfigError, RunError};

/// Timeouts and retries of one HTTP runner.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpPolicy {
    /// Whole request, streaming included.
    pub(crate) timeout: Duration,
    /// TCP + TLS connect.
    pub(crate) connect_timeout: Duration,
    /// Retries after a 429, a 5xx or a connect failure.
    pub(crate) max_retries: u32,
}

impl HttpPolicy {
    /// A policy from a runner's config values (milliseconds).
    pub(crate) fn from_ms(timeout_ms: u64, connect_timeout_ms: u64, max_retries: u32) -> Self {
        Self {
            timeout: Duration::from_millis(timeout_ms),
            connect_timeout: Duration::from_millis(connect_timeout_ms),
            max_retries,
        }
    }
}

/// Whether `response` is a server-sent event stream (`Content-Type:
/// text/event-stream`), rather than one JSON body.
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// A client with `headers` on every request (names and values checked; errors at
/// `headers.NAME`) and the policy's timeouts.
pub(crate) fn client(
    headers: &BTreeMap<String, String>,
    bearer: Option<&str>,
    policy: HttpPolicy,
) -> Result<reqwest::Client, ConfigError> {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| ConfigError::new(format!("headers.{k}"), e.to_string()))?;
        let value = reqwest::header::HeaderValue::from_str(v)
            .map_err(|e| ConfigError::new(format!("headers.{k}"), e.to_string()))?;
        map.insert(name, value);
    }
    if let Some(token) = bearer {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| ConfigError::new("api_key", e.to_string()))?;
        value.set_sensitive(true);
        map.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .default_headers(map)
        .timeout(policy.timeout)
        .connect_timeout(policy.connect_timeout)
        .build()
        .map_err(|e| ConfigError::new("", e.to_string()))
}

/// `Retry-After` as a delay: seconds, or an HTTP date (RFC 9110 §10.2.3); capped at 60 s.
/// An unreadable value is ignored (the backoff applies).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let raw = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    let raw = raw.trim();
    let secs = match raw.parse::<u64>() {
        Ok(secs) => secs,
        // An IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(raw).ok()?.timestamp();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            u64::try_from(at).ok()?.saturating_sub(now)
        }
    };
    Some(Duration::from_secs(secs.min(60)))
}

/// The backend's error message from a JSON body (`{"error": {"message"}}` as OpenAI
/// sends it, `{"message"}` as Dify does), else the body's start; with any credential it
/// echoes (`Bearer …`, `Basic …`: a proxy or a server quoting the `Authorization`
/// header) replaced by `[redacted]`, since the message travels on to the trace, the
/// history and the caller.
pub(crate) fn error_message(body: &str) -> String {
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let from_json = json.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .and_then(|m| m.as_str())
            .map(str::to_owned)
    });
    redact_credentials(&from_json.unwrap_or_else(|| body.chars().take(300).collect()))
}

/// `text` with the word after each `Bearer` or `Basic` (any case) replaced by
/// `[redacted]`.
fn redact_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut redact_next = false;
    for piece in text.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end();
        if redact_next && !word.is_empty() {
            out.push_str("[redacted]");
            out.push_str(&piece[word.len()..]);
            redact_next = false;
            continue;
        }
        redact_next = word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic");
        out.push_str(piece);
    }
    out
}

/// Whether a request may be sent twice: a completion may (it has no side effect), an
/// upload or a hand-over to an agent may not, unless the server said it did nothing
/// (connect failure, 429, 503).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Retry 429, 5xx and connect failures.
    Idempotent,
    /// Retry only connect failures, 429 and 503.
    SideEffects,
}

/// Longest wait between two attempts when the server does not say.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// Sends the request `make` builds, retrying (see [`Retry`]) up to `policy.max_retries`
/// times: exponential backoff from 500 ms with jitter, at most 8 s, or the server's
/// `Retry-After`; never waiting past `policy.timeout` from the first attempt. A success
/// is returned as is; a failure becomes a typed [`RunError`] through `classify`, which
/// sees the status and body (read in full, at most 64 KiB) and may return `None` to use
/// the generic mapping. Errors never carry the URL (it may hold a token).
pub(crate) async fn send(
    what: &str,
    policy: HttpPolicy,
    retry: Retry,
    make: impl Fn() -> reqwest::RequestBuilder,
    classify: impl Fn(u16, &str) -> Option<RunError>,
) -> Result<reqwest::Response, RunError> {
    let deadline = tokio::time::Instant::now() + policy.timeout;
    let mut attempt = 0u32;
    loop {
        let backoff = |attempt: u32| {
            let base = Duration::from_millis(500) * 2u32.saturating_pow(attempt.min(5));
            base.min(MAX_BACKOFF).mul_f64(0.5 + fastrand::f64() / 2.0)
        };
        // Whether waiting `d` still leaves time for another attempt.
        let fits = |d: Duration| tokio::time::Instant::now() + d < deadline;
        let response = match make().send().await {
            Ok(r) => r,
            Err(e) => {
                // The endpoint without its query or login (they may hold a token).
                let endpoint = e.url().map_or_else(String::new, |u| {
                    format!(
                        " {}://{}{}",
                        u.scheme(),
                        u.host_str().unwrap_or(""),
                        u.port().map(|p| format!(":{p}")).unwrap_or_default()
                    ) + u.path()
                });
                let e = e.without_url();
                if e.is_connect() && attempt < policy.max_retries && fits(backoff(attempt)) {
                    tracing::info!(%what, error = %e, attempt, "connect failed; retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                    continue;
                }
                if e.is_connect() && e.is_timeout() {
                    return Err(RunError::Backend {
                        message: format!(
                            "{what}: no connection within {} ms",
                            policy.connect_timeout.as_millis()
                        ),
                        source: Some(Box::new(e)),
                    });
                }
                if e.is_timeout() {
                    return Err(RunError::Timeout(policy.timeout));
                }
                return Err(RunError::Backend {
                    message: format!("{what}{endpoint}: {}", root_cause(&e)),
                    source: Some(Box::new(e)),
                });
            }
        };
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(response);
        }
        let asked = retry_after(&response);
        let retryable = match retry {
            Retry::Idempotent => status == 429 || (500..600).contains(&status),
            Retry::SideEffects => status == 429 || status == 503,
        };
        let wait = asked.unwrap_or_else(|| backoff(attempt));
        if retryable && attempt < policy.max_retries && fits(wait) {
            tracing::info!(%what, status, attempt, "retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
            continue;
        }
        let body = read_capped(response, 64 * 1024).await;
        if let Some(e) = classify(status, &body) {
            return Err(e);
        }
        let message = format!("{what}: {}", error_message(&body));
        return Err(match status {
            401 | 403 => RunError::Auth { status, message },
            429 => RunError::RateLimited {
                retry_after: asked,
                message,
            },
            500..=599 => RunError::Server { status, message },
            _ => RunError::backend(format!("{message} (HTTP {status})")),
        });
    }
}

async fn read_capped(response: reqwest::Response, cap: usize) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= cap {
            body.truncate(cap);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The innermost cause of an error, which is what a person can act on (`Connection
/// refused (os error 111)` rather than reqwest's "error sending request").
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut root = e;
    while let Some(next) = root.source() {
        root = next;
    }
    if std::ptr::addr_eq(root, e) {
        e.to_string()
    } else {
        format!("{e} ({root})")
    }
}

/// The `data` of each server-sent event of `response` (WHATWG HTML, "Server-sent
/// events"), with its `event` name, in order; comments and keep-alives are skipped.
pub(crate) fn events(
    response: reqwest::Response,
    timeout: Duration,
) -> impl futures_util::Stream<Item = Result<(Option<String>, String), RunError>> {
    sse_stream::SseStream::from_bytes_stream(response.bytes_stream()).filter_map(
        move |item| async move {
            match item {
                Ok(sse) => sse.data.map(|data| Ok((sse.event, data))),
                Err(e) => Some(Err(stream_error(&e, timeout))),
            }
        },
    )
}

/// A broken event stream: [`RunError::Timeout`] when the whole-request timeout ended
/// it, else a backend error.
fn stream_error(e: &(dyn std::error::Error + 'static), timeout: Duration) -> RunError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<reqwest::Error>()
            && r.is_timeout()
        {
            return RunError::Timeout(timeout);
        }
        cur = err.source();
    }
    RunError::backend(format!("the event stream broke: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echoed_credential_never_reaches_the_message() {
        let body = r#"{"error":{"message":"Incorrect API key provided: Bearer sk-secret-xyz. Try again."}}"#;
        assert_eq!(
            error_message(body),
            "Incorrect API key provided: Bearer [redacted] Try again."
        );
        assert_eq!(
            error_message("proxy said: authorization: basic dXNlcjpwYXNz\nbye"),
            "proxy said: authorization: basic [redacted]\nbye"
        );
        assert_eq!(
            error_message("{\"message\":\"quota exceeded\"}"),
            "quota exceeded"
        );
    }
}
