//! Test helpers for code built on hostpipe (the `testkit` feature): third-party stages,
//! runners and stores check themselves with what the built-in ones are checked with.
//!
//! - [`FakeSource`]: an [`McpSource`](hostpipe_core::McpSource) serving text and blob
//!   resources and templates from memory, failing reads on demand, and remembering which
//!   reads reached it;
//! - [`ScriptedRunner`]: a [`Runner`](hostpipe_core::Runner) that answers from a script
//!   (text, a failure, a delay, a panic) and remembers the requests it got;
//! - [`conformance`]: the runner contract, checked on any runner;
//! - [`check_store`]: what every [`AttachmentStore`](crate::AttachmentStore) must do;
//!   [`check_sealed_rows`]: what every [`SealedRows`](crate::SealedRows) must do;
//!   [`check_server_entries`]: what every [`ServerEntries`](crate::ServerEntries) must do.
//!
//! ```toml
//! [dev-dependencies]
//! hostpipe-engine = { version = "0.1", features = ["testkit"] }
//! ```

pub mod conformance;
mod runner;
mod source;
mod store;

pub use runner::{Script, ScriptedRunner};
pub use source::FakeSource;
pub use store::{check_sealed_rows, check_server_entries, check_store};
