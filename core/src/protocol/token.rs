//! The fencing token (SPEC.md §6): totally ordered, strictly greater for every
//! flight minted after another, across coordinator terms too.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::limits::MAX_TOKEN_DIGITS;

/// The number of one coordinator term. Every term's epoch is greater than
/// every earlier term's (SPEC.md §7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(u32);

impl Epoch {
    /// The epoch of the first term a directory ever has.
    pub const FIRST: Epoch = Epoch(1);

    /// The largest epoch: tokens must fit in a signed 64-bit integer so that
    /// fenced resources can store them in an SQL `BIGINT` / SQLite `INTEGER`
    /// (SPEC.md §6). At one term per second that is 68 years of failovers.
    pub const MAX: Epoch = Epoch(i32::MAX as u32);

    /// `None` for 0 and for numbers above [`Epoch::MAX`].
    pub fn new(epoch: u64) -> Option<Epoch> {
        if epoch == 0 || epoch > u64::from(Epoch::MAX.0) {
            None
        } else {
            Some(Epoch(epoch as u32))
        }
    }

    /// The epoch as a number, from 1 to [`Epoch::MAX`].
    pub fn get(self) -> u32 {
        self.0
    }

    /// The epoch of the term after this one, or `None` past [`Epoch::MAX`].
    pub fn next(self) -> Option<Epoch> {
        Epoch::new(u64::from(self.0) + 1)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A flight's fencing token: `epoch × 2³² + sequence` (SPEC.md §6).
///
/// Work that writes to a shared resource passes its token along, and the
/// resource refuses any write whose token is lower than one it has seen.
/// Compare tokens as numbers (`Ord`), never as text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

/// Why a text is not a fencing token (SPEC.md §6).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The text is empty.
    #[error("a fencing token is a decimal number, but this text is empty")]
    Empty,
    /// The text holds something other than digits, or starts with `0`.
    #[error(
        "a fencing token is written with the digits 0-9 only, without sign, spaces or leading zeros"
    )]
    NotDecimal,
    /// The number is above `i64::MAX`.
    #[error(
        "a fencing token has at most {MAX_TOKEN_DIGITS} digits and is at most 9223372036854775807"
    )]
    TooLarge,
    /// The number's epoch or sequence is 0.
    #[error(
        "a fencing token's epoch (the number divided by 2^32) is at least 1, and its sequence (the remainder) is at least 1"
    )]
    OutOfRange,
}

impl FencingToken {
    /// The token of the `sequence`-th flight of the term `epoch`
    /// (sequences start at 1).
    pub fn new(epoch: Epoch, sequence: u32) -> Option<FencingToken> {
        (sequence != 0).then_some(FencingToken(
            (u64::from(epoch.0) << 32) | u64::from(sequence),
        ))
    }

    /// The term that minted this token.
    pub fn epoch(self) -> Epoch {
        Epoch((self.0 >> 32) as u32)
    }

    /// The position of this flight among its term's flights, from 1.
    pub fn sequence(self) -> u32 {
        self.0 as u32
    }

    /// The token as one number, for storage next to the data it fences.
    /// Always at most `i64::MAX`.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The token as a signed number, for SQL columns.
    pub fn as_i64(self) -> i64 {
        // `Epoch::MAX` keeps the top bit clear (SPEC.md §6).
        self.0 as i64
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({}:{})", self.epoch(), self.sequence())
    }
}

impl FromStr for FencingToken {
    type Err = TokenError;

    fn from_str(text: &str) -> Result<FencingToken, TokenError> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(TokenError::Empty);
        }
        if !bytes.iter().all(u8::is_ascii_digit) || (bytes[0] == b'0') {
            return Err(TokenError::NotDecimal);
        }
        if bytes.len() > MAX_TOKEN_DIGITS {
            return Err(TokenError::TooLarge);
        }
        let value: u64 = text.parse().map_err(|_| TokenError::TooLarge)?;
        if value > i64::MAX as u64 {
            return Err(TokenError::TooLarge);
        }
        let epoch = Epoch::new(value >> 32).ok_or(TokenError::OutOfRange)?;
        FencingToken::new(epoch, value as u32).ok_or(TokenError::OutOfRange)
    }
}

impl Serialize for FencingToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A decimal string: JSON numbers lose precision past 2^53 in most readers.
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FencingToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(epoch: u64, sequence: u32) -> FencingToken {
        FencingToken::new(Epoch::new(epoch).unwrap(), sequence).unwrap()
    }

    /// §6: ordered by epoch first, then by sequence.
    #[test]
    fn orders_by_epoch_then_sequence() {
        assert!(token(1, u32::MAX) < token(2, 1));
        assert!(token(2, 1) < token(2, 2));
        assert_eq!(token(1, 1).to_string(), "4294967297");
        assert_eq!(token(1, 1).epoch(), Epoch::FIRST);
        assert_eq!(token(3, 7).sequence(), 7);
    }

    /// §6: the largest token is `i64::MAX`.
    #[test]
    fn largest_token_fits_in_i64() {
        let largest = token(u64::from(Epoch::MAX.get()), u32::MAX);
        assert_eq!(largest.as_i64(), i64::MAX);
        assert_eq!("9223372036854775807".parse(), Ok(largest));
        assert_eq!(Epoch::MAX.next(), None);
    }

    /// §6: the token text is strict.
    #[test]
    fn rejects_malformed_text() {
        let cases: &[(&str, TokenError)] = &[
            ("", TokenError::Empty),
            ("+4294967297", TokenError::NotDecimal),
            ("04294967297", TokenError::NotDecimal),
            (" 4294967297", TokenError::NotDecimal),
            ("4294967297.0", TokenError::NotDecimal),
            ("-1", TokenError::NotDecimal),
            ("0", TokenError::NotDecimal),
            ("9223372036854775808", TokenError::TooLarge),
            ("99999999999999999999", TokenError::TooLarge),
            ("4294967296", TokenError::OutOfRange),
            ("7", TokenError::OutOfRange),
        ];
        for (text, error) in cases {
            assert_eq!(
                text.parse::<FencingToken>().as_ref(),
                Err(error),
                "{text:?}"
            );
        }
    }
}
