//! Whether the election is out, and how long to pause before the next
//! attempt (SPEC.md §13.5, §18.5): the decision of `serve`, which campaigns
//! through an outage of etcd, and of a host coordinator, which looks for
//! the cluster's coordinator through one; both log one line when an outage
//! begins and one when it ends, not one per attempt.

use std::time::{Duration, Instant};

/// The longest pause between two attempts while the election is out
/// (SPEC.md §13.5, §18.5): from the poll interval, doubled after each failed
/// one.
/// A failure that comes at once (every member refuses connections) then
/// costs one attempt every 2 s, not ten a second; one that waits for its
/// answer (a host cut off) takes longer than this anyway.
const MAX_OUTAGE_PAUSE: Duration = Duration::from_secs(2);

/// The pauses between attempts, and whether the election is out (SPEC.md
/// §13.5, §18.5): a decision with the time passed in, so that the tests
/// below drive it without a clock.
#[derive(Debug)]
pub(super) struct Outage {
    /// Since when the election has been out; `None` while it answers.
    since: Option<Instant>,
    /// The pause after an attempt that was answered: the poll interval.
    first: Duration,
    /// The pause before the next attempt.
    pause: Duration,
}

impl Outage {
    pub(super) fn new(poll_interval: Duration) -> Outage {
        Outage {
            since: None,
            first: poll_interval,
            pause: poll_interval,
        }
    }

    /// An attempt (a campaign, a look for the coordinator) was answered at
    /// `now`: the pauses start again from the poll interval. How long the election was out, if it was.
    pub(super) fn answered(&mut self, now: Instant) -> Option<Duration> {
        self.pause = self.first;
        self.since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }

    /// An attempt failed at `now` because the election is out: the next
    /// pause doubles, up to [`MAX_OUTAGE_PAUSE`]. Whether this failure began
    /// the outage.
    pub(super) fn failed(&mut self, now: Instant) -> bool {
        self.pause = (self.pause * 2).min(MAX_OUTAGE_PAUSE);
        let began = self.since.is_none();
        self.since.get_or_insert(now);
        began
    }

    /// The pause before the next attempt.
    pub(super) fn pause(&self) -> Duration {
        self.pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §13.5: while the election is out the pauses double from the poll
    /// interval to at most 2 s, the outage begins once, and an answer ends
    /// it and starts the pauses again from the poll interval.
    #[test]
    fn outage_pauses_double_to_their_cap_and_an_answer_resets_them() {
        let poll = Duration::from_millis(10);
        let start = Instant::now();
        let mut outage = Outage::new(poll);
        assert_eq!(outage.answered(start), None, "no outage to end");
        assert_eq!(outage.pause(), poll);
        let mut now = start;
        let mut pauses = Vec::new();
        for attempt in 0..12 {
            assert_eq!(outage.failed(now), attempt == 0, "attempt {attempt}");
            pauses.push(outage.pause());
            now += outage.pause();
        }
        assert_eq!(pauses[..3], [poll * 2, poll * 4, poll * 8]);
        assert!(pauses.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(pauses.last(), Some(&MAX_OUTAGE_PAUSE));
        assert_eq!(outage.answered(now), Some(now - start));
        assert_eq!(outage.pause(), poll);
        assert!(outage.failed(now), "a new outage begins");
    }
}
