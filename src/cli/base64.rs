//! Base64 (RFC 4648, standard alphabet, with padding): how a command's bytes,
//! which need not be UTF-8, travel inside the text of a flight's value
//! (SPEC.md §13.2). Small enough to keep here rather than add a dependency.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The base64 text of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let sextets = [n >> 18, n >> 12, n >> 6, n].map(|s| ALPHABET[(s & 63) as usize] as char);
        text.push(sextets[0]);
        text.push(sextets[1]);
        text.push(if chunk.len() > 1 { sextets[2] } else { '=' });
        text.push(if chunk.len() > 2 { sextets[3] } else { '=' });
    }
    text
}

/// The bytes of base64 `text`, or what is wrong with it. The text comes from
/// another process: anything malformed is an error, never a panic.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return Err(format!(
            "base64 text has a length of {}, not a multiple of 4",
            text.len()
        ));
    }
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let groups = text.len() / 4;
    for (index, group) in text.chunks(4).enumerate() {
        let padding = group.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && index + 1 != groups) {
            return Err("base64 text has padding in the wrong place".into());
        }
        let mut n = 0u32;
        for &c in &group[..4 - padding] {
            n = n << 6 | u32::from(sextet(c)?);
        }
        n <<= 6 * padding as u32;
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        bytes.extend_from_slice(&decoded[..3 - padding]);
    }
    Ok(bytes)
}

fn sextet(c: u8) -> Result<u8, String> {
    match c {
        b'A'..=b'Z' => Ok(c - b'A'),
        b'a'..=b'z' => Ok(c - b'a' + 26),
        b'0'..=b'9' => Ok(c - b'0' + 52),
        b'+' => Ok(62),
        b'/' => Ok(63),
        _ => Err(format!(
            "base64 text holds the byte {c:#04x}, not in its alphabet"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_4648_test_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn every_byte_survives() {
        let bytes: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        for length in 0..bytes.len() {
            assert_eq!(decode(&encode(&bytes[..length])).unwrap(), &bytes[..length]);
        }
    }

    #[test]
    fn malformed_text_is_an_error() {
        for text in ["Zg=", "Zg=a", "Z===", "Zg==Zg==", "Zm9\u{e9}", "Zm 9"] {
            assert!(decode(text).is_err(), "{text:?}");
        }
    }
}
