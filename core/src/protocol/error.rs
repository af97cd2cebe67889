//! Why bytes from another process are not a message (SPEC.md §3.7, §4).

use super::token::TokenError;

/// A line that is not a valid message. The peer is to blame; the text says
/// what is wrong so that whoever wrote the peer can fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the line is not JSON text ({reason}); each line must be one JSON object in UTF-8")]
    NotJson { reason: String },
    #[error("the line is JSON but not an object; each line must be one JSON object")]
    NotAnObject,
    #[error("the message has no field \"{field}\"")]
    MissingField { field: &'static str },
    #[error("field \"{field}\" must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("field \"{field}\" is empty; it needs at least one character")]
    Empty { field: &'static str },
    #[error("field \"{field}\" is {len} bytes long; the limit is {max} bytes")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("field \"{field}\" is not a fencing token: {reason}")]
    BadToken {
        field: &'static str,
        reason: TokenError,
    },
    #[error(
        "field \"outcome\" must be {{\"value\": string}} or {{\"failure\": {{\"name\", \"message\", \"code\"?}}}}"
    )]
    BadOutcome,
    #[error(
        "the coordinator sent a response with op \"{op}\", which this version does not know; is something else listening on the socket?"
    )]
    UnknownResponse { op: String },
}

/// A byte stream that cannot be cut into lines (SPEC.md §4.1). The
/// connection must be closed: nothing after it can be trusted to start at a
/// message boundary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error(
        "a line is longer than {max} bytes without a newline; messages are limited to {max} bytes (SPEC.md §5)"
    )]
    LineTooLong { max: usize },
}
