//! The coordinator's lease renewals (SPEC.md §14.2), on a thread of their
//! own with a connection to etcd of their own: the single-flight thread
//! that serves the term also makes every TLS handshake of the clients that
//! connect to it, and a thousand of them at once would otherwise queue the
//! renewals behind seconds of handshakes and the process's other requests,
//! until the term could no longer prove its lease and ended mid-stampede.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tonic::Code;
use tracing::{info, warn};

use super::EtcdTls;
use super::REQUEST_TIMEOUT;
use super::client::{Client, Credentials, KeepAlive, describe};
use super::lease::Lease;

/// The pause before the renewals' stream is opened again after it failed:
/// short, so that a lease survives a member's death, and long enough not to
/// hammer a cluster without quorum.
const RENEW_RETRY: Duration = Duration::from_millis(200);

/// What the renewals share with the term: what they proved of the lease
/// (§14.2), and why it is gone if etcd said so.
#[derive(Clone, Debug)]
pub(super) struct Proof {
    lease: Arc<Mutex<Lease>>,
    /// Set once, by the first word from etcd that the lease is gone (what
    /// came after only follows from it); read without a lock, since
    /// [`Proof::holds`] is asked before every batch a coordinator writes.
    lost: Arc<OnceLock<String>>,
}

impl Proof {
    pub(super) fn new(lease: Lease) -> Proof {
        Proof {
            lease: Arc::new(Mutex::new(lease)),
            lost: Arc::new(OnceLock::new()),
        }
    }

    /// Why the lease is gone, once etcd said so.
    pub(super) fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// How much longer the lease is proven alive at `now`, or `None` once
    /// it is not.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        self.lease.lock().expect("never poisoned").left(now)
    }

    /// Whether the term may still answer at `now` (§14.2): its lease is
    /// proven, and etcd has not said it is gone.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.lost.get().is_none() && self.lease.lock().expect("never poisoned").holds(now)
    }

    /// A renewal sent at `sent` was answered with `ttl`.
    fn renewed(&self, sent: Instant, ttl: Duration) {
        self.lease
            .lock()
            .expect("never poisoned")
            .renewed(sent, ttl);
    }

    fn lose(&self, reason: String) {
        let _ = self.lost.set(reason);
    }
}

/// How to reach etcd from the renewals' own connection. Its client reads
/// etcd's TLS files when it is made and again while it lives, as every
/// client does (SPEC.md §14.5): a stream opened again after it broke
/// connects with the files of that time.
#[derive(Clone, Debug)]
pub(super) struct Reach {
    pub(super) endpoints: Vec<String>,
    pub(super) tls: Option<EtcdTls>,
    /// The user the renewals authenticate as over their own connection
    /// (SPEC.md §14.9), with a token of their own.
    pub(super) credentials: Option<Credentials>,
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
                            Ok(own) => match reach.credentials {
                                Some(credentials) => own.authenticated_as(credentials),
                                None => own,
                            },
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

/// How many renewals go out per TTL (SPEC.md §14.2). A renewal proves the
/// lease from its own send time, so with renewals every TTL/6 the lease
/// stays proven while etcd answers within TTL − margin − TTL/6 (3.2 s of
/// the default 5 s lease): a stampede on a two-core host made etcd answer
/// after up to 3.5 s, and renewals a third of the TTL apart, each awaited
/// before the next, lost terms. Renewals are cheap for etcd (its leader
/// answers them without a raft write).
const RENEWALS_PER_TTL: u32 = 6;

/// Renews the lease until it is gone, keeping the proof at the send time of
/// the last renewal answered, plus its TTL, minus the margin (SPEC.md
/// §14.2). Renewals go out on a schedule over one stream, without waiting
/// for the previous answer: a late answer delays no later renewal. The
/// first goes out at once: it opens the stream (and the connection) before
/// a stampede can make that slow. A stream whose oldest unanswered renewal
/// is older than the TTL, or that breaks, is opened again.
async fn renew(
    client: Client,
    lease: i64,
    granted: Duration,
    proof: Proof,
    told: watch::Sender<()>,
) {
    let every = granted / RENEWALS_PER_TTL;
    loop {
        let sent = Instant::now();
        let opened = tokio::time::timeout(REQUEST_TIMEOUT, client.lease_keep_alive(lease)).await;
        let failure = match opened {
            Ok(Ok((keeper, ttl))) => {
                proof.renewed(sent, Duration::from_secs(ttl as u64));
                told.send_replace(());
                match renew_over(keeper, granted, every, &proof, &told).await {
                    Some(failure) => failure,
                    None => return,
                }
            }
            Ok(Err(error)) if error.code() == Code::NotFound => {
                proof.lose(error.message().to_owned());
                told.send_replace(());
                return;
            }
            Ok(Err(error)) => describe(&error),
            Err(_) => "etcd did not open the renewals' stream in time".to_owned(),
        };
        told.send_replace(());
        // §14.2: the coordinator says so before it steps down.
        match proof.left(Instant::now()) {
            Some(left) => warn!(
                error = %failure,
                proven_for = ?left,
                "renewing the coordinator's lease failed; retrying. Unless a renewal succeeds, this coordinator steps down when the lease is no longer proven (SPEC.md §14.2)"
            ),
            None => {
                info!(error = %failure, "renewals failed past the lease's proven time: the coordinator steps down (SPEC.md §14.2)");
            }
        }
        tokio::time::sleep(RENEW_RETRY).await;
    }
}

/// Renews over one open stream until it fails (`Some` reason) or etcd says
/// the lease is gone (`None`, the proof marked lost).
async fn renew_over(
    mut keeper: KeepAlive,
    granted: Duration,
    every: Duration,
    proof: &Proof,
    told: &watch::Sender<()>,
) -> Option<String> {
    let mut pending: VecDeque<Instant> = VecDeque::new();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let now = Instant::now();
                if pending.front().is_some_and(|sent| now.duration_since(*sent) >= granted) {
                    return Some("etcd answered no renewal for a TTL".to_owned());
                }
                if let Some(left) = proof.left(now).filter(|left| *left < every * 2) {
                    // §14.2: said before the coordinator steps down.
                    warn!(proven_for = ?left, unanswered = pending.len(), "renewals of the coordinator's lease are answered late; it steps down when the lease is no longer proven (SPEC.md §14.2)");
                }
                if !keeper.send() {
                    return Some("the renewals' stream does not take requests".to_owned());
                }
                pending.push_back(now);
            }
            answer = keeper.answer() => match answer {
                Ok(Some(answer)) if answer.ttl > 0 => {
                    if let Some(sent) = pending.pop_front() {
                        proof.renewed(sent, Duration::from_secs(answer.ttl as u64));
                        told.send_replace(());
                    }
                }
                Ok(Some(_)) => {
                    proof.lose("etcd says the lease has expired".to_owned());
                    told.send_replace(());
                    return None;
                }
                Ok(None) => return Some("etcd ended the renewals' stream".to_owned()),
                Err(error) => return Some(describe(&error)),
            },
        }
    }
}
