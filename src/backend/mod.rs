//! Where the processes meet, and the one place that picks a backend for it.
//!
//! A backend is an [`Election`] (who coordinates) and a [`Transport`] (how
//! the others reach it) that go together, behind the `Backend` trait; each
//! is one module:
//!
//! - `local`: a flight directory on this machine: the SQLite claim and the
//!   Unix socket (SPEC.md §7, §11.1);
//! - `cluster` (feature `cluster`): the machines of a cluster: etcd and TCP
//!   with mutual TLS (§14).
//!
//! The shell above is generic over `Backend` and never asks which one
//! runs: `open`, `serve` and `status` each hand a `Visit` to
//! `Place::with`, the one `match` that runs a backend. `Place`'s other
//! matches read its configuration (its defaults, its directory or cluster)
//! and run nothing. A new backend is a module here, a variant of `Place`,
//! an arm of `Place::with` and one of each of those readers.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod default_directory;
#[cfg(feature = "cluster")]
pub(crate) mod host;
pub(crate) mod local;
#[cfg(feature = "cluster")]
pub(crate) mod tiered;

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::election::Election;
use crate::protocol::HostId;
use crate::transport::Transport;

/// One backend: the election and the transport of one kind of place.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Who coordinates.
    type Election: Election<Address = <Self::Transport as Transport>::Address>;
    /// How the others reach the coordinator.
    type Transport: Transport;

    /// The grace window of a term that follows another, by default
    /// (SPEC.md §10.2, §14.4).
    const GRACE_WINDOW: Duration;
    /// The time between attempts to reach or elect a coordinator, by
    /// default (SPEC.md §7.2).
    const POLL_INTERVAL: Duration;

    /// Readies this process to take part: checks (or creates) the
    /// directory, or loads the certificates and connects to etcd.
    fn open(
        &self,
        poll_interval: Duration,
    ) -> impl Future<Output = Result<(Self::Election, Self::Transport), BackendError>> + Send;

    /// Finds the coordinator for one look at it (SPEC.md §3.5), creating
    /// nothing: `None` when nobody coordinates.
    fn find(&self) -> impl Future<Output = Result<Found<Self>, BackendError>> + Send;

    /// The coordinator's address as a status shows it (SPEC.md §3.5);
    /// `None` where there is nothing to show.
    fn shown(address: &<Self::Transport as Transport>::Address) -> Option<String>;

    /// What to call this place in messages.
    fn describe(&self) -> String;

    /// Where this process serves when it coordinates, for logs and errors.
    fn serving_at(&self, transport: &Self::Transport) -> String;

    /// The place whose coordinator this one relays to, for a host directory
    /// of a cluster (SPEC.md §18.1): its coordinator serves the relay and
    /// reaches the cluster. A place that relays to none names itself and
    /// returns `None`.
    type Upper: Backend + Clone;

    /// The place above this one, if any, for a look at it (§13.5): reading
    /// it creates nothing.
    fn above(&self) -> Option<&Self::Upper>;

    /// The place above this one and the id of the host this one relays for
    /// (§18.6), once [`open`](Self::open) has prepared the directory that
    /// may keep the id; `None` for a place that relays to none.
    fn upper(&self) -> Result<Option<Upper<Self::Upper>>, BackendError>;
}

/// The place a host directory's coordinator relays to, and the host it
/// relays for (SPEC.md §18.1).
#[derive(Clone, Debug)]
pub(crate) struct Upper<B> {
    /// The cluster.
    pub(crate) backend: B,
    /// The host id of the relay hello.
    pub(crate) host: HostId,
}

/// A coordinator that [`Backend::find`] found: the transport to reach it,
/// and its address.
pub(crate) type Found<B> = Option<(
    <B as Backend>::Transport,
    <<B as Backend>::Transport as Transport>::Address,
)>;

/// Something to do with whichever backend a [`Place`] has: the shell's
/// `open`, `serve` and `status` are each one.
pub(crate) trait Visit {
    /// What it comes to.
    type Output;

    /// Does it with `backend`. Not bound to be `Send`: each visit's future
    /// is `Send` where its parts are, which the callers that spawn one
    /// (`open`) have and `serve`'s shutdown future need not.
    fn visit<B: Backend>(self, backend: B) -> impl Future<Output = Self::Output>;
}

/// Where the processes meet.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    /// A flight directory on this machine (SPEC.md §7, §11).
    Directory(local::Directory),
    /// A cluster of machines (SPEC.md §14).
    #[cfg(feature = "cluster")]
    Cluster(Box<cluster::Cluster>),
    /// A host directory whose coordinator relays to a cluster (SPEC.md
    /// §18): a cluster's place unless its processes reach it directly
    /// (§18.6).
    #[cfg(feature = "cluster")]
    Tiered(Box<tiered::Tiered>),
}

impl Place {
    /// Does `visit` with this place's backend.
    pub(crate) async fn with<V: Visit>(self, visit: V) -> V::Output {
        match self {
            Place::Directory(directory) => visit.visit(directory).await,
            #[cfg(feature = "cluster")]
            Place::Cluster(cluster) => visit.visit(*cluster).await,
            #[cfg(feature = "cluster")]
            Place::Tiered(tiered) => visit.visit(*tiered).await,
        }
    }

    /// The places of this place's shards, in shard order (SPEC.md §19.4):
    /// a process of a cluster of S shards is S clients, one in each. A
    /// directory, and a cluster of one shard, is its own only shard.
    pub(crate) fn shards(&self) -> Vec<Place> {
        match self {
            Place::Directory(_) => vec![self.clone()],
            #[cfg(feature = "cluster")]
            Place::Cluster(cluster) => cluster
                .each_shard()
                .into_iter()
                .map(|cluster| Place::Cluster(Box::new(cluster)))
                .collect(),
            #[cfg(feature = "cluster")]
            Place::Tiered(tiered) => tiered
                .shards()
                .into_iter()
                .map(|tiered| Place::Tiered(Box::new(tiered)))
                .collect(),
        }
    }

    /// This backend's default grace window and poll interval.
    pub(crate) fn defaults(&self) -> (Duration, Duration) {
        fn of<B: Backend>(_: &B) -> (Duration, Duration) {
            (B::GRACE_WINDOW, B::POLL_INTERVAL)
        }
        match self {
            Place::Directory(directory) => of(directory),
            #[cfg(feature = "cluster")]
            Place::Cluster(cluster) => of(&**cluster),
            #[cfg(feature = "cluster")]
            Place::Tiered(tiered) => of(&**tiered),
        }
    }

    /// The flight directory, a host directory's too; `None` for a cluster
    /// reached directly, which has none.
    pub(crate) fn directory(&self) -> Option<&Path> {
        match self {
            Place::Directory(directory) => Some(directory.path()),
            #[cfg(feature = "cluster")]
            Place::Cluster(_) => None,
            #[cfg(feature = "cluster")]
            Place::Tiered(tiered) => Some(tiered.directory().path()),
        }
    }

    /// The cluster; `None` for a directory.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(&self) -> Option<&cluster::Cluster> {
        match self {
            Place::Directory(_) => None,
            Place::Cluster(cluster) => Some(cluster),
            Place::Tiered(tiered) => Some(tiered.cluster()),
        }
    }

    /// Trusts a FUSE file system type as local (SPEC.md §7.4); a cluster
    /// has no directory to judge.
    pub(crate) fn trust_fuse_type(&mut self, fuse_type: String) {
        match self {
            Place::Directory(directory) => directory.trust_fuse_type(fuse_type),
            #[cfg(feature = "cluster")]
            Place::Cluster(_) => {}
            #[cfg(feature = "cluster")]
            Place::Tiered(tiered) => tiered.trust_fuse_type(fuse_type),
        }
    }
}

/// Why a backend could not be used: the flight directory, the election,
/// etcd, the certificates, the coordinator's transport. Each backend has
/// errors of its own, which this carries whole (as rustls's `Error::Other`
/// does), so that a new backend adds no variant to any public error. Its
/// message says what happened and what to do; [`source`](Error::source)
/// is the backend's error's own source.
#[derive(Clone)]
pub struct BackendError(Arc<dyn Error + Send + Sync>);

impl BackendError {
    /// Carries a backend's `error`.
    pub(crate) fn new(error: impl Error + Send + Sync + 'static) -> BackendError {
        BackendError(Arc::new(error))
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}
