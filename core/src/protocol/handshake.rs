//! The version handshake, the first line each way on every connection
//! (SPEC.md §4.2).

use serde::{Deserialize, Serialize};

use super::error::DecodeError;

/// The name every hello carries, so that a peer that is not single-flight at
/// all (another program's socket) is told apart from a version mismatch.
pub const PROTOCOL_NAME: &str = "single-flight";

/// The version of the protocol this build speaks. It changes only when a
/// message this version knows changes meaning; new requests are added as
/// extensions that older coordinators answer `unsupported` (SPEC.md §3.6).
pub const PROTOCOL_VERSION: u32 = 1;

/// A client's first line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    /// The protocol's name, [`PROTOCOL_NAME`] for a hello.
    pub protocol: String,
    /// The version the client speaks.
    pub version: u32,
}

/// The coordinator's first line: its version, and which term it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorHello {
    /// The protocol's name, [`PROTOCOL_NAME`] for a hello.
    pub protocol: String,
    /// The version the coordinator speaks.
    pub version: u32,
    /// The coordinator's term, as decimal text like tokens.
    pub epoch: String,
    /// The coordinator's process id, for operators (`single-flight status`).
    pub pid: u32,
    /// The coordinator's host name, for operators (SPEC.md §4.2): in
    /// cluster mode the pid alone does not say which machine to look at.
    /// Optional, so that hellos of coordinators that do not send it decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The longest host name a hello may carry: a DNS name's 253 characters
/// with room to spare (POSIX's `HOST_NAME_MAX` on Linux is 64). A longer one
/// is no host name, and is refused rather than printed to an operator.
pub const MAX_HOST_BYTES: usize = 255;

/// The two sides speak different versions; neither may go on (SPEC.md §4.2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "protocol version mismatch: this process speaks single-flight protocol version {ours}, \
     the other side speaks version {theirs}; run the same single-flight version in every \
     process that shares the directory"
)]
pub struct ProtocolVersionError {
    /// The version this process speaks.
    pub ours: u32,
    /// The version the peer's hello names.
    pub theirs: u32,
}

/// Why a first line is not an acceptable hello.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The first line is not a hello: not JSON, another protocol, or a
    /// field that is not what a hello holds.
    #[error(
        "the peer's first line is not a single-flight hello ({reason}); is another program using this socket?"
    )]
    NotAHello {
        /// What is wrong with the line.
        reason: String,
    },
    /// A hello of another version.
    #[error(transparent)]
    Version(#[from] ProtocolVersionError),
}

impl ClientHello {
    /// The hello of this build: [`PROTOCOL_NAME`], [`PROTOCOL_VERSION`].
    pub fn current() -> ClientHello {
        ClientHello {
            protocol: PROTOCOL_NAME.to_owned(),
            version: PROTOCOL_VERSION,
        }
    }
}

/// Decodes and checks a client's hello.
pub fn decode_client_hello(line: &[u8]) -> Result<ClientHello, HandshakeError> {
    let hello: ClientHello = parse(line)?;
    check(&hello.protocol, hello.version)?;
    Ok(hello)
}

/// Decodes and checks a coordinator's hello.
pub fn decode_coordinator_hello(line: &[u8]) -> Result<CoordinatorHello, HandshakeError> {
    let hello: CoordinatorHello = parse(line)?;
    check(&hello.protocol, hello.version)?;
    // Written like a token (SPEC.md §6): digits only, no sign or leading zero.
    let canonical =
        hello.epoch.bytes().all(|b| b.is_ascii_digit()) && !hello.epoch.starts_with('0');
    canonical
        .then(|| hello.epoch.parse::<u64>().ok())
        .flatten()
        .and_then(super::token::Epoch::new)
        .ok_or_else(|| HandshakeError::NotAHello {
            reason: format!("epoch {:?} is not a term number", hello.epoch),
        })?;
    if let Some(host) = &hello.host
        && (host.len() > MAX_HOST_BYTES || host.chars().any(char::is_control))
    {
        return Err(HandshakeError::NotAHello {
            reason: format!(
                "its host name is not one: {} bytes, at most {MAX_HOST_BYTES} without control characters",
                host.len()
            ),
        });
    }
    Ok(hello)
}

fn parse<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Result<T, HandshakeError> {
    serde_json::from_slice(line).map_err(|error| HandshakeError::NotAHello {
        reason: DecodeError::NotJson {
            reason: error.to_string(),
        }
        .to_string(),
    })
}

fn check(protocol: &str, version: u32) -> Result<(), HandshakeError> {
    if protocol != PROTOCOL_NAME {
        return Err(HandshakeError::NotAHello {
            reason: format!("it names protocol {protocol:?}"),
        });
    }
    if version != PROTOCOL_VERSION {
        return Err(ProtocolVersionError {
            ours: PROTOCOL_VERSION,
            theirs: version,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §4.2: the exact hello lines.
    #[test]
    fn hello_lines() {
        assert_eq!(
            serde_json::to_string(&ClientHello::current()).unwrap(),
            r#"{"protocol":"single-flight","version":1}"#
        );
        let line = br#"{"protocol":"single-flight","version":1,"epoch":"3","pid":42}"#;
        assert_eq!(decode_coordinator_hello(line).unwrap().epoch, "3");
        let line =
            br#"{"protocol":"single-flight","version":1,"epoch":"3","pid":42,"host":"ci-7"}"#;
        assert_eq!(
            decode_coordinator_hello(line).unwrap().host.as_deref(),
            Some("ci-7")
        );
    }

    /// §4.2: a host name that is none is refused, not shown to an operator.
    #[test]
    fn host_names_are_checked() {
        let hello = |host: &str| {
            format!(
                r#"{{"protocol":"single-flight","version":1,"epoch":"3","pid":42,"host":{}}}"#,
                serde_json::to_string(host).unwrap()
            )
        };
        let longest = "h".repeat(MAX_HOST_BYTES);
        assert!(decode_coordinator_hello(hello(&longest).as_bytes()).is_ok());
        let longer = "h".repeat(MAX_HOST_BYTES + 1);
        assert!(decode_coordinator_hello(hello(&longer).as_bytes()).is_err());
        assert!(decode_coordinator_hello(hello("a\u{1b}[2J").as_bytes()).is_err());
    }

    /// §4.2: a different version is a `ProtocolVersionError`, anything else
    /// is not a hello.
    #[test]
    fn mismatches() {
        assert_eq!(
            decode_client_hello(br#"{"protocol":"single-flight","version":2}"#),
            Err(HandshakeError::Version(ProtocolVersionError {
                ours: 1,
                theirs: 2
            }))
        );
        assert!(matches!(
            decode_client_hello(br#"{"protocol":"other","version":1}"#),
            Err(HandshakeError::NotAHello { .. })
        ));
        assert!(matches!(
            decode_client_hello(b"GET / HTTP/1.1"),
            Err(HandshakeError::NotAHello { .. })
        ));
        assert!(matches!(
            decode_coordinator_hello(
                br#"{"protocol":"single-flight","version":1,"epoch":"0","pid":1}"#
            ),
            Err(HandshakeError::NotAHello { .. })
        ));
    }
}
