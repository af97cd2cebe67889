//! The wire protocol (SPEC.md §3–§6): messages, framing, handshake, limits and
//! the fencing token. It knows nothing of the coordinator or of sockets.

mod error;
mod framing;
mod handshake;
pub mod limits;
mod message;
mod mutant;
mod shard;
mod token;

pub use error::{DecodeError, FrameError};
pub use framing::LineReader;
pub use handshake::{
    ClientHello, CoordinatorHello, HandshakeError, HostId, HostIdError, MAX_HOST_BYTES,
    PROTOCOL_NAME, PROTOCOL_VERSION, ProtocolVersionError, Relaying, decode_client_hello,
    decode_coordinator_hello,
};
pub use message::{
    CoordinatorIdentity, CoordinatorStats, Failure, FailureCode, FlightStatus, GroupStatus,
    HostStatus, HostsStatus, Incoming, Key, LineEncoder, Outcome, Reason, RelayStatus, Request,
    RequestId, Response, ReuseWindow, VALUE_TOO_LARGE, decode_request, decode_response, encode,
    encoded_len,
};
#[cfg(single_flight_mutants)]
pub use mutant::Mutant;
pub use shard::{MAX_SHARDS, Shard, ShardCount, ShardCountError};
pub use token::{Epoch, FencingToken, TokenError};
