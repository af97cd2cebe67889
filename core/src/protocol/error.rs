//! Why bytes from another process are not a message (SPEC.md §3.7, §4).

use super::token::TokenError;

/// A line that is not a valid message. The peer is to blame; the text says
/// what is wrong so that whoever wrote the peer can fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The line is not JSON text: not UTF-8, not well formed, or nested
    /// deeper than `MAX_NESTING_DEPTH`.
    #[error("the line is not JSON text ({reason}); each line must be one JSON object in UTF-8")]
    NotJson {
        /// What the JSON reader found wrong, and where.
        reason: String,
    },
    /// The line is JSON, but not an object.
    #[error("the line is JSON but not an object; each line must be one JSON object")]
    NotAnObject,
    /// A field the message needs is missing.
    #[error("the message has no field \"{field}\"")]
    MissingField {
        /// The name of the missing field.
        field: &'static str,
    },
    /// A field holds a value of the wrong type.
    #[error("field \"{field}\" must be {expected}")]
    WrongType {
        /// The name of the field.
        field: &'static str,
        /// What it must hold, as a phrase: "a string", "an array".
        expected: &'static str,
    },
    /// An `id`, `key` or `op` is empty (SPEC.md §5).
    #[error("field \"{field}\" is empty; it needs at least one character")]
    Empty {
        /// The name of the field.
        field: &'static str,
    },
    /// An `id`, `key` or `op` is longer than its limit (SPEC.md §5).
    #[error("field \"{field}\" is {len} bytes long; the limit is {max} bytes")]
    TooLong {
        /// The name of the field.
        field: &'static str,
        /// Its length, in bytes.
        len: usize,
        /// Its limit, in bytes.
        max: usize,
    },
    /// A `token` or `flight` is not the text of a fencing token (SPEC.md §6).
    #[error("field \"{field}\" is not a fencing token: {reason}")]
    BadToken {
        /// The name of the field.
        field: &'static str,
        /// What is wrong with its text.
        reason: TokenError,
    },
    /// An outcome is not of the form of SPEC.md §3.4.
    #[error(
        "field \"outcome\" must be {{\"value\": string}} or {{\"failure\": {{\"name\", \"message\", \"code\"?}}}}"
    )]
    BadOutcome,
    /// A response whose `op` this version does not know (SPEC.md §3.6).
    #[error(
        "the coordinator sent a response with op \"{op}\", which this version does not know; is something else listening on the socket?"
    )]
    UnknownResponse {
        /// The unknown `op`.
        op: String,
    },
}

/// A byte stream that cannot be cut into lines (SPEC.md §4.1). The
/// connection must be closed: nothing after it can be trusted to start at a
/// message boundary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A line grew past the limit before its `\n`.
    #[error(
        "a line is longer than {max} bytes without a newline; messages are limited to {max} bytes (SPEC.md §5)"
    )]
    LineTooLong {
        /// The limit, in bytes without the `\n`.
        max: usize,
    },
}
