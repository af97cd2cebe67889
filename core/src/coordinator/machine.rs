//! The coordinator's rules (SPEC.md §8).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::cycles::{PartyRef, WaitFor};
use super::io::{CloseReason, ConnectionId, Effect, EndReason, Event, Term, Timer};
use super::mutant::{Mutant, Seeded};
use super::table::Table;
use crate::protocol::limits::{MAX_KEPT_BYTES, MAX_KEPT_VALUES, STATUS_FLIGHTS_BYTES};
use crate::protocol::{
    CoordinatorStats, Epoch, FencingToken, FlightStatus, HostId, HostStatus, HostsStatus, Incoming,
    Key, Outcome, Request, RequestId, Response, ReuseWindow, encoded_len,
};

/// Open requests one connection may have at once (SPEC.md §8.9). A process
/// has one connection, so this bounds its concurrent calls; it is far above
/// what a real process runs at once and keeps a runaway client from growing
/// the coordinator's memory without bound.
pub const MAX_OPEN_REQUESTS_PER_CONNECTION: usize = 65_536;

/// Connections a term serves at once, open or in their handshake (SPEC.md
/// §11.3). Each costs the shell two tasks and up to a queue of answers; a
/// flood beyond this is refused at accept, so that it cannot exhaust
/// descriptors or memory.
pub const MAX_CONNECTIONS: usize = 4096;

/// The most endings a coordinator remembers for one host while its relay
/// window is open (SPEC.md §18.2): as many as one connection's open
/// requests, which is what one relay connection can have joined. A host
/// coordinator that dies again and again within its window would otherwise
/// make the coordinator remember, with their outcomes, every flight that
/// each of its connections had joined; past the bound an ending is not
/// remembered, and the host's rejoin of it is answered `interrupted`
/// (§8.2), which reruns nothing.
pub const MAX_HOST_ENDINGS: usize = MAX_OPEN_REQUESTS_PER_CONNECTION;

/// The coordinator of one term.
///
/// # Driving contract
///
/// - Create one per term with [`Coordinator::new`], with the term's epoch
///   from the election, and report [`Event::TermBegan`] first.
/// - Feed every fact as an [`Event`] through [`Coordinator::step`], in the
///   order it happened, and carry out the returned [`Effect`]s in the order
///   given before feeding the next event: the order of `Send`s on one
///   connection is the order the client must see. An
///   [`Effect::StartTimer`] comes back as [`Event::TimerFired`] once its
///   time has run out.
/// - Report [`Event::ConnectionAccepted`] at accept, and start the handshake
///   only if the coordinator did not close the connection in answer; then
///   [`Event::ConnectionOpened`] after the handshake and before any request
///   of that connection, or [`Event::ConnectionRefused`] when the shell
///   refuses it. Report [`Event::ConnectionClosed`] once a connection is gone
///   (also after carrying out an [`Effect::Close`]). Never reuse a
///   [`ConnectionId`] within a term. Events for connections that are not
///   open are ignored, so a late event is harmless.
/// - Report [`Event::StopRequested`] when the process asks the term to stop,
///   and end it only at [`Effect::EndTerm`] (SPEC.md §10.4).
/// - After [`Effect::EndTerm`], resign and close everything; the coordinator
///   ignores all further events.
///
/// The coordinator never reads a clock, sleeps or does I/O; the same code
/// runs in the tokio shell and in the model checker.
///
/// ```no_run
/// use single_flight_core::coordinator::{ConnectionId, Coordinator, Effect, Event, Term};
/// use single_flight_core::protocol::Epoch;
///
/// # fn next_event() -> Event { unimplemented!() }
/// # fn write_line(_: ConnectionId, _: String) {}
/// # fn close(_: ConnectionId) {}
/// # fn resign() {}
/// # fn after(_: std::time::Duration, _: Event) {}
/// let mut coordinator = Coordinator::new(Epoch::FIRST, Term::First);
/// let mut event = Event::TermBegan;
/// loop {
///     for effect in coordinator.step(event) {
///         match effect {
///             Effect::Send { connection, response } => {
///                 write_line(connection, single_flight_core::protocol::encode(&response))
///             }
///             Effect::Close { connection, .. } => close(connection),
///             // A timer whose event comes back through `next_event`.
///             Effect::StartTimer { timer, after: time } => after(time, Event::TimerFired { timer }),
///             Effect::EndTerm { .. } => return resign(),
///         }
///     }
///     event = next_event();
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Coordinator {
    epoch: Epoch,
    /// The sequence of the next token; `None` once the term has minted its
    /// last one (SPEC.md §6).
    next_sequence: Option<u32>,
    in_grace: bool,
    /// How long the grace window lasts, for its timer (SPEC.md §10.2).
    grace_window: Duration,
    /// Set by [`Effect::EndTerm`].
    ended: bool,
    /// The process asked the term to stop inside its grace window: it ends
    /// when the window does (SPEC.md §10.4).
    stopping: bool,
    connections: Table<ConnectionId, Table<RequestId, Party>>,
    /// Connections accepted and not yet opened, refused or closed: each
    /// holds a slot, as an open one does (SPEC.md §11.3).
    handshaking: BTreeSet<ConnectionId>,
    /// The most connections held at once, [`MAX_CONNECTIONS`] but in tests
    /// and the model.
    connection_limit: usize,
    flights: Table<Key, Flight>,
    /// Runs waiting for the grace window to end or for their flight to be
    /// reasserted, in arrival order (SPEC.md §8.4).
    waiting: Vec<PartyRef>,
    /// Flights of earlier terms that ended during this grace window, with
    /// their outcome (`None`: interrupted), for rejoins that arrive after
    /// the end (SPEC.md §8.4). Emptied when the window ends.
    ended_in_grace: BTreeMap<FencingToken, Option<Arc<Outcome>>>,
    /// The greatest token reasserted for each key in this grace window
    /// (SPEC.md §8.3). Emptied when the window ends.
    reasserted: BTreeMap<Key, FencingToken>,
    /// Values kept for reuse (SPEC.md §16.2), least recently landed first;
    /// at most one per key, at most [`MAX_KEPT_VALUES`] of them and
    /// [`MAX_KEPT_BYTES`] in all. A list, not a map: it is short, a lookup
    /// is a scan only for runs with a reuse window, and its order is the
    /// eviction order with no clock or counter to keep.
    kept: Vec<Kept>,
    /// The bytes of `kept`, as [`Kept::bytes`] counts them.
    kept_bytes: usize,
    /// The detached flights in progress (SPEC.md §15.2), by token.
    ///
    /// This and the next two are side tables rather than fields of each
    /// flight and party: a call that uses neither extension then pays only
    /// an emptiness check, where fields would make every party and flight
    /// larger and every step measurably slower (BENCHMARKS.md, "Detached
    /// calls and the reuse window").
    detached: BTreeSet<FencingToken>,
    /// The reuse windows of the flights in progress whose leader had one:
    /// how long their value is kept once they land (SPEC.md §16.2).
    keeps: BTreeMap<FencingToken, ReuseWindow>,
    /// The reuse windows of the plain runs that wait for the grace window to
    /// end (SPEC.md §16.3), for when they lead or join.
    waiting_reuse: BTreeMap<PartyRef, ReuseWindow>,
    /// The wait-for graph of nested flights (SPEC.md §17.2): a side table
    /// too, empty unless calls name a parent.
    waits: WaitFor,
    /// The relay windows (SPEC.md §18.2): side tables too, empty unless a
    /// host coordinator relays to this term.
    relays: Relays,
    /// The caller's buffer of effects while a step is in progress
    /// ([`Coordinator::step_into`]); always empty between steps.
    effects: Vec<Effect>,
    /// What this term decided, counted for operators (SPEC.md §8.11).
    counters: Tally,
    /// The seeded bug, if any (SPEC.md §12.3); zero-sized in a shipped
    /// build. Set in mutant.rs, the one home of the seeded bugs.
    pub(super) seeded: Seeded,
}

/// What a coordinator decided in its term, counted (SPEC.md §8.11), in
/// the form `status` reports it: plain integers, so that counting costs an
/// addition where the decision is made. They start at 0 with the term;
/// `connections_open` stays 0 here (`counters` fills it in). Each counts at
/// most one thing per request, party or connection, so none comes near
/// 2^64.
///
/// Kept out of the coordinator's equality and hash: they
/// record what happened and never decide anything, and the model checker
/// stores coordinators by their hash (model/src/state.rs). Counted into the
/// hash, two states that behave alike but were reached by different paths
/// would be two states, and the explored space would grow with every count
/// (SPEC.md §12; model/README.md, "What is modelled", gives the figures).
#[derive(Clone, Copy, Debug, Default)]
struct Tally(CoordinatorStats);

impl PartialEq for Tally {
    fn eq(&self, _: &Tally) -> bool {
        true
    }
}

impl Eq for Tally {}

impl Hash for Tally {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Party {
    key: Key,
    role: Role,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    /// Waits for the grace window to end (`flight: None`) or for the flight
    /// `flight` to be reasserted (a rejoin).
    Waiting {
        flight: Option<FencingToken>,
    },
    Leading {
        token: FencingToken,
    },
    Joining {
        token: FencingToken,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Flight {
    token: FencingToken,
    /// `None` while the flight is orphaned by a host whose relay connection
    /// closed (SPEC.md §18.2).
    leader: Option<PartyRef>,
    joiners: BTreeSet<PartyRef>,
}

/// The endings of flights, by key and token, with their outcome (`None`:
/// interrupted).
type Endings = BTreeMap<(Key, FencingToken), Option<Arc<Outcome>>>;

/// What the coordinator keeps for the hosts that relay to it (SPEC.md
/// §18.2). Every table is empty, and costs a check, while no host relays.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Relays {
    /// How long a relay window lasts; `None` when the coordinator keeps no
    /// relay windows, and relay connections are ordinary ones (§8.7).
    window: Option<Duration>,
    /// The open relay connections, with their host.
    host_of: BTreeMap<ConnectionId, HostId>,
    /// The open relay connection of each host: at most one.
    connection_of: BTreeMap<HostId, ConnectionId>,
    /// The open relay windows, each named by the relay connection whose
    /// close opened it last, as its timer is ([`Timer::RelayWindow`]).
    windows: BTreeMap<HostId, ConnectionId>,
    /// The flights in progress without a leader, by key, with their token
    /// and the host whose relay connection led them. By key and not by
    /// token, as the next two: a client may name one token with two keys,
    /// and one key has one flight in progress.
    orphans: BTreeMap<Key, (FencingToken, HostId)>,
    /// The flights in progress joined by a host whose relay connection
    /// closed while its window is open.
    joined_by: BTreeMap<(Key, FencingToken), BTreeSet<HostId>>,
    /// The endings of the flights joined by each host that ended in its
    /// window (`None`: interrupted), for its rejoins.
    endings: BTreeMap<HostId, Endings>,
}

/// A value kept for reuse (SPEC.md §16.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Kept {
    key: Key,
    token: FencingToken,
    outcome: Arc<Outcome>,
    /// What it counts against [`MAX_KEPT_BYTES`]: its key and its outcome's
    /// JSON text.
    bytes: usize,
}

impl Coordinator {
    /// The coordinator of the term `epoch`.
    pub fn new(epoch: Epoch, term: Term) -> Coordinator {
        let (in_grace, grace_window) = match term {
            Term::First => (false, Duration::ZERO),
            Term::AfterFailover { grace_window } => (true, grace_window),
        };
        Coordinator {
            epoch,
            next_sequence: Some(1),
            in_grace,
            grace_window,
            ended: false,
            stopping: false,
            connections: Table::default(),
            handshaking: BTreeSet::new(),
            connection_limit: MAX_CONNECTIONS,
            flights: Table::default(),
            waiting: Vec::new(),
            ended_in_grace: BTreeMap::new(),
            reasserted: BTreeMap::new(),
            kept: Vec::new(),
            kept_bytes: 0,
            detached: BTreeSet::new(),
            keeps: BTreeMap::new(),
            waiting_reuse: BTreeMap::new(),
            waits: WaitFor::default(),
            relays: Relays::default(),
            effects: Vec::new(),
            counters: Tally(CoordinatorStats {
                grace_windows: u64::from(in_grace),
                ..CoordinatorStats::default()
            }),
            seeded: Seeded::default(),
        }
    }

    /// Starts minting at `sequence` instead of 1, to test the end of a
    /// term's tokens (SPEC.md §8.9) without minting four billion of them.
    #[doc(hidden)]
    pub fn with_next_sequence(mut self, sequence: u32) -> Coordinator {
        self.next_sequence = Some(sequence);
        self
    }

    /// Holds at most `limit` connections at once instead of
    /// [`MAX_CONNECTIONS`], to test the limit (SPEC.md §11.3) without four
    /// thousand connections.
    #[doc(hidden)]
    pub fn with_connection_limit(mut self, limit: usize) -> Coordinator {
        self.connection_limit = limit;
        self
    }

    /// Keeps relay windows of `window` for the hosts that relay to this
    /// coordinator (SPEC.md §18.2): the term's grace window length (§10.2,
    /// §14.4), also for a term that opened without a grace window. A
    /// coordinator built without it treats a relay connection
    /// ([`Event::ConnectionOpened`] with a host) as an ordinary one: its
    /// close withdraws its parties at once (§8.7).
    pub fn with_relay_window(mut self, window: Duration) -> Coordinator {
        self.relays.window = Some(window);
        self
    }

    /// Whether this coordinator keeps relay windows (SPEC.md §18.1: its
    /// hello says so).
    pub fn keeps_relay_windows(&self) -> bool {
        self.relays.window.is_some()
    }

    /// The epoch of this coordinator's term (SPEC.md §6).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Whether the term's grace window is still open (SPEC.md §8.4).
    pub fn in_grace(&self) -> bool {
        self.in_grace
    }

    /// The flights in progress, by key, with their tokens.
    pub fn flights(&self) -> impl Iterator<Item = (&Key, FencingToken)> {
        self.flights
            .sorted()
            .into_iter()
            .map(|(key, flight)| (key, flight.token))
    }

    /// The values kept for reuse, least recently landed first (SPEC.md
    /// §16.2), with the tokens of the flights that landed them.
    pub fn kept(&self) -> impl Iterator<Item = (&Key, FencingToken, &Outcome)> {
        self.kept
            .iter()
            .map(|kept| (&kept.key, kept.token, &*kept.outcome))
    }

    /// The keys whose flight in progress is detached (SPEC.md §15.2), with
    /// its token and its number of joiners.
    pub fn detached(&self) -> impl Iterator<Item = (&Key, FencingToken, usize)> {
        self.flights
            .sorted()
            .into_iter()
            .filter(|(_, flight)| self.detached.contains(&flight.token))
            .map(|(key, flight)| (key, flight.token, flight.joiners.len()))
    }

    /// What this term has decided so far (SPEC.md §8.11).
    pub fn counters(&self) -> CoordinatorStats {
        CoordinatorStats {
            connections_open: self.connections.len() as u64,
            ..self.counters.0
        }
    }

    /// Whether `connection` is open as far as the coordinator knows.
    pub fn is_open(&self, connection: ConnectionId) -> bool {
        self.connections.contains_key(&connection)
    }

    /// Whether `connection` was accepted and holds a slot for its handshake:
    /// not yet opened, refused or closed (SPEC.md §11.3).
    pub fn in_handshake(&self, connection: ConnectionId) -> bool {
        self.handshaking.contains(&connection)
    }

    /// Takes one event and returns what the shell must do (SPEC.md §8.1).
    pub fn step(&mut self, event: Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.step_into(event, &mut effects);
        effects
    }

    /// Takes one event and appends what the shell must do to `effects`
    /// (SPEC.md §8.1), as [`Coordinator::step`] returns it: a shell that
    /// keeps one buffer for every step allocates none per event
    /// (BENCHMARKS.md, "`step` with hash tables").
    pub fn step_into(&mut self, event: Event, effects: &mut Vec<Effect>) {
        if self.ended {
            return;
        }
        // The caller's buffer is the step's own until it returns, so that
        // every rule pushes to `self.effects` as before.
        std::mem::swap(&mut self.effects, effects);
        self.take(event);
        std::mem::swap(&mut self.effects, effects);
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::TermBegan => {
                if self.in_grace {
                    self.effects.push(Effect::StartTimer {
                        timer: Timer::GraceWindow,
                        after: self.grace_window,
                    });
                }
            }
            Event::ConnectionAccepted { connection } => {
                self.accept(connection);
            }
            Event::ConnectionRefused { connection } => self.refuse(connection),
            Event::ConnectionOpened { connection, relay } => {
                if self.accept(connection) {
                    self.handshaking.remove(&connection);
                    if let Entry::Vacant(vacant) = self.connections.entry(connection) {
                        vacant.insert(Table::default());
                        if let Some(host) = relay {
                            self.relay_opened(connection, host);
                        }
                    }
                }
            }
            Event::RequestReceived {
                connection,
                request,
            } => {
                if self.is_open(connection) {
                    self.request(connection, request);
                }
            }
            Event::ConnectionClosed { connection } => {
                self.handshaking.remove(&connection);
                self.close(connection);
            }
            Event::TimerFired {
                timer: Timer::GraceWindow,
            } => self.end_grace(),
            Event::TimerFired {
                timer: Timer::Reuse { key, token },
            } => self.expire(&key, token),
            Event::TimerFired {
                timer: Timer::RelayWindow { host, closed },
            } => self.relay_window_ended(&host, closed),
            Event::StopRequested => self.stop_asked(),
        }
    }

    /// §10.4: a term asked to stop ends at once, unless its grace window is
    /// open: the flights of earlier terms that landed in the window are
    /// known to this term alone, and their rejoiners come back within the
    /// window for their outcomes; ended now, the term would leave them to
    /// the next one, which would tell them their flights were lost (§9.2).
    /// It then ends with the window (`end_grace`).
    fn stop_asked(&mut self) {
        self.stopping = true;
        if self.hook(Mutant::StopsInGraceAtOnce, self.in_grace, false) {
            return;
        }
        self.end_term(EndReason::Stopped);
    }

    /// Ends the term once: the shell resigns and closes every connection,
    /// and every later event is ignored.
    fn end_term(&mut self, reason: EndReason) {
        if !self.ended {
            self.ended = true;
            self.effects.push(Effect::EndTerm { reason });
        }
    }

    /// §11.3: an accepted connection takes a slot, or is refused at once
    /// when every slot is held. `true` when it holds one (also when it
    /// already did).
    fn accept(&mut self, connection: ConnectionId) -> bool {
        if self.is_open(connection) || self.in_handshake(connection) {
            return true;
        }
        if self.connections.len() + self.handshaking.len() >= self.connection_limit {
            self.counters.0.connections_refused += 1;
            self.effects.push(Effect::Close {
                connection,
                reason: CloseReason::TooManyConnections,
            });
            return false;
        }
        self.handshaking.insert(connection);
        true
    }

    /// §11.3, §8.11: a connection refused in its handshake gives its slot
    /// back, or failed handshakes would shut every client out for the term,
    /// and counts as refused.
    fn refuse(&mut self, connection: ConnectionId) {
        if !self.in_handshake(connection) {
            return;
        }
        self.counters.0.connections_refused += 1;
        if self.hook(Mutant::KeepsRefusedSlots, true, false) {
            self.handshaking.remove(&connection);
        }
    }

    fn request(&mut self, connection: ConnectionId, incoming: Incoming) {
        let request = match incoming {
            // §3.6: answered, and the connection keeps everything it has.
            Incoming::Unknown { id, .. } => {
                return self.send(connection, Response::Unsupported { id });
            }
            Incoming::Request(request) => request,
        };
        match request {
            Request::Run {
                id,
                key,
                flight,
                reuse,
                parent,
            } => {
                if self.open(connection, &id, &key) {
                    if let Some(parent) = parent {
                        self.waits
                            .insert((connection, id.clone()), parent, key.clone(), flight);
                    }
                    match flight {
                        None => self.run((connection, id), key, reuse),
                        Some(token) => {
                            self.counters.0.rejoins += 1;
                            self.rejoin((connection, id), key, token)
                        }
                    }
                }
            }
            Request::Land { id, outcome } => self.land((connection, id), outcome),
            Request::Cancel { id } => self.withdraw(&(connection, id), Withdrawal::Cancel),
            Request::Reassert {
                id,
                key,
                token,
                outcome,
                parent,
            } => {
                if self.open(connection, &id, &key) {
                    // A leader's edge comes back with its flight (§17.2);
                    // a landed or rejected reassert's goes with its party.
                    if let Some(parent) = parent {
                        self.waits
                            .insert((connection, id.clone()), parent, key.clone(), None);
                    }
                    self.reassert((connection, id), key, token, outcome);
                }
            }
            Request::Status { id } => self.status(connection, id),
            Request::Detach { id } => self.detach((connection, id)),
        }
    }

    /// §3.5: the flights in progress in key order, as many as fit in one
    /// line, and how many did not.
    fn status(&mut self, connection: ConnectionId, id: RequestId) {
        let mut room = STATUS_FLIGHTS_BYTES;
        // The hosts first: a cluster has few, and an operator who asks a
        // coordinator with more flights than fit still sees them all.
        let hosts = self.hosts_status(&mut room);
        let mut flights = Vec::new();
        for (key, flight) in self.flights.sorted() {
            let status = FlightStatus {
                key: key.clone(),
                token: flight.token,
                joiners: flight.joiners.len() as u64,
                detached: self.is_detached(flight.token),
            };
            // Its JSON and the comma before the next one.
            let Some(left) = room.checked_sub(encoded_len(&status) + 1) else {
                break;
            };
            room = left;
            flights.push(status);
        }
        let omitted = (self.flights.len() - flights.len()) as u64;
        // The runs that wait for the window, for an operator who wonders why
        // calls stall after a failover.
        let waiting = self.in_grace.then(|| {
            self.waiting
                .iter()
                .filter(|party| self.party(party).is_some())
                .count() as u64
        });
        let stats = self.counters();
        let response = Response::Status {
            id,
            flights,
            waiting,
            omitted: (omitted > 0).then_some(omitted),
            stats: Some(Box::new(stats)),
            hosts: hosts.map(Box::new),
            relay: None,
        };
        self.send(connection, response);
    }

    /// §3.5, §18.2: the connections by host, when this coordinator keeps
    /// relay windows (without them it knows no relay connection): the
    /// hosts with an open relay connection or relay window in host id
    /// order, as many as fit in `room`, which they use up.
    fn hosts_status(&self, room: &mut usize) -> Option<HostsStatus> {
        self.relays.window?;
        let relays = &self.relays;
        let mut orphans: BTreeMap<&HostId, u64> = BTreeMap::new();
        for (_, host) in relays.orphans.values() {
            *orphans.entry(host).or_default() += 1;
        }
        let named: BTreeSet<&HostId> = relays
            .connection_of
            .keys()
            .chain(relays.windows.keys())
            .collect();
        let mut listed = Vec::new();
        for host in &named {
            let connection = relays.connection_of.get(*host);
            let status = HostStatus {
                host: (*host).clone(),
                connections: u64::from(connection.is_some()),
                parties: connection
                    .and_then(|connection| self.connections.get(connection))
                    .map_or(0, |parties| parties.len() as u64),
                window: relays.windows.contains_key(*host),
                orphans: orphans.get(*host).copied().unwrap_or(0),
            };
            // Its JSON and the comma before the next one.
            let Some(left) = room.checked_sub(encoded_len(&status) + 1) else {
                break;
            };
            *room = left;
            listed.push(status);
        }
        Some(HostsStatus {
            direct: (self.connections.len() - relays.connection_of.len()) as u64,
            omitted: (named.len() - listed.len()) as u64,
            relays: listed,
        })
    }

    /// Opens a party for `id` in the role `Waiting`; `false` when the id is
    /// already open (§8.8: ignored) or the connection is over its limit
    /// (§8.9: closed).
    fn open(&mut self, connection: ConnectionId, id: &RequestId, key: &Key) -> bool {
        let Some(parties) = self.connections.get_mut(&connection) else {
            return false;
        };
        let full = parties.len() >= MAX_OPEN_REQUESTS_PER_CONNECTION;
        match parties.entry(id.clone()) {
            Entry::Occupied(_) => return false,
            Entry::Vacant(vacant) if !full => {
                vacant.insert(Party {
                    key: key.clone(),
                    role: Role::Waiting { flight: None },
                });
                return true;
            }
            Entry::Vacant(_) => {}
        }
        self.close(connection);
        self.effects.push(Effect::Close {
            connection,
            reason: CloseReason::TooManyOpenRequests,
        });
        false
    }

    /// §8.2: a plain run leads or joins; during the grace window it waits.
    /// A run with a reuse window takes a kept value first (§16.3); none is
    /// kept in the window, as no flight has been led in the term yet.
    fn run(&mut self, party: PartyRef, key: Key, reuse: Option<ReuseWindow>) {
        if self.hook(Mutant::GraceLetsRunsLead, self.in_grace, false) {
            // §17.2: a run that waits in the window counts, and is refused
            // if it closes a cycle through a held flight.
            if self.refuses_cycle(&party, &key, None) {
                return;
            }
            if let Some(window) = reuse {
                self.waiting_reuse.insert(party.clone(), window);
            }
            self.waiting.push(party);
        } else {
            self.lead_or_join(party, key, reuse);
        }
    }

    /// `reuse`: the run's window (§16.3).
    fn lead_or_join(&mut self, party: PartyRef, key: Key, reuse: Option<ReuseWindow>) {
        if self.reuse(&party, &key, reuse) || self.refuses_cycle(&party, &key, None) {
            return;
        }
        let in_progress = self.flights.get(&key);
        match self.hook(Mutant::SecondLeaderWhileInProgress, in_progress, None) {
            Some(flight) => {
                let token = flight.token;
                self.join(party, &key, token);
            }
            _ => self.lead(party, key, reuse),
        }
    }

    /// `keep`: the leader's reuse window, the flight's once it lands (§16.2).
    fn lead(&mut self, party: PartyRef, key: Key, keep: Option<ReuseWindow>) {
        let Some(token) = self.mint() else {
            // §8.9: the term has no tokens left. The party stays waiting; the
            // shell closes every connection and the next term takes over.
            self.end_term(EndReason::OutOfTokens);
            return;
        };
        self.set_role(&party, Role::Leading { token });
        let flight = Flight {
            token,
            leader: Some(party.clone()),
            joiners: BTreeSet::new(),
        };
        self.flights.insert(key, flight);
        if let Some(window) = keep {
            self.keeps.insert(token, window);
        }
        self.counters.0.flights_led += 1;
        let (connection, id) = party;
        self.send(connection, Response::Lead { id, token });
    }

    fn join(&mut self, party: PartyRef, key: &Key, token: FencingToken) {
        self.set_role(&party, Role::Joining { token });
        if let Some(flight) = self.flights.get_mut(key) {
            flight.joiners.insert(party.clone());
        }
        self.counters.0.joins += 1;
        let (connection, id) = party;
        self.send(connection, Response::Joined { id, flight: token });
    }

    /// §8.2: a rejoin joins its flight if it is in progress, waits during the
    /// grace window if that flight is held or may still be reasserted, and is
    /// otherwise interrupted. It never leads.
    fn rejoin(&mut self, party: PartyRef, key: Key, token: FencingToken) {
        if self.refuses_cycle(&party, &key, Some(token)) {
            return;
        }
        let in_progress = self.flights.get(&key).is_some_and(|f| f.token == token);
        if in_progress && self.hook(Mutant::JoinsHeldFlights, !self.in_grace, true) {
            return self.join(party, &key, token);
        }
        if let Some(outcome) = self.relay_ending(party.0, &key, token) {
            return self.finish(&party, outcome);
        }
        if let Some(outcome) = self.ended_in_grace.get(&token).cloned() {
            return self.finish(&party, outcome);
        }
        // In the window a flight in progress is held for its leader (§8.3):
        // nobody joins it before the window ends, because a later flight of
        // its key may still be reasserted and supersede it. A flight not
        // reasserted yet may still be, if it is of an earlier term and no
        // later flight of its key has been. (`<` or `<=` alike: a `latest`
        // equal to `token` means T was reasserted in this window, so it is in
        // progress, or it ended in the window and was answered above.)
        let may_return = in_progress
            || token.epoch() < self.epoch
                && self
                    .reasserted
                    .get(&key)
                    .is_none_or(|latest| *latest < token);
        if self.in_grace && may_return {
            self.set_role(
                &party,
                Role::Waiting {
                    flight: Some(token),
                },
            );
            return self.waiting.push(party);
        }
        // With the seeded bug, a rejoin whose key has no flight leads one.
        let key_has_flight = self.flights.contains_key(&key);
        if self.hook(Mutant::RejoinMayLead, true, key_has_flight) {
            return self.finish(&party, None);
        }
        self.lead(party, key, None);
    }

    /// §8.3: a leader of an earlier term claims its flight again: still
    /// running (`outcome: None`), or landed in a term that died before it
    /// acknowledged the land.
    fn reassert(
        &mut self,
        party: PartyRef,
        key: Key,
        token: FencingToken,
        outcome: Option<Outcome>,
    ) {
        if self.orphaned_by_host_of(party.0, &key, token) {
            self.counters.0.reasserts_accepted += 1;
            return self.adopt(party, &key, token, outcome);
        }
        let in_window = self.hook(Mutant::ReassertAfterGrace, self.in_grace, true);
        let latest = self.reasserted.get(&key).copied();
        // A running flight comes back only if it is the key's latest: a
        // greater token of the key was led after it ended (§8.3).
        let superseded = outcome.is_none() && latest.is_some_and(|latest| latest >= token);
        let accepted = in_window
            && token.epoch() < self.epoch
            && !self.ended_in_grace.contains_key(&token)
            && !superseded;
        if !accepted {
            self.counters.0.reasserts_rejected += 1;
            self.remove_party(&party);
            let (connection, id) = party;
            return self.send(connection, Response::Rejected { id });
        }
        self.counters.0.reasserts_accepted += 1;
        // Equal only for a second reassert of a flight in progress in this
        // window, which no client sends: a flight has one leader, which
        // reasserts once per connection, and the flight of a connection that
        // closed ended in the window, which refuses another reassert of it.
        if latest.is_none_or(|latest| latest < token) {
            self.reasserted.insert(key.clone(), token);
            // The flight of this key brought back earlier in this window is
            // older than this one: it had ended before this one was led.
            if let Some(older) = self.flights.get(&key).map(|f| (f.token, f.leader.clone())) {
                self.end_flight(&key, older.0, None);
                // An orphaned flight (§18.2) has no leader to tell.
                if let Some((connection, id)) = older.1 {
                    self.send(connection, Response::Rejected { id });
                }
            }
        }
        match outcome {
            Some(outcome) => self.landed_before(party, &key, token, outcome),
            None => self.lead_again(party, key, token),
        }
    }

    /// A running flight of an earlier term is in progress again, led by
    /// `party`, without an answer, and held for its leader until the window
    /// ends: the runs of its key keep waiting (§8.3, §8.4), so that if a
    /// later flight of the key is reasserted after it and supersedes it, no
    /// run has joined it to be interrupted.
    fn lead_again(&mut self, party: PartyRef, key: Key, token: FencingToken) {
        self.set_role(&party, Role::Leading { token });
        // A reasserted flight keeps no value (§16.2): its window was its
        // own term's, and a failover loses kept values anyway.
        let flight = Flight {
            token,
            leader: Some(party),
            joiners: BTreeSet::new(),
        };
        self.flights.insert(key.clone(), flight);
        // With the seeded bug, the plain runs of the key and the rejoins of
        // this flight join it at once.
        let joins_at_once = self.hook(Mutant::JoinsHeldFlights, None, Some([None, Some(token)]));
        self.settle_waiting(&key, |waiting| match waiting {
            // Rejoins of an older flight of the key: it was superseded.
            Some(t) if t < token => Settle::Finish(None),
            // Plain runs, rejoins of this flight and of newer ones wait.
            _ => {
                if joins_at_once.is_some_and(|joining| joining.contains(&waiting)) {
                    Settle::Join(token)
                } else {
                    Settle::Wait
                }
            }
        });
    }

    /// A flight of an earlier term that landed, but whose land was not
    /// acknowledged before its term died, hands its outcome to its
    /// rejoiners; it does not become live again, so it displaces nothing
    /// and no new call joins it (§8.3).
    fn landed_before(&mut self, party: PartyRef, key: &Key, token: FencingToken, outcome: Outcome) {
        let (outcome, answer) = shareable(outcome);
        self.count_land(matches!(outcome, Outcome::Value(_)));
        let outcome = Arc::new(outcome);
        if self.hook(Mutant::ForgetsLandingsInGrace, true, false) {
            self.ended_in_grace.insert(token, Some(outcome.clone()));
        }
        self.settle_waiting(key, |waiting| match waiting {
            Some(t) if t == token => Settle::Finish(Some(outcome.clone())),
            _ => Settle::Wait,
        });
        self.remove_party(&party);
        let (connection, id) = party;
        self.send(connection, answer(id));
    }

    /// Applies `rule` to each run of `key` that waits, in arrival order; the
    /// runs that go on waiting keep their place, so that the window's end
    /// still settles every run in arrival order (§8.4).
    fn settle_waiting(&mut self, key: &Key, rule: impl Fn(Option<FencingToken>) -> Settle) {
        let mut still = Vec::with_capacity(self.waiting.len());
        for waiting in std::mem::take(&mut self.waiting) {
            let flight = match self.party(&waiting) {
                Some(Party {
                    key: of,
                    role: Role::Waiting { flight },
                    ..
                }) if of == key => *flight,
                _ => {
                    still.push(waiting);
                    continue;
                }
            };
            let settled = rule(flight);
            if !matches!(settled, Settle::Wait) {
                self.forget_waiting_reuse(&waiting);
            }
            match settled {
                Settle::Join(token) => self.join(waiting, key, token),
                Settle::JoinLanded(token, outcome) => {
                    self.join(waiting.clone(), key, token);
                    self.finish(&waiting, Some(outcome));
                }
                Settle::Finish(outcome) => self.finish(&waiting, outcome),
                Settle::Wait => still.push(waiting),
            }
        }
        self.waiting = still;
    }

    /// §8.5: the leader ends its flight; anyone else is rejected. An outcome
    /// too large to share ends the flight too, with the failure that takes
    /// its place, and the leader is told that its own was not handed over.
    fn land(&mut self, party: PartyRef, outcome: Outcome) {
        let leading = match self.party(&party) {
            Some(Party {
                key,
                role: Role::Leading { token },
                ..
            }) => Some((key.clone(), *token)),
            _ => None,
        };
        let (connection, id) = party;
        let Some((key, token)) = leading else {
            return self.send(connection, Response::Rejected { id });
        };
        let (outcome, answer) = shareable(outcome);
        let value = matches!(outcome, Outcome::Value(_));
        if let Some((keep, outcome)) = self.end_flight(&key, token, Some(outcome)) {
            self.count_land(value);
            self.send(connection, answer(id));
            // §16.2: what is kept is the key's latest landing or nothing: a
            // caller must not reuse an older value than one that landed
            // since. A value of a flight whose leader has a reuse window is
            // kept; a failure never is (it is worth calling again at once).
            if self.hook(Mutant::ReusesOlderValues, true, false) {
                self.forget_kept(|kept| kept.key == key);
            }
            if let (Some(window), Some(outcome)) = (keep, outcome)
                && self.hook(Mutant::KeepsFailures, value, true)
            {
                self.keep(key, token, outcome, window);
            }
        } else {
            self.send(connection, Response::Rejected { id });
        }
    }

    /// §8.6: a waiting run or a joiner leaves silently; a leader's flight is
    /// interrupted.
    fn withdraw(&mut self, party: &PartyRef, why: Withdrawal) {
        let (connection, id) = party;
        let removed = self
            .connections
            .get_mut(connection)
            .and_then(|parties| parties.remove(id));
        if let Some(removed) = removed {
            self.withdrawn(party, removed, why);
        }
    }

    /// Undoes what `party`, already removed from its connection, was doing.
    fn withdrawn(&mut self, party: &PartyRef, Party { key, role, .. }: Party, why: Withdrawal) {
        if !self.waits.is_empty() {
            self.waits.remove(party);
        }
        match role {
            Role::Waiting { .. } => {
                self.waiting.retain(|waiting| waiting != party);
                self.forget_waiting_reuse(party);
            }
            Role::Joining { token } => {
                if let Some(flight) = self.flights.get_mut(&key).filter(|f| f.token == token) {
                    flight.joiners.remove(party);
                    // The last joiner of a detached flight may have left
                    // (§15.2); stop_if_unwanted judges it.
                    if self.hook(Mutant::KeepsUnwantedFlights, true, false) {
                        self.stop_if_unwanted(&key);
                    }
                }
            }
            Role::Leading { token } => {
                let closed = matches!(why, Withdrawal::Close);
                if self.hook(Mutant::LeaderCloseStrandsJoiners, false, closed) {
                    self.flights.remove(&key);
                } else {
                    self.end_flight(&key, token, None);
                }
            }
        }
    }

    /// §8.7: the connection is forgotten first, so that nothing more is sent
    /// on it, then everything it had is withdrawn.
    fn close(&mut self, connection: ConnectionId) {
        let Some(parties) = self.connections.remove(&connection) else {
            return;
        };
        let host = if self.relays.host_of.is_empty() {
            None
        } else {
            self.relays.host_of.remove(&connection)
        };
        // The seeded bug of SPEC.md §12.3: a relay connection's close taken
        // for an ordinary one (§8.7), whose flights are interrupted at once.
        if let Some(host) = self.hook(Mutant::InterruptsRelayedAtOnce, host, None) {
            return self.relay_closed(connection, host, parties);
        }
        for (id, party) in parties.into_sorted() {
            self.withdrawn(&(connection, id), party, Withdrawal::Close);
        }
    }

    /// Ends the flight `token` of `key`, if it is in progress: every joiner is
    /// answered with the outcome (`None`: interrupted) and the leader's party
    /// is closed. When it was in progress, returns its reuse window (§16.2)
    /// and the outcome.
    fn end_flight(
        &mut self,
        key: &Key,
        token: FencingToken,
        outcome: Option<Outcome>,
    ) -> Option<(Option<ReuseWindow>, Option<Arc<Outcome>>)> {
        if self.flights.get(key).is_none_or(|f| f.token != token) {
            return None;
        }
        let flight = self.flights.remove(key)?;
        if !self.detached.is_empty() {
            self.detached.remove(&token);
        }
        if !self.relays.orphans.is_empty() {
            self.relays.orphans.remove(key);
        }
        // §18.2: the hosts whose relay connection had joined it remember its
        // ending for their rejoins while their window is open.
        let joined_by = if self.relays.joined_by.is_empty() {
            None
        } else {
            self.relays.joined_by.remove(&(key.clone(), token))
        };
        let keep = if self.keeps.is_empty() {
            None
        } else {
            self.keeps.remove(&token)
        };
        if outcome.is_none() {
            self.counters.0.interruptions += 1;
        }
        // In the window every flight in progress is of an earlier epoch (no
        // flight is led in it, §8.4; a reassert is of an earlier term): `<`
        // and `<=` cannot differ here.
        let held = self.in_grace && flight.token.epoch() < self.epoch;
        // One outcome for every joiner, the window's runs and the kept value,
        // shared rather than copied for each; and not even made shareable
        // when nobody takes it, as for most flights (an allocation saved).
        let wanted = !flight.joiners.is_empty() || held || keep.is_some() || joined_by.is_some();
        let mut outcome = outcome.filter(|_| wanted).map(Arc::new);
        for host in joined_by.into_iter().flatten() {
            let endings = self.relays.endings.entry(host).or_default();
            if endings.len() < MAX_HOST_ENDINGS {
                endings.insert((key.clone(), token), outcome.clone());
            }
        }
        for joiner in &flight.joiners {
            self.finish(joiner, outcome.clone());
        }
        if held {
            // §8.4: a held flight ended in the window. Its rejoins get its
            // ending. The key's plain runs that wait were made while it ran,
            // so they may take its outcome as joiners would have; when it was
            // interrupted they wait on, to lead or join when the window ends.
            self.settle_waiting(key, |waiting| match (waiting, &outcome) {
                (Some(t), _) if t == token => Settle::Finish(outcome.clone()),
                (None, Some(landed)) => Settle::JoinLanded(token, landed.clone()),
                _ => Settle::Wait,
            });
            if self.hook(Mutant::ForgetsLandingsInGrace, true, false) {
                // Moved, not copied: a held flight keeps no value (§16.2),
                // so nobody needs it back.
                self.ended_in_grace.insert(flight.token, outcome.take());
            }
        }
        if let Some(leader) = &flight.leader {
            self.remove_party(leader);
        }
        Some((keep, outcome))
    }

    /// §8.4: the held flights become ordinary ones; waiting plain runs lead
    /// or join, one leader per key, in arrival order; rejoins join their
    /// flight if it is held, and are interrupted otherwise.
    fn end_grace(&mut self) {
        if !self.in_grace {
            return;
        }
        self.in_grace = false;
        self.ended_in_grace.clear();
        self.reasserted.clear();
        for waiting in std::mem::take(&mut self.waiting) {
            match self.party(&waiting).cloned() {
                Some(Party {
                    key,
                    role: Role::Waiting { flight: None },
                }) => {
                    let reuse = self.forget_waiting_reuse(&waiting);
                    self.lead_or_join(waiting, key, reuse);
                }
                Some(Party {
                    key,
                    role:
                        Role::Waiting {
                            flight: Some(token),
                        },
                    ..
                }) => {
                    if self.flights.get(&key).is_some_and(|f| f.token == token) {
                        // §17.2: the reasserts of the window may have closed
                        // a cycle through this rejoin since it arrived.
                        if !self.refuses_cycle(&waiting, &key, Some(token)) {
                            self.join(waiting, &key, token);
                        }
                    } else {
                        self.finish(&waiting, None);
                    }
                }
                _ => {}
            }
            if self.ended {
                return;
            }
        }
        // §15.2: a detached flight that nobody rejoined is stopped now.
        if !self.detached.is_empty() {
            let keys: Vec<Key> = self
                .flights
                .sorted()
                .into_iter()
                .map(|(key, _)| key.clone())
                .collect();
            for key in keys {
                self.stop_if_unwanted(&key);
            }
        }
        // §10.4: a term asked to stop in its window ends with it, once the
        // window has settled what waited for it, so that those answers are
        // written before the connections close.
        if self.stopping {
            self.end_term(EndReason::Stopped);
        }
    }

    fn is_detached(&self, token: FencingToken) -> bool {
        !self.detached.is_empty() && self.detached.contains(&token)
    }

    /// The reuse window of a run that waited, which it no longer does.
    fn forget_waiting_reuse(&mut self, party: &PartyRef) -> Option<ReuseWindow> {
        if self.waiting_reuse.is_empty() {
            return None;
        }
        self.waiting_reuse.remove(party)
    }

    /// §15.2: the caller of the leading party `party` left. Its flight goes
    /// on while it has joiners; without any, it is stopped at once.
    /// Anything but a leading party is ignored, as a `cancel` of an id that
    /// is not open is.
    fn detach(&mut self, party: PartyRef) {
        let Some(Party {
            key,
            role: Role::Leading { token },
        }) = self.party(&party).cloned()
        else {
            return;
        };
        if self.flights.get(&key).is_none_or(|f| f.token != token) {
            return;
        }
        self.detached.insert(token);
        if self.hook(Mutant::DetachStopsWaitedFlights, false, true) {
            return self.stop(&key);
        }
        self.stop_if_unwanted(&key);
    }

    /// §15.2: a detached flight of `key` that nobody joins any more is
    /// stopped, outside the grace window; in the window its rejoins and the
    /// key's waiting runs may still join it when the window ends, which
    /// judges it then.
    fn stop_if_unwanted(&mut self, key: &Key) {
        let unwanted = self
            .flights
            .get(key)
            .is_some_and(|flight| flight.joiners.is_empty() && self.is_detached(flight.token));
        if unwanted && !self.in_grace {
            self.stop(key);
        }
    }

    /// Ends the flight of `key` as interrupted and tells its leader to stop
    /// its work (§15.2).
    fn stop(&mut self, key: &Key) {
        let Some((token, leader)) = self.flights.get(key).map(|f| (f.token, f.leader.clone()))
        else {
            return;
        };
        self.end_flight(key, token, None);
        // An orphaned flight is never detached (§18.2), so it always has a
        // leader here; one without would have nobody to tell.
        if let Some((connection, id)) = leader {
            self.send(connection, Response::Stop { id });
        }
    }

    /// §16.3: a run with a reuse window whose key has a kept value receives
    /// it, and its party is closed. `false` when it does not (no window, or
    /// nothing kept).
    fn reuse(&mut self, party: &PartyRef, key: &Key, window: Option<ReuseWindow>) -> bool {
        if self.kept.is_empty() || self.hook(Mutant::ReusesWithoutWindow, window.is_none(), false) {
            return false;
        }
        let Some(kept) = self.kept.iter().find(|kept| kept.key == *key) else {
            return false;
        };
        let (flight, outcome) = (kept.token, Box::new(Outcome::clone(&kept.outcome)));
        self.remove_party(party);
        let (connection, id) = party.clone();
        self.send(
            connection,
            Response::Reused {
                id,
                flight,
                outcome,
            },
        );
        true
    }

    /// §16.2: keeps the value that the flight `token` of `key` landed (the
    /// key's older one is forgotten already), and evicts the least recently
    /// landed while over the bounds; the shell reports its expiry.
    fn keep(&mut self, key: Key, token: FencingToken, outcome: Arc<Outcome>, window: ReuseWindow) {
        let bytes = key.as_str().len() + outcome.encoded_len();
        self.kept.push(Kept {
            key: key.clone(),
            token,
            outcome,
            bytes,
        });
        self.kept_bytes += bytes;
        while self.kept.len() > MAX_KEPT_VALUES || self.kept_bytes > MAX_KEPT_BYTES {
            let evicted = self.kept.remove(0);
            self.kept_bytes -= evicted.bytes;
        }
        self.effects.push(Effect::StartTimer {
            timer: Timer::Reuse { key, token },
            after: window.as_duration(),
        });
    }

    /// §16.2: the reuse window of a kept value is over. A late expiry, of a
    /// value replaced or evicted since, changes nothing.
    fn expire(&mut self, key: &Key, token: FencingToken) {
        if self.hook(Mutant::ReusesPastExpiry, true, false) {
            self.forget_kept(|kept| kept.key == *key && kept.token == token);
        }
    }

    fn forget_kept(&mut self, which: impl Fn(&Kept) -> bool) {
        if self.kept.is_empty() {
            return;
        }
        let bytes = &mut self.kept_bytes;
        self.kept.retain(|kept| {
            let forget = which(kept);
            if forget {
                *bytes -= kept.bytes;
            }
            !forget
        });
    }

    /// Answers a joiner or a rejoin for good: `landed` with the outcome, or
    /// `interrupted`; its party is closed (§8.10).
    fn finish(&mut self, party: &PartyRef, outcome: Option<Arc<Outcome>>) {
        self.remove_party(party);
        let (connection, id) = party.clone();
        let response = match outcome {
            Some(outcome) => Response::Landed { id, outcome },
            None => Response::Interrupted { id },
        };
        self.send(connection, response);
    }

    /// The one place that sends: never on a closed connection (§8.10).
    fn send(&mut self, connection: ConnectionId, response: Response) {
        if self.is_open(connection) {
            self.effects.push(Effect::Send {
                connection,
                response,
            });
        }
    }

    /// Counts an outcome handed over by its leader, a value or a failure
    /// (§8.11).
    fn count_land(&mut self, value: bool) {
        if value {
            self.counters.0.lands_value += 1;
        } else {
            self.counters.0.lands_failure += 1;
        }
    }

    fn mint(&mut self) -> Option<FencingToken> {
        let sequence = self.next_sequence?;
        self.next_sequence = sequence.checked_add(1);
        let epoch = self.hook(Mutant::TokenIgnoresEpoch, self.epoch, Epoch::FIRST);
        FencingToken::new(epoch, sequence)
    }

    fn party(&self, (connection, id): &PartyRef) -> Option<&Party> {
        self.connections.get(connection)?.get(id)
    }

    fn set_role(&mut self, (connection, id): &PartyRef, role: Role) {
        if let Some(party) = self
            .connections
            .get_mut(connection)
            .and_then(|parties| parties.get_mut(id))
        {
            party.role = role;
        }
    }

    fn remove_party(&mut self, party: &PartyRef) {
        let (connection, id) = party;
        if let Some(parties) = self.connections.get_mut(connection) {
            parties.remove(id);
        }
        if !self.waits.is_empty() {
            self.waits.remove(party);
        }
    }

    /// §17.2: a party made by the work of a flight in progress, about to wait
    /// for the flight of `key` (`only`: a rejoin's, which it waits for only
    /// while it is that key's flight), is answered `cycle` and closed when
    /// that flight's work waits, through nested calls, for the parent's.
    /// `true` when it was refused.
    fn refuses_cycle(&mut self, party: &PartyRef, key: &Key, only: Option<FencingToken>) -> bool {
        if self.waits.is_empty() {
            return false;
        }
        let Some(parent) = self.waits.parent(party) else {
            return false;
        };
        let start = self
            .flights
            .get(key)
            .map(|flight| flight.token)
            .filter(|token| only.is_none_or(|only| only == *token));
        let flights = &self.flights;
        let found = self
            .waits
            .cycle(key, start, parent, |key| flights.get(key).map(|f| f.token));
        let found = self.hook(Mutant::SkipsCycleCheck, found, None);
        // With the seeded bug, any wait for a flight in progress is taken
        // for a cycle of its key alone.
        let any_wait = start.map(|_| vec![key.clone()]);
        let Some(keys) = self.hook(Mutant::RefusesNonCycle, found, any_wait) else {
            return false;
        };
        self.remove_party(party);
        let (connection, id) = party.clone();
        self.send(connection, Response::Cycle { id, keys });
        true
    }
}

/// The relay windows (SPEC.md §18.2): what a host coordinator's lost
/// connection leaves behind, and how its next connection takes it back.
impl Coordinator {
    /// A relay connection of `host` opened: the host's older one, if still
    /// open, is closed first, as a relay connection that ended. Without
    /// relay windows it is an ordinary connection.
    fn relay_opened(&mut self, connection: ConnectionId, host: HostId) {
        if self.relays.window.is_none() {
            return;
        }
        if let Some(older) = self.relays.connection_of.get(&host).copied() {
            self.close(older);
            self.effects.push(Effect::Close {
                connection: older,
                reason: CloseReason::RelayReplaced,
            });
        }
        self.relays.host_of.insert(connection, host.clone());
        self.relays.connection_of.insert(host, connection);
    }

    /// The relay connection `connection` of `host`, already forgotten, is
    /// gone: its flights are orphaned, its joiners leave their flights and
    /// the host remembers them, its waiting runs are withdrawn, and the
    /// host's relay window opens, or opens again from now.
    fn relay_closed(
        &mut self,
        connection: ConnectionId,
        host: HostId,
        parties: Table<RequestId, Party>,
    ) {
        self.relays.connection_of.remove(&host);
        self.relays.windows.insert(host.clone(), connection);
        for (id, party) in parties.into_sorted() {
            let party_ref = (connection, id);
            let in_progress = |token| {
                self.flights
                    .get(&party.key)
                    .is_some_and(|f| f.token == token)
            };
            match party.role {
                // A leader's party goes when its flight ends (`end_flight`),
                // so a party still leading leads a flight in progress.
                Role::Leading { token } => {
                    // Its ending is remembered for the host too: the host's
                    // own joiners of it were the relay's, not parties here
                    // (§18.3), and rejoin after the host's failover.
                    let flight = (party.key.clone(), token);
                    self.relays
                        .joined_by
                        .entry(flight)
                        .or_default()
                        .insert(host.clone());
                    self.orphan(&party_ref, &party.key, token, &host);
                }
                Role::Joining { token } => {
                    if in_progress(token) {
                        let flight = (party.key.clone(), token);
                        let hosts = self.relays.joined_by.entry(flight).or_default();
                        hosts.insert(host.clone());
                    }
                    self.withdrawn(&party_ref, party, Withdrawal::Close);
                }
                _ => self.withdrawn(&party_ref, party, Withdrawal::Close),
            }
        }
        if let Some(window) = self.relays.window {
            self.effects.push(Effect::StartTimer {
                timer: Timer::RelayWindow {
                    host,
                    closed: connection,
                },
                after: window,
            });
        }
    }

    /// The flight `token` of `key`, led by `party` of a relay connection of
    /// `host` that closed, goes on without a leader. Its leader's edge goes
    /// with its party (§17.2), and its detached mark with its leader's
    /// caller (§15.2): an orphaned flight is never stopped for having no
    /// joiners. Its reuse window stays, for a landed reassert.
    fn orphan(&mut self, party: &PartyRef, key: &Key, token: FencingToken, host: &HostId) {
        if let Some(flight) = self.flights.get_mut(key) {
            flight.leader = None;
        }
        self.relays
            .orphans
            .insert(key.clone(), (token, host.clone()));
        if !self.waits.is_empty() {
            self.waits.remove(party);
        }
        if !self.detached.is_empty() {
            self.detached.remove(&token);
        }
    }

    /// Whether the flight `token` of `key` is in progress and orphaned by
    /// the host of the relay connection `connection`.
    fn orphaned_by_host_of(
        &self,
        connection: ConnectionId,
        key: &Key,
        token: FencingToken,
    ) -> bool {
        if self.relays.orphans.is_empty() {
            return false;
        }
        let Some(host) = self.relays.host_of.get(&connection) else {
            return false;
        };
        self.relays
            .orphans
            .get(key)
            .is_some_and(|(orphan, by)| *orphan == token && by == host)
    }

    /// A reassert of a flight orphaned by its host takes it back: running,
    /// its party leads it again without an answer; landed, it lands it as
    /// its leader's `land` would (§8.5).
    fn adopt(&mut self, party: PartyRef, key: &Key, token: FencingToken, outcome: Option<Outcome>) {
        self.relays.orphans.remove(key);
        self.set_role(&party, Role::Leading { token });
        if let Some(flight) = self.flights.get_mut(key) {
            flight.leader = Some(party.clone());
        }
        if let Some(outcome) = outcome {
            self.land(party, outcome);
        }
    }

    /// The ending remembered for the host of the relay connection
    /// `connection` of the flight `token` of `key` that it had joined, if
    /// that flight ended in the host's window.
    fn relay_ending(
        &self,
        connection: ConnectionId,
        key: &Key,
        token: FencingToken,
    ) -> Option<Option<Arc<Outcome>>> {
        if self.relays.endings.is_empty() {
            return None;
        }
        let host = self.relays.host_of.get(&connection)?;
        let endings = self.relays.endings.get(host)?;
        endings.get(&(key.clone(), token)).cloned()
    }

    /// The relay window of `host` that the close of `closed` opened is
    /// over, unless a later close opened it again: the flights still
    /// orphaned by the host are interrupted, and what the host had joined
    /// is forgotten.
    fn relay_window_ended(&mut self, host: &HostId, closed: ConnectionId) {
        if self.relays.windows.get(host) != Some(&closed) {
            return;
        }
        self.relays.windows.remove(host);
        // In key order, as the orphans are kept.
        let orphaned: Vec<(Key, FencingToken)> = self
            .relays
            .orphans
            .iter()
            .filter(|(_, (_, by))| by == host)
            .map(|(key, (token, _))| (key.clone(), *token))
            .collect();
        for (key, token) in orphaned {
            self.end_flight(&key, token, None);
        }
        self.relays.endings.remove(host);
        self.relays.joined_by.retain(|_, hosts| {
            hosts.remove(host);
            !hosts.is_empty()
        });
    }
}

/// The outcome that a land or a landed reassert hands to the joiners, and how
/// its leader is answered (§3.4, §8.5): `ack` when the outcome itself is
/// handed over; `rejected` when it is too large for a joiner's `landed` line,
/// which then carries the `ValueTooLarge` failure instead, so that the
/// joiners still get an answer and the coordinator never sends a line over
/// the frame limit.
fn shareable(outcome: Outcome) -> (Outcome, fn(RequestId) -> Response) {
    match outcome.shareable() {
        Ok(outcome) => (outcome, |id| Response::Ack { id }),
        Err(failure) => (Outcome::Failure(failure), |id| Response::Rejected { id }),
    }
}

/// What becomes of a run that waited, when its key's flight is settled.
enum Settle {
    /// Joins the flight (only a seeded bug joins a flight in the window).
    Join(FencingToken),
    /// Joins the flight that just landed and receives its outcome at once.
    JoinLanded(FencingToken, Arc<Outcome>),
    Finish(Option<Arc<Outcome>>),
    Wait,
}

/// Why a party is withdrawn; the two differ only for a seeded bug.
#[derive(Clone, Copy)]
enum Withdrawal {
    Cancel,
    Close,
}
