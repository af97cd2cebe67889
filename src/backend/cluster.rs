//! The cluster backend (SPEC.md §14): its configuration (etcd, the
//! cluster's name, where to listen and what to advertise, the certificates),
//! and the election through etcd and the transport over TCP with mutual TLS
//! that it puts together. The shell that drives them is the same as the
//! local mode's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::default_directory::default_directory;
use super::host::HostChoice;
use super::local::Directory;
use super::tiered::Tiered;
use super::{Backend, BackendError, Place, Upper};
use crate::election::etcd::{self, EtcdElection, EtcdError, EtcdOptions, EtcdTls, EtcdUser};
use crate::protocol::{HostId, Shard, ShardCount, ShardCountError};
use crate::transport::tcp::{
    Security, TcpConfigError, TcpOptions, TcpTransport, certificate_expiry, rfc3339,
};

/// The grace window of a cluster's term that follows another (SPEC.md
/// §14.4). A survivor reconnects across hosts: it learns of the old term's
/// end from etcd's watch, reads the new address, and makes a TCP and a TLS
/// handshake (three round trips, and certificate checks on a loaded host);
/// 2 s covers that with room, four times the local default, and stays well
/// under the lease TTL that dominates a failover after a host dies.
pub const DEFAULT_CLUSTER_GRACE_WINDOW: Duration = Duration::from_secs(2);

/// The time between attempts to find or elect a coordinator in cluster
/// mode. Each attempt is a read from etcd, so 10 ms as locally would make a
/// hundred processes without a coordinator send 10 000 requests a second;
/// 100 ms keeps that modest and is small beside the lease TTL.
pub(crate) const CLUSTER_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where the processes of a cluster meet (SPEC.md §14). Build one with
/// [`Cluster::etcd`], then open it with
/// [`SingleFlight::cluster`](crate::SingleFlight::cluster).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use single_flight::{Cluster, SingleFlight};
///
/// let cluster = Cluster::etcd(["https://10.0.0.5:2379"], "ci-cache")
///     .listen("10.0.0.1:7000".parse()?)
///     .tls("ca.pem", "host.pem", "host-key.pem");
/// let flights = SingleFlight::cluster(cluster).open().await?;
/// let landed = flights
///     .run("artifact:abc123", |token| async move {
///         Ok::<_, std::io::Error>(format!("fetched under token {token}"))
///     })
///     .await?;
/// println!("{}", landed.value);
/// flights.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Cluster {
    etcd: EtcdOptions,
    etcd_tls: Option<EtcdTls>,
    listen: SocketAddr,
    advertise: Option<String>,
    security: Option<Security>,
    /// Files of the CA's revocation lists (SPEC.md §14.5).
    crls: Vec<PathBuf>,
    /// How this process reaches the cluster (SPEC.md §18.6).
    reach: Reach,
    /// The cluster's number of shards as [`shards`](Cluster::shards) gave
    /// it, checked when the cluster opens (SPEC.md §19.1).
    shards: Result<ShardCount, ShardCountError>,
}

/// How a process reaches its cluster (SPEC.md §18.6).
#[derive(Clone, Debug)]
enum Reach {
    /// Through its host's coordinator, in its host directory: `cluster-NAME`
    /// in `directory` (the user's default flight directory when `None`).
    ThroughHost {
        directory: Option<PathBuf>,
        host: HostChoice,
    },
    /// As its own client of etcd and of the cluster's coordinator (§14).
    Direct,
}

/// What a host directory's name begins with, before the cluster's name: a
/// cluster may be named `flight.lock`, and its host directory must not be
/// mistaken for a file of the flight directory it is in (§7.1).
const HOST_DIRECTORY_PREFIX: &str = "cluster-";

/// What to call the cluster in messages: its name and its etcd endpoints,
/// as `the cluster "default" at http://e1:2379,http://e2:2379`.
impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the cluster {:?} at {}",
            self.etcd.cluster,
            self.etcd.endpoints.join(",")
        )
    }
}

/// Why cluster mode could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ClusterError {
    #[error(transparent)]
    Election(#[from] EtcdError),
    #[error(transparent)]
    Transport(#[from] TcpConfigError),
    #[error(
        "the listen address {listen} is not one other hosts can connect to; give the address to advertise (--advertise HOST:PORT), the one in this host's certificate"
    )]
    NothingToAdvertise { listen: SocketAddr },
    #[error(
        "no certificates were given for the cluster: give the CA, this process's certificate and its key (--tls-ca, --tls-cert, --tls-key), or, on loopback only, --insecure"
    )]
    NoSecurity,
    #[error(
        "a certificate revocation list (--tls-crl) was given without TLS: give --tls-ca, --tls-cert and --tls-key with it, or leave it out"
    )]
    CrlWithoutTls,
    #[error("{0}: give --shards (SINGLE_FLIGHT_SHARDS, Cluster::shards) a number in that range")]
    Shards(ShardCountError),
}

impl Cluster {
    /// The shortest lease TTL that [`ttl`](Self::ttl) takes: etcd raises
    /// shorter leases to its own minimum (SPEC.md §14.2).
    pub const MIN_TTL: Duration = crate::election::etcd::MIN_TTL;

    /// The cluster `name` of the etcd at `endpoints` (`http://` or
    /// `https://` URLs). Listens on 127.0.0.1 on a free port unless
    /// [`listen`](Self::listen) says otherwise.
    pub fn etcd(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        name: impl Into<String>,
    ) -> Cluster {
        Cluster {
            etcd: EtcdOptions::new(endpoints.into_iter().map(Into::into).collect(), name),
            etcd_tls: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            security: None,
            crls: Vec::new(),
            reach: Reach::ThroughHost {
                directory: None,
                host: HostChoice::Kept,
            },
            shards: Ok(ShardCount::ONE),
        }
    }

    /// Splits the cluster's keys over `count` shards, 1 to
    /// [`MAX_SHARDS`](crate::MAX_SHARDS), each with a coordinator of its own
    /// (SPEC.md §19): 1 by default. The cluster keeps the number it was
    /// first used with; a process that gives another is refused, naming
    /// both. A count outside the range is an error when the cluster opens.
    pub fn shards(mut self, count: u32) -> Cluster {
        self.shards = ShardCount::new(u64::from(count));
        self
    }

    /// The cluster's number of shards, as [`shards`](Self::shards) gave
    /// it; `None` when it is outside the range.
    pub fn shard_count(&self) -> Option<ShardCount> {
        self.shards.ok()
    }

    /// The flight directory in which this host's processes meet before
    /// they reach the cluster (SPEC.md §18.6): the host directory is
    /// `cluster-NAME` inside it. The user's
    /// [`default_directory`](crate::default_directory) by default. Every
    /// process of a host gives the same one; simulated hosts that share a
    /// file system each give their own. Replaces [`direct`](Self::direct).
    pub fn directory(mut self, directory: impl Into<PathBuf>) -> Cluster {
        let host = self.host_choice();
        self.reach = Reach::ThroughHost {
            directory: Some(directory.into()),
            host,
        };
        self
    }

    /// The id under which this host's coordinator relays for it (SPEC.md
    /// §18.1, §18.6): 1 to 255 bytes of text without control characters,
    /// different on every host of the cluster. By default the host
    /// directory keeps one, made of the host's name and 64 random bits.
    /// Replaces [`direct`](Self::direct).
    pub fn host_id(mut self, id: impl Into<String>) -> Cluster {
        let directory = match self.reach {
            Reach::ThroughHost { directory, .. } => directory,
            Reach::Direct => None,
        };
        self.reach = Reach::ThroughHost {
            directory,
            host: HostChoice::Named(id.into()),
        };
        self
    }

    /// Reaches the cluster directly, as its own client of etcd and of the
    /// cluster's coordinator and its own candidate (SPEC.md §14, §18.6),
    /// instead of through this host's coordinator: for a process that
    /// cannot share a host directory, or the only process of its host.
    /// Replaces [`directory`](Self::directory) and
    /// [`host_id`](Self::host_id).
    pub fn direct(mut self) -> Cluster {
        self.reach = Reach::Direct;
        self
    }

    /// The host directory this process meets its host's others in
    /// (SPEC.md §18.6); `None` when it reaches the cluster directly. With
    /// several shards, the directory that holds each shard's host directory
    /// (§19.4).
    pub fn host_directory(&self) -> Option<PathBuf> {
        match &self.reach {
            Reach::ThroughHost { directory, .. } => {
                let parent = directory.clone().unwrap_or_else(default_directory);
                let cluster = parent.join(format!("{HOST_DIRECTORY_PREFIX}{}", self.etcd.cluster));
                let shard = self.etcd.shard;
                Some(if shard.count() == ShardCount::ONE {
                    cluster
                } else {
                    cluster.join(format!("shard-{}-of-{}", shard.index(), shard.count()))
                })
            }
            Reach::Direct => None,
        }
    }

    /// This cluster as the client of one of its shards sees it (SPEC.md
    /// §19.4): its election is that shard's term, and its host directory
    /// that shard's.
    pub(crate) fn for_shard(&self, shard: Shard) -> Cluster {
        let mut cluster = self.clone();
        cluster.etcd.shard = shard;
        cluster
    }

    /// One cluster per shard, each [`for_shard`](Self::for_shard): the
    /// places this process takes part in. A count out of range gives the
    /// one cluster, whose check reports the count (§19.1).
    pub(crate) fn each_shard(&self) -> Vec<Cluster> {
        match self.shards {
            Ok(count) if count != ShardCount::ONE => {
                count.shards().map(|shard| self.for_shard(shard)).collect()
            }
            _ => vec![self.clone()],
        }
    }

    fn host_choice(&self) -> HostChoice {
        match &self.reach {
            Reach::ThroughHost { host, .. } => host.clone(),
            Reach::Direct => HostChoice::Kept,
        }
    }

    /// Where this process meets the cluster: its host directory, or the
    /// cluster itself when it reaches it directly (SPEC.md §18.6).
    pub(crate) fn place(self) -> Place {
        match self.host_directory() {
            Some(path) => {
                let host = self.host_choice();
                let first = self
                    .etcd
                    .shard
                    .count()
                    .shard(0)
                    .expect("every count has a first");
                let keeps_id = self
                    .for_shard(first)
                    .host_directory()
                    .expect("a shard of a host's cluster has a host directory");
                Place::Tiered(Box::new(Tiered::new(
                    Directory::new(&path),
                    self,
                    host,
                    Directory::new(&keeps_id),
                )))
            }
            None => Place::Cluster(Box::new(self)),
        }
    }

    /// Checks what can be checked of the configuration without etcd or a
    /// port (SPEC.md §18.6): the certificates load, the name is one a
    /// cluster may have, and there is an address to advertise. A process
    /// of a host checks it when it opens, although only its host's
    /// coordinator uses it, so that a mistake is an error at once and not a
    /// host coordinator that retries for ever.
    pub(crate) fn check(&self) -> Result<(), BackendError> {
        self.shards
            .map_err(|error| BackendError::new(ClusterError::Shards(error)))?;
        let security = self.security().map_err(BackendError::new)?;
        if self.advertise.is_none() && self.listen.ip().is_unspecified() {
            return Err(BackendError::new(ClusterError::NothingToAdvertise {
                listen: self.listen,
            }));
        }
        etcd::check_options(&self.etcd_options(&security)).map_err(BackendError::new)?;
        TcpTransport::client(&security)
            .map(drop)
            .map_err(|error| BackendError::new(ClusterError::from(error)))
    }

    /// Where this process listens when it coordinates; port 0 picks a free
    /// port, which is the one advertised.
    pub fn listen(mut self, address: SocketAddr) -> Cluster {
        self.listen = address;
        self
    }

    /// The `host:port` clients connect to when this process coordinates
    /// (its certificate must be valid for the host); the listen address by
    /// default.
    pub fn advertise(mut self, address: impl Into<String>) -> Cluster {
        self.advertise = Some(address.into());
        self
    }

    /// Mutual TLS (SPEC.md §14.5): the cluster's CA, and this process's
    /// certificate and key, PEM files, read again while the process runs:
    /// new connections use renewed files, a file that does not load leaves
    /// the last good set in use and is logged. etcd over `https://` uses
    /// them too unless [`etcd_tls`](Self::etcd_tls) or
    /// [`etcd_ca`](Self::etcd_ca) gives others.
    pub fn tls(
        mut self,
        ca: impl Into<PathBuf>,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Cluster {
        self.security = Some(Security::Tls {
            ca: ca.into(),
            certificate: certificate.into(),
            key: key.into(),
            crls: Vec::new(),
        });
        self
    }

    /// A PEM file of certificate revocation lists (blocks `BEGIN X509 CRL`)
    /// of the cluster's CA: a process whose certificate one lists is
    /// refused at the handshake, as a client and as a coordinator (SPEC.md
    /// §14.5). Give one call for each file; each is read again while the
    /// process runs, as the [`tls`](Self::tls) files are. Needs `tls`.
    pub fn crl(mut self, path: impl Into<PathBuf>) -> Cluster {
        self.crls.push(path.into());
        self
    }

    /// Each certificate file this process uses — its certificate and the
    /// CA of [`tls`](Self::tls), then etcd's own of
    /// [`etcd_tls`](Self::etcd_tls) or [`etcd_ca`](Self::etcd_ca) when
    /// they are others — and when the certificates in it expire (the
    /// earliest of them; RFC 3339 in UTC, `2026-03-01T12:00:00Z`), read from
    /// the files now (SPEC.md §13.5). Empty without TLS.
    pub fn certificate_expiries(&self) -> Vec<(PathBuf, Result<String, BackendError>)> {
        let mut files: Vec<&PathBuf> = Vec::new();
        if let Some(Security::Tls {
            ca, certificate, ..
        }) = &self.security
        {
            files.extend([certificate, ca]);
        }
        if let Some(etcd) = &self.etcd_tls {
            files.extend(etcd.identity.as_ref().map(|(certificate, _)| certificate));
            files.push(&etcd.ca);
        }
        let mut seen = std::collections::BTreeSet::new();
        files
            .into_iter()
            .filter(|file| seen.insert(*file))
            .map(|file| {
                let expiry = certificate_expiry(file)
                    .map(|not_after| rfc3339(not_after.as_secs()))
                    .map_err(BackendError::new);
                (file.clone(), expiry)
            })
            .collect()
    }

    /// Other certificates for etcd's `https://` endpoints: the CA that
    /// signed the members', and the certificate and key this process
    /// presents to them (whose common name etcd takes for its user when
    /// its authentication is on, SPEC.md §14.9).
    pub fn etcd_tls(
        mut self,
        ca: impl Into<PathBuf>,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Cluster {
        self.etcd_tls = Some(EtcdTls {
            ca: ca.into(),
            identity: Some((certificate.into(), key.into())),
        });
        self
    }

    /// The CA that signed the certificates of etcd's `https://` members,
    /// and no certificate of this process for them: for an etcd that
    /// checks its clients by user and password
    /// ([`etcd_user`](Self::etcd_user)) instead (SPEC.md §14.9). Replaces
    /// [`etcd_tls`](Self::etcd_tls).
    pub fn etcd_ca(mut self, ca: impl Into<PathBuf>) -> Cluster {
        self.etcd_tls = Some(EtcdTls {
            ca: ca.into(),
            identity: None,
        });
        self
    }

    /// The etcd user this process authenticates as, when etcd has
    /// authentication on (SPEC.md §14.9), and the file that holds its
    /// password (without one trailing newline). The file is read when the
    /// cluster is opened, which fails naming it when it cannot be read or
    /// is empty, and fails naming the user when etcd refuses the password.
    ///
    /// A file rather than the password: a password in the program's
    /// configuration ends up in its logs and its `Debug` output (this
    /// `Cluster` derives it), and the command line takes the same file
    /// (`--etcd-password-file`) because `ps` shows every argument. A
    /// program that holds the password in memory writes it to a file of
    /// mode 0600, or to a memory file system.
    pub fn etcd_user(
        mut self,
        name: impl Into<String>,
        password_file: impl Into<PathBuf>,
    ) -> Cluster {
        self.etcd.user = Some(EtcdUser {
            name: name.into(),
            password_file: password_file.into(),
        });
        self
    }

    /// Plain TCP, allowed on loopback only (SPEC.md §14.5).
    pub fn insecure(mut self) -> Cluster {
        self.security = Some(Security::Insecure);
        self
    }

    /// The lease TTL (SPEC.md §14.2), at least [`MIN_TTL`](Self::MIN_TTL);
    /// 5 s by default.
    pub fn ttl(mut self, ttl: Duration) -> Cluster {
        self.etcd.ttl = ttl;
        self
    }

    /// The first part of every etcd key (SPEC.md §14.1); `single-flight`
    /// by default.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Cluster {
        self.etcd.prefix = prefix.into();
        self
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.etcd.cluster
    }

    /// The etcd endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.etcd.endpoints
    }

    /// The cluster as the host coordinator of `host` opens it (SPEC.md
    /// §18.1): a shard's host key names the host, not the process's
    /// address (§19.3).
    pub(crate) fn relaying_for(mut self, host: &HostId) -> Cluster {
        self.etcd.host = Some(host.as_str().to_owned());
        self
    }

    /// What this process advertises with `transport`'s real port.
    fn advertised(&self, transport: &TcpTransport) -> String {
        match &self.advertise {
            Some(address) => address.clone(),
            None => transport.local_address().to_string(),
        }
    }

    /// The etcd options with etcd's TLS files: those given for etcd, or
    /// else the cluster's own.
    fn etcd_options(&self, security: &Security) -> EtcdOptions {
        let mut etcd = self.etcd.clone();
        etcd.tls = self.etcd_tls.clone().or(match security {
            Security::Tls {
                ca,
                certificate,
                key,
                ..
            } => Some(EtcdTls {
                ca: ca.clone(),
                identity: Some((certificate.clone(), key.clone())),
            }),
            Security::Insecure => None,
        });
        etcd
    }

    /// The TLS files with the revocation lists, or plain TCP.
    fn security(&self) -> Result<Security, ClusterError> {
        let mut security = self.security.clone().ok_or(ClusterError::NoSecurity)?;
        match &mut security {
            Security::Tls { crls, .. } => crls.clone_from(&self.crls),
            Security::Insecure if !self.crls.is_empty() => {
                return Err(ClusterError::CrlWithoutTls);
            }
            Security::Insecure => {}
        }
        Ok(security)
    }

    /// Loads the certificates, binds the listen port once to learn it, and
    /// connects to etcd.
    async fn connect(&self) -> Result<(EtcdElection, TcpTransport), ClusterError> {
        let security = self.security()?;
        if self.advertise.is_none() && self.listen.ip().is_unspecified() {
            return Err(ClusterError::NothingToAdvertise {
                listen: self.listen,
            });
        }
        let transport = TcpTransport::new(TcpOptions {
            listen: self.listen,
            security: security.clone(),
        })?;
        let etcd = self.etcd_options(&security);
        let election = EtcdElection::connect(&etcd, self.advertised(&transport)).await?;
        Ok((election, transport))
    }
}

impl Backend for Cluster {
    type Election = EtcdElection;
    type Transport = TcpTransport;

    const GRACE_WINDOW: Duration = DEFAULT_CLUSTER_GRACE_WINDOW;
    const POLL_INTERVAL: Duration = CLUSTER_POLL_INTERVAL;

    /// etcd paces the cluster's attempts itself (`CLUSTER_POLL_INTERVAL`);
    /// the poll interval is the shell's.
    async fn open(&self, _: Duration) -> Result<(EtcdElection, TcpTransport), BackendError> {
        self.connect().await.map_err(BackendError::new)
    }

    /// The coordinator that the cluster's key names (SPEC.md §14.3), read
    /// by a client of etcd that only reads, and a transport that binds
    /// nothing (§13.5): `status` takes no lease and no port.
    async fn find(&self) -> Result<Option<(TcpTransport, String)>, BackendError> {
        let security = self.security().map_err(BackendError::new)?;
        let transport = TcpTransport::client(&security)
            .map_err(|error| BackendError::new(ClusterError::from(error)))?;
        let address = etcd::read_coordinator(&self.etcd_options(&security))
            .await
            .map_err(BackendError::new)?;
        Ok(address.map(|address| (transport, address)))
    }

    fn shown(address: &String) -> Option<String> {
        Some(address.clone())
    }

    fn describe(&self) -> String {
        self.to_string()
    }

    fn serving_at(&self, transport: &TcpTransport) -> String {
        self.advertised(transport)
    }

    /// A process that reaches the cluster directly relays for no host.
    type Upper = Cluster;

    fn above(&self) -> Option<&Cluster> {
        None
    }

    fn upper(&self) -> Result<Option<Upper<Cluster>>, BackendError> {
        Ok(None)
    }
}
