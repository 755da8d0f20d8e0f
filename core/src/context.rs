//! Context blocks (what a turn puts in front of the model) and attachments (what the
//! host was asked to read).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where an attachment was made. Ranking prefers the narrower scope:
/// message > conversation > pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Configured on the pipeline: every turn carries it.
    Pipeline,
    /// Pinned to one conversation.
    Conversation,
    /// This message only.
    Message,
}

impl Scope {
    /// `pipeline`, `conversation` or `message`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pipeline => "pipeline",
            Self::Conversation => "conversation",
            Self::Message => "message",
        }
    }
}

/// The value of one URI-template argument: a string, or `{ var = "NAME", default = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a string, or { var = \"NAME\", default = \"VALUE\" } to take a turn variable"
)]
pub enum ArgumentValue {
    /// A fixed value.
    Literal(String),
    /// The value of a turn variable.
    Variable(VariableRef),
}

/// A reference to a turn variable ([`Variables`](crate::Variables)), with an optional
/// default when the turn does not set it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableRef {
    /// Variable name.
    pub var: String,
    /// Used when the variable is missing; without it a missing variable is an error on
    /// that block.
    #[serde(default)]
    pub default: Option<String>,
}

/// What an attachment points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttachmentTarget {
    /// A static resource URI.
    Uri {
        /// The URI to read.
        uri: String,
    },
    /// An RFC 6570 template and its arguments.
    Template {
        /// The URI template, as listed by `resources/templates/list`.
        template: String,
        /// Argument values by variable name.
        #[serde(default)]
        arguments: BTreeMap<String, ArgumentValue>,
    },
    /// Contents the server already sent (an embedded resource or an image in a
    /// `prompts/get` result): nothing to read, the same conversion and budget rules.
    Embedded {
        /// The contents; its `uri` names the block.
        contents: crate::source::ResourceContents,
    },
}

/// A request to read a resource into the turn's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The MCP server (configured name).
    pub server: String,
    /// What to read.
    #[serde(flatten)]
    pub target: AttachmentTarget,
    /// Where it was attached.
    pub scope: Scope,
}

impl Attachment {
    /// A message-scope attachment of a static URI.
    pub fn message_uri(server: impl Into<String>, uri: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            target: AttachmentTarget::Uri { uri: uri.into() },
            scope: Scope::Message,
        }
    }
}

/// A template and the concrete argument values it was expanded with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRef {
    /// The URI template.
    pub uri_template: String,
    /// The values used, after variable lookup (before percent-encoding).
    pub arguments: BTreeMap<String, String>,
}

/// Provenance of a [`ContextBlock`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSource {
    /// MCP server name.
    pub server: String,
    /// The URI that was read (or, for a block that failed before a URI existed, the
    /// template).
    pub uri: String,
    /// The template and arguments, for template attachments.
    pub template: Option<TemplateRef>,
    /// The attachment scope.
    pub scope: Scope,
    /// The resource's listed name or title, when known.
    pub name: Option<String>,
}

/// Why a block carries a fallback note instead of its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FallbackReason {
    /// Binary content that cannot go to the model as text.
    Binary,
    /// An image, and the model has no vision (or images are not injected).
    ImageWithoutVision,
    /// The read failed; `error` is the error's text.
    ReadFailed {
        /// The error.
        error: String,
    },
    /// The attachment could not be turned into a URI (e.g. a missing template variable).
    InvalidAttachment {
        /// What was wrong.
        error: String,
    },
    /// The budget had no room left for even a truncated copy.
    NoBudget,
    /// The consent policy (or the user asked) did not allow the read; nothing was sent
    /// to the server. The resource may well exist.
    Withheld {
        /// How it was decided ([`Verdict::how`](crate::Verdict::how)).
        decision: String,
    },
}

/// The content of a block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockBody {
    /// Text for the model, as it will be sent.
    Text {
        /// The text (after any truncation; includes the omission marker).
        text: String,
    },
    /// An image for a model with vision.
    Image {
        /// MIME type, e.g. `image/png`.
        mime_type: String,
        /// Encoded image bytes (never base64 here; runners encode as their API needs).
        #[serde(skip)]
        data: Vec<u8>,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// A short, safe note in place of content the model cannot or should not get. The
    /// note never contains the content itself (no base64).
    Fallback {
        /// Why.
        reason: FallbackReason,
        /// The note shown to the model, e.g.
        /// `[binary resource demo://x (application/octet-stream, 1024 bytes) not shown]`.
        note: String,
    },
}

/// Which part of a text a truncation kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationSide {
    /// Kept the beginning.
    Head,
    /// Kept the end.
    Tail,
    /// Kept the beginning and the end, omitting the middle.
    HeadTail,
}

/// What was done to a block to fit the budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Treatment {
    /// Kept whole.
    Whole,
    /// Truncated token-exactly with a visible omission marker.
    Truncated {
        /// Which part was kept.
        side: TruncationSide,
        /// Tokens of the original text that were left out.
        omitted_tokens: usize,
    },
    /// Split into chunks, some kept.
    Chunked {
        /// Chunks kept.
        kept: usize,
        /// Chunks in all.
        total: usize,
    },
    /// Replaced by a summary.
    Summarized,
    /// Not injected (a fallback note, or nothing at all).
    Omitted,
}

/// One piece of context for the model, with its provenance and token accounting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBlock {
    /// Where it came from.
    pub source: BlockSource,
    /// The content's MIME type, if known.
    pub mime_type: Option<String>,
    /// The content.
    pub body: BlockBody,
    /// What was done to fit the budget.
    pub treatment: Treatment,
    /// Tokens of the content before treatment (0 for non-text content).
    pub tokens_before: usize,
    /// Tokens of the body as sent (text or fallback note; images count 0 here).
    pub tokens_after: usize,
}

impl ContextBlock {
    /// The text the model sees for this block: the text, or the fallback note; `None`
    /// for images.
    pub fn text(&self) -> Option<&str> {
        match &self.body {
            BlockBody::Text { text } => Some(text),
            BlockBody::Fallback { note, .. } => Some(note),
            BlockBody::Image { .. } => None,
        }
    }
}
