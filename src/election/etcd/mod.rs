//! The cluster election (SPEC.md §14.1–§14.3): a coordinator holds an etcd
//! lease and the key `<prefix>/<cluster>/coordinator`, whose value is the
//! address it advertises; each term's epoch is the counter
//! `<prefix>/<cluster>/epoch`, raised in the same transaction that wins the
//! key. The holder renews its lease and stops answering as soon as it can no
//! longer prove the lease alive (§14.2). In a cluster of several shards,
//! each election is one shard's, under keys of its own (`keys.rs`, §19.2);
//! every election checks the cluster's count of shards (`shards.rs`), and
//! a shard's campaign pauses longer on a host that coordinates others
//! (`spread.rs`, §19.3).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::Status;
use tracing::{debug, info, warn};

use client::{
    Client, ConnectError, Credentials, EventType, TxnRequest, TxnResponse, describe, response_op,
};
use keys::Keys;
use lease::Lease;
use proto::etcdserverpb::KeyValue;
use renew::{Proof, Reach, Renewals};
use retry::{Backoff, Jitter, with_retries};
use shards::Kept;

pub use error::EtcdError;
#[cfg(feature = "_internal")] // for the tests and harnesses only
pub use tls::{EtcdTlsError, EtcdTlsFile};

use super::{Election, Term, Warrant};
use crate::protocol::{Epoch, Shard};

#[doc(hidden)]
pub mod client;
mod error;
mod keys;
mod lease;
mod proto;
mod renew;
mod retry;
mod shards;
mod spread;
mod tls;

/// The lease a coordinator holds unless told otherwise (SPEC.md §14.2). It
/// bounds how long a dead coordinator's host keeps its key, hence the
/// failover after a host dies: 5 s keeps that within what a stampede's
/// callers wait anyway, while renewals every sixth of it (0.8 s) survive
/// an etcd leader election (about 1 s with etcd's defaults) without
/// stepping down.
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);

/// etcd grants no lease shorter than about twice its election timeout (2 s
/// with its defaults) and silently raises shorter ones; asking
/// for less would only make the granted TTL differ from the configured one.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// How long before the lease could expire a coordinator stops answering
/// (SPEC.md §14.2). It must cover the drift between this host's clock and
/// the etcd leader's over one TTL, the time between two checks of the
/// deadline, and scheduling delays of a loaded host; one second is two
/// orders of magnitude above the first two.
pub const STEP_DOWN_MARGIN: Duration = Duration::from_secs(1);

/// The default first part of every key, so that single-flight's keys are
/// found together in a shared etcd.
pub const DEFAULT_PREFIX: &str = "single-flight";

/// How long one attempt of a request to etcd may take. An attempt that
/// gets no answer in that time (quorum lost, every endpoint unreachable, an
/// etcd swamped by a stampede) fails, and is tried again for up to
/// [`REQUEST_PATIENCE`] (§14.6), so that calls end `Unavailable` instead of
/// hanging when etcd is gone.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a request to etcd is tried again while it fails transiently,
/// from its first attempt (SPEC.md §14.6). A thousand processes that start
/// at once on two cores make etcd answer late for seconds (their TLS
/// handshakes and reads queue behind each other; BENCHMARKS.md, "A thousand
/// processes"): a request that timed out then is worth another try, not an
/// `Unavailable` call. 20 s is several times the longest such congestion
/// measured, and bounds how long a call without a deadline waits for an
/// etcd that is really gone before it ends `Unavailable`; a call's deadline
/// ends it sooner.
pub const REQUEST_PATIENCE: Duration = Duration::from_secs(20);

/// The least of the window from which a process draws its pause before it
/// campaigns (§14.3). Every process that finds no coordinator would
/// otherwise campaign at once, a lease grant and a transaction each (two
/// raft writes) that all but one lose: a thousand processes of a stampede
/// made etcd answer so late that calls failed. Each process pauses
/// `window × √u` for a uniform `u` (the later of two random draws),
/// watching the coordinator key: the first to end its pause wins, and the
/// rest see its key put and campaign not at all. The square root makes
/// short pauses rare, so that few of n processes end theirs within the d
/// seconds one campaign takes (about n·((window/√n + d)/window)²), while a
/// lone process waits two thirds of the window on average. Half a second
/// is small beside a failover's TTL and grace window.
pub const CAMPAIGN_SPREAD: Duration = Duration::from_millis(500);

/// The window grows with how long etcd took to say that no coordinator
/// exists, this many times that: a loaded etcd makes a campaign slow (two
/// writes, each at least a read's time), and only a window well beyond a
/// campaign's duration keeps the processes that campaign together few.
const SPREAD_PER_READ: u32 = 10;

/// The widest window (§14.3): a lone process on a very slow etcd waits at
/// most this long before it campaigns, and a thousand that wake together
/// have their first pause over in a tenth of it.
pub const LONGEST_SPREAD: Duration = Duration::from_secs(4);

/// The window of a campaign's pause after a read of `read` found no
/// coordinator (§14.3).
fn campaign_window(read: Duration) -> Duration {
    (read * SPREAD_PER_READ).clamp(CAMPAIGN_SPREAD, LONGEST_SPREAD)
}

/// The longest cluster name, so that every key stays short.
pub const MAX_CLUSTER_NAME_BYTES: usize = 128;

/// How to reach etcd and what to elect (SPEC.md §14).
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// `http://host:port` or `https://host:port` URLs of the etcd members.
    pub endpoints: Vec<String>,
    /// The cluster's name: processes of one name share flights; others do
    /// not see them.
    pub cluster: String,
    /// The first part of every key; [`DEFAULT_PREFIX`] by default.
    pub prefix: String,
    /// The lease a coordinator asks for; at least [`MIN_TTL`].
    pub ttl: Duration,
    /// Certificates for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// The etcd user to authenticate as, if etcd has authentication on and
    /// does not know this process by its certificate (SPEC.md §14.9).
    pub user: Option<EtcdUser>,
    /// The shard whose term this election is for, and the cluster's number
    /// of shards (SPEC.md §19.2): [`Shard::ONLY`] for a cluster of one.
    pub shard: Shard,
    /// The host this process campaigns for, which the host key of a shard
    /// whose term it wins names (SPEC.md §19.3): the host id of a host
    /// coordinator; `None` for a process that reaches the cluster directly,
    /// whose host is the address it advertises.
    pub host: Option<String>,
}

/// The files for etcd over TLS: the CA that signed the members'
/// certificates, and this process's certificate and key, if it presents
/// one (without, etcd knows it by its user only, SPEC.md §14.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// An etcd user, and the file that holds its password (SPEC.md §14.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUser {
    pub name: String,
    pub password_file: PathBuf,
}

/// The longest password file read (SPEC.md §14.9): a password is a line;
/// a larger file is not one.
pub const MAX_PASSWORD_FILE_BYTES: u64 = 64 * 1024;

impl EtcdOptions {
    /// Options with the defaults for everything but the endpoints and the
    /// cluster's name.
    pub fn new(endpoints: Vec<String>, cluster: impl Into<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            cluster: cluster.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: DEFAULT_TTL,
            tls: None,
            user: None,
            shard: Shard::ONLY,
            host: None,
        }
    }
}

/// What a request needs of etcd's access control (SPEC.md §14.9), for the
/// error that says it was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    Read,
    Write,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Permission::Read => "read",
            Permission::Write => "write",
        })
    }
}

/// Why etcd refused a request for who sent it, not for the state of etcd
/// (SPEC.md §14.9): never tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// A wrong password or an unknown user.
    AuthenticationFailed,
    /// The user's roles do not grant the permission.
    PermissionDenied,
    /// etcd has authentication on and was given no user.
    NoUser,
}

/// etcd 3.4's answers for a refused user or request (SPEC.md §14.9).
fn refusal(error: &Status) -> Option<Refusal> {
    match error.code() {
        tonic::Code::PermissionDenied => Some(Refusal::PermissionDenied),
        tonic::Code::InvalidArgument if error.message().contains("authentication failed") => {
            Some(Refusal::AuthenticationFailed)
        }
        tonic::Code::InvalidArgument if error.message().contains("user name is empty") => {
            Some(Refusal::NoUser)
        }
        _ => None,
    }
}

/// Reads an etcd user's password (SPEC.md §14.9): the file's text without
/// one trailing newline; an empty, unreadable or oversized file, or one
/// that is not UTF-8, is refused naming it.
fn read_password(user: &EtcdUser) -> Result<String, EtcdError> {
    use std::io::Read;
    let refuse = |problem: String| EtcdError::EtcdPasswordFile {
        path: user.password_file.clone(),
        user: user.name.clone(),
        problem,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(&user.password_file)
        .and_then(|file| {
            file.take(MAX_PASSWORD_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(|error| refuse(error.to_string()))?;
    if bytes.len() as u64 > MAX_PASSWORD_FILE_BYTES {
        return Err(refuse(format!(
            "it is larger than {MAX_PASSWORD_FILE_BYTES} bytes, which no password is"
        )));
    }
    password_from(bytes).map_err(|problem| refuse(problem.to_owned()))
}

/// The password a file's bytes hold: without one trailing newline (`\n`
/// or `\r\n`), as `echo` and editors leave it.
fn password_from(mut bytes: Vec<u8>) -> Result<String, &'static str> {
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err("it is empty");
    }
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text")
}

/// [`Election`] of one cluster's coordinator through etcd.
pub struct EtcdElection {
    client: Client,
    /// How the term's renewals reach etcd over their own connection.
    reach: Reach,
    /// The randomness of the pauses: of the campaign (§14.3) and of the
    /// retries (§14.6).
    jitter: Jitter,
    keys: Keys,
    endpoints: String,
    ttl: Duration,
    /// The address this process advertises when it coordinates.
    advertise: String,
    /// The host a shard's host key names when this process holds its term
    /// (SPEC.md §19.3).
    host: String,
    /// Whether a read found the cluster's count of shards this process's
    /// own (or none yet), which it reads before its first discovery
    /// (SPEC.md §19.2).
    counted: bool,
    /// Who etcd knows this process as, for the errors of its access
    /// control (SPEC.md §14.9).
    user: Option<EtcdUser>,
    /// The coordinator key's create revision and the revision of the answer
    /// that last reported it, for [`Election::coordinator_gone`].
    seen: Option<(i64, i64)>,
    /// The revision of the last read that found no coordinator key, and
    /// how long that read took, for the campaign that follows it.
    absent: Option<(i64, Duration)>,
}

impl std::fmt::Debug for EtcdElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdElection")
            .field("keys", &self.keys)
            .field("endpoints", &self.endpoints)
            .field("advertise", &self.advertise)
            .finish_non_exhaustive()
    }
}

/// Checks a cluster name: letters, digits, `.`, `_` and `-`, so that it can
/// never reach into another cluster's keys.
fn check_cluster_name(name: &str) -> Result<(), EtcdError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_CLUSTER_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(EtcdError::ClusterName {
            name: name.to_owned(),
        })
    }
}

/// A client of one cluster's etcd, and what it was made from.
struct Connected {
    client: Client,
    tls: Option<EtcdTls>,
    credentials: Option<Credentials>,
    keys: Keys,
    /// The endpoints, for messages.
    endpoints: String,
}

impl Connected {
    /// Checks the options, reads the TLS files (the client reads them again
    /// while it lives, SPEC.md §14.5) and the password, and makes a client,
    /// which connects lazily.
    fn new(options: &EtcdOptions) -> Result<Connected, EtcdError> {
        check_cluster_name(&options.cluster)?;
        let endpoints = options.endpoints.join(",");
        if options.endpoints.is_empty() {
            return Err(EtcdError::EtcdUnreachable {
                endpoints,
                error: "no endpoint was given".to_owned(),
            });
        }
        let mut tls = None;
        if options.endpoints.iter().any(|e| e.starts_with("https://")) {
            let Some(files) = &options.tls else {
                return Err(EtcdError::EtcdTlsMissing { endpoints });
            };
            tls = Some(files.clone());
        }
        let credentials = match &options.user {
            Some(user) => Some(Credentials {
                user: user.name.clone(),
                password: read_password(user)?,
            }),
            None => None,
        };
        let mut client = Client::connect_with(&options.endpoints, tls.as_ref(), REQUEST_TIMEOUT)
            .map_err(|error| match error {
                ConnectError::Tls(error) => EtcdError::EtcdTls(error),
                ConnectError::Endpoints(error) => EtcdError::EtcdUnreachable {
                    endpoints: endpoints.clone(),
                    error,
                },
            })?;
        if let Some(credentials) = credentials.clone() {
            client = client.authenticated_as(credentials);
        }
        Ok(Connected {
            client,
            tls,
            credentials,
            keys: Keys::new(options),
            endpoints,
        })
    }
}

/// Checks `options` as connecting would, without a request to etcd: the
/// cluster's name, the endpoints, etcd's TLS files and the password file
/// (SPEC.md §18.6). Needs a Tokio runtime, as the client it makes and drops
/// does.
pub fn check_options(options: &EtcdOptions) -> Result<(), EtcdError> {
    Connected::new(options).map(drop)
}

/// The address of the coordinator that the cluster's key names, read once
/// by a client that only reads (SPEC.md §13.5): no lease, no campaign, no
/// watch, so that `status` needs only read permission (§14.9) and leaves
/// nothing behind. `None` when no coordinator holds the key.
pub async fn read_coordinator(options: &EtcdOptions) -> Result<Option<String>, EtcdError> {
    let Connected {
        client,
        keys,
        endpoints,
        ..
    } = Connected::new(options)?;
    let reader = Reader {
        client: &client,
        keys: &keys,
        user: &options.user,
        endpoints: &endpoints,
    };
    let (found, _) = reader.coordinator_and_count(&mut Jitter::from_os()).await?;
    Ok(found.map(|found| String::from_utf8_lossy(&found.value).into_owned()))
}

/// What the first read of a process is doing, for its messages.
const COUNTING: &str = "reading the coordinator key and the cluster's count of shards";

/// What a read of etcd needs: the client, the keys, and who etcd knows
/// this process as, for the errors (SPEC.md §14.9).
struct Reader<'a> {
    client: &'a Client,
    keys: &'a Keys,
    user: &'a Option<EtcdUser>,
    endpoints: &'a str,
}

impl Reader<'_> {
    /// Reads the coordinator key with the cluster's count of shards, in
    /// one read-only transaction, and checks the count (SPEC.md §19.2): the
    /// read before a process's first discovery, and `status`'s. Writes
    /// nothing. The key, if it exists, and the revision of the read.
    async fn coordinator_and_count(
        &self,
        jitter: &mut Jitter,
    ) -> Result<(Option<KeyValue>, i64), EtcdError> {
        let keys = self.keys;
        let txn = TxnRequest {
            compare: Vec::new(),
            success: vec![
                client::range_op(keys.coordinator.clone()),
                client::range_op(keys.shards.clone()),
                client::range_op(keys.unsharded_epoch.clone()),
            ],
            failure: Vec::new(),
        };
        let answer = with_retries(self.client, jitter, COUNTING, |client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(|error| {
            let access = (
                Permission::Read,
                format!(
                    "the keys {}, {} and {}",
                    keys.coordinator, keys.shards, keys.unsharded_epoch
                ),
            );
            refused(self.user, self.endpoints, keys, COUNTING, access, error)
        })?;
        let [coordinator, shards, epoch] = ranges(&answer);
        Kept::read(
            keys,
            shards.map(|kv| (&kv.value[..], kv.mod_revision)),
            epoch.is_some(),
        )?
        .admits(keys, keys.shard.count())?;
        let revision = answer.header.map_or(0, |header| header.revision);
        Ok((coordinator.cloned(), revision))
    }
}

/// The first key that each of a transaction's first `N` reads found.
fn ranges<const N: usize>(answer: &TxnResponse) -> [Option<&KeyValue>; N] {
    std::array::from_fn(|index| {
        answer
            .responses
            .get(index)
            .and_then(|answer| match &answer.response {
                Some(response_op::Response::ResponseRange(range)) => range.kvs.first(),
                _ => None,
            })
    })
}

impl EtcdElection {
    /// Connects to etcd. `advertise` is the address clients will be told to
    /// connect to when this process coordinates.
    pub async fn connect(
        options: &EtcdOptions,
        advertise: String,
    ) -> Result<EtcdElection, EtcdError> {
        let Connected {
            client,
            tls,
            credentials,
            keys,
            endpoints,
        } = Connected::new(options)?;
        let mut jitter = Jitter::from_os();
        // §14.9: a wrong password fails the opening, not a later call.
        if options.user.is_some() {
            with_retries(
                &client,
                &mut jitter,
                "authenticating",
                |client| async move { client.authenticate().await },
            )
            .await
            .map_err(|error| {
                let access = (Permission::Read, keys.base().to_owned());
                refused(
                    &options.user,
                    &endpoints,
                    &keys,
                    "authenticating",
                    access,
                    error,
                )
            })?;
        }
        Ok(EtcdElection {
            client,
            reach: Reach {
                endpoints: options.endpoints.clone(),
                tls,
                credentials,
            },
            jitter,
            keys,
            user: options.user.clone(),
            endpoints,
            ttl: options.ttl.max(MIN_TTL),
            host: options
                .host
                .clone()
                .unwrap_or_else(|| spread::direct_host(&advertise).to_owned()),
            advertise,
            counted: false,
            seen: None,
            absent: None,
        })
    }

    /// The key that names the coordinator (SPEC.md §14.1).
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub fn coordinator_key(&self) -> &str {
        &self.keys.coordinator
    }

    /// The key that holds the last epoch (SPEC.md §14.1).
    #[cfg(feature = "_internal")] // for the tests and harnesses only
    pub fn epoch_key(&self) -> &str {
        &self.keys.epoch
    }

    /// The error of a request for `what`, which needs `permission` on the
    /// cluster's keys.
    fn request_failed(
        &self,
        what: &'static str,
        access: (Permission, String),
        error: Status,
    ) -> EtcdError {
        refused(&self.user, &self.endpoints, &self.keys, what, access, error)
    }
}

/// The error of a request for `what` that etcd refused or did not answer:
/// for a refusal of the user or of a permission, one that names the user,
/// the keys and the permission (SPEC.md §14.9).
fn refused(
    user: &Option<EtcdUser>,
    endpoints: &str,
    keys: &Keys,
    what: &'static str,
    (permission, keys_needed): (Permission, String),
    error: Status,
) -> EtcdError {
    let who = match user {
        Some(user) => format!("the user {:?}", user.name),
        None => "the user named by this process's etcd certificate (its common name)".to_owned(),
    };
    match (refusal(&error), user) {
        (Some(Refusal::AuthenticationFailed), Some(user)) => EtcdError::EtcdAuthentication {
            user: user.name.clone(),
            endpoints: endpoints.to_owned(),
            password_file: user.password_file.clone(),
            error: describe(&error),
        },
        (Some(Refusal::PermissionDenied), _) => EtcdError::EtcdPermission {
            who,
            permission,
            keys: keys_needed,
            what,
            endpoints: endpoints.to_owned(),
            prefix: keys.base().to_owned(),
        },
        (Some(Refusal::NoUser), None) => EtcdError::EtcdNoUser {
            endpoints: endpoints.to_owned(),
        },
        _ => EtcdError::EtcdRequest {
            what,
            endpoints: endpoints.to_owned(),
            error: describe(&error),
        },
    }
}

/// Parses the epoch counter (SPEC.md §14.1): a decimal number of an epoch,
/// or fails closed naming the key.
fn parse_epoch(key: &str, value: &[u8]) -> Result<Epoch, EtcdError> {
    std::str::from_utf8(value)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .and_then(Epoch::new)
        .ok_or_else(|| EtcdError::EtcdEpochCorrupt {
            key: key.to_owned(),
            value: String::from_utf8_lossy(&value[..value.len().min(64)]).into_owned(),
        })
}

/// The keys of a cluster as one read found them (SPEC.md §14.1).
struct Found {
    coordinator: Option<KeyValue>,
    epoch: Option<KeyValue>,
    /// The cluster's count of shards, this process's own (§19.2).
    kept: Kept,
    /// How many other shards this process's host coordinates (§19.3); 0
    /// with one shard.
    held: u32,
    /// The revision of the read.
    revision: i64,
}

impl EtcdElection {
    /// Reads every key of the cluster in one request: the coordinator key
    /// and the epoch of this election's shard (and its clean key, unused
    /// here), the cluster's count of shards, which it checks (§19.2), and
    /// with more than one shard the other shards' host keys (§19.3).
    async fn read_keys(&mut self, what: &'static str) -> Result<Found, EtcdError> {
        let base = self.keys.base().to_owned();
        let answer = with_retries(&self.client, &mut self.jitter, what, |client| {
            let base = base.clone();
            async move { client.get_prefix(base).await }
        })
        .await
        .map_err(|error| {
            let range = format!("the range of every key under {base}");
            self.request_failed(what, (Permission::Read, range), error)
        })?;
        let find = |key: &str| {
            answer
                .kvs
                .iter()
                .find(|kv| kv.key == key.as_bytes())
                .cloned()
        };
        let shards = find(&self.keys.shards);
        let kept = Kept::read(
            &self.keys,
            shards.as_ref().map(|kv| (&kv.value[..], kv.mod_revision)),
            find(&self.keys.unsharded_epoch).is_some(),
        )?;
        kept.admits(&self.keys, self.keys.shard.count())?;
        let held = if self.keys.host.is_some() {
            let found = answer.kvs.iter().map(|kv| (&kv.key[..], &kv.value[..]));
            spread::held(&self.keys, found, &self.host)
        } else {
            0
        };
        Ok(Found {
            coordinator: find(&self.keys.coordinator),
            epoch: find(&self.keys.epoch),
            kept,
            held,
            revision: answer.header.as_ref().map_or(0, |header| header.revision),
        })
    }

    /// Records this process's count of shards as the cluster's, unless
    /// another process recorded one or a term was served meanwhile
    /// (SPEC.md §19.2): a transaction that puts `P shards` only while
    /// neither it nor `P epoch` exists, and otherwise reads both, whose
    /// count is checked as every read's. The revision of `P shards`' last
    /// modification, for the campaign's transaction to compare. An attempt
    /// that was applied though its answer was lost is told by its failure
    /// branch, which then finds this process's own count.
    async fn record_count(&mut self) -> Result<i64, EtcdError> {
        let what = "recording the cluster's count of shards";
        let count = self.keys.shard.count().to_string();
        let txn = TxnRequest {
            compare: vec![
                client::create_revision_is(self.keys.shards.clone(), 0),
                client::create_revision_is(self.keys.unsharded_epoch.clone(), 0),
            ],
            success: vec![client::put_op(self.keys.shards.clone(), count.clone(), 0)],
            failure: vec![
                client::range_op(self.keys.shards.clone()),
                client::range_op(self.keys.unsharded_epoch.clone()),
            ],
        };
        let answer = with_retries(&self.client, &mut self.jitter, what, |client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(|error| {
            let access = (Permission::Write, format!("the key {}", self.keys.shards));
            self.request_failed(what, access, error)
        })?;
        if answer.succeeded {
            info!(key = %self.keys.shards, %count, "recorded the cluster's count of shards (SPEC.md §19.2)");
            return Ok(answer.header.map_or(0, |header| header.revision));
        }
        let [shards, epoch] = ranges(&answer);
        let kept = Kept::read(
            &self.keys,
            shards.map(|kv| (&kv.value[..], kv.mod_revision)),
            epoch.is_some(),
        )?;
        kept.admits(&self.keys, self.keys.shard.count())?;
        Ok(kept.revision())
    }

    /// Whether the coordinator key is put within `pause`, by a watch from
    /// the revision after `read`; the pause whole when the watch cannot be
    /// had (§14.3).
    async fn put_within(&self, pause: Duration, read: i64) -> bool {
        let client = self.client.clone();
        let key = self.keys.coordinator.clone();
        let put = async move {
            if let Ok(mut watch) = client.watch(key, read + 1).await {
                while let Ok(Some(answer)) = watch.message().await {
                    if answer
                        .events
                        .iter()
                        .any(|event| event.r#type() == EventType::Put)
                    {
                        return;
                    }
                    if answer.canceled {
                        break;
                    }
                }
            }
            // No watch: the re-read after the pause tells.
            std::future::pending::<()>().await
        };
        tokio::time::timeout(pause, put).await.is_ok()
    }
}

impl Election for EtcdElection {
    type Error = EtcdError;
    /// The `host:port` a coordinator advertises.
    type Address = String;
    type Term = EtcdTerm;

    async fn coordinator(&mut self) -> Result<Option<String>, EtcdError> {
        let started = Instant::now();
        self.absent = None;
        let (found, revision) = if self.counted {
            let key = self.keys.coordinator.clone();
            let answer = with_retries(
                &self.client,
                &mut self.jitter,
                "reading the coordinator key",
                |client| {
                    let key = key.clone();
                    async move { client.get(key).await }
                },
            )
            .await
            .map_err(|error| {
                let access = (Permission::Read, format!("the key {key}"));
                self.request_failed("reading the coordinator key", access, error)
            })?;
            let revision = answer.header.map_or(0, |header| header.revision);
            (answer.kvs.into_iter().next(), revision)
        } else {
            // §19.2: the first read also reads the cluster's count of
            // shards, in the same request, and a process of another count
            // goes no further.
            let reader = Reader {
                client: &self.client,
                keys: &self.keys,
                user: &self.user,
                endpoints: &self.endpoints,
            };
            let read = reader.coordinator_and_count(&mut self.jitter).await?;
            self.counted = true;
            read
        };
        let Some(found) = found else {
            self.seen = None;
            self.absent = Some((revision, started.elapsed()));
            return Ok(None);
        };
        self.seen = Some((found.create_revision, revision));
        Ok(Some(String::from_utf8_lossy(&found.value).into_owned()))
    }

    async fn campaign(&mut self) -> Result<Option<EtcdTerm>, EtcdError> {
        // A campaign right after a read that found no coordinator key goes
        // on from that read. Others come from processes that could not
        // reach a coordinator whose key still lives: one read, no lease.
        let sharded = self.keys.host.is_some();
        let (mut read_at, read_took, held) = match self.absent.take() {
            // §19.3: with shards, the pause depends on how many other
            // shards this host coordinates, which the read of the
            // coordinator key alone did not say.
            Some((revision, took)) if sharded => {
                let found = self.read_keys("reading the cluster's keys").await?;
                if found.coordinator.is_some() {
                    return Ok(None);
                }
                (revision, took, found.held)
            }
            Some((revision, took)) => (revision, took, 0),
            None => {
                let started = Instant::now();
                let found = self.read_keys("reading the coordinator key").await?;
                if found.coordinator.is_some() {
                    return Ok(None);
                }
                (found.revision, started.elapsed(), found.held)
            }
        };
        // §14.3: a pause, so that one process of a stampede campaigns and
        // the rest see its key put; then a read again. §19.3: a window
        // more for each other shard this host coordinates, and again for
        // each it won meanwhile.
        let window = campaign_window(read_took);
        let mut pause = spread::first_pause(window, held, self.jitter.fraction());
        let mut paused_for = held;
        let found = loop {
            if self.put_within(pause, read_at).await {
                debug!(
                    ?pause,
                    "another process took the coordinator key during the pause"
                );
                return Ok(None);
            }
            let found = self.read_keys("reading the coordinator key").await?;
            if found.coordinator.is_some() {
                return Ok(None);
            }
            // At most once per other shard: `held` only grows here.
            match spread::further_pause(window, paused_for, found.held) {
                Some(more) => {
                    debug!(
                        held = found.held,
                        ?more,
                        "this host won other shards during the pause; pausing again (SPEC.md §19.3)"
                    );
                    (pause, paused_for, read_at) = (more, found.held, found.revision);
                }
                None => break found,
            }
        };
        // §19.2: the first campaign of a sharded cluster records its count;
        // a cluster of one needs no record (its epoch key says it).
        let shards_revision = match found.kept {
            Kept::Unrecorded if sharded => self.record_count().await?,
            kept => kept.revision(),
        };
        let epoch_key = self.keys.epoch.clone();
        let (last, last_revision) = match &found.epoch {
            Some(kv) => (Some(parse_epoch(&epoch_key, &kv.value)?), kv.mod_revision),
            None => (None, 0),
        };
        let epoch = match last {
            None => Epoch::FIRST,
            Some(last) => last
                .next()
                .ok_or(EtcdError::EtcdEpochExhausted { key: epoch_key })?,
        };
        // The lease is proven from the moment its grant was sent (§14.2):
        // the attempt that got it, when the grant was tried again.
        let mut sent = Instant::now();
        let ttl = self.ttl.as_secs() as i64;
        let (lease, granted) = with_retries(
            &self.client,
            &mut self.jitter,
            "granting a lease",
            |client| {
                sent = Instant::now();
                async move { client.lease_grant(ttl).await }
            },
        )
        .await
        .map_err(|error| {
            let access = (
                Permission::Write,
                format!("the key {}", self.keys.coordinator),
            );
            self.request_failed("granting a lease", access, error)
        })?;
        let granted = Duration::from_secs(granted.max(0) as u64);
        // §14.1: the key is won and the epoch raised in one transaction, which
        // succeeds only if nobody holds the key and nobody raised the epoch
        // since it was read; so epochs strictly increase across terms. Its
        // failure branch reads the key: an attempt that etcd applied but
        // whose answer was lost shows the key under this lease (§14.6).
        // §19.2: nor if the count of shards changed since it was read (a
        // process of more shards recorded its count first).
        let mut success = vec![
            client::put_op(self.keys.coordinator.clone(), self.advertise.clone(), lease),
            client::put_op(self.keys.epoch.clone(), epoch.to_string(), 0),
            client::delete_op(self.keys.clean.clone()),
        ];
        // §19.3: the shard's host key goes with the term's lease.
        if let Some(host_key) = &self.keys.host {
            success.push(client::put_op(host_key.clone(), self.host.clone(), lease));
        }
        let txn = TxnRequest {
            compare: vec![
                client::create_revision_is(self.keys.coordinator.clone(), 0),
                client::mod_revision_is(self.keys.epoch.clone(), last_revision),
                client::mod_revision_is(self.keys.shards.clone(), shards_revision),
            ],
            success,
            failure: vec![client::range_op(self.keys.coordinator.clone())],
        };
        let won = with_retries(&self.client, &mut self.jitter, "campaigning", |client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await;
        let won = match won {
            Ok(won) => won,
            Err(error) => {
                // Whether the transaction was applied is unknown: the lease
                // is revoked, which removes the key if it was.
                revoke_later(self.client.clone(), lease);
                let keys = match &self.keys.host {
                    None => format!(
                        "the keys {}, {} and {}",
                        self.keys.coordinator, self.keys.epoch, self.keys.clean
                    ),
                    Some(host) => format!(
                        "the keys {}, {}, {} and {host}",
                        self.keys.coordinator, self.keys.epoch, self.keys.clean
                    ),
                };
                return Err(self.request_failed("campaigning", (Permission::Write, keys), error));
            }
        };
        let (revision, was_clean) = if won.succeeded {
            let was_clean = won.responses.iter().any(|answer| {
                matches!(&answer.response,
                    Some(response_op::Response::ResponseDeleteRange(deleted)) if deleted.deleted > 0)
            });
            (won.header.map_or(0, |header| header.revision), was_clean)
        } else {
            let holder = won
                .responses
                .iter()
                .find_map(|answer| match &answer.response {
                    Some(response_op::Response::ResponseRange(range)) => range.kvs.first().cloned(),
                    _ => None,
                });
            match holder {
                // An earlier attempt won. Whether it deleted a clean key is
                // not known: the term opens a grace window (§10.2), which
                // costs a wait at most.
                Some(kv) if kv.lease == lease => {
                    info!("an attempt of the campaign that seemed to fail had won it");
                    (kv.create_revision, false)
                }
                _ => {
                    debug!("another process won the campaign");
                    revoke_later(self.client.clone(), lease);
                    return Ok(None);
                }
            }
        };
        let proof = Proof::new(Lease::granted(sent, granted));
        let (renewals, mut renewed) = renew::start(
            self.reach.clone(),
            self.client.clone(),
            lease,
            granted,
            proof.clone(),
        );
        info!(%epoch, key = %self.keys.coordinator, advertise = %self.advertise, ttl = ?granted, "won the coordinator's key");
        // A campaign slowed by a loaded etcd can win a lease whose proof is
        // nearly spent, and a term that served now would end at its first
        // check, its key revoked and a new campaign begun. The term waits
        // for its first renewal, sent at once, instead (§14.2), as long as
        // a request is tried; a term still unproven then ends at its first
        // check.
        let proven = async {
            while proof
                .left(Instant::now())
                .is_none_or(|left| left < granted / 3)
            {
                if proof.lost().is_some() || renewed.changed().await.is_err() {
                    break;
                }
            }
        };
        if tokio::time::timeout(REQUEST_PATIENCE, proven)
            .await
            .is_err()
        {
            warn!(
                "no renewal of the new term's lease succeeded; the term ends unproven (SPEC.md §14.2)"
            );
        }
        Ok(Some(EtcdTerm {
            client: self.client.clone(),
            keys: self.keys.clone(),
            epoch,
            lease,
            revision,
            follows_failover: !(epoch == Epoch::FIRST || was_clean),
            proof,
            renewals,
        }))
    }

    /// §13.5, §14.6: a request that etcd did not answer or refused for
    /// want of a quorum; a damaged epoch key or a bad name is not one.
    fn is_outage(error: &EtcdError) -> bool {
        matches!(error, EtcdError::EtcdRequest { .. })
    }

    // The coordinator key is watched (§14.3).
    const TELLS_GONE: bool = true;

    fn coordinator_gone(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let client = self.client.clone();
        let key = self.keys.coordinator.clone();
        let seen = self.seen;
        let mut jitter = self.jitter.fork();
        async move {
            let Some((created, revision)) = seen else {
                return;
            };
            // A watch that cannot be made or breaks says nothing about the
            // coordinator: it is made again, after a backoff (§14.6), from
            // the revision after the read, so that no change is missed.
            // Meanwhile the connection's keepalive still tells.
            let mut backoff = Backoff::new(Instant::now());
            loop {
                if let Ok(mut stream) = client.watch(key.clone(), revision + 1).await {
                    while let Ok(Some(answer)) = stream.message().await {
                        let gone = answer.events.iter().any(|event| {
                            event.r#type() == EventType::Delete
                                || event
                                    .kv
                                    .as_ref()
                                    .is_some_and(|kv| kv.create_revision != created)
                        });
                        // A watch that etcd cancels (its revision was
                        // compacted) can no longer tell: as if gone, the
                        // client reads the key again.
                        if gone || answer.canceled {
                            return;
                        }
                    }
                }
                let pause = backoff
                    .after_failure(Instant::now(), &mut jitter)
                    .unwrap_or(retry::LONGEST_RETRY);
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Revokes a lease that no term uses, in the background: it expires anyway.
fn revoke_later(client: Client, lease: i64) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, client.lease_revoke(lease)).await;
    });
}

/// One term won through etcd: the coordinator key under a lease.
pub struct EtcdTerm {
    client: Client,
    keys: Keys,
    epoch: Epoch,
    lease: i64,
    /// The revision at which this term won the key (its create revision).
    revision: i64,
    follows_failover: bool,
    proof: Proof,
    /// Dropped with the term, which stops renewing, so that a term dropped
    /// without [`Term::resign`] lets its lease expire as if its process had
    /// died.
    renewals: Renewals,
}

impl std::fmt::Debug for EtcdTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTerm")
            .field("epoch", &self.epoch)
            .field("lease", &self.lease)
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

impl Term for EtcdTerm {
    type Error = EtcdError;

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn follows_failover(&self) -> bool {
        self.follows_failover
    }

    fn takes_relays(&self) -> bool {
        true
    }

    fn check(&mut self) -> Result<(), EtcdError> {
        if let Some(reason) = self.proof.lost() {
            return Err(EtcdError::LeaseLost {
                key: self.keys.coordinator.clone(),
                reason: reason.to_owned(),
            });
        }
        if !self.proof.holds(Instant::now()) {
            return Err(EtcdError::LeaseLost {
                key: self.keys.coordinator.clone(),
                reason: format!(
                    "no renewal succeeded in the last TTL minus the {STEP_DOWN_MARGIN:?} margin"
                ),
            });
        }
        Ok(())
    }

    /// §14.2: from the clock, never from etcd: a process that was paused
    /// past its lease must not answer before it learns anything. The
    /// decision is [`Lease::holds`]'s; this only reads the clock for it.
    fn warrant(&self) -> Warrant {
        let proof = self.proof.clone();
        Warrant::new(move || proof.holds(Instant::now()))
    }

    async fn resign(self, clean: bool) {
        let EtcdTerm {
            client: etcd,
            keys,
            epoch,
            lease,
            revision,
            renewals,
            ..
        } = self;
        drop(renewals);
        if clean {
            // §10.2: written only while this term still holds the key.
            let txn = TxnRequest {
                compare: vec![client::create_revision_is(
                    keys.coordinator.clone(),
                    revision,
                )],
                success: vec![client::put_op(keys.clean.clone(), "", 0)],
                failure: Vec::new(),
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, etcd.txn(txn)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    warn!(error = %describe(&error), "could not mark the term's end as clean")
                }
                Err(_) => warn!("etcd did not answer in time: the term's end is not marked clean"),
            }
        }
        // Revoking the lease removes the key at once, so that the next
        // coordinator need not wait for it to expire.
        match tokio::time::timeout(REQUEST_TIMEOUT, etcd.lease_revoke(lease)).await {
            Ok(Ok(_)) => info!(epoch = %epoch, "resigned the coordinator's key"),
            Ok(Err(error)) => {
                warn!(error = %describe(&error), "could not revoke the lease; it expires by itself")
            }
            Err(_) => warn!("etcd did not answer the revocation; the lease expires by itself"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §14.1: the counter fails closed on anything but an epoch.
    #[test]
    fn epoch_values_that_are_not_numbers_fail_closed_naming_the_key() {
        assert_eq!(parse_epoch("k", b"7").unwrap().get(), 7);
        for bad in [
            &b""[..],
            b"-1",
            b"0",
            b"1e3",
            b" 7",
            b"2147483648",
            b"seven",
            b"\xff",
        ] {
            let error = parse_epoch("p/c/epoch", bad).unwrap_err().to_string();
            assert!(error.contains("p/c/epoch"), "{error}");
        }
        assert_eq!(parse_epoch("k", b"2147483647").unwrap(), Epoch::MAX);
    }

    /// §14.3: the window of a campaign's pause grows with etcd's answer
    /// time, between its least and its widest.
    #[test]
    fn the_campaign_window_follows_etcds_answer_time_within_bounds() {
        assert_eq!(campaign_window(Duration::from_millis(2)), CAMPAIGN_SPREAD);
        assert_eq!(
            campaign_window(Duration::from_millis(200)),
            Duration::from_secs(2)
        );
        assert_eq!(campaign_window(Duration::from_secs(3)), LONGEST_SPREAD);
    }

    /// §14.9: a password file's one trailing newline is not part of the
    /// password; an empty one or bytes that are not text are refused.
    #[test]
    fn a_password_is_the_files_text_without_one_trailing_newline() {
        assert_eq!(password_from(b"s3cret\n".to_vec()).unwrap(), "s3cret");
        assert_eq!(password_from(b"s3cret\r\n".to_vec()).unwrap(), "s3cret");
        assert_eq!(password_from(b"s3cret".to_vec()).unwrap(), "s3cret");
        assert_eq!(password_from(b"s3cret\n\n".to_vec()).unwrap(), "s3cret\n");
        assert_eq!(password_from(b" sp ace ".to_vec()).unwrap(), " sp ace ");
        assert!(password_from(b"\n".to_vec()).unwrap_err().contains("empty"));
        assert!(password_from(Vec::new()).unwrap_err().contains("empty"));
        assert!(
            password_from(b"\xff\n".to_vec())
                .unwrap_err()
                .contains("UTF-8")
        );
    }

    /// §14.9: etcd 3.4's refusals of a user or a request, as it words
    /// them, are told apart; a failure of the way to etcd is none.
    #[test]
    fn etcds_refusals_of_the_user_and_of_a_permission_are_told_apart() {
        let wrong = Status::invalid_argument(
            "etcdserver: authentication failed, invalid user ID or password",
        );
        assert_eq!(refusal(&wrong), Some(Refusal::AuthenticationFailed));
        let denied = Status::permission_denied("etcdserver: permission denied");
        assert_eq!(refusal(&denied), Some(Refusal::PermissionDenied));
        let nobody = Status::invalid_argument("etcdserver: user name is empty");
        assert_eq!(refusal(&nobody), Some(Refusal::NoUser));
        for other in [
            Status::unavailable("etcdserver: request timed out"),
            Status::invalid_argument("etcdserver: key is not provided"),
        ] {
            assert_eq!(refusal(&other), None, "{other:?}");
            assert!(matches!(
                refused(
                    &None,
                    "e",
                    &Keys::new(&EtcdOptions::new(vec![], "c")),
                    "x",
                    (Permission::Read, "k".into()),
                    other
                ),
                EtcdError::EtcdRequest { .. }
            ));
        }
        let user = Some(EtcdUser {
            name: "alice".to_owned(),
            password_file: PathBuf::from("/run/secrets/etcd"),
        });
        let keys = Keys::new(&EtcdOptions::new(vec![], "ci"));
        let access = (
            Permission::Write,
            "the key single-flight/ci/coordinator".to_owned(),
        );
        let error =
            refused(&user, "http://e:2379", &keys, "campaigning", access, denied).to_string();
        for words in [
            "\"alice\"",
            "write permission",
            "single-flight/ci/coordinator",
            "readwrite single-flight/ci/",
        ] {
            assert!(error.contains(words), "{words:?} in {error}");
        }
        let access = (Permission::Read, "single-flight/ci/".to_owned());
        let error = refused(
            &user,
            "http://e:2379",
            &keys,
            "authenticating",
            access,
            wrong,
        )
        .to_string();
        for words in ["\"alice\"", "/run/secrets/etcd", "password"] {
            assert!(error.contains(words), "{words:?} in {error}");
        }
    }

    /// §14.1: cluster names cannot reach into another cluster's keys.
    #[test]
    fn cluster_names_are_plain() {
        for good in ["ci", "web-eu.1", "A_b"] {
            check_cluster_name(good).unwrap();
        }
        for bad in ["", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(check_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
