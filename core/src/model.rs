//! What hostpipe needs to know about the model a turn is for.

use serde::{Deserialize, Serialize};

use crate::tokens::Encoding;

/// The model a turn is prepared for: how much fits, how to count it, what it can take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelProfile {
    /// Model name as the runner's API knows it, e.g. `gpt-4o`.
    pub name: String,
    /// Context window in tokens (input plus output).
    pub context_window: usize,
    /// Tokens reserved for the model's answer.
    pub max_output_tokens: usize,
    /// The tokenizer used to count tokens.
    pub encoding: Encoding,
    /// Whether the model accepts image input.
    pub vision: bool,
    /// Whether the model supports tool calling.
    pub tool_calling: bool,
    /// Longest image edge the model accepts, in pixels.
    pub max_image_edge_px: u32,
    /// Largest image the model accepts, in bytes.
    pub max_image_bytes: usize,
}

impl Default for ModelProfile {
    /// `gpt-4o`: 128 000-token window, 16 384 output tokens reserved, `o200k_base`,
    /// vision and tool calling, images up to 2048 px and 20 MiB (OpenAI's published
    /// limits for image inputs).
    fn default() -> Self {
        Self {
            name: "gpt-4o".into(),
            context_window: 128_000,
            max_output_tokens: 16_384,
            encoding: Encoding::O200kBase,
            vision: true,
            tool_calling: true,
            max_image_edge_px: 2048,
            max_image_bytes: 20 * 1024 * 1024,
        }
    }
}

impl ModelProfile {
    /// Tokens left for input after reserving the output: `context_window -
    /// max_output_tokens`, saturating at 0.
    pub fn input_tokens(&self) -> usize {
        self.context_window.saturating_sub(self.max_output_tokens)
    }
}

/// A model profile whose numbers contradict each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ModelProfileError {
    /// The field at fault, e.g. `max_output_tokens`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl ModelProfile {
    /// Checks that the profile can hold any input at all.
    ///
    /// # Errors
    /// [`ModelProfileError`] when `context_window` is 0, when `max_output_tokens` leaves
    /// no input tokens, or when an image limit is 0.
    pub fn validate(&self) -> Result<(), ModelProfileError> {
        let err = |field, message: String| Err(ModelProfileError { field, message });
        if self.context_window == 0 {
            return err("context_window", "must be at least 1 token".into());
        }
        if self.max_output_tokens >= self.context_window {
            return err(
                "max_output_tokens",
                format!(
                    "{} leaves no input tokens in a {}-token context window",
                    self.max_output_tokens, self.context_window
                ),
            );
        }
        if self.max_image_edge_px == 0 || self.max_image_bytes == 0 {
            return err("max_image_edge_px", "image limits must be positive".into());
        }
        Ok(())
    }
}
