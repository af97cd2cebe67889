//! How a work's value crosses processes (SPEC.md §3.4): as text, through a
//! [`Codec`]. JSON by default.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Turns values of `T` into the text of an outcome and back.
///
/// The leader encodes its value once; every joiner decodes it. Implement it
/// for formats other than JSON, or to keep a value's exact bytes (for example
/// by base64-encoding them).
pub trait Codec<T>: Send + Sync {
    /// The text of `value`, or why it has none.
    fn encode(&self, value: &T) -> Result<String, String>;
    /// The value of `text`, or why it is not one.
    fn decode(&self, text: &str) -> Result<T, String>;
}

/// The default codec: `serde_json`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(&self, value: &T) -> Result<String, String> {
        serde_json::to_string(value).map_err(|error| error.to_string())
    }

    fn decode(&self, text: &str) -> Result<T, String> {
        serde_json::from_str(text).map_err(|error| error.to_string())
    }
}
