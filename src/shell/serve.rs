//! Holding the coordinator in the foreground (`single-flight serve`): a
//! process that only coordinates and never calls.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::options::Options;
use super::server::{self, Lifetime};
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
    shutdown: impl Future<Output = ()> + Send,
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

impl<F: Future<Output = ()> + Send> Visit for Serve<F> {
    type Output = Result<(), ServeError>;

    async fn visit<B: Backend>(self, backend: B) -> Result<(), ServeError> {
        let (election, transport) = backend.open(self.options.poll_interval).await?;
        let place = backend.serving_at(&transport);
        info!(%place, "campaigning");
        campaign_and_serve(
            election,
            transport,
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

/// Why [`campaign_and_serve`] stopped before its shutdown.
enum Stopped {
    Election(BackendError),
    Listen(std::io::Error),
}

/// Campaigns until this process coordinates, serves until `shutdown`, and
/// campaigns again when a term is lost; any backend. While needed
/// ([`Lifetime::WhileNeeded`]) it campaigns once and serves one term: it is
/// there to keep a term alive, not to wait for one.
async fn campaign_and_serve<E, T>(
    mut election: E,
    transport: T,
    options: &Options,
    lifetime: Lifetime,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Stopped>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    tokio::pin!(shutdown);
    // Since when the election has been out (SPEC.md §13.5), and the pause
    // before the next campaign.
    let mut outage: Option<Instant> = None;
    let mut pause = options.poll_interval;
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
                    if let Some(since) = outage.take() {
                        info!(
                            after = ?since.elapsed(),
                            "the election answers again; campaigning as before"
                        );
                    }
                    pause = options.poll_interval;
                    if let Some(term) = won {
                        break term;
                    }
                }
                Err(error) if E::is_outage(&error) => {
                    // One line per outage, not one per attempt.
                    if outage.is_none() {
                        outage = Some(Instant::now());
                        warn!(
                            %error,
                            "cannot campaign; trying again until the election answers (SPEC.md §13.5)"
                        );
                    } else {
                        debug!(%error, "the election is still out");
                    }
                    pause = (pause * 2).min(MAX_OUTAGE_PAUSE);
                }
                Err(error) => return Err(Stopped::Election(BackendError::new(error))),
            }
            if lifetime == Lifetime::WhileNeeded {
                info!("another process coordinates; not needed");
                return Ok(());
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(pause) => {}
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
        let mut serving = server::start_for(term, listener, options, lifetime);
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
