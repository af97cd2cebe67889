//! The in-memory election with etcd's semantics (SPEC.md §14.1–§14.3),
//! over simulated time: a store with revisions, a coordinator key created
//! under a lease, leases that expire on the store's (true) clock unless
//! renewed, a campaign that creates the key only if absent and raises the
//! epoch counter in the same step, and a watch that tells a client when
//! the key it read is deleted or replaced. Every request crosses the
//! requesting host's link to the store ([`STORE`]): a host cut off from it
//! gets no answer, and a request whose answer is lost may still have been
//! applied, as with etcd (§14.6).
//!
//! A term proves its lease on its own host's clock (§14.2), which can run
//! at another rate than the store's: from the send time of the last
//! renewal answered, plus the TTL, minus [`STEP_DOWN_MARGIN`].
//!
//! A cluster of several shards (§19.2, §19.3) has one coordinator key,
//! epoch and clean mark per shard in the one store, and each campaign's
//! transaction puts its shard's `host` key with its coordinator key under
//! the term's lease; a campaign of a cluster of shards pauses longer for
//! each other shard that its host already coordinates (the spread).
//!
//! It mirrors src/election/etcd/ (the TTL, margin, renewal cadence,
//! campaign spread and request timeout are the same constants) with two
//! simplifications recorded in SPEC.md §12.7: a request is tried once
//! (etcd's client tries again for up to `REQUEST_PATIENCE`; here the
//! driver's next attempt does), and the renewals run on the term's own
//! runtime, not a thread of their own.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use single_flight::_internal::election::{Election, Term, Warrant};
use single_flight::Epoch;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::network::{Address, HostId, Net, ProcessId, STORE};
use crate::world::Record;

/// As the etcd election's `DEFAULT_TTL`.
pub const TTL: Duration = Duration::from_secs(5);
/// As the etcd election's `STEP_DOWN_MARGIN`.
pub const STEP_DOWN_MARGIN: Duration = Duration::from_secs(1);
/// As the etcd election's `REQUEST_TIMEOUT`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// As the etcd election's `CAMPAIGN_SPREAD`: the widest pause before a
/// campaign, so that one process of a stampede campaigns (§14.3).
pub const CAMPAIGN_SPREAD: Duration = Duration::from_millis(500);
/// As the etcd renewals' `RENEWALS_PER_TTL`.
const RENEWALS_PER_TTL: u32 = 6;

tokio::task_local! {
    /// The task group of the code that runs now, when it is a caller's:
    /// what a tokio client library's background tasks land on when it is
    /// created there (tonic's channel spawns its worker on the runtime
    /// that creates it).
    pub static CALLER: Group;
}

/// A group of tasks that ends together: in the simulation, a caller's
/// runtime, which can end while the process lives (the shell's bug 4).
#[derive(Clone, Default)]
pub struct Group(Arc<Mutex<Vec<tokio::task::AbortHandle>>>);

impl Group {
    /// Ends every task spawned in the group.
    pub fn end(&self) {
        for task in self.0.lock().expect("never poisoned").drain(..) {
            task.abort();
        }
    }
}

/// Spawns `task` as a client library does: in the caller's group when
/// there is one, otherwise on the runtime for as long as it runs.
fn spawn_here(task: impl Future<Output = ()> + Send + 'static) {
    let handle = tokio::spawn(task);
    let _ = CALLER.try_with(|group| {
        group
            .0
            .lock()
            .expect("never poisoned")
            .push(handle.abort_handle())
    });
}

/// A process's client of the store: alive while its background worker
/// runs, as an etcd client's channel is.
#[derive(Clone)]
struct Client(watch::Receiver<()>);

impl Client {
    /// A client, whose worker is spawned where the caller runs.
    fn connect() -> Client {
        let (worker, alive) = watch::channel(());
        spawn_here(async move {
            let _worker = worker;
            std::future::pending::<()>().await;
        });
        Client(alive)
    }

    fn gone(&self) -> bool {
        self.0.has_changed().is_err()
    }
}

/// Why a request got no answer.
#[derive(Debug)]
pub struct SimError(String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

/// A shard's coordinator key, and its `host` key (§19.2), put and deleted
/// with it under the term's lease.
#[derive(Clone, Copy, Debug)]
struct Key {
    address: Address,
    create_revision: i64,
    lease: i64,
    /// Who won the term, as the spread counts hosts (§19.3).
    host: Spreader,
}

/// What the spread (§19.3) counts as one host: a host coordinator's host,
/// or a direct process, which is a host of one process (§18.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spreader {
    Host(HostId),
    Process(ProcessId),
}

/// One shard's keys: the coordinator key, the epoch counter and the clean
/// mark (§10.2).
#[derive(Default)]
struct ShardKeys {
    coordinator: Option<Key>,
    epoch: u64,
    epoch_revision: i64,
    clean: bool,
}

/// The store's state: each shard's keys and the leases.
struct StoreState {
    revision: i64,
    /// In shard order; one for a cluster of one shard (§19.2).
    shards: Vec<ShardKeys>,
    /// Each live lease and when it expires on the store's clock.
    leases: std::collections::BTreeMap<i64, Instant>,
    next_lease: i64,
}

/// The election's store (etcd), shared by every process.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<StoreState>>,
    /// Told when a lease's expiry changes, for the reaper.
    leases_changed: Arc<Notify>,
    /// The revision, told to watches.
    revisions: Arc<watch::Sender<i64>>,
    net: Net,
}

impl Store {
    /// A store of a cluster of `shards` shards, and its reaper, which
    /// deletes the keys of an expired lease; spawned on the current runtime.
    pub fn start(net: Net, shards: u32) -> Store {
        let store = Store {
            state: Arc::new(Mutex::new(StoreState {
                revision: 1,
                shards: (0..shards).map(|_| ShardKeys::default()).collect(),
                leases: std::collections::BTreeMap::new(),
                next_lease: 1,
            })),
            leases_changed: Arc::new(Notify::new()),
            revisions: Arc::new(watch::channel(1).0),
            net,
        };
        let reaper = store.clone();
        tokio::spawn(async move { reaper.reap().await });
        store
    }

    async fn reap(self) {
        loop {
            let next = {
                let state = self.state.lock().expect("never poisoned");
                state.leases.values().min().copied()
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.leases_changed.notified() => continue,
                    }
                }
                None => {
                    self.leases_changed.notified().await;
                    continue;
                }
            }
            let now = Instant::now();
            let mut state = self.state.lock().expect("never poisoned");
            let expired: Vec<i64> = state
                .leases
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(lease, _)| *lease)
                .collect();
            for lease in expired {
                self.net
                    .trace()
                    .record(format_args!("store lease {lease} expired"));
                state.revoke(lease);
            }
            let revision = state.revision;
            drop(state);
            self.revisions.send_replace(revision);
        }
    }

    /// One request from `host`: it crosses the link there, is applied, and
    /// its answer crosses back; no answer within [`REQUEST_TIMEOUT`] is an
    /// error, though the request may have been applied.
    async fn request<R>(
        &self,
        client: &Client,
        (host, process): (HostId, ProcessId),
        what: &str,
        apply: impl FnOnce(&mut StoreState, Instant) -> R,
    ) -> Result<R, SimError> {
        if self.net.is_dead(process) {
            return Err(SimError(format!(
                "cannot send {what}: this process was killed"
            )));
        }
        if client.gone() {
            return Err(SimError(format!(
                "cannot send {what}: the election's client stopped with the runtime it was started on"
            )));
        }
        let started = Instant::now();
        let no_answer = || SimError(format!("the election's store did not answer {what}"));
        let there = self.net.reach(host, STORE);
        if there.stalled {
            tokio::time::sleep(REQUEST_TIMEOUT).await;
            return Err(no_answer());
        }
        if there.refused {
            // A refusal comes back after a round trip, as a reset does.
            tokio::time::sleep(there.delay * 2).await;
            return Err(SimError(format!("the election's store refused {what}")));
        }
        tokio::time::sleep(there.delay).await;
        let (answer, revision) = {
            let mut state = self.state.lock().expect("never poisoned");
            let answer = apply(&mut state, Instant::now());
            (answer, state.revision)
        };
        self.leases_changed.notify_one();
        self.revisions.send_if_modified(|seen| {
            let changed = *seen != revision;
            *seen = revision;
            changed
        });
        let back = self.net.reach(STORE, host);
        if back.stalled {
            tokio::time::sleep_until(started + REQUEST_TIMEOUT).await;
            return Err(no_answer());
        }
        tokio::time::sleep(back.delay).await;
        Ok(answer)
    }
}

impl StoreState {
    /// Revokes `lease`, deleting the keys put under it in one revision.
    fn revoke(&mut self, lease: i64) {
        self.leases.remove(&lease);
        let mut deleted = false;
        for shard in &mut self.shards {
            if shard.coordinator.is_some_and(|key| key.lease == lease) {
                shard.coordinator = None;
                deleted = true;
            }
        }
        if deleted {
            self.revision += 1;
        }
    }

    /// How many shards other than `shard` have a term won by `host`: the
    /// `k` of the spread (§19.3).
    fn held_by(&self, host: Spreader, shard: u32) -> u32 {
        let held = self.shards.iter().enumerate().filter(|(index, keys)| {
            *index != shard as usize && keys.coordinator.is_some_and(|key| key.host == host)
        });
        held.count() as u32
    }
}

/// A host's clock: it runs at `rate` times the store's.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    rate: f64,
}

impl Clock {
    pub fn new(rate: f64) -> Clock {
        Clock {
            origin: Instant::now(),
            rate,
        }
    }

    /// How fast it runs against the store's clock.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// This host's time since the run began.
    pub fn now(&self) -> Duration {
        self.origin.elapsed().mul_f64(self.rate)
    }
}

/// One process's view of one shard's election.
pub struct SimElection {
    store: Store,
    host: HostId,
    process: ProcessId,
    advertise: Address,
    /// The shard whose term this election is for (§19.3).
    shard: u32,
    /// Who this process counts as for the spread.
    spreader: Spreader,
    clock: Clock,
    record: Record,
    /// The key the last read found: its create revision and the read's
    /// revision (§14.3).
    seen: Option<(i64, i64)>,
    /// The revision of a read that found no key, for the next campaign.
    absent: Option<i64>,
    rng: ChaCha8Rng,
    client: Client,
}

impl SimElection {
    /// Connects `advertise`'s process to the store, for `shard`'s term,
    /// counted as `spreader` by the spread: its client's worker is spawned
    /// where this runs.
    pub fn connect(
        store: Store,
        (advertise, process): (Address, ProcessId),
        (shard, spreader): (u32, Spreader),
        clock: Clock,
        record: Record,
        seed: u64,
    ) -> SimElection {
        SimElection {
            store,
            host: advertise.host,
            process,
            advertise,
            shard,
            spreader,
            clock,
            record,
            seen: None,
            absent: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            client: Client::connect(),
        }
    }

    async fn request<R>(
        &self,
        what: &str,
        apply: impl FnOnce(&mut StoreState, Instant) -> R,
    ) -> Result<R, SimError> {
        // A killed process sends nothing: not counted.
        if !self.store.net.is_dead(self.process) {
            self.record.election_request(self.advertise, what);
        }
        self.store
            .request(&self.client, (self.host, self.process), what, apply)
            .await
    }

    /// Whether the cluster has shards, whose campaigns spread (§19.3).
    fn spreads(&self) -> bool {
        self.store
            .state
            .lock()
            .expect("never poisoned")
            .shards
            .len()
            > 1
    }

    /// Waits `pause` for this shard's coordinator key to be put after
    /// revision `read`, as a watch from that revision tells it across the
    /// host's link to the store: true when it was.
    async fn put_within(&self, pause: Duration, read: i64) -> bool {
        let mut revisions = self.store.revisions.subscribe();
        let shard = self.shard as usize;
        let put = async {
            loop {
                if *revisions.borrow_and_update() > read
                    && self.store.net.reach(STORE, self.host).answers()
                    && self.store.state.lock().expect("never poisoned").shards[shard]
                        .coordinator
                        .is_some()
                {
                    return;
                }
                if revisions.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(pause, put).await.is_ok()
    }
}

impl Election for SimElection {
    type Address = Address;
    type Term = SimTerm;
    type Error = SimError;

    async fn coordinator(&mut self) -> Result<Option<Address>, SimError> {
        let shard = self.shard as usize;
        let (key, revision) = self
            .request("a read of the coordinator key", |state, _| {
                (state.shards[shard].coordinator, state.revision)
            })
            .await?;
        self.absent = None;
        match key {
            Some(key) => {
                self.seen = Some((key.create_revision, revision));
                Ok(Some(key.address))
            }
            None => {
                self.seen = None;
                self.absent = Some(revision);
                Ok(None)
            }
        }
    }

    async fn campaign(&mut self) -> Result<Option<SimTerm>, SimError> {
        let shard = self.shard as usize;
        let read = match self.absent.take() {
            Some(read) => read,
            None => {
                let (key, revision) = self
                    .request("a read of the coordinator key", |state, _| {
                        (state.shards[shard].coordinator, state.revision)
                    })
                    .await?;
                if key.is_some() {
                    return Ok(None);
                }
                revision
            }
        };
        // §19.3: with shards, the campaign first counts the other shards
        // whose term its host holds, each a window more of pause.
        let (spreader, spreads) = (self.spreader, self.spreads());
        let (mut held, mut read) = (0, read);
        if spreads {
            (held, read) = self
                .request("a read of the shards' hosts", |state, _| {
                    (state.held_by(spreader, shard as u32), state.revision)
                })
                .await?;
        }
        // §14.3: a pause, so that one process of a stampede campaigns and
        // the rest see its key put. The watch's news crosses the link too.
        let fraction = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let pause = CAMPAIGN_SPREAD.mul_f64(f64::from(held) + fraction.sqrt());
        if self.put_within(pause, read).await {
            return Ok(None);
        }
        let epoch_revision = loop {
            let (key, epoch_revision, now_held, revision) = self
                .request("a read of the coordinator key", |state, _| {
                    let keys = &state.shards[shard];
                    let held = state.held_by(spreader, shard as u32);
                    (keys.coordinator, keys.epoch_revision, held, state.revision)
                })
                .await?;
            if key.is_some() {
                return Ok(None);
            }
            // §19.3: its host won another shard meanwhile: a window more
            // for each, and the keys read again.
            if !spreads || now_held <= held {
                break epoch_revision;
            }
            let more = CAMPAIGN_SPREAD * (now_held - held);
            held = now_held;
            if self.put_within(more, revision).await {
                return Ok(None);
            }
        };
        let sent = self.clock.now();
        let lease = self
            .request("a lease grant", |state, now| {
                let lease = state.next_lease;
                state.next_lease += 1;
                state.leases.insert(lease, now + TTL);
                lease
            })
            .await?;
        let advertise = self.advertise;
        let won = self
            .request("a campaign", move |state, _| {
                let keys = &state.shards[shard];
                if keys.coordinator.is_some()
                    || keys.epoch_revision != epoch_revision
                    || !state.leases.contains_key(&lease)
                {
                    state.revoke(lease);
                    return None;
                }
                state.revision += 1;
                let revision = state.revision;
                let keys = &mut state.shards[shard];
                keys.coordinator = Some(Key {
                    address: advertise,
                    create_revision: revision,
                    lease,
                    host: spreader,
                });
                keys.epoch += 1;
                keys.epoch_revision = revision;
                let was_clean = std::mem::take(&mut keys.clean);
                Some((keys.epoch, revision, was_clean))
            })
            .await;
        let Some((epoch, revision, was_clean)) = won? else {
            return Ok(None);
        };
        let epoch = Epoch::new(epoch).ok_or_else(|| SimError("epochs exhausted".to_owned()))?;
        self.store.net.trace().record(format_args!(
            "election {} won epoch {epoch} lease {lease}",
            self.advertise
        ));
        let proof = Arc::new(Mutex::new(Proof {
            until: sent + TTL - STEP_DOWN_MARGIN,
            lost: false,
        }));
        let renewals = tokio::spawn(renew(
            self.client.clone(),
            self.store.clone(),
            (self.host, self.process),
            self.advertise,
            self.record.clone(),
            lease,
            self.clock,
            proof.clone(),
        ));
        Ok(Some(SimTerm {
            store: self.store.clone(),
            host: self.host,
            process: self.process,
            advertise: self.advertise,
            shard: self.shard,
            epoch,
            lease,
            revision,
            follows_failover: !(epoch == Epoch::FIRST || was_clean),
            proof,
            clock: self.clock,
            renewals,
            record: self.record.clone(),
            client: self.client.clone(),
        }))
    }

    // The coordinator key is watched (§14.3).
    const TELLS_GONE: bool = true;

    fn coordinator_gone(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let store = self.store.clone();
        let (host, shard) = (self.host, self.shard as usize);
        let seen = self.seen;
        let client = self.client.clone();
        async move {
            let Some((created, _)) = seen else {
                return;
            };
            if client.gone() {
                // A watch needs the client: it never tells.
                std::future::pending::<()>().await;
            }
            let mut revisions = store.revisions.subscribe();
            let mut links = store.net.changes();
            loop {
                let gone = store.state.lock().expect("never poisoned").shards[shard]
                    .coordinator
                    .is_none_or(|key| key.create_revision != created);
                let reach = store.net.reach(STORE, host);
                // A store that refuses tells nothing either.
                if gone && reach.answers() {
                    tokio::time::sleep(reach.delay).await;
                    return;
                }
                tokio::select! {
                    _ = revisions.changed() => {}
                    _ = links.changed() => {}
                }
            }
        }
    }

    fn is_outage(_: &SimError) -> bool {
        true
    }
}

/// Until when a term's lease is proven, on its host's clock (§14.2).
struct Proof {
    until: Duration,
    lost: bool,
}

/// Renews the lease every TTL/6 until the store says it is gone; each
/// answered renewal proves it from its send time (§14.2).
#[allow(clippy::too_many_arguments, reason = "one call, each argument named")]
async fn renew(
    client: Client,
    store: Store,
    (host, process): (HostId, ProcessId),
    advertise: Address,
    record: Record,
    lease: i64,
    clock: Clock,
    proof: Arc<Mutex<Proof>>,
) {
    let every = TTL / RENEWALS_PER_TTL;
    loop {
        tokio::time::sleep(every).await;
        if store.net.is_dead(process) {
            return;
        }
        let sent = clock.now();
        record.election_request(advertise, "a renewal");
        let alive = store
            .request(
                &client,
                (host, process),
                "a renewal",
                |state, now| match state.leases.get_mut(&lease) {
                    Some(expires) => {
                        *expires = now + TTL;
                        true
                    }
                    None => false,
                },
            )
            .await;
        let mut proof = proof.lock().expect("never poisoned");
        match alive {
            Ok(true) => proof.until = proof.until.max(sent + TTL - STEP_DOWN_MARGIN),
            Ok(false) => {
                proof.lost = true;
                return;
            }
            Err(_) => {}
        }
    }
}

/// One term won in the simulated election.
pub struct SimTerm {
    store: Store,
    host: HostId,
    process: ProcessId,
    advertise: Address,
    shard: u32,
    epoch: Epoch,
    lease: i64,
    revision: i64,
    follows_failover: bool,
    proof: Arc<Mutex<Proof>>,
    clock: Clock,
    renewals: JoinHandle<()>,
    record: Record,
    client: Client,
}

impl Drop for SimTerm {
    fn drop(&mut self) {
        // A term dropped without resigning lets its lease expire, as if
        // its process had died.
        self.renewals.abort();
    }
}

impl Term for SimTerm {
    type Error = SimError;

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn follows_failover(&self) -> bool {
        self.follows_failover
    }

    /// A term of the simulated cluster.
    fn takes_relays(&self) -> bool {
        true
    }

    fn check(&mut self) -> Result<(), SimError> {
        if self.warrant().holds() {
            Ok(())
        } else {
            Err(SimError(format!(
                "the lease of term {} is no longer proven",
                self.epoch
            )))
        }
    }

    fn warrant(&self) -> Warrant {
        let (proof, clock, record) = (self.proof.clone(), self.clock, self.record.clone());
        let (epoch, advertise, shard) = (self.epoch, self.advertise, self.shard);
        let (net, process) = (self.store.net.clone(), self.process);
        Warrant::new(move || {
            let proof = proof.lock().expect("never poisoned");
            // A killed process answers nothing more.
            let holds = !proof.lost && clock.now() < proof.until && !net.is_dead(process);
            if holds {
                record.serving(shard, epoch, advertise);
            }
            holds
        })
    }

    async fn resign(self, clean: bool) {
        self.renewals.abort();
        let (lease, revision, shard) = (self.lease, self.revision, self.shard as usize);
        if !self.store.net.is_dead(self.process) {
            self.record
                .election_request(self.advertise, "a resignation");
        }
        let _ = self
            .store
            .request(
                &self.client,
                (self.host, self.process),
                "a resignation",
                move |state, _| {
                    let keys = &mut state.shards[shard];
                    if clean
                        && keys
                            .coordinator
                            .is_some_and(|key| key.create_revision == revision)
                    {
                        keys.clean = true;
                    }
                    state.revoke(lease);
                },
            )
            .await;
        self.store.net.trace().record(format_args!(
            "election {} resigned epoch {} clean {clean}",
            self.advertise, self.epoch
        ));
    }
}
