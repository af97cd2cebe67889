//! The host tier of a cluster (SPEC.md §18): the processes of one host meet
//! in a host directory as in local mode (§7, §11.1), and only the
//! directory's coordinator reaches the cluster, relaying for its host. This
//! backend is the host directory's; its [`Backend::upper`] is the cluster.

use std::time::Duration;

use super::cluster::Cluster;
use super::host::HostChoice;
use super::local::Directory;
use super::{Backend, BackendError, Upper};
use crate::election::local::LocalElection;
use crate::transport::unix::UnixTransport;

/// A host directory and the cluster its coordinator relays to.
#[derive(Clone, Debug)]
pub(crate) struct Tiered {
    directory: Directory,
    cluster: Cluster,
    /// How the host id of the relay hello is chosen (SPEC.md §18.6).
    host: HostChoice,
    /// The host directory that keeps the host id: this one, or with several
    /// shards the first shard's, so that every shard's host coordinator
    /// relays under one id (SPEC.md §19.4).
    keeps_id: Directory,
}

impl Tiered {
    pub(crate) fn new(
        directory: Directory,
        cluster: Cluster,
        host: HostChoice,
        keeps_id: Directory,
    ) -> Tiered {
        Tiered {
            directory,
            cluster,
            host,
            keeps_id,
        }
    }

    pub(crate) fn directory(&self) -> &Directory {
        &self.directory
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// One host directory per shard of the cluster, each with its shard's
    /// cluster (SPEC.md §19.4); this one for a cluster of one shard.
    pub(crate) fn shards(&self) -> Vec<Tiered> {
        let clusters = self.cluster.each_shard();
        let Some(first) = clusters.first().and_then(Cluster::host_directory) else {
            return vec![self.clone()];
        };
        let keeps_id = self.directory.at(&first);
        clusters
            .into_iter()
            .map(|cluster| Tiered {
                directory: match cluster.host_directory() {
                    Some(path) => self.directory.at(&path),
                    None => self.directory.clone(),
                },
                cluster,
                host: self.host.clone(),
                keeps_id: keeps_id.clone(),
            })
            .collect()
    }

    /// Vouches that the FUSE file system type is local (SPEC.md §7.4).
    pub(crate) fn trust_fuse_type(&mut self, fuse_type: String) {
        self.keeps_id.trust_fuse_type(fuse_type.clone());
        self.directory.trust_fuse_type(fuse_type);
    }
}

impl Backend for Tiered {
    type Election = LocalElection;
    type Transport = UnixTransport;
    type Upper = Cluster;

    /// The cluster's: the terms this backend's processes open with a grace
    /// window are the cluster's (§14.4); a host term opens none (§18.3),
    /// and the cluster's relay windows cover a host coordinator's death
    /// (§18.2).
    const GRACE_WINDOW: Duration = <Cluster as Backend>::GRACE_WINDOW;
    /// The host directory's: its attempts are reads of a local file
    /// (§7.2); the relay paces its attempts to reach the cluster itself
    /// (§14.3).
    const POLL_INTERVAL: Duration = <Directory as Backend>::POLL_INTERVAL;

    /// Checks the cluster's configuration, which any process of the host
    /// may come to use as its host's coordinator (§18.6), then the host
    /// directory as a flight directory.
    async fn open(
        &self,
        poll_interval: Duration,
    ) -> Result<(LocalElection, UnixTransport), BackendError> {
        self.cluster.check()?;
        self.directory.open(poll_interval).await
    }

    /// The host coordinator: what a process of the host reaches.
    async fn find(&self) -> Result<Option<(UnixTransport, ())>, BackendError> {
        self.directory.find().await
    }

    fn shown(address: &()) -> Option<String> {
        Directory::shown(address)
    }

    fn describe(&self) -> String {
        format!(
            "the host directory {} of {}",
            self.directory.describe(),
            self.cluster
        )
    }

    fn serving_at(&self, transport: &UnixTransport) -> String {
        self.directory.serving_at(transport)
    }

    fn above(&self) -> Option<&Cluster> {
        Some(&self.cluster)
    }

    fn upper(&self) -> Result<Option<Upper<Cluster>>, BackendError> {
        // Another shard's directory may not have been opened yet: make sure
        // it is one (§7.4) before it keeps the id.
        if self.keeps_id.path() != self.directory.path() {
            self.keeps_id.prepare()?;
        }
        let host = self
            .host
            .host_id(self.keeps_id.path())
            .map_err(BackendError::new)?;
        Ok(Some(Upper {
            backend: self.cluster.clone().relaying_for(&host),
            host,
        }))
    }
}
