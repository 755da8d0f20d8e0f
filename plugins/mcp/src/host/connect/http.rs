//! A streamable HTTP server: the client transport's config.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// The transport config for `url`: the configured headers, a bounded SSE retry, both
/// size caps at `max_message_bytes`, and no silent re-initialize.
///
/// # Errors
/// A header name or value HTTP does not allow, naming the header.
pub(super) fn config(
    url: &str,
    headers: &BTreeMap<String, String>,
    max_message_bytes: usize,
) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut map = HashMap::new();
    for (k, v) in headers {
        let name =
            http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header `{k}`: {e}"))?;
        let value = http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
        map.insert(name, value);
    }
    let mut backoff = ExponentialBackoff::default();
    // rmcp's default retries the SSE stream forever with unbounded delays.
    backoff.max_times = Some(5);
    backoff.max_delay = Some(Duration::from_secs(10));
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(map);
    config.retry_config = Arc::new(backoff);
    config.max_json_response_size = max_message_bytes;
    config.max_sse_event_size = max_message_bytes;
    // rmcp would re-initialize a session the server no longer knows without
    // telling its handler, and the server-side subscriptions would be lost
    // silently. hostpipe reconnects itself instead (`live::reconnect`), which
    // drops the cache and subscribes again.
    config.reinit_on_expired_session = false;
    Ok(config)
}

/// The HTTP client of an OAuth server's transport: as rmcp's own default (no idle
/// pool), following only same-origin 307/308 redirects (a cross-origin one would hand
/// the bearer token to another host), each connect attempt bounded.
///
/// # Errors
/// When the TLS backend cannot start.
pub(super) fn client() -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| {
            first.scheme() == attempt.url().scheme()
                && first.host_str() == attempt.url().host_str()
                && first.port_or_known_default() == attempt.url().port_or_known_default()
        });
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() < 10 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(policy)
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_limits_go_into_the_config() {
        let headers = BTreeMap::from([("Authorization".to_owned(), "Bearer t".to_owned())]);
        let config = config("http://127.0.0.1:1/mcp", &headers, 1234)
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(&*config.uri, "http://127.0.0.1:1/mcp");
        assert_eq!(
            config
                .custom_headers
                .get(&http::header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            Some(&b"Bearer t"[..])
        );
        assert_eq!(config.max_json_response_size, 1234);
        assert_eq!(config.max_sse_event_size, 1234);
        assert!(!config.reinit_on_expired_session);
    }

    #[test]
    fn a_bad_header_is_named() {
        let headers = BTreeMap::from([("bad name".to_owned(), "v".to_owned())]);
        let err = config("http://127.0.0.1:1/mcp", &headers, 1).err();
        assert!(err.is_some_and(|e| e.starts_with("header `bad name`")));
        let headers = BTreeMap::from([("X-Ok".to_owned(), "line\nbreak".to_owned())]);
        let err = config("http://127.0.0.1:1/mcp", &headers, 1).err();
        assert!(err.is_some_and(|e| e.starts_with("header `X-Ok`")));
    }
}
