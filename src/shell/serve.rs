//! Holding the coordinator in the foreground (`single-flight serve`): a
//! process that only coordinates and never calls.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::options::Options;
use super::server::Lifetime;
use super::upstream::Serves;
use crate::backend::{Backend, BackendError, Place, Visit};
use crate::election::{Election, Term};
use crate::transport::Transport;

/// The longest pause between two campaigns while the election is out
/// (SPEC.md §13.5): from the poll interval, doubled after each failed one.
/// A failure that comes at once (every member refuses connections) then
/// costs one attempt every 2 s, not ten a second; one that waits for its
/// answer (a host cut off) takes longer than this anyway.
const MAX_OUTAGE_PAUSE: Duration = Duration::from_secs(2);

/// Why [`Builder::serve`](super::Builder::serve) stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The directory was refused, the election failed closed (a damaged
    /// epoch file, …), or cluster mode could not start (SPEC.md §14); the
    /// message names the file or setting and what to do.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The term was won, but this process cannot listen where it serves.
    #[error("cannot listen for the coordinator's connections at {place}: {error}")]
    Listen {
        /// Where it would serve: the flight directory, or the address it
        /// advertises.
        place: String,
        /// What listening failed with.
        error: std::io::Error,
    },
}

/// Holds the coordinator of `place` until `shutdown` (SPEC.md §10.4); with
/// [`Lifetime::WhileNeeded`], campaigns once and serves one term, until it
/// is idle (§16.4).
pub(super) async fn serve(
    place: Place,
    options: Options,
    lifetime: Lifetime,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    place
        .with(Serve {
            options,
            lifetime,
            shutdown,
        })
        .await
}

/// [`serve`] with whichever backend the place has.
struct Serve<F> {
    options: Options,
    lifetime: Lifetime,
    shutdown: F,
}

impl<F: Future<Output = ()>> Visit for Serve<F> {
    type Output = Result<(), ServeError>;

    async fn visit<B: Backend>(self, backend: B) -> Result<(), ServeError> {
        let (election, transport) = backend.open(self.options.poll_interval).await?;
        let upper = backend.upper()?;
        let place = backend.serving_at(&transport);
        info!(%place, "campaigning");
        campaign_and_serve(
            election,
            transport,
            Serves::new(upper),
            &self.options,
            self.lifetime,
            self.shutdown,
        )
        .await
        .map_err(|error| match error {
            Stopped::Election(error) => ServeError::Backend(error),
            Stopped::Listen(error) => ServeError::Listen { place, error },
        })
    }
}

/// The pauses between campaigns, and whether the election is out
/// (SPEC.md §13.5): a decision with the time passed in, so that the tests
/// below drive it without a clock.
#[derive(Debug)]
struct Outage {
    /// Since when the election has been out; `None` while it answers.
    since: Option<Instant>,
    /// The pause after a campaign that answered: the poll interval.
    first: Duration,
    /// The pause before the next campaign.
    pause: Duration,
}

impl Outage {
    fn new(poll_interval: Duration) -> Outage {
        Outage {
            since: None,
            first: poll_interval,
            pause: poll_interval,
        }
    }

    /// A campaign was answered at `now`: the pauses start again from the
    /// poll interval. How long the election was out, if it was.
    fn answered(&mut self, now: Instant) -> Option<Duration> {
        self.pause = self.first;
        self.since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }

    /// A campaign failed at `now` because the election is out: the next
    /// pause doubles, up to [`MAX_OUTAGE_PAUSE`]. Whether this failure began
    /// the outage.
    fn failed(&mut self, now: Instant) -> bool {
        self.pause = (self.pause * 2).min(MAX_OUTAGE_PAUSE);
        let began = self.since.is_none();
        self.since.get_or_insert(now);
        began
    }

    /// The pause before the next campaign.
    fn pause(&self) -> Duration {
        self.pause
    }
}

/// Why [`campaign_and_serve`] stopped before its shutdown.
enum Stopped {
    Election(BackendError),
    Listen(std::io::Error),
}

/// Campaigns until this process coordinates, serves until `shutdown`, and
/// campaigns again when a term is lost; any backend. While needed
/// ([`Lifetime::WhileNeeded`]) it campaigns once and serves one term: it is
/// there to keep a term alive, not to wait for one.
async fn campaign_and_serve<E, T, U>(
    mut election: E,
    transport: T,
    serves: Serves<U>,
    options: &Options,
    lifetime: Lifetime,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Stopped>
where
    E: Election,
    T: Transport<Address = E::Address>,
    U: Backend + Clone,
{
    tokio::pin!(shutdown);
    let mut outage = Outage::new(options.poll_interval);
    loop {
        let term = loop {
            // One attempt at a time, and a shutdown never waits for one: a
            // campaign that etcd does not answer takes seconds (§14.6).
            let campaign = tokio::select! {
                () = &mut shutdown => return Ok(()),
                campaign = election.campaign() => campaign,
            };
            match campaign {
                Ok(won) => {
                    if let Some(after) = outage.answered(Instant::now()) {
                        info!(?after, "the election answers again; campaigning as before");
                    }
                    if let Some(term) = won {
                        break term;
                    }
                }
                Err(error) if E::is_outage(&error) => {
                    // One line per outage, not one per attempt.
                    if outage.failed(Instant::now()) {
                        warn!(
                            %error,
                            "cannot campaign; trying again until the election answers (SPEC.md §13.5)"
                        );
                    } else {
                        debug!(%error, "the election is still out");
                    }
                }
                Err(error) => return Err(Stopped::Election(BackendError::new(error))),
            }
            if lifetime == Lifetime::WhileNeeded {
                info!("another process coordinates; not needed");
                return Ok(());
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(outage.pause()) => {}
            }
        };
        info!(epoch = %term.epoch(), "serving");
        let listener = match transport.listen() {
            Ok(listener) => listener,
            Err(error) => {
                term.resign(false).await;
                return Err(Stopped::Listen(error));
            }
        };
        let mut serving = serves.start(term, listener, options, lifetime);
        tokio::select! {
            () = &mut shutdown => {
                let _ = serving.stop.send(());
                let _ = serving.done.await;
                return Ok(());
            }
            _ = &mut serving.done => {
                if lifetime == Lifetime::WhileNeeded {
                    return Ok(());
                }
                warn!("the term ended; campaigning again");
            }
        }
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
