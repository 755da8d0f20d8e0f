//! "Allow for this conversation": [`ConsentGrant`]s, and the [`GrantStore`] seam where
//! a consent gate keeps them beyond its process.

use async_trait::async_trait;
use hostpipe_core::ReadOrigin;
use serde::{Deserialize, Serialize};

use crate::error::{MAX_ID_BYTES, StoreError};

/// An "allow for this conversation" answer ([`ConsentAnswer::AllowConversation`](super::ConsentAnswer::AllowConversation)):
/// the pipeline's consent gate does not ask again for the same server, URI and origin
/// in that conversation. Kept by the store, so that every worker sharing it honours the
/// answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConsentGrant {
    /// The pipeline whose policy asked.
    pub pipeline: String,
    /// The conversation.
    pub conversation: String,
    /// The MCP server.
    pub server: String,
    /// The resource URI; for a tool call, the tool's name as its server lists it.
    pub uri: String,
    /// Whose read: attached (host) or asked for by the model.
    pub origin: ReadOrigin,
    /// A read, or a tool call.
    #[serde(default)]
    pub kind: GrantKind,
}

/// What a [`ConsentGrant`] allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// Reading a resource.
    #[default]
    Read,
    /// Calling a tool.
    Call,
}

impl GrantKind {
    /// `read` or `call`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Call => "call",
        }
    }
}

impl ConsentGrant {
    /// Checks the ids' lengths.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a pipeline, conversation or server id over
    /// [`MAX_ID_BYTES`].
    pub fn validate(&self) -> Result<(), StoreError> {
        for (what, id) in [
            ("pipeline", &self.pipeline),
            ("conversation", &self.conversation),
            ("server", &self.server),
        ] {
            if id.len() > MAX_ID_BYTES {
                return Err(StoreError::invalid(format!(
                    "the {what} id is {} bytes; at most {MAX_ID_BYTES}",
                    id.len()
                )));
            }
        }
        Ok(())
    }
}

/// Where a [`Consent`](super::Consent) gate keeps conversation grants, so that every
/// worker sharing the store honours them. Every [`AttachmentStore`](crate::AttachmentStore)
/// is one; the defaults keep nothing (the gate then remembers grants in its own process
/// only).
#[async_trait]
pub trait GrantStore: Send + Sync {
    /// Keeps a conversation grant (again: no change).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] ([`ConsentGrant::validate`]), or a database error.
    async fn grant(&self, grant: &ConsentGrant, now_ms: i64) -> Result<(), StoreError> {
        let _ = (grant, now_ms);
        Ok(())
    }

    /// Whether `grant` was kept by [`GrantStore::grant`]. The default: never.
    ///
    /// # Errors
    /// A database error.
    async fn is_granted(&self, grant: &ConsentGrant) -> Result<bool, StoreError> {
        let _ = grant;
        Ok(false)
    }
}
