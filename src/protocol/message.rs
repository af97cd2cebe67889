//! The messages of SPEC.md §3, as Rust types, and their JSON text.
//!
//! Decoding goes through `serde_json::Value` and checks every field by hand,
//! so that a malformed message from another process gets a [`DecodeError`]
//! that names the field and what is wrong with it, never a panic.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::error::DecodeError;
use super::limits::{MAX_ID_BYTES, MAX_KEY_BYTES};
use super::token::FencingToken;

/// A flight key: the name of the work that runs once (SPEC.md §3.1).
/// Any UTF-8 text of 1 to [`MAX_KEY_BYTES`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<str>);

/// The id of one request on one connection (SPEC.md §3.1).
/// Any UTF-8 text of 1 to [`MAX_ID_BYTES`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(Arc<str>);

macro_rules! bounded_text {
    ($type:ident, $field:literal, $max:ident) => {
        impl $type {
            /// Checks the length limit (SPEC.md §5).
            pub fn new(text: impl Into<Arc<str>>) -> Result<$type, DecodeError> {
                let text = text.into();
                if text.is_empty() {
                    return Err(DecodeError::Empty { field: $field });
                }
                if text.len() > $max {
                    return Err(DecodeError::TooLong {
                        field: $field,
                        len: text.len(),
                        max: $max,
                    });
                }
                Ok($type(text))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
    };
}

bounded_text!(Key, "key", MAX_KEY_BYTES);
bounded_text!(RequestId, "id", MAX_ID_BYTES);

/// A leader's error as text, because an error value cannot cross a process
/// boundary (SPEC.md §3.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Failure {
    pub name: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<FailureCode>,
}

/// The `code` of a failure, as Node.js and POSIX errors have one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum FailureCode {
    Text(String),
    Number(i64),
}

/// How a flight landed: the value as the codec encoded it, or the leader's
/// failure (SPEC.md §3.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Outcome {
    #[serde(rename = "value")]
    Value(String),
    #[serde(rename = "failure")]
    Failure(Failure),
}

/// What a client asks of the coordinator (SPEC.md §3.2), in the order SPEC.md
/// lists them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Leads the flight of `key`, or joins the one in progress; with `flight`,
    /// a rejoin that never leads.
    Run {
        id: RequestId,
        key: Key,
        #[serde(skip_serializing_if = "Option::is_none")]
        flight: Option<FencingToken>,
    },
    /// The leader of `id` ends its flight with `outcome`.
    Land { id: RequestId, outcome: Outcome },
    /// Withdraws a run, a joiner, or a leader (which interrupts its flight).
    Cancel { id: RequestId },
    /// A leader from an earlier term claims its flight again; with
    /// `outcome`, a leader whose work already finished hands the outcome to
    /// the flight's rejoiners without making the flight live again.
    Reassert {
        id: RequestId,
        key: Key,
        token: FencingToken,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
    },
    /// Asks for the coordinator's view of its flights (SPEC.md §3.5, an
    /// extension that older coordinators answer `unsupported`).
    Status { id: RequestId },
}

/// What the coordinator answers (SPEC.md §3.3), in the order SPEC.md lists them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Response {
    Lead {
        id: RequestId,
        token: FencingToken,
    },
    Joined {
        id: RequestId,
        flight: FencingToken,
    },
    Landed {
        id: RequestId,
        outcome: Outcome,
    },
    Interrupted {
        id: RequestId,
    },
    Ack {
        id: RequestId,
    },
    Rejected {
        id: RequestId,
    },
    Unsupported {
        id: RequestId,
    },
    /// The answer to `status` (SPEC.md §3.5).
    Status {
        id: RequestId,
        flights: Vec<FlightStatus>,
    },
}

/// One flight in progress, as `status` reports it (SPEC.md §3.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct FlightStatus {
    pub key: Key,
    pub token: FencingToken,
    /// How many callers wait for this flight's outcome besides its leader.
    pub joiners: u64,
}

/// A decoded request line: a request this version knows, or a well-formed
/// envelope with an `op` it does not know (SPEC.md §3.6), which a coordinator
/// answers `unsupported` while keeping the connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Incoming {
    Request(Request),
    Unknown { op: String, id: RequestId },
}

impl Request {
    pub fn id(&self) -> &RequestId {
        match self {
            Request::Run { id, .. }
            | Request::Land { id, .. }
            | Request::Cancel { id }
            | Request::Reassert { id, .. }
            | Request::Status { id } => id,
        }
    }
}

impl Response {
    pub fn id(&self) -> &RequestId {
        match self {
            Response::Lead { id, .. }
            | Response::Joined { id, .. }
            | Response::Landed { id, .. }
            | Response::Interrupted { id }
            | Response::Ack { id }
            | Response::Rejected { id }
            | Response::Unsupported { id }
            | Response::Status { id, .. } => id,
        }
    }
}

/// The JSON text of a message, without the line's `\n`.
pub fn encode<M: Serialize>(message: &M) -> String {
    // Serializing these types cannot fail: every map key is a string and no
    // value is a float.
    serde_json::to_string(message).expect("protocol messages always serialize")
}

/// Decodes one request line (without its `\n`).
pub fn decode_request(line: &[u8]) -> Result<Incoming, DecodeError> {
    let mut fields = Fields::parse(line)?;
    let op = fields.op()?;
    let id = fields.id()?;
    let request = match op.as_str() {
        "run" => Request::Run {
            id,
            key: fields.key()?,
            flight: fields.optional_token("flight")?,
        },
        "land" => Request::Land {
            id,
            outcome: fields.outcome()?,
        },
        "cancel" => Request::Cancel { id },
        "reassert" => Request::Reassert {
            id,
            key: fields.key()?,
            token: fields.token("token")?,
            outcome: fields.optional_outcome()?,
        },
        "status" => Request::Status { id },
        _ => return Ok(Incoming::Unknown { op, id }),
    };
    Ok(Incoming::Request(request))
}

/// Decodes one response line (without its `\n`). A response with an `op` this
/// version does not know is an error: a coordinator only sends new responses
/// to new requests, so it means the peer is not speaking this protocol.
pub fn decode_response(line: &[u8]) -> Result<Response, DecodeError> {
    let mut fields = Fields::parse(line)?;
    let op = fields.op()?;
    let id = fields.id()?;
    Ok(match op.as_str() {
        "lead" => Response::Lead {
            id,
            token: fields.token("token")?,
        },
        "joined" => Response::Joined {
            id,
            flight: fields.token("flight")?,
        },
        "landed" => Response::Landed {
            id,
            outcome: fields.outcome()?,
        },
        "interrupted" => Response::Interrupted { id },
        "ack" => Response::Ack { id },
        "rejected" => Response::Rejected { id },
        "unsupported" => Response::Unsupported { id },
        "status" => Response::Status {
            id,
            flights: fields.flights()?,
        },
        _ => return Err(DecodeError::UnknownResponse { op }),
    })
}

/// The fields of one JSON object, taken out one by one with typed errors.
struct Fields(Map<String, Value>);

impl Fields {
    fn parse(line: &[u8]) -> Result<Fields, DecodeError> {
        match serde_json::from_slice(line) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(DecodeError::NotAnObject),
            Err(error) => Err(DecodeError::NotJson {
                reason: error.to_string(),
            }),
        }
    }

    fn take(&mut self, field: &'static str) -> Result<Value, DecodeError> {
        self.0
            .remove(field)
            .ok_or(DecodeError::MissingField { field })
    }

    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        string(self.take(field)?, field)
    }

    fn op(&mut self) -> Result<String, DecodeError> {
        let op = self.string("op")?;
        if op.is_empty() {
            return Err(DecodeError::Empty { field: "op" });
        }
        // `op` is matched against a handful of names; anything longer than the
        // id limit is no op of any version and would only be echoed in errors.
        if op.len() > MAX_ID_BYTES {
            return Err(DecodeError::TooLong {
                field: "op",
                len: op.len(),
                max: MAX_ID_BYTES,
            });
        }
        Ok(op)
    }

    fn id(&mut self) -> Result<RequestId, DecodeError> {
        RequestId::new(self.string("id")?)
    }

    fn key(&mut self) -> Result<Key, DecodeError> {
        Key::new(self.string("key")?)
    }

    fn token(&mut self, field: &'static str) -> Result<FencingToken, DecodeError> {
        let text = self.string(field)?;
        text.parse()
            .map_err(|reason| DecodeError::BadToken { field, reason })
    }

    fn optional_token(&mut self, field: &'static str) -> Result<Option<FencingToken>, DecodeError> {
        if self.0.contains_key(field) {
            self.token(field).map(Some)
        } else {
            Ok(None)
        }
    }

    fn outcome(&mut self) -> Result<Outcome, DecodeError> {
        outcome(self.take("outcome")?)
    }

    fn optional_outcome(&mut self) -> Result<Option<Outcome>, DecodeError> {
        if self.0.contains_key("outcome") {
            self.outcome().map(Some)
        } else {
            Ok(None)
        }
    }

    fn flights(&mut self) -> Result<Vec<FlightStatus>, DecodeError> {
        let Value::Array(items) = self.take("flights")? else {
            return Err(DecodeError::WrongType {
                field: "flights",
                expected: "an array",
            });
        };
        items
            .into_iter()
            .map(|item| {
                let Value::Object(map) = item else {
                    return Err(DecodeError::WrongType {
                        field: "flights",
                        expected: "an array of objects",
                    });
                };
                let mut fields = Fields(map);
                let joiners = match fields.take("joiners")? {
                    Value::Number(n) if n.is_u64() => n.as_u64().unwrap_or_default(),
                    _ => {
                        return Err(DecodeError::WrongType {
                            field: "joiners",
                            expected: "a non-negative integer",
                        });
                    }
                };
                Ok(FlightStatus {
                    key: fields.key()?,
                    token: fields.token("token")?,
                    joiners,
                })
            })
            .collect()
    }
}

fn string(value: Value, field: &'static str) -> Result<String, DecodeError> {
    match value {
        Value::String(text) => Ok(text),
        _ => Err(DecodeError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn outcome(value: Value) -> Result<Outcome, DecodeError> {
    let Value::Object(map) = value else {
        return Err(DecodeError::BadOutcome);
    };
    if map.len() != 1 {
        return Err(DecodeError::BadOutcome);
    }
    let mut fields = Fields(map);
    if let Some(value) = fields.0.remove("value") {
        return Ok(Outcome::Value(string(value, "value")?));
    }
    let Some(Value::Object(failure)) = fields.0.remove("failure") else {
        return Err(DecodeError::BadOutcome);
    };
    let mut failure = Fields(failure);
    let code = match failure.0.remove("code") {
        None => None,
        Some(Value::String(text)) => Some(FailureCode::Text(text)),
        Some(Value::Number(n)) if n.is_i64() => n.as_i64().map(FailureCode::Number),
        Some(_) => {
            return Err(DecodeError::WrongType {
                field: "code",
                expected: "a string or an integer",
            });
        }
    };
    Ok(Outcome::Failure(Failure {
        name: failure.string("name")?,
        message: failure.string("message")?,
        code,
    }))
}
