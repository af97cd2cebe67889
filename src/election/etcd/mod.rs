//! The cluster election (SPEC.md §14.1–§14.3): a coordinator holds an etcd
//! lease and the key `<prefix>/<cluster>/coordinator`, whose value is the
//! address it advertises; each term's epoch is the counter
//! `<prefix>/<cluster>/epoch`, raised in the same transaction that wins the
//! key. The holder renews its lease and stops answering as soon as it can no
//! longer prove the lease alive (§14.2).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::{Code, Status};
use tracing::{debug, info, warn};

use client::{Client, EventType, TlsFiles, TxnRequest, describe, response_op};

pub use error::EtcdError;

use super::{Election, Term};
use crate::protocol::Epoch;

#[doc(hidden)]
pub mod client;
mod error;
mod proto;

/// The lease a coordinator holds unless told otherwise (SPEC.md §14.2). It
/// bounds how long a dead coordinator's host keeps its key, hence the
/// failover after a host dies: 5 s keeps that within what a stampede's
/// callers wait anyway, while a renewal every third of it (1.7 s) survives
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

/// How long one request to etcd may take. A request that gets no answer in
/// that time (quorum lost, every endpoint unreachable) fails, so that calls
/// end `Unavailable` within their deadline instead of hanging (§14.6).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The pause between two attempts to renew after a failed one: short, so
/// that a lease survives a member's death, and long enough not to hammer a
/// cluster without quorum.
const RENEW_RETRY: Duration = Duration::from_millis(200);

/// Attempts of one request to etcd. The client spreads requests over the
/// members, and one sent to a member that died fails at once ("connection
/// refused") until the client stops choosing it; a few attempts, a short
/// pause apart, let a request reach a live member instead.
const REQUEST_ATTEMPTS: u32 = 5;

/// The pause between two attempts of a request (see [`REQUEST_ATTEMPTS`]).
const REQUEST_RETRY: Duration = Duration::from_millis(100);

/// Whether a failed request may succeed at another member: the member was
/// unreachable (gRPC's UNAVAILABLE, which is also how a connection that
/// cannot be made is reported), not the request wrong.
fn transient(error: &Status) -> bool {
    error.code() == Code::Unavailable
}

/// Sends a request, again at most [`REQUEST_ATTEMPTS`] times while it fails
/// transiently. Every request made this way is safe to repeat: reads, a
/// lease grant (an unused lease expires), and the campaign's transaction (if
/// an attempt that failed was applied, the repeat finds the key taken and
/// the campaign revokes its own lease).
async fn with_retries<T, F, Fut>(client: &Client, mut request: F) -> Result<T, Status>
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut attempt = 1;
    loop {
        match request(client.clone()).await {
            Err(error) if attempt < REQUEST_ATTEMPTS && transient(&error) => {
                debug!(error = %describe(&error), attempt, "an etcd request failed; trying another member");
                attempt += 1;
                tokio::time::sleep(REQUEST_RETRY).await;
            }
            other => return other,
        }
    }
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
}

/// The files for etcd over TLS: the CA that signed the members'
/// certificates, and this process's certificate and key.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

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
        }
    }
}

/// The keys of one cluster (SPEC.md §14.1).
#[derive(Clone, Debug)]
struct Keys {
    coordinator: String,
    epoch: String,
    clean: String,
}

/// [`Election`] of one cluster's coordinator through etcd.
pub struct EtcdElection {
    client: Client,
    keys: Keys,
    endpoints: String,
    ttl: Duration,
    /// The address this process advertises when it coordinates.
    advertise: String,
    /// The coordinator key's create revision and the revision of the answer
    /// that last reported it, for [`Election::coordinator_gone`].
    seen: Option<(i64, i64)>,
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

/// Reads a PEM file for etcd's TLS, naming it when it cannot.
fn read_pem(path: &PathBuf, what: &'static str) -> Result<Vec<u8>, EtcdError> {
    std::fs::read(path).map_err(|error| EtcdError::EtcdTlsFile {
        what,
        path: path.clone(),
        error,
    })
}

impl EtcdElection {
    /// Connects to etcd. `advertise` is the address clients will be told to
    /// connect to when this process coordinates.
    pub async fn connect(
        options: &EtcdOptions,
        advertise: String,
    ) -> Result<EtcdElection, EtcdError> {
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
            tls = Some(TlsFiles {
                ca: read_pem(&files.ca, "CA certificate")?,
                cert: read_pem(&files.cert, "certificate")?,
                key: read_pem(&files.key, "private key")?,
            });
        }
        let client = Client::connect(&options.endpoints, tls.as_ref(), REQUEST_TIMEOUT).map_err(
            |error| EtcdError::EtcdUnreachable {
                endpoints: endpoints.clone(),
                error,
            },
        )?;
        let base = format!(
            "{}/{}",
            options.prefix.trim_end_matches('/'),
            options.cluster
        );
        Ok(EtcdElection {
            client,
            keys: Keys {
                coordinator: format!("{base}/coordinator"),
                epoch: format!("{base}/epoch"),
                clean: format!("{base}/clean"),
            },
            endpoints,
            ttl: options.ttl.max(MIN_TTL),
            advertise,
            seen: None,
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

    fn request_failed(&self, what: &'static str, error: Status) -> EtcdError {
        EtcdError::EtcdRequest {
            what,
            endpoints: self.endpoints.clone(),
            error: describe(&error),
        }
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

impl Election for EtcdElection {
    type Error = EtcdError;
    /// The `host:port` a coordinator advertises.
    type Address = String;
    type Term = EtcdTerm;

    async fn coordinator(&mut self) -> Result<Option<String>, EtcdError> {
        let key = self.keys.coordinator.clone();
        let answer = with_retries(&self.client, |client| {
            let key = key.clone();
            async move { client.get(key).await }
        })
        .await
        .map_err(|error| self.request_failed("reading the coordinator key", error))?;
        let revision = answer.header.map_or(0, |header| header.revision);
        let Some(found) = answer.kvs.first() else {
            self.seen = None;
            return Ok(None);
        };
        self.seen = Some((found.create_revision, revision));
        Ok(Some(String::from_utf8_lossy(&found.value).into_owned()))
    }

    async fn campaign(&mut self) -> Result<Option<EtcdTerm>, EtcdError> {
        // Most campaigns come from processes that could not reach a
        // coordinator whose key still lives: one read, no lease.
        if self.coordinator().await?.is_some() {
            return Ok(None);
        }
        let epoch_key = self.keys.epoch.clone();
        let answer = with_retries(&self.client, |client| {
            let key = epoch_key.clone();
            async move { client.get(key).await }
        })
        .await
        .map_err(|error| self.request_failed("reading the epoch", error))?;
        let (last, last_revision) = match answer.kvs.first() {
            Some(found) => (
                Some(parse_epoch(&epoch_key, &found.value)?),
                found.mod_revision,
            ),
            None => (None, 0),
        };
        let epoch = match last {
            None => Epoch::FIRST,
            Some(last) => last
                .next()
                .ok_or(EtcdError::EtcdEpochExhausted { key: epoch_key })?,
        };
        // The lease is proven from the moment its grant was sent (§14.2).
        let sent = Instant::now();
        let ttl = self.ttl.as_secs() as i64;
        let (lease, granted) = with_retries(&self.client, |client| async move {
            client.lease_grant(ttl).await
        })
        .await
        .map_err(|error| self.request_failed("granting a lease", error))?;
        let granted = Duration::from_secs(granted.max(0) as u64);
        // §14.1: the key is won and the epoch raised in one transaction, which
        // succeeds only if nobody holds the key and nobody raised the epoch
        // since it was read; so epochs strictly increase across terms.
        let txn = TxnRequest {
            compare: vec![
                client::create_revision_is(self.keys.coordinator.clone(), 0),
                client::mod_revision_is(self.keys.epoch.clone(), last_revision),
            ],
            success: vec![
                client::put_op(self.keys.coordinator.clone(), self.advertise.clone(), lease),
                client::put_op(self.keys.epoch.clone(), epoch.to_string(), 0),
                client::delete_op(self.keys.clean.clone()),
            ],
            failure: Vec::new(),
        };
        let won = with_retries(&self.client, |client| {
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
                return Err(self.request_failed("campaigning", error));
            }
        };
        if !won.succeeded {
            debug!("another process won the campaign");
            revoke_later(self.client.clone(), lease);
            return Ok(None);
        }
        let revision = won.header.map_or(0, |header| header.revision);
        let was_clean = won.responses.iter().any(|answer| {
            matches!(&answer.response,
                Some(response_op::Response::ResponseDeleteRange(deleted)) if deleted.deleted > 0)
        });
        let proven_until = Arc::new(Mutex::new(sent + granted.saturating_sub(STEP_DOWN_MARGIN)));
        let lost = Arc::new(Mutex::new(None));
        let renewing = tokio::spawn(renew(
            self.client.clone(),
            lease,
            granted,
            proven_until.clone(),
            lost.clone(),
        ));
        info!(%epoch, key = %self.keys.coordinator, advertise = %self.advertise, ttl = ?granted, "won the coordinator's key");
        Ok(Some(EtcdTerm {
            client: self.client.clone(),
            keys: self.keys.clone(),
            epoch,
            lease,
            revision,
            follows_failover: !(epoch == Epoch::FIRST || was_clean),
            proven_until,
            lost,
            renewing,
        }))
    }

    /// §13.5, §14.6: a request that etcd did not answer or refused for
    /// want of a quorum; a damaged epoch key or a bad name is not one.
    fn is_outage(error: &EtcdError) -> bool {
        matches!(error, EtcdError::EtcdRequest { .. })
    }

    fn coordinator_gone(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let client = self.client.clone();
        let key = self.keys.coordinator.clone();
        let seen = self.seen;
        async move {
            let Some((created, revision)) = seen else {
                return;
            };
            // Watching from the revision after the read, so that a change in
            // between is not missed.
            let Ok(mut stream) = client.watch(key, revision + 1).await else {
                // Without a watch, the connection's keepalive still tells.
                return std::future::pending().await;
            };
            loop {
                match stream.message().await {
                    Ok(Some(answer)) => {
                        let gone = answer.events.iter().any(|event| {
                            event.r#type() == EventType::Delete
                                || event
                                    .kv
                                    .as_ref()
                                    .is_some_and(|kv| kv.create_revision != created)
                        });
                        if gone || answer.canceled {
                            return;
                        }
                    }
                    // A broken watch says nothing about the coordinator; the
                    // connection's keepalive still tells.
                    Ok(None) | Err(_) => return std::future::pending().await,
                }
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

/// Renews the lease until it is gone, keeping `proven_until` at the send
/// time of the last renewal that succeeded, plus its TTL, minus the margin
/// (SPEC.md §14.2). Sets `lost` when etcd says the lease is gone.
async fn renew(
    client: Client,
    lease: i64,
    granted: Duration,
    proven_until: Arc<Mutex<Instant>>,
    lost: Arc<Mutex<Option<String>>>,
) {
    let every = granted / 3;
    let mut keeper = None;
    let mut pause = every;
    loop {
        tokio::time::sleep(pause).await;
        pause = RENEW_RETRY;
        if keeper.is_none() {
            match tokio::time::timeout(REQUEST_TIMEOUT, client.lease_keep_alive(lease)).await {
                Ok(Ok(opened)) => keeper = Some(opened),
                Ok(Err(error)) if error.code() == Code::NotFound => {
                    *lost.lock().expect("never poisoned") = Some(error.message().to_owned());
                    return;
                }
                Ok(Err(error)) => {
                    warn!(error = %describe(&error), "cannot renew the coordinator's lease; retrying");
                    continue;
                }
                Err(_) => {
                    warn!("etcd did not answer a renewal in time; retrying");
                    continue;
                }
            }
        }
        let renewals = keeper.as_mut().expect("set above");
        let sent = Instant::now();
        let renewed = tokio::time::timeout(REQUEST_TIMEOUT, renewals.renew()).await;
        match renewed {
            Ok(Ok(Some(answer))) if answer.ttl > 0 => {
                let ttl = Duration::from_secs(answer.ttl as u64);
                *proven_until.lock().expect("never poisoned") =
                    sent + ttl.saturating_sub(STEP_DOWN_MARGIN);
                pause = every;
            }
            Ok(Ok(Some(_))) => {
                *lost.lock().expect("never poisoned") =
                    Some("etcd says the lease has expired".to_owned());
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                warn!("a renewal of the coordinator's lease failed; retrying");
                keeper = None;
            }
        }
    }
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
    proven_until: Arc<Mutex<Instant>>,
    lost: Arc<Mutex<Option<String>>>,
    renewing: tokio::task::JoinHandle<()>,
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

impl EtcdTerm {
    /// How much longer the lease is proven alive, or `None` once it is not.
    pub fn proven_for(&self) -> Option<Duration> {
        let until = *self.proven_until.lock().expect("never poisoned");
        until.checked_duration_since(Instant::now())
    }
}

impl Drop for EtcdTerm {
    /// A term dropped without [`Term::resign`] stops renewing, so that its
    /// lease expires as if its process had died.
    fn drop(&mut self) {
        self.renewing.abort();
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

    fn check(&mut self) -> Result<(), EtcdError> {
        if let Some(reason) = self.lost.lock().expect("never poisoned").clone() {
            return Err(EtcdError::LeaseLost {
                key: self.keys.coordinator.clone(),
                reason,
            });
        }
        if !self.still_holds() {
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
    /// past its lease must not answer before it learns anything.
    fn still_holds(&self) -> bool {
        self.proven_for().is_some() && self.lost.lock().expect("never poisoned").is_none()
    }

    async fn resign(self, clean: bool) {
        self.renewing.abort();
        if clean {
            // §10.2: written only while this term still holds the key.
            let txn = TxnRequest {
                compare: vec![client::create_revision_is(
                    self.keys.coordinator.clone(),
                    self.revision,
                )],
                success: vec![client::put_op(self.keys.clean.clone(), "", 0)],
                failure: Vec::new(),
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, self.client.txn(txn)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    warn!(error = %describe(&error), "could not mark the term's end as clean")
                }
                Err(_) => warn!("etcd did not answer in time: the term's end is not marked clean"),
            }
        }
        // Revoking the lease removes the key at once, so that the next
        // coordinator need not wait for it to expire.
        match tokio::time::timeout(REQUEST_TIMEOUT, self.client.lease_revoke(self.lease)).await {
            Ok(Ok(_)) => info!(epoch = %self.epoch, "resigned the coordinator's key"),
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
