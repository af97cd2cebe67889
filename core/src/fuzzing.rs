//! Entry points for the fuzz targets in `fuzz/` (and for the property tests):
//! they call the library's own code, never a copy of it. Each panics only when
//! an invariant of SPEC.md is broken, which is what the fuzzer looks for.

use crate::protocol::{
    Incoming, LineReader, decode_client_hello, decode_coordinator_hello, decode_request,
    decode_response, encode, limits::MAX_FRAME_BYTES,
};

/// Decodes `bytes` as a request line; whatever decodes must encode back to a
/// line that decodes to the same request (SPEC.md §3).
pub fn request(bytes: &[u8]) {
    let _ = decode_client_hello(bytes);
    if let Ok(Incoming::Request(request)) = decode_request(bytes) {
        let again = decode_request(encode(&request).as_bytes());
        assert_eq!(again, Ok(Incoming::Request(request)), "request round trip");
    }
}

/// Decodes `bytes` as a response line, with the same round-trip check.
pub fn response(bytes: &[u8]) {
    let _ = decode_coordinator_hello(bytes);
    if let Ok(response) = decode_response(bytes) {
        let again = decode_response(encode(&response).as_bytes());
        assert_eq!(again, Ok(response), "response round trip");
    }
}

/// Feeds `bytes` to a [`LineReader`] in chunks cut at `cuts` (each taken
/// modulo the remaining length) and checks that the lines that come out are
/// exactly the lines of `bytes`, whatever the cuts (SPEC.md §4.1).
pub fn framer(bytes: &[u8], cuts: &[u16], max: usize) {
    let max = max.clamp(1, MAX_FRAME_BYTES);
    let mut reader = LineReader::new(max);
    let mut got = Vec::new();
    let mut rest = bytes;
    let mut cuts = cuts.iter();
    let mut failed = false;
    while !rest.is_empty() {
        let take = match cuts.next() {
            Some(&cut) => 1 + usize::from(cut) % rest.len(),
            None => rest.len(),
        };
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        if reader.push(chunk).is_err() {
            failed = true;
            // A failed reader must stay safe to use.
            assert_eq!(reader.next_line(), None);
            assert_eq!(reader.partial_len(), 0);
            assert!(reader.push(b"\n").is_err());
            break;
        }
        got.extend(std::iter::from_fn(|| reader.next_line()));
    }
    let mut expected: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let partial = expected.pop().unwrap_or_default();
    let too_long = expected.iter().any(|line| line.len() > max) || partial.len() > max;
    assert_eq!(
        failed, too_long,
        "a reader fails exactly when a line is over the limit"
    );
    if !failed {
        assert_eq!(got, expected, "lines come out whole and in order");
        assert_eq!(reader.partial_len(), partial.len());
    }
}
