//! When a request to etcd is tried again, and when the election gives up
//! (SPEC.md §14.6), and the randomness that spreads a stampede's attempts
//! (§14.3). The decisions take the time as input, so that the tests below
//! drive them without a clock; only [`with_retries`] sleeps.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use tonic::{Code, Status};
use tracing::{debug, warn};

use super::REQUEST_PATIENCE;
use super::client::{Client, describe};

/// The pause after a request's first failure: one member's death is
/// noticed by the client at once (the next attempt goes to another member),
/// so the first retry comes soon.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest pause between two attempts: the pause doubles after each
/// failure up to this, so that an overloaded etcd sees fewer and fewer
/// repeats of the same requests, and a recovered one is used again within
/// 2 s.
pub(super) const LONGEST_RETRY: Duration = Duration::from_secs(2);

/// Whether a failed request may succeed if sent again: etcd or the way to
/// it was busy or gone, not the request wrong. UNAVAILABLE is a member that
/// cannot be reached (or a connection that cannot be made), and etcd's own
/// "request timed out", "leader changed" and "no leader"; CANCELLED is this
/// client's timeout of one attempt ("Timeout expired"); DEADLINE_EXCEEDED
/// the same seen by a proxy or by etcd; RESOURCE_EXHAUSTED etcd's "too many
/// requests".
pub(super) fn transient(error: &Status) -> bool {
    matches!(
        error.code(),
        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::ResourceExhausted
    )
}

/// A source of random numbers for the shell's pauses: seeded from the
/// operating system (the keys of the standard library's `RandomState`) in
/// use, from a fixed seed in tests. Never used by the core, which is
/// deterministic.
#[derive(Clone, Debug)]
pub(super) struct Jitter(u64);

impl Jitter {
    /// A source seeded from the operating system's randomness, different in
    /// every process.
    pub(super) fn from_os() -> Jitter {
        Jitter(RandomState::new().hash_one(std::process::id()))
    }

    /// A source that repeats: for tests.
    #[cfg(test)]
    pub(super) fn seeded(seed: u64) -> Jitter {
        Jitter(seed)
    }

    /// The next number of the sequence (SplitMix64: every seed, zero
    /// included, gives a well-mixed sequence).
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A source of its own for another task, seeded from this one.
    pub(super) fn fork(&mut self) -> Jitter {
        Jitter(self.next())
    }

    /// A number in [0, 1), uniformly.
    pub(super) fn fraction(&mut self) -> f64 {
        // The 53 high bits make every double of [0, 1) a multiple of 2^-53.
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A duration in [`max` / 2, `max`): "equal jitter", so that processes
    /// that failed together do not try again together, while none tries
    /// again much sooner than its backoff says.
    pub(super) fn half_to_full(&mut self, max: Duration) -> Duration {
        max.mul_f64(0.5 + self.fraction() / 2.0)
    }
}

/// The retries of one request (SPEC.md §14.6): pauses from [`FIRST_RETRY`]
/// doubling to [`LONGEST_RETRY`], each jittered, until
/// [`REQUEST_PATIENCE`] has passed since the first attempt.
#[derive(Debug)]
pub(super) struct Backoff {
    until: Instant,
    next: Duration,
}

impl Backoff {
    /// The retries of a request first sent at `started`.
    pub(super) fn new(started: Instant) -> Backoff {
        Backoff::with_patience(started, REQUEST_PATIENCE)
    }

    pub(super) fn with_patience(started: Instant, patience: Duration) -> Backoff {
        Backoff {
            until: started + patience,
            next: FIRST_RETRY,
        }
    }

    /// After a transient failure at `now`: how long to pause before the
    /// next attempt, or `None` when the patience is spent. The last pause
    /// ends at the patience's end, for one last attempt.
    pub(super) fn after_failure(&mut self, now: Instant, jitter: &mut Jitter) -> Option<Duration> {
        let left = self.until.checked_duration_since(now)?;
        if left.is_zero() {
            return None;
        }
        let pause = jitter.half_to_full(self.next).min(left);
        self.next = (self.next * 2).min(LONGEST_RETRY);
        Some(pause)
    }
}

/// Sends a request, again after a backoff while it fails transiently, for
/// up to [`REQUEST_PATIENCE`] (SPEC.md §14.6); `what` names it in the log.
/// Every request made this way is safe to repeat: reads, a lease grant (an
/// unused lease expires), a revocation, and the campaign's transaction,
/// whose failure branch reads the key to tell an attempt that was applied
/// (the key is under this campaign's lease) from a lost campaign.
pub(super) async fn with_retries<T, F, Fut>(
    client: &Client,
    jitter: &mut Jitter,
    what: &str,
    mut request: F,
) -> Result<T, Status>
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut backoff = Backoff::new(Instant::now());
    let mut attempt = 1u32;
    loop {
        let error = match request(client.clone()).await {
            Err(error) if transient(&error) => error,
            other => return other,
        };
        let Some(pause) = backoff.after_failure(Instant::now(), jitter) else {
            warn!(error = %describe(&error), attempts = attempt, patience = ?REQUEST_PATIENCE, "etcd failed {what} every time; giving up");
            return Err(error);
        };
        // The first failures are common under a stampede and are logged
        // quietly; a request that keeps failing is worth a warning.
        if attempt < 3 {
            debug!(error = %describe(&error), attempt, ?pause, "etcd failed {what}; trying again");
        } else {
            warn!(error = %describe(&error), attempt, ?pause, "etcd failed {what} again; trying again (SPEC.md §14.6)");
        }
        attempt += 1;
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §14.6: pauses double from the first to the longest, each jittered
    /// into its upper half, and stop when the patience is spent.
    #[test]
    fn backoff_doubles_to_its_cap_and_ends_with_the_patience() {
        let start = Instant::now();
        let mut jitter = Jitter::seeded(7);
        let mut backoff = Backoff::with_patience(start, Duration::from_secs(10));
        let mut now = start;
        let mut pauses = Vec::new();
        while let Some(pause) = backoff.after_failure(now, &mut jitter) {
            pauses.push(pause);
            // Each attempt itself takes a second here.
            now += pause + Duration::from_secs(1);
            assert!(pauses.len() < 100, "the backoff never ends");
        }
        let mut cap = FIRST_RETRY;
        for pause in &pauses[..pauses.len() - 1] {
            assert!(
                *pause >= cap / 2 && *pause < cap,
                "{pause:?} within {cap:?}"
            );
            cap = (cap * 2).min(LONGEST_RETRY);
        }
        assert!(now >= start + Duration::from_secs(10));
        assert!(pauses.iter().all(|pause| *pause <= LONGEST_RETRY));
    }

    /// The last pause ends at the patience's end, never after it.
    #[test]
    fn the_last_pause_is_cut_to_the_patience() {
        let start = Instant::now();
        let mut jitter = Jitter::seeded(1);
        let mut backoff = Backoff::with_patience(start, Duration::from_millis(30));
        let pause = backoff.after_failure(start, &mut jitter).unwrap();
        assert!(pause <= Duration::from_millis(30));
        let late = start + Duration::from_millis(30);
        assert_eq!(backoff.after_failure(late, &mut jitter), None);
    }

    /// §14.6: timeouts and unreachable members are tried again; a request
    /// that etcd refuses for what it is (a missing lease, a bad argument) is
    /// not.
    #[test]
    fn only_failures_of_the_way_to_etcd_are_tried_again() {
        for code in [
            Code::Unavailable,
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
        ] {
            assert!(transient(&Status::new(code, "")), "{code:?}");
        }
        for code in [
            Code::NotFound,
            Code::InvalidArgument,
            Code::PermissionDenied,
            Code::FailedPrecondition,
            Code::Unauthenticated,
        ] {
            assert!(!transient(&Status::new(code, "")), "{code:?}");
        }
    }

    /// The shell's randomness: fractions cover [0, 1) evenly, and two
    /// sources from the operating system differ.
    #[test]
    fn jitter_is_spread_and_differs_between_sources() {
        let mut jitter = Jitter::seeded(0);
        let mut buckets = [0u32; 10];
        for _ in 0..10_000 {
            let fraction = jitter.fraction();
            assert!((0.0..1.0).contains(&fraction));
            buckets[(fraction * 10.0) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
        let (mut a, mut b) = (Jitter::from_os(), Jitter::from_os());
        assert_ne!(a.next(), b.next());
    }
}
