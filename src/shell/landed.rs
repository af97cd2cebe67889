//! How a call ends when it gets a value: [`Landed`], with its [`Role`].

use crate::protocol::FencingToken;

/// Whether a call ran the work or received another's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// This call led the flight: the value is its own work's.
    Led,
    /// This call joined a flight led elsewhere (in this process or another).
    Joined,
    /// This call asked for a reuse window and received the value that a
    /// flight of its key had landed within it (SPEC.md §16): nothing ran
    /// for it.
    Reused,
}

/// A call's value, and how it got it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Landed<T> {
    /// The flight's value: this call's own work's, or the one it received.
    pub value: T,
    /// Whether this call led, joined or reused.
    pub role: Role,
    /// The flight's fencing token (SPEC.md §6).
    pub token: FencingToken,
}
