//! Arbitrary bytes as a response line or a coordinator hello (SPEC.md §3.3,
//! §3.7, §4.2): no panic, and whatever decodes round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| single_flight_core::fuzzing::response(line));
