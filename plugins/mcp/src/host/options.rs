//! [`HostOptions`]: the host-wide limits and their defaults.

use std::time::Duration;

/// Host-wide limits. Every value is a default that a server's config may override where
/// it says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// Spawn (or HTTP connect) plus the `initialize` handshake. Default 30 s (an `npx`
    /// server may install itself on first start).
    pub connect_timeout: Duration,
    /// Each request (`*/list` page, `resources/read`, `tools/call`). Default 30 s.
    /// rmcp has no default request timeout; this is what keeps a lost answer (e.g. a
    /// stdio message over rmcp's 16 MiB line cap, which it drops silently) from hanging
    /// the turn.
    pub request_timeout: Duration,
    /// Pages followed per list before the list is cut with a warning. Default 100.
    pub max_list_pages: usize,
    /// Items kept per list (resources, templates, tools, prompts) before the list is
    /// cut with a warning, whatever the page count. Default 10 000.
    pub max_list_items: usize,
    /// `clientInfo.name` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// Most decoded bytes the content cache holds (`resources/read` results by server
    /// and URI). Default 256 MiB; 0 disables the cache.
    pub content_cache_bytes: u64,
    /// How long a cached read stays fresh, unless the server's `ttlMs` is shorter or
    /// `notifications/resources/updated` comes first. Default 5 min; zero disables the
    /// cache.
    pub content_ttl: Duration,
    /// Largest single message a stdio server may send, in bytes; a larger answer fails
    /// its request at once with an error naming this limit (rmcp alone drops it and the
    /// request hangs). The same cap applies to streamable HTTP responses and SSE events.
    /// Default 16 MiB (rmcp's own).
    pub max_message_bytes: usize,
    /// First delay before reconnecting a lost server; doubles each failed attempt,
    /// with jitter. Default 500 ms.
    pub reconnect_delay: Duration,
    /// Largest delay between reconnect attempts. Default 30 s.
    pub reconnect_max_delay: Duration,
    /// Attempts before giving up on a lost server (status `failed`); `None`: never give
    /// up. Default `None`. A server that fails its first connect is retried only after
    /// [`McpHost::keep_retrying_unreachable`](crate::McpHost::keep_retrying_unreachable)
    /// (`hostpipe serve` calls it; a one-shot command does not).
    pub max_reconnect_attempts: Option<u32>,
    /// After a `list_changed` notification, how long to wait for more before listing
    /// again. List calls made meanwhile wait for the new list (up to the request
    /// timeout). Default 100 ms.
    pub list_refresh_debounce: Duration,
    /// How often a streamable HTTP server is pinged to notice a restart (its session,
    /// and so its subscriptions, would be gone). Zero disables. Default 30 s.
    pub ping_interval: Duration,
    /// The shortest time a list from a 2026-07-28 server is kept when its `ttlMs` says
    /// less (missing means 0: spec 2026-07-28, "Caching"), and the server does not
    /// notify changes of that list. The lists one turn needs, and those of the turns
    /// running within it, then come from one listing instead of one per need. Zero
    /// follows the server exactly. Default 1 s.
    pub min_list_ttl: Duration,
    /// Whether hostpipe declares the `elicitation` client capability (MCP 2025-11-25
    /// `client/elicitation`), and which modes. Declare it only when an elicitor can
    /// ask a user: a server may then ask during a request, and the question goes to the
    /// user of the turn the request belongs to. Default [`Elicitation::Off`].
    pub elicitation: Elicitation,
}

/// Which elicitation modes hostpipe declares ([`HostOptions::elicitation`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Elicitation {
    /// No `elicitation` capability: servers must not ask (rmcp declines any request).
    #[default]
    Off,
    /// `elicitation: { form: {} }`.
    Form,
    /// `elicitation: { form: {}, url: {} }`.
    FormAndUrl,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_list_pages: 100,
            max_list_items: 10_000,
            client_name: "hostpipe".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            content_cache_bytes: 256 * 1024 * 1024,
            content_ttl: Duration::from_secs(300),
            max_message_bytes: 16 * 1024 * 1024,
            reconnect_delay: Duration::from_millis(500),
            reconnect_max_delay: Duration::from_secs(30),
            max_reconnect_attempts: None,
            list_refresh_debounce: Duration::from_millis(100),
            ping_interval: Duration::from_secs(30),
            min_list_ttl: Duration::from_secs(1),
            elicitation: Elicitation::Off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let o = HostOptions::default();
        assert_eq!(o.connect_timeout, Duration::from_secs(30));
        assert_eq!(o.request_timeout, Duration::from_secs(30));
        assert_eq!((o.max_list_pages, o.max_list_items), (100, 10_000));
        assert_eq!(o.client_name, "hostpipe");
        assert_eq!(o.client_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(o.content_cache_bytes, 256 * 1024 * 1024);
        assert_eq!(o.content_ttl, Duration::from_secs(300));
        // rmcp's own stdio line cap (`DEFAULT_MAX_LINE_LENGTH`).
        assert_eq!(o.max_message_bytes, 16 * 1024 * 1024);
        assert_eq!(o.reconnect_delay, Duration::from_millis(500));
        assert_eq!(o.reconnect_max_delay, Duration::from_secs(30));
        assert_eq!(o.max_reconnect_attempts, None);
        assert_eq!(o.list_refresh_debounce, Duration::from_millis(100));
        assert_eq!(o.ping_interval, Duration::from_secs(30));
        assert_eq!(o.min_list_ttl, Duration::from_secs(1));
        assert_eq!(o.elicitation, Elicitation::Off);
    }
}
