//! [`Observed`]: the transport wrapper that sees a server's notifications in arrival
//! order.
//!
//! rmcp hands each notification to the client handler on its own task, so the handler
//! sees them out of order (see `docs/mcp-notes.md`). hostpipe does not use the handler:
//! [`Observed`] wraps the transport and sees every message in `receive`, which rmcp
//! calls sequentially. What must hold before rmcp hands on the next message is done
//! right there: `resources/updated` makes the cached copy unreachable, and
//! `list_changed` marks the lists stale, so a read or list call that follows can never
//! get the old answer. The rest (refreshing lists, unsubscribing, reconnecting: network
//! calls) goes into one channel per server, tagged with the connection it came from,
//! and the server's event loop ([`super::live::run`]) does it in order.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::RxJsonRpcMessage;
use rmcp::transport::Transport;

use super::slot::{Signal, Slot};
use crate::cache::ContentCache;

/// A transport that reports notifications and its own end to the server's event loop.
pub(super) struct Observed<T> {
    pub(super) inner: T,
    pub(super) slot: Arc<Slot>,
    pub(super) cache: Arc<ContentCache>,
    pub(super) conn: u64,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        let signal = match &message {
            None => Some(Signal::Closed),
            Some(JsonRpcMessage::Notification(n)) => match &n.notification {
                ServerNotification::ResourceUpdatedNotification(u) => {
                    let uri = u.params.uri.clone();
                    let was_cached = self
                        .cache
                        .invalidate_uri(&self.slot.config.name, &uri)
                        .await;
                    self.slot.note_update();
                    Some(Signal::Updated { uri, was_cached })
                }
                ServerNotification::ResourceListChangedNotification(_) => {
                    Some(Signal::ResourcesChanged)
                }
                ServerNotification::ToolListChangedNotification(_) => Some(Signal::ToolsChanged),
                ServerNotification::PromptListChangedNotification(_) => {
                    Some(Signal::PromptsChanged)
                }
                _ => None,
            },
            Some(_) => None,
        };
        if matches!(
            signal,
            Some(Signal::ResourcesChanged | Signal::ToolsChanged | Signal::PromptsChanged)
        ) && self.conn == self.slot.conn.load(Ordering::SeqCst)
        {
            self.slot.lists.seen.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(signal) = signal {
            // The loop is gone only when the host is: nothing to tell.
            let _ = self.slot.signals.send((self.conn, signal));
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
