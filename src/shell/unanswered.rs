//! How long a process waits, at most, before it looks again for the
//! coordinator when the one the election names does not answer and its key
//! still holds (SPEC.md §14.3, "A key whose coordinator does not answer"):
//! the decision of the client's finder and of a host coordinator's reach of
//! the cluster, with nothing but the attempts passed in.
use std::pin::Pin;
use std::time::Duration;

/// A future that resolves when the coordinator the election named is no
/// longer the one (SPEC.md §14.3): its key went, or another term began;
/// one that never resolves where the connection's close says it (a local
/// coordinator).
pub(super) type Gone = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The longest wait between two looks at a key whose coordinator does not
/// answer (SPEC.md §14.3). The wait ends earlier when the key goes (the
/// election's watch), so this bounds only how late a process learns of a
/// change its watch missed, and how often it asks etcd meanwhile: a killed
/// coordinator's key holds until its lease expires (the TTL, 5 s by
/// default), which at the poll interval cost every waiting process a read
/// and a campaign ten times a second — at a thousand hosts ten thousand
/// requests a second. Half the default grace window (§14.4), so that a
/// process whose watch missed the new term still reaches it within that
/// window.
pub(super) const MAX_UNANSWERED_PAUSE: Duration = Duration::from_secs(1);

/// The waits while a key's coordinator does not answer: from the poll
/// interval, doubled after each such attempt in a row, to
/// [`MAX_UNANSWERED_PAUSE`].
#[derive(Debug)]
pub(super) struct Unanswered {
    /// The first wait: the poll interval.
    first: Duration,
    /// The wait after the next unanswered attempt.
    next: Duration,
}

impl Unanswered {
    pub(super) fn new(poll_interval: Duration) -> Unanswered {
        Unanswered {
            first: poll_interval,
            next: poll_interval,
        }
    }

    /// An attempt found the coordinator the election names silent and its
    /// key held: how long to wait for the key to go before looking again.
    pub(super) fn missed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_UNANSWERED_PAUSE.max(self.first));
        wait
    }

    /// An attempt connected, found no key, or won: the waits start again
    /// from the poll interval.
    pub(super) fn reset(&mut self) {
        self.next = self.first;
    }

    /// An attempt found the key held and did not win: when its coordinator
    /// was `silent` and the election `tells_gone`, waits for `silent`
    /// (the key's going) at most [`missed`](Unanswered::missed), and the
    /// next look may come at once; else the next look comes after `poll`.
    /// Returns the pause before the next look.
    pub(super) async fn wait_out(
        &mut self,
        silent: Option<impl Future<Output = ()>>,
        tells_gone: bool,
        poll: Duration,
    ) -> Duration {
        match silent {
            Some(gone) if tells_gone => {
                let _ = tokio::time::timeout(self.missed(), gone).await;
                Duration::ZERO
            }
            _ => poll,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §14.3: the waits double from the poll interval to 1 s, and any other
    /// outcome starts them again from the poll interval.
    #[test]
    fn s14_3_waits_for_a_silent_coordinator_double_to_their_cap() {
        let poll = Duration::from_millis(100);
        let mut unanswered = Unanswered::new(poll);
        let waits: Vec<Duration> = (0..8).map(|_| unanswered.missed()).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1000, 1000, 1000, 1000].map(Duration::from_millis)
        );
        // A killed coordinator's key holds for at most the TTL: 5 s of
        // waits are 8 looks, where the poll interval made 50.
        let mut fresh = Unanswered::new(poll);
        let mut waited = Duration::ZERO;
        let mut looks = 0;
        while waited < Duration::from_secs(5) {
            waited += fresh.missed();
            looks += 1;
        }
        assert_eq!(looks, 8);
        unanswered.reset();
        assert_eq!(unanswered.missed(), poll);
    }

    /// A poll interval longer than the cap is kept: the cap never makes a
    /// process look more often than it was told to.
    #[test]
    fn a_poll_interval_past_the_cap_is_kept() {
        let poll = Duration::from_secs(3);
        let mut unanswered = Unanswered::new(poll);
        assert_eq!(unanswered.missed(), poll);
        assert_eq!(unanswered.missed(), poll);
    }
}
