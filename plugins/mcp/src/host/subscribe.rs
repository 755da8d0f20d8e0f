//! Subscriptions to resource updates and list changes, in both eras: `resources/subscribe`
//! on a 2025-11-25 connection, one `subscriptions/listen` on a 2026-07-28 one (spec
//! 2026-07-28, "Subscriptions"), re-issued with the whole set whenever a URI is added,
//! and again after an abrupt end while the connection lives. Either way the
//! notifications are acted on where they arrive ([`super::observed`]): the content
//! cache's invalidation is the same for both.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{SubscribeRequestParams, SubscriptionFilter};
use rmcp::service::{Subscription, SubscriptionEnd};
use rmcp::{Peer, RoleClient};

use super::slot::{Listener, Slot, timed_call};
use super::span::Call;

/// Subscribes to updates of `uri` unless already subscribed on this connection:
/// `resources/subscribe` on a 2025-11-25 connection, a new `subscriptions/listen` with
/// `uri` added on a 2026-07-28 one. A failure is logged and the read goes on (the
/// cache's TTL still bounds staleness).
pub(super) async fn subscribe_once(
    slot: &Arc<Slot>,
    peer: &Peer<RoleClient>,
    uri: &str,
    timeout: Duration,
) {
    if !slot.mark_subscribed(uri) {
        return;
    }
    if slot.is_modern() {
        if let Err(e) = relisten(slot, peer, timeout).await {
            tracing::info!(server = %slot.config.name, %uri, error = %e, "subscriptions/listen failed");
            slot.unmark_subscribed(uri);
        } else if !covers(slot, uri) {
            tracing::info!(server = %slot.config.name, %uri, "the server did not acknowledge the subscription");
            slot.unmark_subscribed(uri);
        }
        return;
    }
    #[allow(deprecated)] // legacy-only in rmcp 3.11; the right call on `initialize` sessions
    let call = peer.subscribe(SubscribeRequestParams::new(uri));
    let about = Call::new(slot, "resources/subscribe").uri(uri);
    if let Err(e) = timed_call(slot, &about, timeout, call).await {
        tracing::info!(server = %slot.config.name, %uri, error = %e, "resources/subscribe failed");
        slot.unmark_subscribed(uri);
    }
}

/// Opens a `subscriptions/listen` for list changes and every URI subscribed on this
/// connection, replacing the one before (dropped: cancelled), and waits for the
/// server's acknowledgement (at most `timeout`). One at a time per server: the filter
/// is built once the one before is in place, so concurrent first reads of different
/// URIs end with a listen that holds them all.
///
/// # Errors
/// The request failed or timed out.
pub(super) async fn relisten(
    slot: &Arc<Slot>,
    peer: &Peer<RoleClient>,
    timeout: Duration,
) -> Result<(), String> {
    let _one_at_a_time = slot.relistening.lock().await;
    let filter = filter(slot, &slot.subscriptions());
    let ending = slot.request("subscriptions/listen");
    let answered = tokio::time::timeout(timeout, peer.listen(filter)).await;
    ending.end_bounded(&answered);
    let subscription = match answered {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => {
            return Err(format!(
                "no acknowledgement within {} ms",
                timeout.as_millis()
            ));
        }
    };
    let acknowledged = subscription
        .acknowledged()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    let task = tokio::spawn(drain(Arc::clone(slot), peer.clone(), subscription, timeout));
    *slot
        .listener
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Listener { acknowledged, task });
    Ok(())
}

/// Whether the current listen's acknowledgement covers `uri`.
pub(super) fn covers(slot: &Slot, uri: &str) -> bool {
    slot.listener
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .is_some_and(|l| l.acknowledged.iter().any(|u| u == uri))
}

/// Whether the server declared list changes: then a connection listens from the start
/// (resource updates join when a read subscribes).
pub(super) fn wants_listen(slot: &Slot) -> bool {
    let n = slot.read().notifies;
    n.tools_list_changed || n.prompts_list_changed || n.resources_list_changed
}

/// The list changes the server declared, and updates of `uris` when it declared
/// `resources.subscribe`: a server may refuse a filter asking for more.
fn filter(slot: &Slot, uris: &[String]) -> SubscriptionFilter {
    let n = slot.read().notifies;
    let mut f = SubscriptionFilter::new();
    f.tools_list_changed = n.tools_list_changed.then_some(true);
    f.prompts_list_changed = n.prompts_list_changed.then_some(true);
    f.resources_list_changed = n.resources_list_changed.then_some(true);
    if n.resources_updated && !uris.is_empty() {
        f.resource_subscriptions = Some(uris.to_vec());
    }
    f
}

/// Drains `subscription` (its notifications were already acted on in transit); after an
/// abrupt end or a lagging consumer, listens again (1 s apart) while the connection
/// lives. A graceful end or a cancellation ends the task.
async fn drain(
    slot: Arc<Slot>,
    peer: Peer<RoleClient>,
    mut subscription: Subscription,
    timeout: Duration,
) {
    loop {
        while let Ok(Some(_)) = subscription.next().await {}
        let again = matches!(
            subscription.end(),
            None | Some(SubscriptionEnd::Abrupt | SubscriptionEnd::Lagged { .. })
        );
        if !again || peer.is_transport_closed() {
            return;
        }
        tracing::info!(server = %slot.config.name, end = ?subscription.end(), "subscriptions/listen ended; listening again");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let filter = filter(&slot, &slot.subscriptions());
        let ending = slot.request("subscriptions/listen");
        let answered = tokio::time::timeout(timeout, peer.listen(filter)).await;
        ending.end_bounded(&answered);
        subscription = match answered {
            Ok(Ok(s)) => s,
            _ => return,
        };
    }
}
