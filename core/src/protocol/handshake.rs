//! The version handshake, the first line each way on every connection
//! (SPEC.md §4.2).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    /// The host for which this client relays, when it is a host
    /// coordinator (SPEC.md §18.1); absent for every other client.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_relay"
    )]
    pub relay: Option<Relaying>,
}

/// The `relay` member of a host coordinator's hello (SPEC.md §18.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Relaying {
    /// The host for which the client relays.
    pub host: HostId,
}

/// Read by hand: a derived reader also takes a struct from an array
/// (`["build-7"]`), and §18.1 asks for an object holding `host`. Members it
/// does not know are ignored, as in any message (§3).
impl<'de> Deserialize<'de> for Relaying {
    fn deserialize<D: Deserializer<'de>>(reader: D) -> Result<Relaying, D::Error> {
        use serde::de::Error;
        let mut members = serde_json::Map::<String, serde_json::Value>::deserialize(reader)?;
        let host = members
            .remove("host")
            .ok_or_else(|| D::Error::missing_field("host"))?;
        let host = HostId::deserialize(host).map_err(D::Error::custom)?;
        Ok(Relaying { host })
    }
}

/// The id of a host whose coordinator relays to the cluster (SPEC.md
/// §18.1): text of 1 to [`MAX_HOST_BYTES`] bytes without control
/// characters, the rules of a hello's `host` (§4.2), so that what an
/// operator is shown of it is checked as a host name is.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(Arc<str>);

/// Why a text is not a host id (SPEC.md §18.1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostIdError {
    /// Empty or longer than [`MAX_HOST_BYTES`].
    #[error(
        "a host id is {bytes} bytes long; it must be 1 to {MAX_HOST_BYTES} bytes (SPEC.md §18.1)"
    )]
    Length {
        /// Its length, in bytes.
        bytes: usize,
    },
    /// It holds a control character (Unicode's general category Cc).
    #[error("a host id holds a control character; it must be printable text (SPEC.md §18.1, §4.2)")]
    Control,
}

impl HostId {
    /// Checks the rules of SPEC.md §18.1.
    pub fn new(text: impl Into<Arc<str>>) -> Result<HostId, HostIdError> {
        let text = text.into();
        if text.is_empty() || text.len() > MAX_HOST_BYTES {
            return Err(HostIdError::Length { bytes: text.len() });
        }
        if text.chars().any(char::is_control) {
            return Err(HostIdError::Control);
        }
        Ok(HostId(text))
    }

    /// The text, as it is on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for HostId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for HostId {
    fn deserialize<D: Deserializer<'de>>(reader: D) -> Result<HostId, D::Error> {
        let text = String::deserialize(reader)?;
        HostId::new(text).map_err(serde::de::Error::custom)
    }
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
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_text"
    )]
    pub host: Option<String>,
    /// The coordinator keeps relay windows for the hosts that relay to it
    /// (SPEC.md §18.1, §18.2). Written only when true; a hello without it
    /// reads false, as an older coordinator's does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relays: bool,
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
            relay: None,
        }
    }

    /// The hello of a host coordinator that relays for `host` (SPEC.md
    /// §18.1).
    pub fn relaying(host: HostId) -> ClientHello {
        ClientHello {
            relay: Some(Relaying { host }),
            ..ClientHello::current()
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
    term_number(&hello.epoch).ok_or_else(|| HandshakeError::NotAHello {
        reason: format!("epoch {:?} is not a term number", hello.epoch),
    })?;
    if let Some(host) = &hello.host
        && !is_host_name(host)
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

/// The epoch a coordinator names itself by (§4.2, and in a `relay` status,
/// §3.5), written as a token's is (§6): digits only, no sign or leading
/// zero, a term number.
pub(super) fn term_number(text: &str) -> Option<super::token::Epoch> {
    let canonical = text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
    canonical
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .and_then(super::token::Epoch::new)
}

/// Whether a coordinator's `host` may be shown to an operator (§4.2): at
/// most [`MAX_HOST_BYTES`] without control characters.
pub(super) fn is_host_name(host: &str) -> bool {
    host.len() <= MAX_HOST_BYTES && !host.chars().any(char::is_control)
}

/// An optional member that, when present, is a string: `null` is a value of
/// the wrong type as anywhere in the protocol (SPEC.md §3.4's `code`), not
/// a way to leave the member out.
fn present_text<'de, D: serde::Deserializer<'de>>(reader: D) -> Result<Option<String>, D::Error> {
    String::deserialize(reader).map(Some)
}

/// `relay`, when present, is an object holding a host id (SPEC.md §18.1):
/// `null` is of the wrong type, as for `host`.
fn present_relay<'de, D: Deserializer<'de>>(reader: D) -> Result<Option<Relaying>, D::Error> {
    Relaying::deserialize(reader).map(Some)
}

/// Reads a hello as a line like any other (SPEC.md §3.7, §4.2): through a
/// `serde_json::Value` first, so that nesting deeper than
/// `MAX_NESTING_DEPTH` anywhere in the line, even in a member the hello does
/// not know, makes it not JSON (a derived reader skips unknown members
/// without counting their depth). A hello is read once per connection, so
/// the tree it builds costs nothing that matters.
fn parse<T: serde::de::DeserializeOwned>(line: &[u8]) -> Result<T, HandshakeError> {
    let not_json = |error: serde_json::Error| HandshakeError::NotAHello {
        reason: DecodeError::NotJson {
            reason: error.to_string(),
        }
        .to_string(),
    };
    let value: serde_json::Value = serde_json::from_slice(line).map_err(not_json)?;
    T::deserialize(value).map_err(|error| HandshakeError::NotAHello {
        reason: error.to_string(),
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

    /// §4.2, §6: a coordinator's epoch is written as a token's is: a
    /// leading zero, a sign or anything but digits makes the line no hello.
    #[test]
    fn an_epoch_is_written_as_a_tokens_is() {
        for epoch in ["03", "0", "+3", "-3", "3a", ""] {
            let line =
                format!(r#"{{"protocol":"single-flight","version":1,"epoch":"{epoch}","pid":42}}"#);
            assert!(
                matches!(
                    decode_coordinator_hello(line.as_bytes()),
                    Err(HandshakeError::NotAHello { .. })
                ),
                "{epoch:?}"
            );
        }
    }

    /// §18.1: a host id is shown as it is on the wire, and quoted when
    /// debugged, as a string is.
    #[test]
    fn a_host_id_shows_as_its_text() {
        let host = HostId::new("build-7").unwrap();
        assert_eq!(host.to_string(), "build-7");
        assert_eq!(format!("{host:?}"), "\"build-7\"");
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
        // §4.2: the control characters are Unicode's (general category Cc):
        // C0, DEL and C1; other characters, however unusual, are kept.
        for control in ['\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}'] {
            let host = format!("ci{control}7");
            assert!(
                decode_coordinator_hello(hello(&host).as_bytes()).is_err(),
                "{host:?}"
            );
        }
        assert!(decode_coordinator_hello(hello("ci-7.été").as_bytes()).is_ok());
        // A host that is not a string makes the line not a hello (§4.2).
        for host in ["42", "null", "[\"ci-7\"]", "{}"] {
            let line = format!(
                r#"{{"protocol":"single-flight","version":1,"epoch":"3","pid":42,"host":{host}}}"#
            );
            assert!(
                matches!(
                    decode_coordinator_hello(line.as_bytes()),
                    Err(HandshakeError::NotAHello { .. })
                ),
                "{line}"
            );
        }
    }

    /// §18.1: a host coordinator's hello names its host; every other
    /// client's hello is as before, and decodes without `relay`.
    #[test]
    fn s18_1_a_relay_hello_names_its_host() {
        let host = HostId::new("build-7").unwrap();
        let line = r#"{"protocol":"single-flight","version":1,"relay":{"host":"build-7"}}"#;
        assert_eq!(
            serde_json::to_string(&ClientHello::relaying(host.clone())).unwrap(),
            line
        );
        assert_eq!(
            decode_client_hello(line.as_bytes()).unwrap().relay,
            Some(Relaying { host })
        );
        let plain = decode_client_hello(br#"{"protocol":"single-flight","version":1}"#).unwrap();
        assert_eq!(plain, ClientHello::current());
        assert_eq!(plain.relay, None);
        // A member `relay` does not know is ignored, as in any message (§3).
        let extended = r#"{"protocol":"single-flight","version":1,"relay":{"host":"h","since":3}}"#;
        assert!(decode_client_hello(extended.as_bytes()).is_ok());
    }

    /// §18.1: the host id follows the rules of `host` (§4.2), and is not
    /// empty; a `relay` that is not an object holding one makes the line
    /// not a hello.
    #[test]
    fn s18_1_a_relay_that_is_not_one_makes_the_line_not_a_hello() {
        let with_relay =
            |relay: &str| format!(r#"{{"protocol":"single-flight","version":1,"relay":{relay}}}"#);
        let with_host = |host: &str| {
            with_relay(&format!(
                r#"{{"host":{}}}"#,
                serde_json::to_string(host).unwrap()
            ))
        };
        let not_a_hello = |line: String| {
            assert!(
                matches!(
                    decode_client_hello(line.as_bytes()),
                    Err(HandshakeError::NotAHello { .. })
                ),
                "{line}"
            );
        };
        assert!(decode_client_hello(with_host(&"h".repeat(MAX_HOST_BYTES)).as_bytes()).is_ok());
        assert!(decode_client_hello(with_host("build-7.été").as_bytes()).is_ok());
        not_a_hello(with_host(""));
        not_a_hello(with_host(&"h".repeat(MAX_HOST_BYTES + 1)));
        for control in ['\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}'] {
            not_a_hello(with_host(&format!("build{control}7")));
        }
        for relay in ["null", "\"build-7\"", "42", "[\"build-7\"]", "{}", "true"] {
            not_a_hello(with_relay(relay));
        }
        for host in ["null", "42", "[\"build-7\"]", "{}"] {
            not_a_hello(with_relay(&format!(r#"{{"host":{host}}}"#)));
        }
    }

    /// §18.1: the host id's own checks, for a caller that builds one.
    #[test]
    fn s18_1_host_ids_are_checked() {
        assert_eq!(HostId::new("build-7").unwrap().as_str(), "build-7");
        assert_eq!(HostId::new(""), Err(HostIdError::Length { bytes: 0 }));
        assert_eq!(
            HostId::new("h".repeat(MAX_HOST_BYTES + 1)),
            Err(HostIdError::Length {
                bytes: MAX_HOST_BYTES + 1
            })
        );
        assert_eq!(HostId::new("a\u{1b}[2J"), Err(HostIdError::Control));
    }

    /// §18.1: `relays` is written only when true, reads false when missing,
    /// and makes the line not a hello when it is not a boolean.
    #[test]
    fn s18_1_a_coordinator_says_that_it_keeps_relay_windows() {
        let base = r#"{"protocol":"single-flight","version":1,"epoch":"3","pid":42"#;
        let older = decode_coordinator_hello(format!("{base}}}").as_bytes()).unwrap();
        assert!(!older.relays);
        assert_eq!(serde_json::to_string(&older).unwrap(), format!("{base}}}"));
        let line = format!(r#"{base},"relays":true}}"#);
        let relaying = decode_coordinator_hello(line.as_bytes()).unwrap();
        assert!(relaying.relays);
        assert_eq!(serde_json::to_string(&relaying).unwrap(), line);
        let explicit = decode_coordinator_hello(format!(r#"{base},"relays":false}}"#).as_bytes());
        assert!(!explicit.unwrap().relays);
        for relays in ["null", "1", "\"true\"", "{}"] {
            let line = format!(r#"{base},"relays":{relays}}}"#);
            assert!(
                matches!(
                    decode_coordinator_hello(line.as_bytes()),
                    Err(HandshakeError::NotAHello { .. })
                ),
                "{line}"
            );
        }
    }

    /// §4.2, §3.7: a hello is subject to `MAX_NESTING_DEPTH` like any line,
    /// wherever the nesting is (issue 28: 100 000 levels were accepted).
    #[test]
    fn hellos_nested_too_deep_are_not_hellos() {
        use crate::protocol::limits::MAX_NESTING_DEPTH;
        let nested = |depth: usize| {
            // The hello object is the first level; `extra` adds the rest.
            let extra = depth - 1;
            format!(
                r#"{{"protocol":"single-flight","version":1,"extra":{}{}}}"#,
                "[".repeat(extra),
                "]".repeat(extra)
            )
        };
        assert!(decode_client_hello(nested(MAX_NESTING_DEPTH).as_bytes()).is_ok());
        for depth in [MAX_NESTING_DEPTH + 1, 100_000] {
            assert!(
                matches!(
                    decode_client_hello(nested(depth).as_bytes()),
                    Err(HandshakeError::NotAHello { .. })
                ),
                "{depth}"
            );
        }
        let coordinator = format!(
            r#"{{"protocol":"single-flight","version":1,"epoch":"3","pid":42,"extra":{}{}}}"#,
            "[".repeat(MAX_NESTING_DEPTH),
            "]".repeat(MAX_NESTING_DEPTH)
        );
        assert!(decode_coordinator_hello(coordinator.as_bytes()).is_err());
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
