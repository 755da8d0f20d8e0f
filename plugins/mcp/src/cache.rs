//! The content cache: `resources/read` results by (server, URI), bounded in bytes, each
//! entry with a time to live.
//!
//! Freshness rules:
//! - An entry lives for the host's `content_ttl`, or less when the server's result says
//!   so (`ttlMs`, SEP-2549; `ttlMs: 0` is never cached). `cacheScope` needs no special
//!   case: the cache belongs to one host and its sessions, which is the "requesting
//!   client" both `public` and `private` allow.
//! - `notifications/resources/updated` for a URI, and any reconnect of its server, make
//!   every cached copy of it unreachable at once: a key carries a generation that the
//!   invalidation bumps, so a read that starts after an invalidation never joins a
//!   request that started before it, and a result that was in flight when the
//!   invalidation arrived is handed to its callers but not kept.
//! - Concurrent reads of the same key share one request (moka's coalescing init).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hostpipe_core::{ResourceContents, ResourceRead, SourceError};
use moka::Expiry;
use moka::notification::RemovalCause;

/// A cache key: server, URI and the generation current when the read started.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) server: Arc<str>,
    pub(crate) uri: Arc<str>,
    generation: u64,
}

/// One cached `resources/read` result.
#[derive(Debug)]
pub(crate) struct Entry {
    contents: Arc<[ResourceContents]>,
    ttl: Duration,
}

impl Entry {
    fn weight(&self) -> u32 {
        // A small fixed cost per item keeps many tiny entries from looking free.
        let bytes: usize = self.contents.iter().map(|c| c.byte_len() + 128).sum();
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

/// What one fetch produced: the items and the server's `ttlMs`, if it sent one.
pub(crate) struct Fetched {
    pub(crate) contents: Vec<ResourceContents>,
    pub(crate) ttl_ms: Option<u64>,
}

struct PerEntryTtl;

impl Expiry<Key, Arc<Entry>> for PerEntryTtl {
    fn expire_after_create(&self, _: &Key, value: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

#[derive(Default)]
struct Generations {
    /// Bumped when every entry of the server is invalidated (reconnect).
    epoch: u64,
    /// Bumped per URI by `notifications/resources/updated`.
    uris: HashMap<Arc<str>, u64>,
}

/// Called when an entry leaves the cache because it expired or was evicted for room
/// (not when it was invalidated): the host may unsubscribe from it.
pub(crate) type OnEvict = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// See the module documentation.
pub(crate) struct ContentCache {
    entries: moka::future::Cache<Key, Arc<Entry>>,
    generations: Mutex<HashMap<Arc<str>, Generations>>,
    counter: AtomicU64,
    ttl: Duration,
}

impl ContentCache {
    /// A cache of at most `max_bytes` (decoded content bytes) whose entries live at most
    /// `ttl`; a zero `ttl` or `max_bytes` disables it (every read goes to the server).
    pub(crate) fn new(max_bytes: u64, ttl: Duration, on_evict: OnEvict) -> Self {
        let entries = moka::future::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_, v: &Arc<Entry>| v.weight())
            .expire_after(PerEntryTtl)
            .support_invalidation_closures()
            .eviction_listener(move |k: Arc<Key>, _, cause| {
                if matches!(cause, RemovalCause::Expired | RemovalCause::Size) {
                    on_evict(&k.server, &k.uri);
                }
            })
            .build();
        let ttl = if max_bytes == 0 { Duration::ZERO } else { ttl };
        Self {
            entries,
            generations: Mutex::default(),
            counter: AtomicU64::new(0),
            ttl,
        }
    }

    fn key(&self, server: &str, uri: &str) -> Key {
        let mut gens = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (server, generation) = match gens.get_key_value(server) {
            Some((s, g)) => (
                Arc::clone(s),
                g.uris.get(uri).copied().unwrap_or(0).max(g.epoch),
            ),
            None => {
                let s: Arc<str> = Arc::from(server);
                gens.insert(Arc::clone(&s), Generations::default());
                (s, 0)
            }
        };
        Key {
            server,
            uri: Arc::from(uri),
            generation,
        }
    }

    /// The cached copy of `uri` on `server`, or the result of `fetch` (shared with every
    /// concurrent caller of the same key, and kept when it may be).
    ///
    /// # Errors
    /// Whatever `fetch` returned; callers that shared the request each get a copy.
    pub(crate) async fn get_or_fetch<Fut>(
        &self,
        server: &str,
        uri: &str,
        fetch: impl FnOnce() -> Fut,
    ) -> Result<ResourceRead, SourceError>
    where
        Fut: Future<Output = Result<Fetched, SourceError>>,
    {
        if self.ttl.is_zero() {
            return fetch().await.map(|f| ResourceRead::fresh(f.contents));
        }
        let key = self.key(server, uri);
        if let Some(e) = self.entries.get(&key).await {
            return Ok(ResourceRead {
                contents: Arc::clone(&e.contents),
                cache_hit: true,
            });
        }
        let ran = AtomicBool::new(false);
        let ttl = self.ttl;
        let entry = self
            .entries
            .try_get_with(key.clone(), async {
                ran.store(true, Ordering::Relaxed);
                let f = fetch().await?;
                let ttl = f
                    .ttl_ms
                    .map_or(ttl, |ms| ttl.min(Duration::from_millis(ms)));
                Ok::<_, SourceError>(Arc::new(Entry {
                    contents: f.contents.into(),
                    ttl,
                }))
            })
            .await
            .map_err(|e| (*e).clone())?;
        // An invalidation that arrived while the request was in flight: the callers get
        // what they asked for, later readers do not.
        if self.key(server, uri).generation != key.generation {
            self.entries.invalidate(&key).await;
        }
        Ok(ResourceRead {
            contents: Arc::clone(&entry.contents),
            cache_hit: !ran.load(Ordering::Relaxed),
        })
    }

    /// Drops `uri` on `server` (`notifications/resources/updated`). Returns whether a
    /// copy was cached.
    pub(crate) async fn invalidate_uri(&self, server: &str, uri: &str) -> bool {
        let old = self.key(server, uri);
        let was_cached = self.entries.contains_key(&old);
        let next = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut gens = self
                .generations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(g) = gens.get_mut(server) {
                g.uris.insert(Arc::clone(&old.uri), next);
            }
        }
        self.entries.invalidate(&old).await;
        was_cached
    }

    /// Drops every entry of `server` (it reconnected: its resources may have changed).
    pub(crate) fn invalidate_server(&self, server: &str) {
        let next = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut gens = self
                .generations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(g) = gens.get_mut(server) {
                g.epoch = next;
                g.uris.clear();
            }
        }
        let server: Arc<str> = Arc::from(server);
        // Fails only without `support_invalidation_closures`, which the builder sets.
        let _ = self
            .entries
            .invalidate_entries_if(move |k, _| k.server == server);
    }

    /// Whether the cache keeps anything (a zero size or TTL turns it off).
    pub(crate) fn is_enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// The entries' weight in bytes ([`Entry::weight`]), as moka's last maintenance
    /// counted it.
    pub(crate) fn weighted_bytes(&self) -> u64 {
        self.entries.weighted_size()
    }

    /// Whether a fresh copy of `uri` on `server` is cached.
    pub(crate) fn contains(&self, server: &str, uri: &str) -> bool {
        !self.ttl.is_zero() && self.entries.contains_key(&self.key(server, uri))
    }

    /// Runs moka's pending maintenance: expired entries leave (and their eviction
    /// listener runs) even when nothing reads the cache.
    pub(crate) async fn sweep(&self) {
        self.entries.run_pending_tasks().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Fetched {
        Fetched {
            contents: vec![ResourceContents::Text {
                uri: "u".into(),
                mime_type: None,
                text: t.into(),
            }],
            ttl_ms: None,
        }
    }

    fn cache() -> ContentCache {
        ContentCache::new(1 << 20, Duration::from_secs(60), Arc::new(|_, _| {}))
    }

    fn body(r: &ResourceRead) -> &str {
        match &r.contents[0] {
            ResourceContents::Text { text, .. } => text,
            ResourceContents::Blob { .. } => "",
        }
    }

    #[tokio::test]
    async fn a_second_read_is_a_hit_until_the_uri_is_invalidated() {
        let c = cache();
        let a = c.get_or_fetch("s", "u", || async { Ok(text("v1")) }).await;
        let a = a.unwrap_or_else(|e| unreachable!("{e}"));
        assert!(!a.cache_hit);
        let b = c.get_or_fetch("s", "u", || async { Ok(text("v2")) }).await;
        let b = b.unwrap_or_else(|e| unreachable!("{e}"));
        assert!(b.cache_hit);
        assert_eq!(body(&b), "v1");
        assert!(c.invalidate_uri("s", "u").await);
        let d = c.get_or_fetch("s", "u", || async { Ok(text("v3")) }).await;
        let d = d.unwrap_or_else(|e| unreachable!("{e}"));
        assert!(!d.cache_hit);
        assert_eq!(body(&d), "v3");
        c.invalidate_server("s");
        assert!(!c.contains("s", "u"));
    }

    #[tokio::test]
    async fn ttl_ms_zero_is_not_kept() {
        let c = cache();
        let once = || async {
            Ok(Fetched {
                ttl_ms: Some(0),
                ..text("x")
            })
        };
        let _ = c.get_or_fetch("s", "u", once).await;
        let again = c.get_or_fetch("s", "u", || async { Ok(text("y")) }).await;
        assert!(!again.unwrap_or_else(|e| unreachable!("{e}")).cache_hit);
    }

    #[tokio::test]
    async fn an_update_during_the_read_keeps_the_result_out_of_the_cache() {
        let c = Arc::new(cache());
        let c2 = Arc::clone(&c);
        let r = c
            .get_or_fetch("s", "u", || async move {
                c2.invalidate_uri("s", "u").await;
                Ok(text("old"))
            })
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(body(&r), "old");
        assert!(!c.contains("s", "u"));
    }

    #[tokio::test]
    async fn concurrent_reads_share_one_fetch() {
        let c = cache();
        let fetches = AtomicU64::new(0);
        let read = || {
            c.get_or_fetch("s", "u", || async {
                fetches.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(text("v"))
            })
        };
        let all = futures_util::future::join_all((0..50).map(|_| read())).await;
        assert!(all.iter().all(Result::is_ok));
        assert_eq!(fetches.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn errors_are_not_cached_and_reach_every_waiter() {
        let c = cache();
        let err = || SourceError::Unavailable {
            server: "s".into(),
            reason: "down".into(),
        };
        let r = c.get_or_fetch("s", "u", || async { Err(err()) }).await;
        assert!(matches!(r, Err(SourceError::Unavailable { .. })));
        let ok = c.get_or_fetch("s", "u", || async { Ok(text("v")) }).await;
        assert!(!ok.unwrap_or_else(|e| unreachable!("{e}")).cache_hit);
    }
}
