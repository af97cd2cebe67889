//! The relay's rules (SPEC.md §18.3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::io::{CloseReason, Effect, Event};
use super::mutant::{Mutant, Seeded};
use crate::coordinator::{self, ConnectionId, MAX_CONNECTIONS, MAX_OPEN_REQUESTS_PER_CONNECTION};
use crate::protocol::limits::MAX_FRAME_BYTES;
use crate::protocol::{
    CoordinatorIdentity, FencingToken, GroupStatus, HostId, Incoming, Key, Outcome, Reason,
    RelayStatus, Request, RequestId, Response, encoded_len,
};

/// A local party, named as the coordinator names one: its connection and the
/// `id` of its request (SPEC.md §8.1).
type PartyRef = (ConnectionId, RequestId);

/// The relay of one host term: it serves the host's processes on the host
/// directory's socket and stands for them at the cluster's coordinator, over
/// one upstream connection (SPEC.md §18.3).
///
/// # Driving contract
///
/// - Create one per host term with [`Relay::new`]. It starts without an
///   upstream connection: requests wait until [`Event::UpstreamReady`].
/// - Feed every fact as an [`Event`] through [`Relay::step`], in the order
///   it happened, and carry out the returned [`Effect`]s in the order given
///   before feeding the next event: the order of `Send`s on one connection is
///   the order the client must see, and the order of `SendUpstream`s the
///   order the cluster must see.
/// - Report the local connections as to the coordinator
///   ([`crate::coordinator::Coordinator`]'s contract): accepted, then opened
///   or refused, then closed, never reusing a [`ConnectionId`] within the
///   host term.
/// - Report [`Event::UpstreamReady`] once a connection to the cluster has
///   finished its relay hello (SPEC.md §18.1), after
///   [`Event::UpstreamGreeted`] with the coordinator its hello named (for
///   `status`, §3.5), [`Event::UpstreamResponse`]
///   for each line it carries, and [`Event::UpstreamLost`] once it is gone;
///   then connect again. The relay has closed every local connection by then
///   ([`CloseReason::UpstreamLost`]): the processes reconnect and replay their
///   calls (§9.4), which wait for the next upstream connection.
///
/// Like the coordinator, the relay never reads a clock, sleeps or does I/O,
/// and is plain data (`Eq + Hash`), so that a model checker can store it.
/// Its upstream ids and the arrival order of its parties are numbers drawn
/// from one counter, so two relays that differ only in how they numbered
/// their groups are different states.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Relay {
    /// The open local connections and what each has open.
    connections: BTreeMap<ConnectionId, Local>,
    /// Local connections accepted and not yet opened, refused or closed:
    /// each holds a slot, as an open one does (SPEC.md §11.3).
    handshaking: BTreeSet<ConnectionId>,
    /// The most local connections held at once, [`MAX_CONNECTIONS`] but in
    /// tests.
    connection_limit: usize,
    /// The most upstream parties open at once,
    /// [`MAX_OPEN_REQUESTS_PER_CONNECTION`] but in tests: the cluster's
    /// coordinator closes a connection that opens one more (§8.9), which
    /// would cost the whole host its calls.
    upstream_limit: usize,
    /// Whether an upstream connection is ready.
    upstream_ready: bool,
    /// Groups sent upstream and not ended: the upstream parties open, as far
    /// as the cluster's coordinator will know once it has read what was sent.
    upstream_parties: usize,
    /// The next number for a group, a status request or a party's arrival.
    /// One counter for all three: a group's upstream id is its number in
    /// decimal, unique for the relay's life, so that a late answer to a
    /// withdrawn group never reaches a newer one.
    next_number: u64,
    /// The groups, by number: the local parties that one upstream request
    /// stands for.
    groups: BTreeMap<u64, Group>,
    /// The `status` requests relayed or waiting to be, by number, with their
    /// asker.
    asks: BTreeMap<u64, PartyRef>,
    /// Groups not yet sent upstream, in arrival order (their numbers grow):
    /// no upstream connection is ready, or the upstream bound is reached.
    queued_groups: BTreeSet<u64>,
    /// `status` requests not yet sent upstream: no upstream connection is
    /// ready. They never wait for the bound, which counts parties, and a
    /// `status` opens none at the cluster's coordinator (§3.5).
    queued_asks: BTreeSet<u64>,
    /// The plain group of each key that takes new plain requests.
    plain: BTreeMap<Key, u64>,
    /// The groups that take rejoins of a token: those answered with it, and
    /// the rejoins of it not yet answered. The first (oldest) is chosen.
    rejoinable: BTreeMap<(Key, FencingToken), BTreeSet<u64>>,
    /// The host id this relay relays under (SPEC.md §18.6), for `status`
    /// (§3.5); `None` when it was not given one.
    host: Option<HostId>,
    /// The cluster's coordinator of the upstream connection, as its hello
    /// named it, for `status` (§3.5); `None` without a connection or when
    /// the shell did not report its hello.
    cluster: Option<CoordinatorIdentity>,
    /// The caller's buffer of effects while a step is in progress
    /// ([`Relay::step_into`]); always empty between steps.
    effects: Vec<Effect>,
    /// A seeded bug (SPEC.md §12.3), only in the model's build: zero-sized
    /// and always none in every other.
    pub(super) seeded: Seeded,
}

/// What one open local connection has open.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Local {
    /// Its parties (runs and reasserts), each in one group.
    parties: BTreeMap<RequestId, Membership>,
    /// Its `status` requests not yet answered, by number. They count against
    /// the connection's open requests (§8.9) while they wait, so that a
    /// process cannot queue them without bound while no upstream is ready.
    asks: BTreeSet<u64>,
}

/// Where a local party is: its group, and its number in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Membership {
    group: u64,
    arrival: u64,
}

/// The local parties that one upstream party stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Group {
    key: Key,
    /// The request to send upstream, its id to be replaced by the group's
    /// upstream id; `None` once sent.
    request: Option<Request>,
    /// What upstream answered so far.
    answer: Answer,
    /// The party that leads, once there is one; `None` again when it left
    /// after its land went upstream.
    leader: Option<PartyRef>,
    /// The parties that wait or join, by arrival.
    members: BTreeMap<u64, PartyRef>,
    /// Whether new plain requests or rejoins may enter (SPEC.md §18.3):
    /// only plain groups and groups of rejoins, until their leader lands or
    /// detaches, or they end.
    open: bool,
    /// The token under which the group is in `Relay::rejoinable`.
    indexed: Option<FencingToken>,
    detach: Detach,
    /// The leader's land, sent or riding on its reassert.
    landing: Option<Landing>,
}

/// What upstream answered a group so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    /// Nothing yet: its parties wait.
    Asked,
    /// `lead`, or a running `reassert` (which is not answered when
    /// accepted, §8.3): the group has a leader.
    Led(FencingToken),
    /// `joined`: its parties join.
    Joined(FencingToken),
}

/// Where a leader's `detach` is (SPEC.md §15, §18.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Detach {
    No,
    /// The leader detached; relayed once no other party is left.
    Asked,
    /// Relayed upstream.
    Relayed,
}

/// A leader's land, until upstream answers it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Landing {
    /// What the joiners receive: the outcome, or the `ValueTooLarge` failure
    /// in its place (§3.4).
    outcome: Arc<Outcome>,
    /// The outcome was over `MAX_OUTCOME_BYTES`: the cluster's coordinator
    /// hands its joiners the `ValueTooLarge` failure and answers `rejected`
    /// (§8.5), and so does the relay.
    too_large: bool,
}

impl Landing {
    fn of(outcome: &Outcome) -> Landing {
        match outcome.clone().shareable() {
            Ok(outcome) => Landing {
                outcome: Arc::new(outcome),
                too_large: false,
            },
            Err(failure) => Landing {
                outcome: Arc::new(Outcome::Failure(failure)),
                too_large: true,
            },
        }
    }
}

impl Default for Relay {
    fn default() -> Relay {
        Relay::new()
    }
}

impl Relay {
    /// The relay of a new host term, with no local connection and no
    /// upstream connection yet.
    pub fn new() -> Relay {
        Relay {
            connections: BTreeMap::new(),
            handshaking: BTreeSet::new(),
            connection_limit: MAX_CONNECTIONS,
            upstream_limit: MAX_OPEN_REQUESTS_PER_CONNECTION,
            upstream_ready: false,
            upstream_parties: 0,
            next_number: 1,
            groups: BTreeMap::new(),
            asks: BTreeMap::new(),
            queued_groups: BTreeSet::new(),
            queued_asks: BTreeSet::new(),
            plain: BTreeMap::new(),
            rejoinable: BTreeMap::new(),
            host: None,
            cluster: None,
            effects: Vec::new(),
            seeded: Seeded::default(),
        }
    }

    /// Names the host this relay relays under (SPEC.md §18.6), which its
    /// `status` answers report (§3.5).
    pub fn with_host(mut self, host: HostId) -> Relay {
        self.host = Some(host);
        self
    }

    /// Holds at most `limit` local connections at once instead of
    /// [`MAX_CONNECTIONS`], to test the limit (SPEC.md §11.3).
    #[doc(hidden)]
    pub fn with_connection_limit(mut self, limit: usize) -> Relay {
        self.connection_limit = limit;
        self
    }

    /// Opens at most `limit` upstream parties at once instead of
    /// [`MAX_OPEN_REQUESTS_PER_CONNECTION`], to test the bound (SPEC.md
    /// §18.3) without sixty-five thousand groups.
    #[doc(hidden)]
    pub fn with_upstream_limit(mut self, limit: usize) -> Relay {
        self.upstream_limit = limit;
        self
    }

    /// Whether the local `connection` is open as far as the relay knows.
    pub fn is_open(&self, connection: ConnectionId) -> bool {
        self.connections.contains_key(&connection)
    }

    /// Whether the local `connection` was accepted and holds a slot for its
    /// handshake: not yet opened, refused or closed (SPEC.md §11.3).
    pub fn in_handshake(&self, connection: ConnectionId) -> bool {
        self.handshaking.contains(&connection)
    }

    /// The upstream parties open: groups sent upstream and not ended
    /// (SPEC.md §18.3's bound).
    pub fn upstream_parties(&self) -> usize {
        self.upstream_parties
    }

    /// The groups, sent upstream or waiting to be.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Takes one event and returns what the shell must do (SPEC.md §18.3).
    pub fn step(&mut self, event: Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.step_into(event, &mut effects);
        effects
    }

    /// Takes one event and appends what the shell must do to `effects`, as
    /// [`Relay::step`] returns it: a shell that keeps one buffer for every
    /// step allocates none per event.
    pub fn step_into(&mut self, event: Event, effects: &mut Vec<Effect>) {
        // The caller's buffer is the step's own until it returns, so that
        // every rule pushes to `self.effects`.
        std::mem::swap(&mut self.effects, effects);
        self.take(event);
        // Whatever the event freed (an upstream connection, an upstream
        // party), the groups and statuses that wait for it go now.
        self.flush();
        std::mem::swap(&mut self.effects, effects);
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::ConnectionAccepted { connection } => {
                self.accept(connection);
            }
            Event::ConnectionRefused { connection } => {
                self.handshaking.remove(&connection);
            }
            Event::ConnectionOpened { connection } => {
                if self.accept(connection) {
                    self.handshaking.remove(&connection);
                    self.connections.entry(connection).or_default();
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
            Event::UpstreamReady => self.upstream_ready = true,
            Event::UpstreamGreeted { coordinator } => self.cluster = Some(coordinator),
            Event::UpstreamResponse(response) => self.upstream_response(response),
            Event::UpstreamLost => self.upstream_lost(),
            Event::UpstreamUnavailable { reason } => self.upstream_unavailable(&reason),
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
            self.effects.push(Effect::Close {
                connection,
                reason: CloseReason::Bound(coordinator::CloseReason::TooManyConnections),
            });
            return false;
        }
        self.handshaking.insert(connection);
        true
    }

    fn request(&mut self, connection: ConnectionId, incoming: Incoming) {
        let request = match incoming {
            // §3.6: answered here; the cluster's coordinator knows no more
            // ops than this version does.
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
                if !self.admit(connection, Some(&id)) {
                    return;
                }
                let party = (connection, id.clone());
                let plain = reuse.is_none() && parent.is_none();
                match flight {
                    None if plain => self.plain(party, key),
                    Some(token) if plain => self.rejoin(party, key, token),
                    // A run with `reuse` or `parent` is decided for itself
                    // (§16.3, §17.2), so it goes upstream as it is.
                    _ => {
                        let request = Request::Run {
                            id,
                            key: key.clone(),
                            flight,
                            reuse,
                            parent,
                        };
                        self.found(party, key, request, Answer::Asked, None);
                    }
                }
            }
            Request::Reassert {
                id,
                key,
                token,
                outcome,
                parent,
            } => {
                if !self.admit(connection, Some(&id)) {
                    return;
                }
                // A reassert is its leader's own (§8.3): it leads from the
                // start, as it would at the cluster's coordinator, where an
                // accepted running reassert is not answered.
                let landing = outcome.as_ref().map(Landing::of);
                let party = (connection, id.clone());
                let request = Request::Reassert {
                    id,
                    key: key.clone(),
                    token,
                    outcome,
                    parent,
                };
                self.found(party, key, request, Answer::Led(token), landing);
            }
            Request::Land { id, outcome } => self.land((connection, id), outcome),
            Request::Cancel { id } => self.withdraw(&(connection, id)),
            Request::Status { id } => self.ask((connection, id)),
            Request::Detach { id } => self.detach(&(connection, id)),
        }
    }

    /// §8.8, §8.9: whether a request may open one more on its connection: a
    /// run or reassert (`id`) whose id is already open is ignored, and a
    /// request beyond [`MAX_OPEN_REQUESTS_PER_CONNECTION`] closes the
    /// connection instead.
    fn admit(&mut self, connection: ConnectionId, id: Option<&RequestId>) -> bool {
        let Some(local) = self.connections.get(&connection) else {
            return false;
        };
        if id.is_some_and(|id| local.parties.contains_key(id)) {
            return false;
        }
        if local.parties.len() + local.asks.len() < MAX_OPEN_REQUESTS_PER_CONNECTION {
            return true;
        }
        self.close(connection);
        self.effects.push(Effect::Close {
            connection,
            reason: CloseReason::Bound(coordinator::CloseReason::TooManyOpenRequests),
        });
        false
    }

    fn number(&mut self) -> u64 {
        let number = self.next_number;
        self.next_number += 1;
        number
    }

    /// §18.3: a plain request joins its key's plain group, or opens one.
    fn plain(&mut self, party: PartyRef, key: Key) {
        if let Some(&group) = self.plain.get(&key) {
            return self.enter(group, party);
        }
        let request = Request::Run {
            id: party.1.clone(),
            key: key.clone(),
            flight: None,
            reuse: None,
            parent: None,
        };
        let group = self.found(party, key.clone(), request, Answer::Asked, None);
        if let Some(opened) = self.groups.get_mut(&group) {
            opened.open = true;
        }
        self.plain.insert(key, group);
    }

    /// §18.3: a rejoin of `token` joins a group answered with it, or waits
    /// with one that rejoins it, or opens one.
    fn rejoin(&mut self, party: PartyRef, key: Key, token: FencingToken) {
        let taking = self
            .rejoinable
            .get(&(key.clone(), token))
            .and_then(|groups| groups.first().copied());
        if let Some(group) = taking {
            return self.enter(group, party);
        }
        let request = Request::Run {
            id: party.1.clone(),
            key: key.clone(),
            flight: Some(token),
            reuse: None,
            parent: None,
        };
        let group = self.found(party, key, request, Answer::Asked, None);
        if let Some(opened) = self.groups.get_mut(&group) {
            opened.open = true;
        }
        self.index(group, token);
    }

    /// Opens a group for `party` alone, closed to new requests, and queues
    /// its request for upstream. A group whose `answer` is `Led` (a
    /// reassert's) has the party as its leader.
    fn found(
        &mut self,
        party: PartyRef,
        key: Key,
        request: Request,
        answer: Answer,
        landing: Option<Landing>,
    ) -> u64 {
        let number = self.number();
        let mut group = Group {
            key,
            request: Some(request),
            answer,
            leader: None,
            members: BTreeMap::new(),
            open: false,
            indexed: None,
            detach: Detach::No,
            landing,
        };
        if matches!(answer, Answer::Led(_)) {
            group.leader = Some(party.clone());
        } else {
            group.members.insert(number, party.clone());
        }
        self.member(
            &party,
            Membership {
                group: number,
                arrival: number,
            },
        );
        self.groups.insert(number, group);
        self.queued_groups.insert(number);
        number
    }

    /// `party` enters the open group `number`; it is answered `joined` at
    /// once when the group was answered already (§18.3).
    fn enter(&mut self, number: u64, party: PartyRef) {
        let arrival = self.number();
        self.member(
            &party,
            Membership {
                group: number,
                arrival,
            },
        );
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        group.members.insert(arrival, party.clone());
        if let Answer::Led(token) | Answer::Joined(token) = group.answer {
            let (connection, id) = party;
            self.send(connection, Response::Joined { id, flight: token });
        }
    }

    fn member(&mut self, (connection, id): &PartyRef, membership: Membership) {
        if let Some(local) = self.connections.get_mut(connection) {
            local.parties.insert(id.clone(), membership);
        }
    }

    /// The group takes rejoins of `token` (and no longer those of another).
    fn index(&mut self, number: u64, token: FencingToken) {
        self.unindex(number);
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        group.indexed = Some(token);
        self.rejoinable
            .entry((group.key.clone(), token))
            .or_default()
            .insert(number);
    }

    fn unindex(&mut self, number: u64) {
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        let Some(token) = group.indexed.take() else {
            return;
        };
        let entry = (group.key.clone(), token);
        if let Some(groups) = self.rejoinable.get_mut(&entry) {
            groups.remove(&number);
            if groups.is_empty() {
                self.rejoinable.remove(&entry);
            }
        }
    }

    /// §18.3: the group takes no new requests: its leader landed or
    /// detached, or it ends.
    fn close_to_new(&mut self, number: u64) {
        self.unindex(number);
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        group.open = false;
        if self.plain.get(&group.key) == Some(&number) {
            self.plain.remove(&group.key);
        }
    }

    /// The group that `party` leads with no land sent yet, if any.
    fn leading(&self, (connection, id): &PartyRef) -> Option<u64> {
        let membership = self.connections.get(connection)?.parties.get(id)?;
        let group = self.groups.get(&membership.group)?;
        let leads = group
            .leader
            .as_ref()
            .is_some_and(|(c, i)| c == connection && i == id);
        (leads && group.landing.is_none()).then_some(membership.group)
    }

    /// §18.3: a leader's land goes upstream; only upstream's answer settles
    /// its joiners and the leader. Anyone else's is rejected here.
    fn land(&mut self, party: PartyRef, outcome: Outcome) {
        let Some(number) = self.leading(&party) else {
            let (connection, id) = party;
            return self.send(connection, Response::Rejected { id });
        };
        // A new request would receive an outcome made before it was, or be
        // interrupted with the group for nothing.
        self.close_to_new(number);
        let landing = Landing::of(&outcome);
        let upstream = upstream_id(number);
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        match &mut group.request {
            None => self.effects.push(Effect::SendUpstream(Request::Land {
                id: upstream,
                outcome,
            })),
            // A reassert still waiting for an upstream connection (only a
            // reassert's group leads before it is sent): the outcome rides
            // on it, which makes it the landed reassert that a client
            // reconnecting after its work finished sends (§9.4).
            Some(Request::Reassert {
                outcome: carried, ..
            }) => *carried = Some(outcome),
            Some(_) => {}
        }
        group.landing = Some(landing);
        // The seeded bug of SPEC.md §12.3: settled here, as if upstream had
        // acknowledged already.
        if self.hook(Mutant::AcksBeforeUpstream, false, true) {
            self.settle_land(number, true);
        }
    }

    /// §8.6 through §18.3: a `cancel` withdraws the party; an id that is not
    /// open is ignored.
    fn withdraw(&mut self, (connection, id): &PartyRef) {
        let removed = self
            .connections
            .get_mut(connection)
            .and_then(|local| local.parties.remove(id));
        if let Some(membership) = removed {
            self.withdrawn(&(*connection, id.clone()), membership);
        }
    }

    /// Undoes what `party`, already removed from its connection, was doing
    /// in its group (§18.3, "Withdrawals").
    fn withdrawn(&mut self, party: &PartyRef, membership: Membership) {
        let number = membership.group;
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        if group.leader.as_ref() == Some(party) {
            group.leader = None;
            if group.landing.is_some() {
                // Its land is upstream already, and is answered there: the
                // joiners still receive its ending then.
                if group.members.is_empty() {
                    self.end(number);
                }
                return;
            }
            // §8.6, §8.7: the leader's flight is interrupted upstream, and
            // its joiners here.
            self.cancel_upstream(number);
            if let Some(ended) = self.end(number) {
                self.answer_all(ended.members.into_values(), |id| Response::Interrupted {
                    id,
                });
            }
            return;
        }
        group.members.remove(&membership.arrival);
        if group.members.is_empty() && group.leader.is_none() {
            // The last party of the group left: nobody here waits for its
            // upstream party any more. After a land, that party is over
            // once the land is read.
            if group.landing.is_none() {
                self.cancel_upstream(number);
            }
            self.end(number);
        } else {
            self.relay_detach(number);
        }
    }

    fn cancel_upstream(&mut self, number: u64) {
        if self
            .groups
            .get(&number)
            .is_some_and(|group| group.request.is_none())
        {
            self.effects.push(Effect::SendUpstream(Request::Cancel {
                id: upstream_id(number),
            }));
        }
    }

    /// §8.7 through §18.3: the connection is forgotten first, so that nothing
    /// more is sent on it, then each of its parties is withdrawn.
    fn close(&mut self, connection: ConnectionId) {
        let Some(local) = self.connections.remove(&connection) else {
            return;
        };
        for number in local.asks {
            self.asks.remove(&number);
            self.queued_asks.remove(&number);
        }
        for (id, membership) in local.parties {
            self.withdrawn(&(connection, id), membership);
        }
    }

    /// §15, §18.3: a leader's `detach` closes its group to new requests, and
    /// is relayed once the group has no other party. Anything but a leader
    /// with no land sent is ignored, as by the coordinator (§15.2).
    fn detach(&mut self, party: &PartyRef) {
        let Some(number) = self.leading(party) else {
            return;
        };
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        if group.detach != Detach::No {
            return;
        }
        group.detach = Detach::Asked;
        self.close_to_new(number);
        self.relay_detach(number);
    }

    /// Relays the leader's `detach` when it is due: the group was sent, its
    /// leader is still there with no land sent, and no other party is left.
    /// Relayed earlier, upstream could stop the flight that the group's
    /// joiners wait for, since they are not joiners there.
    fn relay_detach(&mut self, number: u64) {
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        let due = group.detach == Detach::Asked
            && group.request.is_none()
            && group.members.is_empty()
            && group.leader.is_some()
            && group.landing.is_none();
        if due {
            group.detach = Detach::Relayed;
            self.effects.push(Effect::SendUpstream(Request::Detach {
                id: upstream_id(number),
            }));
        }
    }

    /// §18.3: a `status` is relayed, and its answer returned to the asker.
    fn ask(&mut self, party: PartyRef) {
        if !self.admit(party.0, None) {
            return;
        }
        let number = self.number();
        if let Some(local) = self.connections.get_mut(&party.0) {
            local.asks.insert(number);
        }
        self.asks.insert(number, party);
        self.queued_asks.insert(number);
    }

    /// Sends what waits for upstream, in arrival order: every `status`, and
    /// the groups while the bound allows (§18.3).
    fn flush(&mut self) {
        if !self.upstream_ready {
            return;
        }
        loop {
            let group = self
                .queued_groups
                .first()
                .copied()
                .filter(|_| self.upstream_parties < self.upstream_limit);
            let ask = self.queued_asks.first().copied();
            match (group, ask) {
                (Some(group), Some(ask)) if group < ask => self.send_group(group),
                (_, Some(ask)) => self.send_ask(ask),
                (Some(group), None) => self.send_group(group),
                (None, None) => return,
            }
        }
    }

    fn send_group(&mut self, number: u64) {
        self.queued_groups.remove(&number);
        let Some(request) = self
            .groups
            .get_mut(&number)
            .and_then(|group| group.request.take())
        else {
            return;
        };
        self.upstream_parties += 1;
        self.effects.push(Effect::SendUpstream(with_request_id(
            request,
            upstream_id(number),
        )));
        // A leader that detached while its reassert waited.
        self.relay_detach(number);
    }

    fn send_ask(&mut self, number: u64) {
        self.queued_asks.remove(&number);
        self.effects.push(Effect::SendUpstream(Request::Status {
            id: upstream_id(number),
        }));
    }

    /// §3.5, §18.3: the cluster's `status` answer with this relay's own
    /// view added as `relay` (another `relay` in it, which no cluster
    /// coordinator sends, is replaced), cut to fit one line: the host's
    /// groups go first, then the cluster's flights, then its hosts, each
    /// counted in its `omitted`.
    fn with_relay_status(&self, response: Response) -> Response {
        let Response::Status {
            id,
            flights,
            waiting,
            omitted,
            stats,
            hosts,
            relay: _,
        } = response
        else {
            return response;
        };
        let mut groups: Vec<(&Key, u64, GroupStatus)> = self
            .groups
            .iter()
            .map(|(number, group)| {
                let token = match group.answer {
                    Answer::Led(token) | Answer::Joined(token) => Some(token),
                    Answer::Asked => group.indexed,
                };
                let parties = u64::from(group.leader.is_some()) + group.members.len() as u64;
                let status = GroupStatus {
                    key: group.key.clone(),
                    token,
                    parties,
                };
                (&group.key, *number, status)
            })
            .collect();
        groups.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let relay = RelayStatus {
            host: self.host.clone(),
            connections: self.connections.len() as u64,
            groups: groups.into_iter().map(|(_, _, status)| status).collect(),
            omitted: 0,
            cluster: self.cluster.clone(),
        };
        // The line's length without its `\n`, measured once, then lowered
        // by each item dropped (its JSON and the comma after it; one byte
        // too many for the last item of a list, three at most in all).
        let whole = Response::Status {
            id,
            flights,
            waiting,
            omitted,
            stats,
            hosts,
            relay: Some(Box::new(relay)),
        };
        let mut length = encoded_len(&whole);
        // Taken apart again, without copying the lists, to be cut.
        let Response::Status {
            id,
            mut flights,
            waiting,
            mut omitted,
            stats,
            mut hosts,
            relay: Some(relay),
        } = whole
        else {
            unreachable!("built just above");
        };
        let mut relay = *relay;
        // Room for the three `omitted` counts that the cuts may add or
        // lengthen, at their largest, and the three bytes the estimate may
        // be short.
        const OMITTED_MEMBERS_BYTES: usize = 4 * ",\"omitted\":18446744073709551615".len();
        while length + OMITTED_MEMBERS_BYTES > MAX_FRAME_BYTES {
            let cut = if let Some(group) = relay.groups.pop() {
                relay.omitted += 1;
                encoded_len(&group)
            } else if let Some(flight) = flights.pop() {
                omitted = Some(omitted.unwrap_or(0) + 1);
                encoded_len(&flight)
            } else if let Some(host) = hosts.as_mut().and_then(|hosts| hosts.relays.pop()) {
                if let Some(hosts) = hosts.as_mut() {
                    hosts.omitted += 1;
                }
                encoded_len(&host)
            } else {
                break;
            };
            length = length.saturating_sub(cut + 1);
        }
        Response::Status {
            id,
            flights,
            waiting,
            omitted,
            stats,
            hosts,
            relay: Some(Box::new(relay)),
        }
    }

    /// Ends the group `number`: it is forgotten, with its indexes, its
    /// upstream party and its parties' places on their connections. Returns
    /// it, for its parties' answers.
    fn end(&mut self, number: u64) -> Option<Group> {
        self.close_to_new(number);
        let group = self.groups.remove(&number)?;
        if !self.queued_groups.remove(&number) {
            self.upstream_parties -= 1;
        }
        let parties = group.leader.iter().chain(group.members.values());
        for (connection, id) in parties {
            if let Some(local) = self.connections.get_mut(connection)
                && local
                    .parties
                    .get(id)
                    .is_some_and(|membership| membership.group == number)
            {
                local.parties.remove(id);
            }
        }
        Some(group)
    }

    /// Answers `parties` in the order of §8.5 (connections in the order they
    /// were accepted, the ids of one connection by their bytes), skipping
    /// those whose connection closed.
    fn answer_all(
        &mut self,
        parties: impl IntoIterator<Item = PartyRef>,
        response: impl Fn(RequestId) -> Response,
    ) {
        let mut parties: Vec<PartyRef> = parties.into_iter().collect();
        parties.sort_unstable();
        for (connection, id) in parties {
            self.send(connection, response(id));
        }
    }

    fn upstream_response(&mut self, response: Response) {
        let Some(number) = number_of(response.id()) else {
            return;
        };
        if self.asks.contains_key(&number) && !self.queued_asks.contains(&number) {
            // A `status`'s answer, or `unsupported` from a cluster older
            // than it (§3.5); nothing else answers one.
            if matches!(
                response,
                Response::Status { .. } | Response::Unsupported { .. }
            ) && let Some((connection, id)) = self.asks.remove(&number)
            {
                if let Some(local) = self.connections.get_mut(&connection) {
                    local.asks.remove(&number);
                }
                let response = self.with_relay_status(response);
                self.send(connection, with_response_id(response, id));
            }
            return;
        }
        let Some(group) = self
            .groups
            .get(&number)
            .filter(|group| group.request.is_none())
        else {
            return;
        };
        // What upstream may say depends on what it said before; anything
        // else (which the cluster's coordinator never sends) is ignored, so
        // that no party is answered against §8.10.
        let (answer, detach) = (group.answer, group.detach);
        let led = matches!(answer, Answer::Led(_));
        let landing = group.landing.is_some();
        match response {
            Response::Lead { token, .. } if answer == Answer::Asked => {
                self.led(number, token);
            }
            Response::Joined { flight, .. } if answer == Answer::Asked => {
                self.joined(number, flight);
            }
            // §15.3: a cluster older than `detach` answers it `unsupported`,
            // which is for the leader alone; the group goes on.
            Response::Unsupported { .. } if detach == Detach::Relayed => {
                let leader = self.groups.get_mut(&number).and_then(|group| {
                    group.detach = Detach::No;
                    group.leader.clone()
                });
                if let Some((connection, id)) = leader {
                    self.send(connection, Response::Unsupported { id });
                }
            }
            Response::Landed { .. }
            | Response::Interrupted { .. }
            | Response::Reused { .. }
            | Response::Cycle { .. }
            | Response::Unavailable { .. }
            | Response::Unsupported { .. }
                if !led =>
            {
                if let Some(ended) = self.end(number) {
                    self.answer_all(ended.members.into_values(), |id| {
                        with_response_id(response.clone(), id)
                    });
                }
            }
            Response::Ack { .. } if landing => self.settle_land(number, true),
            // §8.5: a land upstream refused; or, before any land, §8.3: a
            // reassert refused, or superseded by a later one.
            Response::Rejected { .. } if led => self.settle_land(number, false),
            // §15.2: nobody waits for the detached flight any more.
            Response::Stop { .. } if led => {
                if let Some(ended) = self.end(number) {
                    self.answer_all(ended.members.into_values(), |id| Response::Interrupted {
                        id,
                    });
                    if let Some((connection, id)) = ended.leader {
                        self.send(connection, Response::Stop { id });
                    }
                }
            }
            _ => {}
        }
    }

    /// §18.3: upstream `lead`: the group's first party leads, the others
    /// join, in arrival order.
    fn led(&mut self, number: u64, token: FencingToken) {
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        group.answer = Answer::Led(token);
        let Some((_, leader)) = group.members.pop_first() else {
            return;
        };
        group.leader = Some(leader.clone());
        let joiners: Vec<PartyRef> = group.members.values().cloned().collect();
        if group.open {
            self.index(number, token);
        }
        let (connection, id) = leader;
        self.send(connection, Response::Lead { id, token });
        for (connection, id) in joiners {
            self.send(connection, Response::Joined { id, flight: token });
        }
    }

    /// §18.3: upstream `joined`: every party joins, in arrival order.
    fn joined(&mut self, number: u64, token: FencingToken) {
        let Some(group) = self.groups.get_mut(&number) else {
            return;
        };
        group.answer = Answer::Joined(token);
        let joiners: Vec<PartyRef> = group.members.values().cloned().collect();
        if group.open {
            self.index(number, token);
        }
        for (connection, id) in joiners {
            self.send(connection, Response::Joined { id, flight: token });
        }
    }

    /// §18.3, "Land": upstream answered the leader's land (`acked`) or
    /// refused it or its reassert. The joiners are answered first, then the
    /// leader, as by the coordinator (§8.5).
    fn settle_land(&mut self, number: u64, acked: bool) {
        let Some(ended) = self.end(number) else {
            return;
        };
        let landing = ended.landing;
        // Only an ack hands the outcome over; a refused land hands over the
        // `ValueTooLarge` failure when it was refused for its size, as the
        // cluster's coordinator did to its own joiners, and nothing
        // otherwise.
        let handed = landing
            .as_ref()
            .filter(|landing| acked || landing.too_large)
            .map(|landing| landing.outcome.clone());
        self.answer_all(ended.members.into_values(), |id| match &handed {
            Some(outcome) => Response::Landed {
                id,
                outcome: outcome.clone(),
            },
            None => Response::Interrupted { id },
        });
        if let Some((connection, id)) = ended.leader {
            // An ack of an outcome too large, which no coordinator sends,
            // still did not hand the leader's outcome over.
            let response = if acked && landing.is_some_and(|landing| !landing.too_large) {
                Response::Ack { id }
            } else {
                Response::Rejected { id }
            };
            self.send(connection, response);
        }
    }

    /// §18.3: every local connection is closed and every group forgotten;
    /// connections still in their handshake have no call yet, and stay.
    fn upstream_lost(&mut self) {
        if !self.upstream_ready {
            return;
        }
        self.upstream_ready = false;
        self.cluster = None;
        for connection in std::mem::take(&mut self.connections).into_keys() {
            self.effects.push(Effect::Close {
                connection,
                reason: CloseReason::UpstreamLost,
            });
        }
        self.upstream_parties = 0;
        self.groups.clear();
        self.asks.clear();
        self.queued_groups.clear();
        self.queued_asks.clear();
        self.plain.clear();
        self.rejoinable.clear();
    }

    /// §18.3, "Unavailable": an attempt to reach the cluster failed while
    /// no upstream connection is ready. Every run and rejoin that waits to
    /// be sent ends `unavailable` with the reason, as a direct process's
    /// waiting calls end when no coordinator can be had (§14.6). A leader's
    /// reassert waits on: its work runs, and its flight may still come
    /// back. `status` requests wait on too, bounded by their asker's own
    /// patience.
    fn upstream_unavailable(&mut self, reason: &Reason) {
        if self.upstream_ready {
            return;
        }
        let every_group = self.hook(Mutant::UnavailableEndsReasserts, false, true);
        let waiting: Vec<u64> = self
            .queued_groups
            .iter()
            .copied()
            .filter(|number| {
                self.groups
                    .get(number)
                    .is_some_and(|group| every_group || group.answer == Answer::Asked)
            })
            .collect();
        for number in waiting {
            if let Some(ended) = self.end(number) {
                self.answer_all(ended.members.into_values(), |id| Response::Unavailable {
                    id,
                    reason: reason.clone(),
                });
            }
        }
    }

    /// The one place that sends locally: never on a closed connection.
    fn send(&mut self, connection: ConnectionId, response: Response) {
        if self.is_open(connection) {
            self.effects.push(Effect::Send {
                connection,
                response,
            });
        }
    }
}

/// The upstream id of the group or `status` request `number`: its decimal
/// text.
fn upstream_id(number: u64) -> RequestId {
    RequestId::new(number.to_string()).expect("a decimal u64 is a valid id")
}

/// The number that an upstream id names; `None` for an id the relay never
/// sends. Only the canonical decimal text names one, so that `"01"` cannot
/// alias `"1"`.
fn number_of(id: &RequestId) -> Option<u64> {
    let number: u64 = id.as_str().parse().ok()?;
    (number.to_string() == id.as_str()).then_some(number)
}

/// `request` with the id `id`.
fn with_request_id(mut request: Request, id: RequestId) -> Request {
    match &mut request {
        Request::Run { id: old, .. }
        | Request::Land { id: old, .. }
        | Request::Cancel { id: old }
        | Request::Reassert { id: old, .. }
        | Request::Status { id: old }
        | Request::Detach { id: old } => *old = id,
    }
    request
}

/// `response` with the id `id`: an upstream answer, for a local party.
fn with_response_id(mut response: Response, id: RequestId) -> Response {
    match &mut response {
        Response::Lead { id: old, .. }
        | Response::Joined { id: old, .. }
        | Response::Landed { id: old, .. }
        | Response::Interrupted { id: old }
        | Response::Ack { id: old }
        | Response::Rejected { id: old }
        | Response::Unsupported { id: old }
        | Response::Stop { id: old }
        | Response::Reused { id: old, .. }
        | Response::Cycle { id: old, .. }
        | Response::Unavailable { id: old, .. }
        | Response::Status { id: old, .. } => *old = id,
    }
    response
}
