//! hostpipe's built-in stages.
//!
//! - [`BindMcpServers`] (`bind_mcp_servers`): which MCP servers the pipeline may use;
//!   a required server that is down ends the turn with a reply.
//! - [`PromptExpansion`] (`prompt_expansion`): a message `/server:prompt arg=value`
//!   becomes the MCP prompt's messages; embedded resources become attachments.
//! - [`ResourceMentions`] (`resource_mentions`): `@server:uri` in the message attaches
//!   that resource for the turn.
//! - [`ResourceContextInjection`] (`resource_context_injection`): reads the attached
//!   resources (static URIs or RFC 6570 templates, see [`uri_template`]), converts them
//!   by MIME type ([`convert`]) and fits them into the token budget ([`fit`]): the
//!   texts are cut into passages ([`passage`]), turned into terms ([`lexical`]),
//!   indexed and ranked across all resources ([`index`], optionally [`fit::retrieval`]), and
//!   the best passages kept under their locators ([`excerpt`]).
//! - [`ToolAssembly`] (`tool_assembly`): the bound servers' tools, namespaced, plus the
//!   exploration tools `list_resources` and `read_resource`, and the [`BoundTools`]
//!   executor that refuses servers not bound for the turn.
//!
//! Each stage registers itself with [`hostpipe_core::submit_stage!`]; its config
//! section is a typed struct that rejects unknown keys.

pub mod attachment;
mod bind;
pub mod budget;
pub mod config;
pub mod convert;
pub mod excerpt;
pub mod fit;
pub mod index;
mod inject;
pub mod lexical;
pub mod mentions;
pub mod passage;
pub mod prompt;
pub mod reader;
pub mod summarize;
mod tools;
pub mod uri_template;

pub use attachment::{AttachmentSpec, TargetError};
pub use bind::{BindConfig, BindMcpServers, Binding};
pub use fit::Strategy;
pub use inject::{AttachmentConfig, InjectConfig, ResourceContextInjection};
pub use mentions::{MentionsConfig, ResourceMentions};
pub use prompt::{PromptConfig, PromptExpansion};
pub use summarize::ExtractiveSummarizer;
pub use tools::{
    BoundTools, LIST_RESOURCES, MAX_TOOL_NAME_LEN, READ_RESOURCE, ToolAssembly, ToolAssemblyConfig,
    namespaced_name,
};

/// Makes sure the linker keeps this crate's registrations: call it (it does nothing)
/// from a binary that uses the registry.
pub fn link() {}
