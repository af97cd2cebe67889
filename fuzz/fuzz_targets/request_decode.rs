//! Arbitrary bytes as a request line or a client hello (SPEC.md §3.2, §3.7,
//! §4.2): no panic, and whatever decodes round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| single_flight_core::fuzzing::request(line));
