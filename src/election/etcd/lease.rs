//! What a term has proven of its lease (SPEC.md §14.2), as a plain value:
//! every method takes the time and none reads a clock, so that whether a
//! holder may still answer is decided here and tests drive a paused holder,
//! a late answer or renewals that cross in microseconds. The renewals'
//! thread and the term share one behind a lock ([`Proof`](super::renew::Proof)),
//! and read the clock where they call it.

use std::time::{Duration, Instant};

use super::STEP_DOWN_MARGIN;

/// Until when a lease is proven alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lease {
    until: Instant,
}

impl Lease {
    /// A lease granted for `ttl` by the grant request sent at `sent`: before
    /// its first renewal it is proven from the grant's send time.
    pub(super) fn granted(sent: Instant, ttl: Duration) -> Lease {
        Lease {
            until: proven_until(sent, ttl),
        }
    }

    /// A renewal sent at `sent` was answered with `ttl`. A late answer
    /// proves only that the lease lived when the request left, and the proof
    /// never goes back: a renewal answered after a later one's proves less,
    /// and changes nothing.
    pub(super) fn renewed(&mut self, sent: Instant, ttl: Duration) {
        self.until = self.until.max(proven_until(sent, ttl));
    }

    /// How much longer the lease is proven alive at `now`, or `None` once
    /// it is not.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        self.until
            .checked_duration_since(now)
            .filter(|left| !left.is_zero())
    }

    /// Whether a holder may still answer at `now`: a coordinator answers
    /// nothing once its lease is no longer proven, whatever it has queued
    /// or is about to answer (SPEC.md §14.2).
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.left(now).is_some()
    }
}

/// The end of what a request sent at `sent` and answered with `ttl` proves:
/// its send time plus the TTL, minus [`STEP_DOWN_MARGIN`] for the drift
/// between this host's clock and the etcd leader's and the pause between a
/// check and an answer.
fn proven_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(STEP_DOWN_MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = super::super::DEFAULT_TTL;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// §14.2: a granted lease is proven from the grant's send time, for the
    /// TTL minus the margin, and not a moment longer.
    #[test]
    fn a_grant_proves_its_ttl_minus_the_margin_from_its_send() {
        let sent = Instant::now();
        let lease = Lease::granted(sent, TTL);
        let proven = TTL - STEP_DOWN_MARGIN;
        assert_eq!(lease.left(sent), Some(proven));
        assert!(lease.holds(sent + proven - ms(1)));
        assert!(!lease.holds(sent + proven));
        assert_eq!(lease.left(sent + proven), None);
        assert!(!lease.holds(sent + TTL));
    }

    /// §14.2: a renewal answered late proves the lease from when it was
    /// sent, not from when its answer came.
    #[test]
    fn a_late_answer_proves_only_from_its_send() {
        let start = Instant::now();
        let mut lease = Lease::granted(start, TTL);
        let sent = start + ms(800);
        let answered = sent + ms(3000);
        lease.renewed(sent, TTL);
        assert_eq!(
            lease.left(answered),
            Some(TTL - STEP_DOWN_MARGIN - ms(3000))
        );
        assert!(!lease.holds(sent + TTL - STEP_DOWN_MARGIN));
    }

    /// §14.2: renewals answered out of order never take the proof back.
    #[test]
    fn an_older_renewal_never_shortens_the_proof() {
        let start = Instant::now();
        let mut lease = Lease::granted(start, TTL);
        lease.renewed(start + ms(1600), TTL);
        let proven = lease;
        lease.renewed(start + ms(800), TTL);
        assert_eq!(lease, proven);
        // A shorter TTL in a later answer cannot shorten it either.
        lease.renewed(start + ms(1700), ms(2000));
        assert_eq!(lease, proven);
    }

    /// §14.2: a holder paused past its proof (SIGSTOP, a paused VM) wakes
    /// up unable to answer, though nothing told it of the lease's end.
    #[test]
    fn a_holder_that_wakes_past_its_proof_answers_nothing() {
        let start = Instant::now();
        let mut lease = Lease::granted(start, TTL);
        lease.renewed(start + ms(800), TTL);
        assert!(lease.holds(start + ms(4000)));
        assert!(!lease.holds(start + ms(4800)));
        assert!(!lease.holds(start + Duration::from_secs(60)));
    }

    /// §14.2: a TTL no longer than the margin proves nothing.
    #[test]
    fn a_ttl_within_the_margin_proves_nothing() {
        let sent = Instant::now();
        assert!(!Lease::granted(sent, STEP_DOWN_MARGIN).holds(sent));
        assert!(!Lease::granted(sent, ms(500)).holds(sent));
    }

    /// §14.2: with renewals every TTL/6, each answered 3.1 s after it was
    /// sent (within TTL − margin − TTL/6, about 3.2 s for the default TTL),
    /// the lease stays proven until each answer arrives.
    #[test]
    fn renewals_answered_within_the_allowance_keep_the_lease_proven() {
        let start = Instant::now();
        let every = TTL / 6;
        let late = ms(3100);
        let mut lease = Lease::granted(start, TTL);
        for n in 1..=30 {
            let sent = start + every * n;
            // Just before this renewal's answer, only the earlier ones count.
            assert!(lease.holds(sent + late - ms(1)), "renewal {n}");
            lease.renewed(sent, TTL);
        }
    }
}
