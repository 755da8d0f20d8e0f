//! Connecting one server: its transport ([`stdio`] child or streamable [`http`]), the
//! `initialize` handshake under the connect timeout, then what it declared, and its
//! lists. The outcome is the slot's status.

mod http;
mod stdio;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hostpipe_core::ServerStatus;
use rmcp::RoleClient;
use rmcp::model::{ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt as _};
use rmcp::transport::{AuthClient, StreamableHttpClientTransport, Transport};

use super::elicit::Handler;
use super::lists::refresh_lists;
use super::oauth;
use super::observed::Observed;
use super::options::HostOptions;
use super::slot::{Era, MODERN, Notifies, Session, Slot, Which};
use super::subscribe;
use crate::auth_config::AuthConfig;
use crate::cache::ContentCache;
use crate::config::{ProtocolMode, TransportConfig};
use crate::convert;

/// Why a connect did not give a session.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The connect failed; the reason, for the status.
    Failed(String),
    /// rmcp's `Auto` probe gave up on `server/discover` (after 10 s) and sent
    /// `initialize`, and then the server's late answer to the probe came: a server slow
    /// to start (a cold `npx` install, a loaded machine). The answer tells its era
    /// ([`late_probe_answer`]); connecting again in that era needs no probe.
    LateProbe {
        /// What the answer showed.
        era: Era,
        /// The reason, for the status if the second try fails too.
        reason: String,
    },
    /// The server wants OAuth credentials hostpipe does not have (a 401): status
    /// `needs_login`, no reconnect loop.
    NeedsLogin {
        /// The reason, for the status.
        reason: String,
        /// The `WWW-Authenticate` challenge, for the login's discovery.
        challenge: Option<String>,
    },
}

impl From<String> for Refused {
    fn from(reason: String) -> Self {
        Self::Failed(reason)
    }
}

/// Connects (or reconnects) one server under its connect timeout and lists what it
/// declares. The outcome is the slot's status.
pub(super) async fn connect(slot: Arc<Slot>, options: HostOptions, cache: Arc<ContentCache>) {
    let connect_timeout = slot
        .config
        .connect_timeout
        .unwrap_or(options.connect_timeout);
    let established = within(connect_timeout, establish(&slot, &options, cache)).await;
    finish(&slot, &options, established).await;
}

/// The handshake under the connect timeout.
pub(super) async fn within(
    connect_timeout: Duration,
    establishing: impl Future<Output = Result<Session, Refused>>,
) -> Result<Session, Refused> {
    match tokio::time::timeout(connect_timeout, establishing).await {
        Ok(r) => r,
        Err(_) => Err(Refused::Failed(format!(
            "no answer to `initialize` within {} ms",
            connect_timeout.as_millis()
        ))),
    }
}

/// Starts the server's transport and does the handshake; after a [`Refused::LateProbe`],
/// once more in the era the late answer showed.
async fn establish(
    slot: &Arc<Slot>,
    options: &HostOptions,
    cache: Arc<ContentCache>,
) -> Result<Session, Refused> {
    match establish_in(slot, options, Arc::clone(&cache), lifecycle(slot)).await {
        Err(Refused::LateProbe { era, reason }) => {
            tracing::info!(server = %slot.config.name, %reason, ?era, "the server answered the `server/discover` probe after rmcp gave up on it; connecting again without a probe");
            slot.stop_child().await;
            establish_in(slot, options, cache, era_lifecycle(era))
                .await
                .map_err(|e| match e {
                    Refused::LateProbe { reason, .. } => Refused::Failed(reason),
                    e => e,
                })
        }
        other => other,
    }
}

/// Starts the server's transport (a new connection number) and does the handshake
/// `lifecycle`.
async fn establish_in(
    slot: &Arc<Slot>,
    options: &HostOptions,
    cache: Arc<ContentCache>,
    lifecycle: ClientLifecycleMode,
) -> Result<Session, Refused> {
    let client = handler(options, slot);
    let conn = slot.new_connection();
    match &slot.config.transport {
        TransportConfig::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            let cmd = stdio::command(command, args, env, inherit_env, cwd.as_deref());
            let transport = stdio::spawn(slot, cmd, command, options.max_message_bytes)?;
            serve(client, transport, slot, cache, conn, lifecycle).await
        }
        TransportConfig::StreamableHttp { url, headers, auth } => {
            let config = http::config(url, headers, options.max_message_bytes)?;
            if matches!(auth, AuthConfig::None) {
                let transport = StreamableHttpClientTransport::from_config(config);
                return serve(client, transport, slot, cache, conn, lifecycle).await;
            }
            let manager = oauth::manager(&slot.config.name, url, auth, slot.vault())
                .await
                .map_err(|e| match e {
                    oauth::Prepare::NeedsLogin(reason) => Refused::NeedsLogin {
                        reason,
                        challenge: None,
                    },
                    oauth::Prepare::Failed(reason) => Refused::Failed(reason),
                })?;
            let http = AuthClient::new(http::client()?, manager);
            if let AuthConfig::ClientCredentials(cc) = auth {
                oauth::keep_renewing(&slot.config.name, url, cc, &http.auth_manager);
            }
            let transport = StreamableHttpClientTransport::with_client(http, config);
            serve(client, transport, slot, cache, conn, lifecycle).await
        }
    }
}

/// The session's client handler: [`client_config`], and elicitation for `slot`.
pub(super) fn handler(options: &HostOptions, slot: &Arc<Slot>) -> Handler {
    Handler {
        config: client_config(options),
        slot: Arc::downgrade(slot),
    }
}

/// What hostpipe says about itself in `initialize` (and, on 2026-07-28, in each
/// request's `_meta`): its name and version, and elicitation only when
/// [`HostOptions::elicitation`] declares it.
pub(super) fn client_config(options: &HostOptions) -> ClientConfig {
    ClientConfig::new(
        super::elicit::capabilities(options),
        Implementation::new(options.client_name.clone(), options.client_version.clone()),
    )
    // rmcp 3.11 puts 2026-07-28 (no `initialize`) into `initialize` by default; pin the
    // newest version that has the handshake, which every current server speaks.
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

/// The `initialize` handshake over `transport`, watched by [`Observed`] as connection
/// `conn`.
pub(super) async fn serve<T>(
    client: Handler,
    transport: T,
    slot: &Arc<Slot>,
    cache: Arc<ContentCache>,
    conn: u64,
    lifecycle: ClientLifecycleMode,
) -> Result<Session, Refused>
where
    T: Transport<RoleClient> + Send + 'static,
    T::Error: std::error::Error + Send + Sync + 'static,
{
    let probing = matches!(lifecycle, ClientLifecycleMode::Auto { .. });
    let handshake = if matches!(lifecycle, ClientLifecycleMode::Initialize) {
        "`initialize`"
    } else {
        "`server/discover`"
    };
    client
        .serve_with_lifecycle(
            Observed {
                inner: transport,
                slot: Arc::clone(slot),
                cache,
                conn,
            },
            lifecycle,
        )
        .await
        .map_err(|e| {
            if e.is_authorization_required() {
                return Refused::NeedsLogin {
                    reason: "the server requires OAuth authorization (HTTP 401) and hostpipe has no usable credentials for it".into(),
                    challenge: e.auth_challenge().map(str::to_owned),
                };
            }
            let mut reason = format!("{handshake} failed: {}", convert::describe_init(&e));
            if probing && let Some(era) = late_probe_answer(&e) {
                return Refused::LateProbe { era, reason };
            }
            // Only a process can exit on the probe; an HTTP server that does not know
            // `server/discover` answers it, and rmcp falls back to `initialize`.
            if probing && matches!(slot.config.transport, TransportConfig::Stdio { .. }) {
                reason.push_str(
                    " (hostpipe probed with `server/discover` before `initialize`; a server that exits on it needs `protocol = \"2025-11-25\"` in its config, `\"protocol\": \"2025-11-25\"` in an mcpServers file)",
                );
            }
            Refused::Failed(reason)
        })
}

/// The era a late answer to rmcp's `Auto` probe shows ([`Refused::LateProbe`]): rmcp
/// sends `server/discover` (id 0), gives up after 10 s and sends `initialize` (id 1), and
/// takes the next response for the answer to `initialize`. A result with another id is
/// the probe's result: a 2026-07-28 server. An error with another id is the probe
/// refused: an older server (method not found).
fn late_probe_answer(e: &rmcp::service::ClientInitializeError) -> Option<Era> {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::ConflictInitResponseId(..) => Some(Era::Modern),
        E::UncorrelatedErrorResponse { .. } => Some(Era::Legacy),
        _ => None,
    }
}

/// The handshake of a server of `era`, without a probe.
fn era_lifecycle(era: Era) -> ClientLifecycleMode {
    match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    }
}

/// How to start a session with `slot`'s server: its config's `protocol`, else what an
/// earlier connection found, else the probe (spec 2026-07-28, "Transports", backward
/// compatibility: `server/discover`, falling back to `initialize`).
pub(super) fn lifecycle(slot: &Slot) -> ClientLifecycleMode {
    match (slot.config.protocol, slot.era()) {
        (ProtocolMode::Legacy, _) | (ProtocolMode::Auto, Some(Era::Legacy)) => {
            era_lifecycle(Era::Legacy)
        }
        (ProtocolMode::Modern, _) | (ProtocolMode::Auto, Some(Era::Modern)) => {
            era_lifecycle(Era::Modern)
        }
        (ProtocolMode::Auto, None) => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
    }
}

/// After the handshake: a failure stops the child and is the status; a session is
/// adopted, and once its lists are in, the server is connected.
pub(super) async fn finish(
    slot: &Arc<Slot>,
    options: &HostOptions,
    established: Result<Session, Refused>,
) {
    let name = &slot.config.name;
    let session = match established {
        Ok(session) => session,
        Err(Refused::NeedsLogin { reason, challenge }) => {
            tracing::warn!(server = %name, %reason, "MCP server needs an OAuth login: run `hostpipe login {name}`, or log in on the admin page");
            if challenge.is_some() {
                *slot
                    .challenge
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = challenge;
            }
            slot.write().status = Some(ServerStatus::NeedsLogin { reason });
            return;
        }
        Err(Refused::Failed(reason) | Refused::LateProbe { reason, .. }) => {
            tracing::info!(server = %name, %reason, stderr = ?slot.stderr_tail(), "MCP server failed to connect");
            slot.stop_child().await;
            slot.write().status = Some(ServerStatus::Failed { reason });
            return;
        }
    };
    adopt(slot, session).await;
    // On a 2026-07-28 connection, list changes come only to a `subscriptions/listen`.
    if slot.is_modern()
        && subscribe::wants_listen(slot)
        && let Some(peer) = slot.peer()
        && let Err(e) = subscribe::relisten(slot, &peer, slot.request_timeout(options)).await
    {
        tracing::info!(server = %name, error = %e, "subscriptions/listen failed: list changes will not be noticed");
    }
    // `shutdown` ran while this connect was in flight: it must not come back to life.
    if slot.closing.load(Ordering::Relaxed) {
        slot.drop_session().await;
        slot.set_status(ServerStatus::Failed {
            reason: "the host shut down".into(),
        });
        return;
    }
    let seen = slot.lists.seen.load(Ordering::SeqCst);
    refresh_lists(slot, options, Which::ALL).await;
    slot.lists.mark_refreshed(seen);
    {
        let mut st = slot.write();
        // A list answered 401 (the server lets `initialize` through without a token):
        // the status says so already.
        if matches!(st.status, Some(ServerStatus::NeedsLogin { .. })) {
            return;
        }
        st.status = Some(ServerStatus::Connected);
    }
    tracing::info!(server = %name, "MCP server connected");
}

/// Keeps the session and what the server said about itself in `initialize`.
async fn adopt(slot: &Slot, session: Session) {
    let peer = session.peer().clone();
    // rmcp's client response cache (SEP-2549) is on by default and may answer a read
    // from cache, or serve a stale copy when a refetch fails. Reads here must be
    // authoritative, and hostpipe's own content cache knows about `resources/updated`,
    // reconnects and per-turn provenance, so rmcp's is switched off.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let info = session.peer_info();
    let caps = info
        .as_ref()
        .map(|i| convert::capabilities(&i.capabilities))
        .unwrap_or_default();
    let notifies = info
        .as_ref()
        .map(|i| Notifies::from_wire(&i.capabilities))
        .unwrap_or_default();
    {
        let mut st = slot.write();
        st.capabilities = caps;
        st.notifies = notifies;
        st.peer = Some(peer);
        if let Some(i) = &info {
            let version = i.protocol_version.to_string();
            slot.remember_era(if version == MODERN {
                Era::Modern
            } else {
                Era::Legacy
            });
            st.protocol_version = Some(version);
            st.implementation = i
                .server_info
                .as_ref()
                .map(|s| (s.name.clone(), s.version.clone()));
            st.instructions.clone_from(&i.instructions);
        }
    }
    slot.set_session(session).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn mode(protocol: ProtocolMode, era: Option<Era>) -> ClientLifecycleMode {
        let mut config = ServerConfig::stdio("s", "unused", Vec::<String>::new());
        config.protocol = protocol;
        let slot = Slot::new(config);
        if let Some(era) = era {
            slot.remember_era(era);
        }
        lifecycle(&slot)
    }

    #[test]
    fn the_pin_wins_then_what_the_first_connection_found_then_the_probe() {
        assert!(matches!(
            mode(ProtocolMode::Auto, None),
            ClientLifecycleMode::Auto { .. }
        ));
        assert!(matches!(
            mode(ProtocolMode::Auto, Some(Era::Modern)),
            ClientLifecycleMode::Discover { .. }
        ));
        assert!(matches!(
            mode(ProtocolMode::Auto, Some(Era::Legacy)),
            ClientLifecycleMode::Initialize
        ));
        assert!(matches!(
            mode(ProtocolMode::Legacy, Some(Era::Modern)),
            ClientLifecycleMode::Initialize
        ));
        assert!(matches!(
            mode(ProtocolMode::Modern, Some(Era::Legacy)),
            ClientLifecycleMode::Discover { .. }
        ));
    }
}
