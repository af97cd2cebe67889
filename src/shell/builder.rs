//! Configuring a [`SingleFlight`] before it opens, and the three things to
//! do with a place: take part in it ([`Builder::open`]), hold its
//! coordinator ([`Builder::serve`]), or look at it ([`Builder::status`]).

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use super::api::SingleFlight;
use super::error::OpenError;
use super::options::Options;
use super::serve::{self, ServeError};
use super::server::Lifetime;
use super::status::{self, Status, StatusError};
use super::thread::{Opened, opened_with, start_thread};
use crate::backend::Place;
use crate::backend::local::Directory;
use crate::protocol::ShardCount;

/// Configures a [`SingleFlight`] before it opens.
#[derive(Clone, Debug)]
pub struct Builder {
    place: Place,
    options: Options,
}

impl Builder {
    fn new(place: Place) -> Builder {
        let (grace_window, poll_interval) = place.defaults();
        Builder {
            place,
            options: Options {
                grace_window,
                poll_interval,
                seeded: super::mutant::Seeded::NONE,
                clock: super::clock::Clock::System,
            },
        }
    }

    /// The grace window a new coordinator opens after a failover
    /// (SPEC.md §10.2); [`DEFAULT_GRACE_WINDOW`](crate::DEFAULT_GRACE_WINDOW)
    /// in a directory by default. Every process of a directory should use
    /// the same.
    pub fn grace_window(mut self, window: Duration) -> Builder {
        self.options.grace_window = window;
        self
    }

    /// The time between attempts to reach or elect a coordinator
    /// (SPEC.md §7.2); 10 ms in a directory by default.
    pub fn poll_interval(mut self, interval: Duration) -> Builder {
        self.options.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// FUSE file system types that you vouch are local to this machine
    /// (SPEC.md §7.4), such as `"fuse.mergerfs"`. A cluster has no
    /// directory to judge, and ignores it.
    pub fn trust_fuse_type(mut self, fuse_type: impl Into<String>) -> Builder {
        self.place.trust_fuse_type(fuse_type.into());
        self
    }

    /// The flight directory; `None` for a cluster.
    pub fn directory(&self) -> Option<&Path> {
        self.place.directory()
    }

    /// The cluster; `None` for a directory.
    #[cfg(feature = "cluster")]
    pub fn cluster(&self) -> Option<&crate::Cluster> {
        self.place.cluster()
    }

    /// Checks the directory (creating it with mode 0700 if missing,
    /// SPEC.md §7.4), or connects to the cluster's election and loads the certificates in
    /// cluster mode (§14), and starts this process's single-flight thread.
    /// It connects to the coordinator, or becomes it, at the first call.
    pub async fn open(self) -> Result<SingleFlight, OpenError> {
        let (flights, opened) = self.start()?;
        opened_with(flights, opened.await)
    }

    /// Starts opening; the async [`open`](Self::open) awaits the answer and
    /// the blocking one waits for it (SPEC.md §9.7).
    pub(super) fn start(self) -> Result<(SingleFlight, Opened), OpenError> {
        let places = self.place.shards();
        let count =
            ShardCount::new(places.len() as u64).expect("a place has 1 to MAX_SHARDS shards");
        let (shards, opened) = start_thread(places, self.options)?;
        Ok((SingleFlight::from_shards(shards, count), opened))
    }

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
        serve::serve(self.place, self.options, Lifetime::UntilStopped, shutdown).await
    }

    /// Holds the coordinator only while it is needed: makes one attempt at
    /// the election and returns at once if another process coordinates;
    /// otherwise serves one term until `shutdown` resolves or nobody needs it
    /// any more — no connection open, no flight in progress, and no value
    /// kept for a reuse window ([`Call::reuse_for`](crate::Call::reuse_for),
    /// SPEC.md §16.2) — and ends it cleanly (§10.4). A term nobody connects
    /// to ends a few seconds after it began. `single-flight run --reuse`
    /// starts one in the background, so that its kept output outlives it
    /// (§16.4), as ssh's `ControlPersist` keeps a master connection.
    pub async fn serve_while_needed(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        serve::serve(self.place, self.options, Lifetime::WhileNeeded, shutdown).await
    }

    /// One look at the coordinator: its term and flights (SPEC.md §3.5).
    /// Creates nothing: a directory that does not exist has no coordinator.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = std::env::temp_dir().join("single-flight-doc-status-nobody");
    /// match single_flight::SingleFlight::builder(&dir).status().await {
    ///     Ok(status) => println!("term {} served by pid {}", status.epoch, status.pid),
    ///     Err(error) => println!("{error}"), // no coordinator answers in …
    /// }
    /// # }
    /// ```
    ///
    /// A cluster of several shards (SPEC.md §19) has a coordinator per
    /// shard: this is the first shard's, and
    /// [`shard_statuses`](Self::shard_statuses) looks at every one.
    pub async fn status(&self) -> Result<Status, StatusError> {
        let first = self.place.shards().swap_remove(0);
        status::look(first).await
    }

    /// One look at each shard's coordinator, in shard order (SPEC.md
    /// §19.6): one answer for a directory or a cluster of one shard.
    pub async fn shard_statuses(&self) -> Vec<Result<Status, StatusError>> {
        let mut answers = Vec::new();
        for shard in self.place.shards() {
            answers.push(status::look(shard).await);
        }
        answers
    }
}

impl SingleFlight {
    /// Opens `directory` with the default options. See [`Builder::open`].
    pub async fn open(directory: impl AsRef<Path>) -> Result<SingleFlight, OpenError> {
        SingleFlight::builder(directory).open().await
    }

    /// Options other than the defaults, for the processes that share
    /// `directory`.
    pub fn builder(directory: impl AsRef<Path>) -> Builder {
        Builder::new(Place::Directory(Directory::new(directory.as_ref())))
    }

    /// Single-flight for the processes of a cluster of machines (SPEC.md
    /// §14), with cluster mode's defaults: a grace window of
    /// [`DEFAULT_CLUSTER_GRACE_WINDOW`](crate::DEFAULT_CLUSTER_GRACE_WINDOW)
    /// and attempts every 100 ms. The processes of one host reach the
    /// cluster through their host's coordinator, whom they meet in a host
    /// directory (§18), unless [`Cluster::direct`](crate::Cluster::direct)
    /// says otherwise. [`Cluster`](crate::Cluster) has an example.
    #[cfg(feature = "cluster")]
    pub fn cluster(cluster: crate::Cluster) -> Builder {
        Builder::new(cluster.place())
    }
}
