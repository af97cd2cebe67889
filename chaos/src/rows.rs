//! What both checkers (`check`, and `check_cluster` for the cluster
//! form's own rows) report with: a must-be-zero row, percentiles, and the
//! slack of comparing two processes' clocks. A module of its own so that
//! the checkers import it, not each other.

/// Slack when comparing times read in two processes: both read the same
/// kernel clock, so this only covers the rounding of microseconds and NTP
/// slewing over a second (at most 0.5 ms).
pub const CLOCK_SLACK_US: u64 = 2_000;

/// Examples shown per row.
pub const EXAMPLES: usize = 5;

/// A row of the report that must be zero.
pub struct Row {
    pub name: &'static str,
    pub count: usize,
    pub examples: Vec<String>,
}

impl Row {
    pub fn new(name: &'static str) -> Row {
        Row {
            name,
            count: 0,
            examples: Vec::new(),
        }
    }

    pub fn hit(&mut self, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example());
        }
    }
}

/// The value at quantile `q` (0 to 1) of `sorted`; 0 when it is empty.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
