//! Reading a backend's JSON leniently, field by field, into typed wire structs.
//!
//! OpenAI-compatible servers and Dify versions differ in small ways (`"usage": null`
//! until the last chunk, `arguments` as an object, a field of another type). The
//! `local` and `dify` runners therefore read every field of an answer with one of the
//! functions here (`#[serde(deserialize_with = "…")]` on a struct with
//! `#[serde(default)]`): a field whose value has another shape than expected counts as
//! absent (its default), so one odd field never rejects a whole answer; unknown
//! fields are ignored; only a JSON syntax error fails. This is what the
//! `serde_json::Value` lookups these wire types replace did. Fields of a struct type
//! take only an object ([`object`]); an array with an element of another shape counts
//! as absent as a whole.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A scalar or array field: the value as `T`, or `T::default()` when it has another
/// shape (for `Option<T>`: `None`, also for `null`).
pub(crate) fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(serde_json::from_value(Value::deserialize(deserializer)?).unwrap_or_default())
}

/// A field of a struct type (or `Option` of one): the value as `T` when it is an
/// object, else `T::default()`.
pub(crate) fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(read(Value::deserialize(deserializer)?))
}

/// A field of a struct type that counts whenever it is there, whatever its value
/// (`null` included): `Some` of the value as `T`, or of `T::default()` when it is not
/// an object.
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(Some(read(Value::deserialize(deserializer)?)))
}

/// A field of a struct type that counts whenever it is there and not `null`: `Some` of
/// the value as `T`, or of `T::default()` when it is not an object.
pub(crate) fn not_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok((!value.is_null()).then(|| read(value)))
}

/// A whole body or chunk: `value` as `T` when it is an object, else `T::default()`.
pub(crate) fn read<T: DeserializeOwned + Default>(value: Value) -> T {
    if value.is_object() {
        serde_json::from_value(value).unwrap_or_default()
    } else {
        T::default()
    }
}

/// `text` as `T`, leniently ([`read`]).
///
/// # Errors
/// When `text` is not JSON; the message is `serde_json`'s (with line and column).
pub(crate) fn parse<T: DeserializeOwned + Default>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_str(text).map(read)
}

/// `usage`, in tokens, as OpenAI's Chat Completions API reports it (`prompt_tokens`,
/// `completion_tokens`) and Dify's `message_end` repeats it in `metadata.usage`; other
/// fields (`total_tokens`, prices) are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Usage {
    #[serde(deserialize_with = "lenient")]
    pub(crate) prompt_tokens: u64,
    #[serde(deserialize_with = "lenient")]
    pub(crate) completion_tokens: u64,
}

impl From<Usage> for hostpipe_core::TokenUsage {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        }
    }
}
