//! The trace of one run: the ordered log of deliveries, election
//! operations and call outcomes, each with its simulated time. Two runs of
//! one seed must give the same trace (tests/sim.rs); it is compared by
//! hash, and kept whole when asked, to show where two runs part.

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// The run's trace, shared by everything that records into it.
#[derive(Clone)]
pub struct Trace(Arc<Mutex<State>>);

struct State {
    origin: Instant,
    /// FNV-1a over every line: specified, so stable across Rust versions
    /// (std's `DefaultHasher` promises no such thing).
    hash: u64,
    lines: u64,
    kept: Option<Vec<String>>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl Trace {
    /// A trace whose times count from now; `keep` keeps every line (a
    /// thousand processes make millions: the scale run keeps the hash only).
    pub fn new(keep: bool) -> Trace {
        Trace(Arc::new(Mutex::new(State {
            origin: Instant::now(),
            hash: FNV_OFFSET,
            lines: 0,
            kept: keep.then(Vec::new),
        })))
    }

    /// Records one event at the current simulated time.
    pub fn record(&self, event: fmt::Arguments<'_>) {
        let mut state = self.0.lock().expect("never poisoned");
        let at = state.origin.elapsed();
        let line = format!("{:>10.6} {event}", at.as_secs_f64());
        for byte in line.bytes().chain([b'\n']) {
            state.hash = (state.hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
        state.lines += 1;
        if let Some(kept) = &mut state.kept {
            kept.push(line);
        }
    }

    /// The hash of every line so far, and their number.
    pub fn digest(&self) -> (u64, u64) {
        let state = self.0.lock().expect("never poisoned");
        (state.hash, state.lines)
    }

    /// The lines, when kept.
    pub fn lines(&self) -> Option<Vec<String>> {
        self.0.lock().expect("never poisoned").kept.clone()
    }

    /// The simulated time since the run began.
    pub fn elapsed(&self) -> std::time::Duration {
        self.0.lock().expect("never poisoned").origin.elapsed()
    }
}
