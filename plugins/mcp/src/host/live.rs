//! Keeping a server's state live: its event loop ([`run`]) does, in order and one
//! server at a time, what the notifications [`Observed`] reported call for (refreshing
//! lists after a debounce, unsubscribing, reconnecting a lost server), pings a
//! streamable HTTP server now and then, and sweeps the content cache when idle. Signals
//! of an older connection are ignored.
//!
//! [`Observed`]: super::observed::Observed

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::connect::connect;
use super::lists::refresh_lists;
use super::options::HostOptions;
use super::slot::{Signal, Slot, Which};
use crate::cache::ContentCache;
use hostpipe_core::ServerStatus;

/// A server's event loop; returns when the host drops the channel or shuts down.
pub(super) async fn run(
    slot: Arc<Slot>,
    options: HostOptions,
    cache: Arc<ContentCache>,
    mut signals: mpsc::UnboundedReceiver<(u64, Signal)>,
) {
    let name = slot.config.name.clone();
    let mut dirty = Which::default();
    let mut refresh_at: Option<Instant> = None;
    let ping_every = slot.is_http().then_some(options.ping_interval);
    let ping_every = ping_every.filter(|d| !d.is_zero());
    let mut next_ping = ping_every.map(|d| Instant::now() + d);
    // moka notices expired entries (and so their unsubscribes) only when the cache is
    // used; an idle host is swept this often.
    let mut sweep = tokio::time::interval(Duration::from_secs(10));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let refresh_sleep = async {
            match refresh_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let ping_sleep = async {
            match next_ping {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            received = signals.recv() => {
                let Some((conn, signal)) = received else { return };
                if slot.closing.load(Ordering::Relaxed) {
                    return;
                }
                // 0: not about one connection (a cache eviction).
                if conn != 0 && conn != slot.conn.load(Ordering::SeqCst) {
                    continue;
                }
                match signal {
                    Signal::Updated { uri, was_cached } => {
                        tracing::debug!(server = %name, %uri, was_cached, "resource updated");
                        // An update for a URI no longer cached: nothing needs it.
                        if !was_cached {
                            unsubscribe(&slot, &options, &cache, &uri).await;
                        }
                    }
                    Signal::Evicted(uri) => unsubscribe(&slot, &options, &cache, &uri).await,
                    Signal::ResourcesChanged | Signal::ToolsChanged | Signal::PromptsChanged => {
                        match signal {
                            Signal::ResourcesChanged => dirty.resources = true,
                            Signal::ToolsChanged => dirty.tools = true,
                            _ => dirty.prompts = true,
                        }
                        refresh_at.get_or_insert_with(|| Instant::now() + options.list_refresh_debounce);
                    }
                    Signal::Closed => {
                        let reason = slot.exit_reason();
                        reconnect(&slot, &options, &cache, reason).await;
                        dirty = Which::default();
                        refresh_at = None;
                    }
                    Signal::Suspect(reason) => {
                        if !slot.ping(&options).await {
                            reconnect(&slot, &options, &cache, reason).await;
                            dirty = Which::default();
                            refresh_at = None;
                        }
                    }
                }
            }
            () = refresh_sleep => {
                refresh_at = None;
                let which = std::mem::take(&mut dirty);
                // Covers the notifications seen before it starts, not those during it.
                let seen = slot.lists.seen.load(Ordering::SeqCst);
                refresh_lists(&slot, &options, which).await;
                slot.lists.mark_refreshed(seen);
            }
            _ = sweep.tick() => cache.sweep().await,
            () = ping_sleep => {
                next_ping = ping_every.map(|d| Instant::now() + d);
                if slot.status().is_connected() && !slot.ping(&options).await {
                    reconnect(&slot, &options, &cache, "no answer to `ping`".into()).await;
                }
            }
        }
    }
}

/// `resources/unsubscribe` from `uri` if the connection is subscribed and nothing needs
/// it: no fresh cached copy, no read in progress.
async fn unsubscribe(slot: &Slot, options: &HostOptions, cache: &ContentCache, uri: &str) {
    if !slot.release_subscription(uri, || cache.contains(&slot.config.name, uri)) {
        return;
    }
    let Some(peer) = slot.peer() else { return };
    // A 2026-07-28 connection has no `resources/unsubscribe`: the URI leaves the listen
    // filter the next time a read listens again (an update for it meanwhile is harmless).
    if slot.is_modern() {
        return;
    }
    let timeout = slot.request_timeout(options);
    let ending = slot.request("resources/unsubscribe");
    #[allow(deprecated)] // legacy-only in rmcp 3.11; the right call on `initialize` sessions
    let call = peer.unsubscribe(UnsubscribeRequestParams::new(uri));
    let answered = tokio::time::timeout(timeout, call).await;
    ending.end_bounded(&answered);
    match answered {
        Ok(Ok(())) => tracing::debug!(server = %slot.config.name, %uri, "unsubscribed"),
        Ok(Err(e)) => {
            tracing::info!(server = %slot.config.name, %uri, error = %e, "resources/unsubscribe failed");
        }
        Err(_) => {
            tracing::info!(server = %slot.config.name, %uri, "resources/unsubscribe timed out")
        }
    }
    // A read that started meanwhile subscribed again; its `resources/subscribe` may
    // have reached the server before this unsubscribe. Subscribe once more so the
    // server's state matches ours (a repeated subscribe is harmless).
    if slot.is_subscribed(uri) {
        let ending = slot.request("resources/subscribe");
        #[allow(deprecated)]
        let again = peer.subscribe(SubscribeRequestParams::new(uri));
        let answered = tokio::time::timeout(timeout, again).await;
        ending.end_bounded(&answered);
        if !matches!(answered, Ok(Ok(()))) {
            tracing::info!(server = %slot.config.name, %uri, "resources/subscribe after an unsubscribe race failed");
        }
    }
}

/// Drops the lost session and connects again with exponential backoff and full jitter
/// (delays from `reconnect_delay`, doubling up to `reconnect_max_delay`), until it
/// connects, the host shuts down, or `max_reconnect_attempts` is reached (status
/// `failed`). The server's cached contents are dropped first: they may have changed
/// while it was away. The lists are fetched again by the connect; subscriptions are
/// made again by the next read of each resource.
async fn reconnect(
    slot: &Arc<Slot>,
    options: &HostOptions,
    cache: &Arc<ContentCache>,
    reason: String,
) {
    if slot.closing.load(Ordering::Relaxed) {
        return;
    }
    slot.drop_session().await;
    cache.invalidate_server(&slot.config.name);
    // Whatever `list_changed` the lost connection announced, the connect lists anew.
    slot.lists.forgive();
    let mut reason = reason;
    let mut delay = options.reconnect_delay;
    let mut attempt: u32 = 1;
    loop {
        if options
            .max_reconnect_attempts
            .is_some_and(|max| attempt > max)
        {
            tracing::warn!(server = %slot.config.name, %reason, "MCP server lost; not reconnecting any more");
            slot.set_status(ServerStatus::Failed { reason });
            return;
        }
        slot.set_status(ServerStatus::Reconnecting {
            reason: reason.clone(),
            attempt,
        });
        tracing::info!(server = %slot.config.name, %reason, attempt, "MCP server lost; reconnecting");
        // Full jitter over the upper half: many hosts restarting together spread out.
        let half = delay / 2;
        let wait = half + half.mul_f64(fastrand::f64());
        tokio::time::sleep(wait).await;
        if slot.closing.load(Ordering::Relaxed) {
            return;
        }
        connect(Arc::clone(slot), options.clone(), Arc::clone(cache)).await;
        match slot.status() {
            ServerStatus::Connected => {
                tracing::info!(server = %slot.config.name, attempt, "MCP server reconnected");
                return;
            }
            ServerStatus::Failed { reason: why } => reason = why,
            // Its credentials are gone or refused: nothing to retry until a login.
            ServerStatus::NeedsLogin { .. } => return,
            _ => {}
        }
        slot.drop_session().await;
        attempt = attempt.saturating_add(1);
        delay = (delay * 2).min(options.reconnect_max_delay.max(options.reconnect_delay));
    }
}

/// How long a list call waits for a pending refresh (after `list_changed`) before it
/// answers with the list it has.
pub(super) async fn wait_fresh(slot: &Slot, timeout: Duration) {
    let seen = slot.lists.seen.load(Ordering::SeqCst);
    let mut rx = slot.lists.refreshed.subscribe();
    let _ = tokio::time::timeout(timeout, rx.wait_for(|&r| r >= seen)).await;
}
