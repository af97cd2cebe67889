//! Why the cluster's election failed (SPEC.md §14.1–§14.6). Each message
//! says what to check.

use std::path::PathBuf;

use crate::protocol::Epoch;

use super::Permission;
use super::tls::EtcdTlsError;

/// Why a campaign in etcd failed or a term there ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// A cluster name that could reach into other clusters' keys (§14.1).
    #[error(
        "the cluster name {name:?} is not allowed: use 1 to 128 letters, digits, '.', '_' or '-' (SPEC.md §14.1)"
    )]
    ClusterName { name: String },
    /// No etcd member answers (§14.6).
    #[error(
        "cannot reach etcd at {endpoints}: {error}; check that the members run and that these URLs (--etcd, SINGLE_FLIGHT_ETCD) are right"
    )]
    EtcdUnreachable { endpoints: String, error: String },
    /// etcd did not answer a request in time or refused it: quorum lost,
    /// members unreachable (§14.6).
    #[error(
        "etcd at {endpoints} failed while {what}: {error}; if a majority of its members is down or cut off, service resumes when they are back"
    )]
    EtcdRequest {
        what: &'static str,
        endpoints: String,
        error: String,
    },
    /// `https://` endpoints without certificates.
    #[error(
        "the etcd endpoints {endpoints} use https, but no CA, certificate and key were given; give --tls-ca, --tls-cert and --tls-key, or etcd's own: --etcd-ca, with --etcd-cert and --etcd-key or with --etcd-user (SPEC.md §14.9)"
    )]
    EtcdTlsMissing { endpoints: String },
    /// One of etcd's TLS files cannot be used (§14.5, §14.9).
    #[error(transparent)]
    EtcdTls(#[from] EtcdTlsError),
    /// The password file of `--etcd-user` cannot be used (§14.9).
    #[error(
        "cannot use {} as the password file of the etcd user {user:?}: {problem}; give --etcd-password-file (SINGLE_FLIGHT_ETCD_PASSWORD_FILE) a file this user can read that holds the password, with or without a trailing newline",
        path.display()
    )]
    EtcdPasswordFile {
        path: PathBuf,
        user: String,
        problem: String,
    },
    /// etcd refused the user's name or password (§14.9).
    #[error(
        "etcd at {endpoints} refused the user {user:?}: the password in {} is wrong or there is no such user ({error}); check --etcd-user and --etcd-password-file, or `etcdctl user get {user}`",
        password_file.display()
    )]
    EtcdAuthentication {
        user: String,
        endpoints: String,
        password_file: PathBuf,
        error: String,
    },
    /// etcd's access control denied a request (§14.9).
    #[error(
        "etcd at {endpoints} denied {who} {permission} permission on {keys} while {what}: single-flight needs readwrite on every key under {prefix} (`etcdctl role grant-permission --prefix=true ROLE readwrite {prefix}`, SPEC.md §14.9)"
    )]
    EtcdPermission {
        who: String,
        permission: Permission,
        keys: String,
        what: &'static str,
        endpoints: String,
        prefix: String,
    },
    /// etcd has authentication on, and this process named no user (§14.9).
    #[error(
        "etcd at {endpoints} has authentication on, and this process gave no user: give --etcd-user and --etcd-password-file, or an etcd client certificate whose common name is an etcd user (SPEC.md §14.9)"
    )]
    EtcdNoUser { endpoints: String },
    /// The epoch counter holds no epoch; the election fails closed (§14.1).
    #[error(
        "the etcd key {key} holds {value:?}, which is not an epoch: refusing to start a term, because a guess could reuse fencing tokens. Put into it a number larger than every epoch this cluster has used (a fencing token divided by 4294967296)"
    )]
    EtcdEpochCorrupt { key: String, value: String },
    /// The epoch counter reached the largest epoch (§6, §14.1).
    #[error(
        "the etcd key {key} holds {}, the largest epoch (SPEC.md §6): no further term can start in this cluster. Use a new cluster name, and reset the highest token that each fenced resource has stored",
        Epoch::MAX
    )]
    EtcdEpochExhausted { key: String },
    /// The cluster was first used with another number of shards than this
    /// process's (§19.2): never tried again.
    #[error(
        "cluster {cluster:?} has {kept} {} ({whence}); this process was configured with {configured} (--shards, SINGLE_FLIGHT_SHARDS, Cluster::shards): give it {kept}. The number cannot change while the cluster has keys (SPEC.md §19.2)",
        if *kept == 1 { "shard" } else { "shards" }
    )]
    EtcdShardCount {
        cluster: String,
        /// The number the cluster has.
        kept: u32,
        /// Where that number comes from.
        whence: String,
        /// This process's number.
        configured: u32,
    },
    /// The cluster's count of shards holds no count; every process fails
    /// closed (§19.2).
    #[error(
        "the etcd key {key} holds {value:?}, which is not a number of shards (the decimal digits of 1 to {max}): refusing to use the cluster, because a guess could send a key to two shards' coordinators. Put into it the number of shards this cluster's processes are configured with (--shards, SPEC.md §19.2)"
    )]
    EtcdShardsCorrupt {
        key: String,
        value: String,
        max: u32,
    },
    /// The term can no longer prove that its lease lives (§14.2).
    #[error(
        "the coordinator's lease on {key} can no longer be proven alive ({reason}); this term has ended"
    )]
    LeaseLost { key: String, reason: String },
}
