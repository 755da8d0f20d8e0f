//! Shared config helpers.

use hostpipe_core::ConfigError;
use serde::de::DeserializeOwned;

/// Deserializes a stage's config section; `null` (no section) means the defaults.
///
/// # Errors
/// A [`ConfigError`] whose key is the path inside the section where deserialization
/// stopped (e.g. `attachments[0].uri`), with serde's message.
pub fn parse_section<T: DeserializeOwned + Default>(
    section: &serde_json::Value,
) -> Result<T, ConfigError> {
    if section.is_null() {
        return Ok(T::default());
    }
    serde_path_to_error::deserialize(section).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." { String::new() } else { path };
        ConfigError::new(key, e.into_inner().to_string())
    })
}
