//! Holding the coordinator in the foreground (`single-flight serve`): a
//! process that only coordinates and never calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::api::Builder;
use super::server;
use super::socket::SocketDirectory;
use crate::election::{ElectionError, ElectionOptions, LeaderElection};

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
        let (directory, options) = self.into_parts();
        let election = LeaderElection::new(
            &directory,
            ElectionOptions {
                poll_interval: options.poll_interval,
                directory: options.directory.clone(),
            },
        )?;
        let socket_error = |error| ServeError::Socket {
            path: directory.display().to_string(),
            error,
        };
        let sockets = Arc::new(SocketDirectory::new(&directory).map_err(socket_error)?);
        tokio::pin!(shutdown);
        loop {
            let leadership = loop {
                // One attempt at a time, so that a shutdown is never kept
                // waiting by a campaign.
                if let Some(leadership) = election.campaign(Duration::ZERO)? {
                    break leadership;
                }
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(options.poll_interval) => {}
                }
            };
            info!(epoch = %leadership.epoch(), directory = %directory.display(), "serving");
            let mut serving =
                server::start(leadership, sockets.clone(), &options).map_err(socket_error)?;
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
}
