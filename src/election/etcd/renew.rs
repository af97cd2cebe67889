//! The coordinator's lease renewals (SPEC.md §14.2), on a thread of their
//! own with a connection to etcd of their own: the single-flight thread
//! that serves the term also makes every TLS handshake of the clients that
//! connect to it, and a thousand of them at once would otherwise queue the
//! renewals behind seconds of handshakes and the process's other requests,
//! until the term could no longer prove its lease and ended mid-stampede.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tonic::Code;
use tracing::{info, warn};

use super::client::{Client, KeepAlive, TlsFiles, describe};
use super::{REQUEST_TIMEOUT, STEP_DOWN_MARGIN};

/// The pause between two attempts to renew after a failed one: short, so
/// that a lease survives a member's death, and long enough not to hammer a
/// cluster without quorum.
const RENEW_RETRY: Duration = Duration::from_millis(200);

/// What the renewals share with the term: until when the lease is proven
/// (§14.2), and why it is gone if etcd said so.
#[derive(Clone, Debug)]
pub(super) struct Proof {
    until: Arc<Mutex<Instant>>,
    lost: Arc<Mutex<Option<String>>>,
}

impl Proof {
    pub(super) fn new(until: Instant) -> Proof {
        Proof {
            until: Arc::new(Mutex::new(until)),
            lost: Arc::new(Mutex::new(None)),
        }
    }

    /// Why the lease is gone, once etcd said so.
    pub(super) fn lost(&self) -> Option<String> {
        self.lost.lock().expect("never poisoned").clone()
    }

    /// How much longer the lease is proven alive at `now`, or `None` once
    /// it is not.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        let until = *self.until.lock().expect("never poisoned");
        until.checked_duration_since(now).filter(|left| !left.is_zero())
    }

    fn renewed(&self, sent: Instant, ttl: Duration) {
        *self.until.lock().expect("never poisoned") = sent + ttl.saturating_sub(STEP_DOWN_MARGIN);
    }

    fn lose(&self, reason: String) {
        *self.lost.lock().expect("never poisoned") = Some(reason);
    }
}

/// How to reach etcd from the renewals' own connection.
#[derive(Clone, Debug)]
pub(super) struct Reach {
    pub(super) endpoints: Vec<String>,
    pub(super) tls: Option<TlsFiles>,
}

/// The renewals of one term's lease; they stop when this is dropped.
#[derive(Debug)]
pub(super) struct Renewals {
    _stop: oneshot::Sender<()>,
}

/// Tells that a renewal was answered (or etcd said the lease is gone).
pub(super) type Renewed = watch::Receiver<()>;

/// Starts renewing `lease` (granted for `granted`) on a thread of its own,
/// over a connection of its own; the first renewal goes out at once. Where
/// no thread can be started, the renewals run on the caller's runtime over
/// `shared`, saying so. Must be called within a tokio runtime.
pub(super) fn start(
    reach: Reach,
    shared: Client,
    lease: i64,
    granted: Duration,
    proof: Proof,
) -> (Renewals, Renewed) {
    let (told, renewed) = watch::channel(());
    let fallback_told = told.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let (fallback, thread_proof) = (shared.clone(), proof.clone());
    let thread = |runtime: tokio::runtime::Runtime| {
        std::thread::Builder::new()
            .name("single-flight-lease".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // The client is made on this thread's runtime, which
                    // then runs its connection: a client's tasks die with
                    // the runtime that made them.
                    let own =
                        match Client::connect(&reach.endpoints, reach.tls.as_ref(), REQUEST_TIMEOUT)
                        {
                            Ok(own) => own,
                            Err(error) => {
                                warn!(%error, "cannot make the renewals' own connection to etcd; renewing over the process's");
                                shared
                            }
                        };
                    tokio::select! {
                        () = renew(own, lease, granted, thread_proof, told) => {}
                        _ = stopped => {}
                    }
                });
            })
    };
    let started = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(thread);
    if let Err(error) = started {
        warn!(%error, "cannot start the thread of the lease's renewals; they share the single-flight thread, where many connecting clients can delay them (SPEC.md §14.2)");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            tokio::select! {
                () = renew(fallback, lease, granted, proof, fallback_told) => {}
                _ = stopped => {}
            }
        });
        return (Renewals { _stop: stop }, renewed);
    }
    (Renewals { _stop: stop }, renewed)
}

/// Renews the lease until it is gone, keeping the proof at the send time of
/// the last renewal that succeeded, plus its TTL, minus the margin (SPEC.md
/// §14.2). The first renewal goes out at once: it opens the stream (and the
/// connection) before a stampede can make that slow.
async fn renew(
    client: Client,
    lease: i64,
    granted: Duration,
    proof: Proof,
    told: watch::Sender<()>,
) {
    let every = granted / 3;
    let mut keeper: Option<KeepAlive> = None;
    let mut pause = Duration::ZERO;
    loop {
        tokio::time::sleep(pause).await;
        pause = RENEW_RETRY;
        let sent = Instant::now();
        let renewed = match keeper.as_mut() {
            None => match tokio::time::timeout(REQUEST_TIMEOUT, client.lease_keep_alive(lease)).await {
                // Opening the stream renewed the lease once.
                Ok(Ok((opened, ttl))) => {
                    keeper = Some(opened);
                    Ok(ttl)
                }
                Ok(Err(error)) if error.code() == Code::NotFound => {
                    proof.lose(error.message().to_owned());
                    told.send_replace(());
                    return;
                }
                Ok(Err(error)) => Err(describe(&error)),
                Err(_) => Err("etcd did not answer in time".to_owned()),
            },
            Some(renewals) => match tokio::time::timeout(REQUEST_TIMEOUT, renewals.renew()).await {
                Ok(Ok(Some(answer))) if answer.ttl > 0 => Ok(answer.ttl),
                Ok(Ok(Some(_))) => {
                    proof.lose("etcd says the lease has expired".to_owned());
                    told.send_replace(());
                    return;
                }
                Ok(Ok(None)) => Err("etcd ended the renewals' stream".to_owned()),
                Ok(Err(error)) => Err(describe(&error)),
                Err(_) => Err("etcd did not answer in time".to_owned()),
            },
        };
        match renewed {
            Ok(ttl) => {
                proof.renewed(sent, Duration::from_secs(ttl as u64));
                told.send_replace(());
                pause = every;
            }
            Err(error) => {
                keeper = None;
                told.send_replace(());
                // §14.2: the coordinator says so before it steps down.
                match proof.left(Instant::now()) {
                    Some(left) => warn!(
                        %error,
                        proven_for = ?left,
                        "a renewal of the coordinator's lease failed; retrying. Unless one succeeds, this coordinator steps down when the lease is no longer proven (SPEC.md §14.2)"
                    ),
                    None => {
                        info!(%error, "renewals failed past the lease's proven time: the coordinator steps down (SPEC.md §14.2)");
                    }
                }
            }
        }
    }
}
