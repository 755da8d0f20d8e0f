//! Errors and limits shared by the stores and the consent gate's grants.

/// The longest pipeline, conversation, message or server id a store keeps, in bytes
/// (stores index them; PostgreSQL's B-tree entries are limited to about 2.7 KB).
pub const MAX_ID_BYTES: usize = 1024;

/// An error from an [`AttachmentStore`](crate::AttachmentStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The request was invalid (an empty id, an embedded target, …).
    #[error("{0}")]
    Invalid(String),
    /// The store could not be opened or migrated (a bad URL, a directory that cannot
    /// be created, a database newer than this hostpipe).
    #[error("cannot open the attachment store {store}: {message}")]
    Open {
        /// The store (its URL without credentials).
        store: String,
        /// What went wrong.
        message: String,
    },
    /// The database failed or did not answer in time.
    #[error("attachment store {store}: {operation} failed: {message}")]
    Database {
        /// The store (its URL without credentials).
        store: String,
        /// What was being done, e.g. `load pins`.
        operation: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A stored row could not be read back (written by another program, or corrupted).
    #[error("attachment store {store}: a stored {what} is invalid: {message}")]
    Corrupt {
        /// The store.
        store: String,
        /// `pin` or `record`.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

impl StoreError {
    /// An [`StoreError::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }
}
