//! Arbitrary bytes cut into arbitrary chunks, against a line limit the input
//! chooses (SPEC.md §4.1): the framer yields exactly the stream's lines, or
//! fails exactly when one is over the limit.
//!
//! Layout of the input: byte 0 is the limit (0 to 255; small, so that the
//! fuzzer's inputs of a few KiB reach the over-limit path), byte 1 is how many
//! cut points follow, each two bytes little-endian, and the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [max, count, rest @ ..] = input else {
        return;
    };
    let cut_bytes = (usize::from(*count) * 2).min(rest.len() / 2 * 2);
    let (cuts, stream) = rest.split_at(cut_bytes);
    let cuts: Vec<u16> = cuts
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    single_flight_core::fuzzing::framer(stream, &cuts, usize::from(*max));
});
