//! Holding the coordinator in the foreground (`single-flight serve`): a
//! process that only coordinates and never calls.

use std::future::Future;
use std::time::Instant;

use tracing::{debug, info, warn};

use super::options::Options;
use super::outage::Outage;
use super::server::Lifetime;
use super::upstream::{Above, Serves};
use crate::backend::{Backend, BackendError, Place, Visit};
use crate::election::{Election, Term};
use crate::transport::Transport;

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
    U: Above,
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
