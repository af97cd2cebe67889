//! Holding the coordinator in the foreground (`single-flight serve`): a
//! process that only coordinates and never calls.

use std::future::Future;

use tracing::{info, warn};

use super::api::{Builder, Place};
use super::options::Options;
use super::server;
use crate::election::{Election, ElectionError, ElectionOptions, LocalElection, Term};
use crate::transport::Transport;
use crate::transport::unix::UnixTransport;

/// Why [`Builder::serve`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The directory was refused, or the election failed closed (a damaged
    /// epoch file, …); the message names the file and what to do.
    #[error(transparent)]
    Election(#[from] ElectionError),
    #[error("cannot bind the coordinator's socket in {path}: {error}")]
    Socket { path: String, error: std::io::Error },
    /// Cluster mode could not start (SPEC.md §14).
    #[cfg(feature = "cluster")]
    #[error(transparent)]
    Cluster(#[from] super::cluster::ClusterError),
}

impl Builder {
    /// Campaigns until this process coordinates, then serves until
    /// `shutdown` resolves, and ends the term cleanly (SPEC.md §10.4). If a
    /// term is lost (its lock file moved, SPEC.md §7.2) it campaigns again.
    /// Returns an error when the election fails closed.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), single_flight::ServeError> {
    /// single_flight::SingleFlight::builder(std::env::temp_dir().join("my-app-flights"))
    ///     .serve(async {
    ///         let _ = tokio::signal::ctrl_c().await;
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let options = self.options;
        // Without the `cluster` feature the match has one arm.
        #[allow(clippy::infallible_destructuring_match)]
        let directory = match self.place {
            Place::Directory(directory) => directory,
            #[cfg(feature = "cluster")]
            Place::Cluster(cluster) => {
                let (election, transport) = cluster.connect().await?;
                let advertised = cluster.advertised(&transport);
                info!(advertise = %advertised, "campaigning");
                return serve(election, transport, &options, shutdown)
                    .await
                    .map_err(|error| match error {
                        Stopped::Election(error) => ServeError::Election(error),
                        Stopped::Listen(error) => ServeError::Socket {
                            path: advertised,
                            error,
                        },
                    });
            }
        };
        let election = LocalElection::new(
            &directory,
            ElectionOptions {
                poll_interval: options.poll_interval,
                directory: options.directory.clone(),
            },
        )?;
        let transport = UnixTransport::new(&directory).map_err(|error| ServeError::Socket {
            path: directory.display().to_string(),
            error,
        })?;
        info!(directory = %directory.display(), "campaigning");
        serve(election, transport, &options, shutdown)
            .await
            .map_err(|error| match error {
                Stopped::Election(error) => ServeError::Election(error),
                Stopped::Listen(error) => ServeError::Socket {
                    path: directory.display().to_string(),
                    error,
                },
            })
    }
}

/// Why [`serve`] stopped before its shutdown.
enum Stopped {
    Election(ElectionError),
    Listen(std::io::Error),
}

/// Campaigns until this process coordinates, serves until `shutdown`, and
/// campaigns again when a term is lost; any backend.
async fn serve<E, T>(
    mut election: E,
    transport: T,
    options: &Options,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Stopped>
where
    E: Election,
    T: Transport<Address = E::Address>,
{
    tokio::pin!(shutdown);
    loop {
        let term = loop {
            // One attempt at a time, so that a shutdown is never kept
            // waiting by a campaign.
            if let Some(term) = election.campaign().await.map_err(Stopped::Election)? {
                break term;
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(options.poll_interval) => {}
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
        let mut serving = server::start(term, listener, options);
        tokio::select! {
            () = &mut shutdown => {
                let _ = serving.stop.send(());
                let _ = serving.done.await;
                return Ok(());
            }
            _ = &mut serving.done => warn!("the term ended; campaigning again"),
        }
    }
}
