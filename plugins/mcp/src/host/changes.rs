//! Servers that come and go while the host runs: [`McpHost::add_server`] (connected in
//! the background, retried like a server down at start), [`McpHost::remove_server`],
//! and [`McpHost::apply`], which makes the host's servers a given set (a reload) and
//! keeps the session of every server whose entry did not change.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use hostpipe_core::ServerStatus;

use super::McpHost;
use super::connect::connect;
use super::live;
use super::slot::{Signal, Slot};
use crate::config::ServerConfig;

/// What [`McpHost::apply`] did, by server name (each list sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Same entry: the session was kept as it was.
    pub kept: Vec<String>,
    /// New names: connecting in the background.
    pub added: Vec<String>,
    /// Another entry under the same name: closed, and connecting anew.
    pub changed: Vec<String>,
    /// Gone: closed.
    pub removed: Vec<String>,
}

/// Why [`McpHost::add_server`] refused a server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddServerError {
    /// A server of that name is already there.
    #[error("an MCP server named `{0}` is already configured")]
    Exists(String),
}

impl McpHost {
    /// Adds `config` as a new server and connects it in the background (status
    /// `connecting`, then `connected`; `disabled` if its entry says so). A server that
    /// does not answer is retried as [`McpHost::keep_retrying_unreachable`] retries
    /// (status `reconnecting`): this is for a long-running service, where servers are
    /// added while it runs. Returns at once; call it within a tokio runtime.
    ///
    /// # Errors
    /// [`AddServerError::Exists`] when a server of that name is there (nothing changes).
    pub fn add_server(&self, config: ServerConfig) -> Result<(), AddServerError> {
        let slot = {
            let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
            if slots.contains_key(&config.name) {
                return Err(AddServerError::Exists(config.name));
            }
            let slot = Arc::new(Slot::new(config));
            slot.added.store(true, Ordering::Relaxed);
            slot.set_vault(self.vault());
            slots.insert(slot.config.name.clone(), Arc::clone(&slot));
            self.senders
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(slot.config.name.clone(), slot.signals.clone());
            slot
        };
        if slot.config.disabled {
            slot.set_status(ServerStatus::Disabled);
            return Ok(());
        }
        slot.set_status(ServerStatus::Connecting);
        let (task_slot, options, cache) = (
            Arc::clone(&slot),
            self.options.clone(),
            Arc::clone(&self.cache),
        );
        let task = tokio::spawn(async move {
            let slot = task_slot;
            connect(Arc::clone(&slot), options.clone(), Arc::clone(&cache)).await;
            match slot.status() {
                ServerStatus::Failed { reason } if slot.peer().is_none() => {
                    tracing::info!(server = %slot.config.name, %reason, "added MCP server unreachable; retrying with backoff");
                    // The loop's answer to a suspect without a session is a reconnect.
                    let _ = slot
                        .signals
                        .send((slot.conn.load(Ordering::SeqCst), Signal::Suspect(reason)));
                }
                // A login is needed: `reconnect` after it starts the loop.
                _ if slot.peer().is_none() => return,
                _ => {}
            }
            if let Some(rx) = slot.take_signals() {
                live::run(slot, options, cache, rx).await;
            }
        });
        slot.push_task(task);
        Ok(())
    }

    /// Removes `server`: no new requests reach it, its event loop stops, its session
    /// closes (a stdio server is stopped as [`McpHost::shutdown`] stops it) and its
    /// cached contents go. Requests in flight fail. Whether it was there.
    ///
    /// Cancel-safe only before it returns its first `Pending`: the server is out of the
    /// host at once, its session closes on the way.
    pub async fn remove_server(&self, server: &str) -> bool {
        let Some(slot) = self
            .slots
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(server)
        else {
            return false;
        };
        self.senders
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(server);
        slot.closing.store(true, Ordering::Relaxed);
        slot.abort_tasks();
        slot.drop_session().await;
        slot.set_status(ServerStatus::Failed {
            reason: "removed".into(),
        });
        self.cache.invalidate_server(server);
        tracing::info!(%server, "MCP server removed");
        true
    }

    /// Makes the host's servers `servers` (a reload): a server whose entry is equal to
    /// the one it runs with keeps its session untouched; a changed entry is closed and
    /// connected anew; a new name is added ([`McpHost::add_server`]); a name no longer
    /// there is removed ([`McpHost::remove_server`]). Closing runs concurrently; new
    /// connections are made in the background. A later entry with the same name
    /// replaces an earlier one.
    pub async fn apply(&self, servers: impl IntoIterator<Item = ServerConfig>) -> Applied {
        let wanted: BTreeMap<String, ServerConfig> =
            servers.into_iter().map(|c| (c.name.clone(), c)).collect();
        let current: BTreeMap<String, ServerConfig> = self
            .all_slots()
            .into_iter()
            .map(|s| (s.config.name.clone(), s.config.clone()))
            .collect();
        let mut applied = Applied::default();
        for name in current.keys().filter(|n| !wanted.contains_key(*n)) {
            applied.removed.push(name.clone());
        }
        let mut to_add = Vec::new();
        for (name, config) in wanted {
            match current.get(&name) {
                Some(running) if *running == config => applied.kept.push(name),
                Some(_) => {
                    applied.changed.push(name);
                    to_add.push(config);
                }
                None => {
                    applied.added.push(name);
                    to_add.push(config);
                }
            }
        }
        let closing = applied.removed.iter().chain(&applied.changed);
        futures_util::future::join_all(closing.map(|name| self.remove_server(name))).await;
        for config in to_add {
            // Every name was removed above or was not there: it cannot exist.
            if let Err(e) = self.add_server(config) {
                tracing::error!(error = %e, "adding a server on reload failed");
            }
        }
        applied
    }
}
