//! Names for the values the machines' unit tests build, written once for
//! the coordinator's and the relay's (both speak of connections, ids, keys,
//! tokens and outcomes in the same words).

use crate::coordinator::ConnectionId;
use crate::protocol::{Epoch, FencingToken, Key, Outcome, RequestId};

pub(crate) fn c(n: u64) -> ConnectionId {
    ConnectionId(n)
}

pub(crate) fn id(text: &str) -> RequestId {
    RequestId::new(text).unwrap()
}

pub(crate) fn key(text: &str) -> Key {
    Key::new(text).unwrap()
}

pub(crate) fn token(epoch: u64, sequence: u32) -> FencingToken {
    FencingToken::new(Epoch::new(epoch).unwrap(), sequence).unwrap()
}

pub(crate) fn value(text: &str) -> Outcome {
    Outcome::Value(text.to_owned())
}
