//! What the model checker stores for one moment of a directory: the real
//! state machines, the connections between them, the budgets of the bounded
//! actions, and the history the properties need (SPEC.md §12.1).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use single_flight_core::client::{CallId, Client};
use single_flight_core::coordinator::{ConnectionId, Coordinator};
use single_flight_core::protocol::{Epoch, FencingToken};
use single_flight_core::protocol::{Key, Outcome, Request, Response};

use crate::directory::Ending;

/// One moment of the directory. Its hash is its class under permutations
/// of the processes (see the `Hash` impl below).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// The client processes, by slot; `None` once a process died for good.
    /// Slots are interchangeable (nothing else names a slot), which is what
    /// makes symmetry reduction sound (see the `Hash` impl below).
    pub processes: Vec<Option<Process>>,
    /// The coordinator of the current term. A dead coordinator is replaced
    /// in the same step by the next term's (the election is atomic in the
    /// model; see `Action::CoordinatorDies`).
    pub coordinator: Coordinator,
    /// The coordinator of the previous term while it goes on serving the
    /// connections it had when the current term began (SPEC.md §12.5), with
    /// what its term owns; `None` when terms do not overlap.
    pub deposed: Option<Deposed>,
    /// The durable epoch of the election (SPEC.md §7.3): the epoch of the
    /// current term, from which the next term's is made.
    pub durable_epoch: Epoch,
    /// The next connection number of this term: the shell never reuses one
    /// within a term (the coordinator's driving contract).
    pub next_connection: u64,
    /// The reuse windows whose timers run: a `StartTimer` effect of this
    /// term starts one, delivering its `TimerFired` ends it, and a coordinator
    /// death drops them all (the shell's timers die with it).
    pub reuse_timers: BTreeSet<(Key, FencingToken)>,
    /// How much of each bounded action has been used.
    pub used: Used,
    /// Facts about the past that the properties need and no state machine
    /// keeps.
    pub history: History,
    /// What the step that led to this state broke or showed. Cleared at
    /// every step, so that it does not multiply the states; a property
    /// looks at it in the state right after the step.
    pub last_step: StepFacts,
}

/// A coordinator that lost the election without knowing it (partitioned
/// from etcd, paused past its lease, or holding a `flight.lock` that was
/// replaced: SPEC.md §12.5), with what its term owns. It serves only the
/// connections it had when the next term began (new connections reach the
/// current term), until it stops ([`crate::Action::DeposedStops`]).
///
/// The step functions act on it by swapping these fields with the current
/// term's (`Step::as_deposed` in the directory), so the same code, and the
/// same checks, drive either coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Deposed {
    pub coordinator: Coordinator,
    /// Its reuse windows' timers (see [`State::reuse_timers`]).
    pub reuse_timers: BTreeSet<(Key, FencingToken)>,
    /// The last token it minted (see [`History::last_minted`]).
    pub last_minted: Option<FencingToken>,
    /// Its term's [`History::reasserted`].
    pub reasserted: BTreeSet<FencingToken>,
    /// Its term's [`History::landed`].
    pub landed: BTreeSet<FencingToken>,
    /// Its term's [`History::reusable`].
    pub reusable: BTreeSet<(Key, FencingToken)>,
}

/// One client process: a real [`Client`] with its connection, the work its
/// leading calls run, and the model's record of each call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Process {
    pub client: Client,
    /// The connection to the current coordinator, once the client connected.
    pub link: Option<Link>,
    /// The work that runs for a leading call, under its token. Ends when it
    /// finishes, when its caller cancels (the shell drops it), or, for a
    /// detached call whose caller left, when the client says `StopWork`.
    pub work: BTreeMap<CallId, FencingToken>,
    /// Every call this process started, numbered from 1 in start order.
    pub calls: BTreeMap<CallId, CallRecord>,
}

/// One connection: ordered and reliable in each direction until it breaks,
/// like a Unix socket. Both queues vanish with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Link {
    pub connection: ConnectionId,
    /// The connection is to the deposed coordinator ([`State::deposed`]):
    /// it was open when the current term began. Connection numbers of the
    /// two terms may be equal.
    pub deposed: bool,
    /// Requests written by the client, not yet read by the coordinator.
    pub requests: VecDeque<Request>,
    /// Responses written by the coordinator, not yet read by the client.
    pub responses: VecDeque<Response>,
}

/// What the model knows about one call, from the messages and effects it
/// saw (it never looks inside the state machines).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallRecord {
    pub key: Key,
    /// The caller asked for a detached call (SPEC.md §15).
    pub detached: bool,
    /// The caller gave the call a reuse window (SPEC.md §16).
    pub reuse: bool,
    /// The client read a `joined` answer to it at least once.
    pub joined: bool,
    /// The token it leads under, once its work started.
    pub token: Option<FencingToken>,
    /// It leads and has not been told `ack` or `rejected` since: the client
    /// holds the lead (its work runs, or its land waits to be settled).
    pub holds_lead: bool,
    /// The client resolved it.
    pub resolved: bool,
    /// Its caller cancelled it.
    pub cancelled: bool,
    /// It was answered `landed`, `interrupted` or `reused` on its current
    /// connection.
    pub answered_for_good: bool,
    /// It was answered `stop` on its current connection: only the
    /// `rejected` of a land that crossed the `stop` may follow.
    pub stopped: bool,
    /// Its latest request on its current connection was a rejoin.
    pub rejoin: Option<Rejoin>,
    /// A nested call (SPEC.md §17): the token of the flight whose work made
    /// it, which waits for it.
    pub parent: Option<FencingToken>,
    /// Only for a nested call: whether the coordinator holds a party for it
    /// (`None`: no party), and the flight it leads or joins (`Some(None)`:
    /// it waits in a grace window for its key's flight). From the
    /// coordinator's answers as they are sent, not as the client reads them.
    pub at_coordinator: Option<Option<FencingToken>>,
}

/// A rejoin as the coordinator received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rejoin {
    pub flight: FencingToken,
    /// It arrived while its flight could still answer it: in the grace
    /// window (the flight may be reasserted, or may have ended in it), or
    /// while the flight was in progress.
    pub answerable: bool,
}

/// Budgets of the bounded actions, counted up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Used {
    pub calls: u8,
    pub cancels: u8,
    pub process_deaths: u8,
    pub disconnects: u8,
    pub coordinator_deaths: u8,
    pub overlaps: u8,
    pub nested: u8,
    pub stops: u8,
}

/// The past, as far as the properties need it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// The last token the current term's coordinator, or one of an earlier
    /// term before it, minted (answered `lead` with). A deposed coordinator
    /// keeps its own ([`Deposed::last_minted`]).
    pub last_minted: Option<FencingToken>,
    /// How the work under each token ended; its outcome is
    /// [`Ending::outcome`] (kept as the ending: an `Outcome` holds strings,
    /// which every state's clone and hash would copy and read).
    pub outcomes: BTreeMap<FencingToken, Ending>,
    /// Flights that the current term took back: a running reassert
    /// accepted, or a landed one acknowledged.
    pub reasserted: BTreeSet<FencingToken>,
    /// Flights whose land the current term acknowledged.
    pub landed: BTreeSet<FencingToken>,
    /// Flights whose land any term acknowledged.
    pub ever_landed: BTreeSet<FencingToken>,
    /// Detached flights whose leader's caller left while the work ran
    /// (SPEC.md §15.2).
    pub caller_left: BTreeSet<FencingToken>,
    /// Detached calls' flights whose leader's connection closed (it broke,
    /// or the process died) while the call led: their joiners may be
    /// interrupted (§8.7). Only detached calls' flights are recorded, the
    /// only ones a property asks about.
    pub leader_disconnected: BTreeSet<FencingToken>,
    /// Values that a flight of the key landed in the current term (a `land`
    /// acknowledged) for a leader with a reuse window, whose expiry event
    /// the coordinator has not received: the only values it may hand out as
    /// `reused` (SPEC.md §16.2). Emptied when the term ends.
    pub reusable: BTreeSet<(Key, FencingToken)>,
    /// The current term was asked to stop (SPEC.md §10.4).
    pub stopping: bool,
    /// Flights whose land the current term acknowledged in its grace
    /// window, in the configurations with stops only; emptied when the
    /// window ends without a stop, or the term dies.
    pub landed_in_window: BTreeSet<FencingToken>,
    /// Flights whose land a term acknowledged in its grace window and which
    /// that term then ended by a stop: no later term knows their outcome,
    /// and none may tell a rejoiner of theirs they were lost (§10.4).
    pub stopped_with: BTreeSet<FencingToken>,
}

/// What the last step broke ([`Violation`]) and showed ([`Witness`]), as
/// bit sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StepFacts {
    pub violations: u32,
    pub witnessed: u16,
}

/// A broken rule seen during a step. Recorded as a flag rather than a panic,
/// because a panic inside `next_state` ends the run without a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A coordinator answered `lead` for a key whose flight was in progress,
    /// or twice for one key in one step.
    SecondFlight,
    /// A coordinator minted a token not greater than the last one minted.
    TokenNotIncreasing,
    /// A new term's epoch is not greater than the last term's.
    EpochNotIncreasing,
    /// A call that was answered `joined` was answered `lead`, or started work.
    JoinedLeads,
    /// A joiner resolved with an outcome that its flight's work did not
    /// produce.
    WrongOutcome,
    /// A reassert was accepted for a flight that had already landed.
    LandedFlightResumed,
    /// A call resolved twice.
    ResolvedTwice,
    /// A call got an answer after `landed`, `interrupted` or `reused` on
    /// the same connection, or one other than `rejected` after `stop`.
    AnsweredAfterFinal,
    /// Something was sent on a connection that is not open.
    SentOnClosed,
    /// A flight was led during a grace window.
    LeadInGrace,
    /// A reassert was accepted outside the grace window.
    ReassertOutsideGrace,
    /// A rejoin that arrived in the grace window of the term that took back
    /// its flight, which then landed, was answered `interrupted`.
    RejoinMissedOutcome,
    /// A reassert's step answered `interrupted` to a call whose request in
    /// this term was a plain run, not a rejoin: a flight it superseded had
    /// been serving runs of the new term.
    SupersededRunInterrupted,
    /// A `stop` was sent for a detached flight in the step that interrupted
    /// one of its joiners: somebody still waited for it.
    StoppedWhileJoined,
    /// A `stop` was sent for a call, or its work stopped, although its
    /// caller had not left.
    StoppedForWaitingCaller,
    /// A joiner of a detached flight whose leader's caller left was answered
    /// `interrupted`, although its leader kept its connection and its
    /// coordinator lived.
    DetachedJoinerInterrupted,
    /// A `reused` answer carried a value other than one that a flight of the
    /// call's key landed in this term with a reuse window, before its
    /// expiry event.
    ReusedNotKept,
    /// A call without a reuse window was answered `reused`, or resolved
    /// with a reused value.
    ReusedWithoutWindow,
    /// A nested call was answered `cycle` although the flight it would have
    /// waited for does not wait, through the works' nested calls, for its
    /// parent (SPEC.md §17.2).
    FalseCycleRefusal,
    /// A rejoin was answered `interrupted` by a term that began after a
    /// stop, for a flight whose land the stopped term acknowledged in its
    /// grace window (SPEC.md §10.4).
    StopLostLanding,
}

/// Something worth reaching, seen during a step (for `sometimes`
/// properties: a model that never gets there proves nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Witness {
    /// A later term accepted a running reassert: a flight lived through a
    /// failover.
    ReassertAccepted,
    /// A later term acknowledged a landed reassert: the outcome of a flight
    /// whose land was lost with its coordinator reached the new term.
    LandedReassertAcknowledged,
    /// A rejoin was answered `interrupted`.
    RejoinInterrupted,
    /// A land, or a landed reassert, was answered `rejected`.
    StaleLandRejected,
    /// A joiner of an earlier term's flight resolved with its value.
    ValueAfterFailover,
    /// A joiner of a detached flight resolved with its outcome after the
    /// leader's caller had left.
    DetachedFlightLanded,
    /// A coordinator told a detached flight's leader to `stop`.
    StopSent,
    /// A call resolved with a reused value.
    ValueReused,
    /// A nested call was answered `cycle` (SPEC.md §17.2).
    CycleRefused,
    /// A term asked to stop in its grace window ended when the window did,
    /// after a flight had landed in it (SPEC.md §10.4).
    StopServedWindow,
}

impl StepFacts {
    pub fn has(&self, violation: Violation) -> bool {
        self.violations & (1 << violation as u32) != 0
    }

    pub fn saw(&self, witness: Witness) -> bool {
        self.witnessed & (1 << witness as u16) != 0
    }

    pub fn violate(&mut self, violation: Violation) {
        self.violations |= 1 << violation as u32;
    }

    pub fn witness(&mut self, witness: Witness) {
        self.witnessed |= 1 << witness as u16;
    }
}

impl State {
    /// The wait-for graph as the works and their nested calls make it
    /// (SPEC.md §17.2), from the model's own records: a flight whose work
    /// runs waits for the flight that each of its nested calls leads or
    /// joins at the coordinator, or, for one that waits there in a grace
    /// window, its key's flight in progress (a rejoin's own flight only).
    pub fn waits_for(&self) -> BTreeMap<FencingToken, BTreeSet<FencingToken>> {
        let running = self.running();
        let flight_of = |key: &Key| {
            self.coordinator
                .flights()
                .find(|(of, _)| *of == key)
                .map(|(_, token)| token)
        };
        let mut edges: BTreeMap<FencingToken, BTreeSet<FencingToken>> = BTreeMap::new();
        for record in self
            .processes
            .iter()
            .flatten()
            .flat_map(|p| p.calls.values())
        {
            let (Some(parent), Some(party)) = (record.parent, record.at_coordinator) else {
                continue;
            };
            if record.resolved || record.cancelled || !running.contains(&parent) {
                continue;
            }
            let target = party.or_else(|| {
                flight_of(&record.key)
                    .filter(|token| record.rejoin.is_none_or(|rejoin| rejoin.flight == *token))
            });
            if let Some(target) = target {
                edges.entry(parent).or_default().insert(target);
            }
        }
        edges
    }

    /// Whether `to` is reached from `from` in `edges` (or is `from`).
    pub fn reaches(
        edges: &BTreeMap<FencingToken, BTreeSet<FencingToken>>,
        from: FencingToken,
        to: FencingToken,
    ) -> bool {
        let mut seen = BTreeSet::from([from]);
        let mut next = vec![from];
        while let Some(at) = next.pop() {
            if at == to {
                return true;
            }
            for &after in edges.get(&at).into_iter().flatten() {
                if seen.insert(after) {
                    next.push(after);
                }
            }
        }
        false
    }

    /// The tokens under which some process's work runs.
    pub fn running(&self) -> BTreeSet<FencingToken> {
        self.processes
            .iter()
            .flatten()
            .flat_map(|process| process.work.values().copied())
            .collect()
    }
}

impl History {
    /// Whether the work under `token` produced `outcome`.
    pub fn produced(&self, token: FencingToken, outcome: &Outcome) -> bool {
        self.outcomes
            .get(&token)
            .is_some_and(|ending| ending.outcome(token) == *outcome)
    }
}

impl Process {
    /// A process that just started: no calls, not connected.
    pub fn fresh() -> Process {
        Process {
            client: Client::new(),
            link: None,
            work: BTreeMap::new(),
            calls: BTreeMap::new(),
        }
    }
}

impl Link {
    pub fn new(connection: ConnectionId) -> Link {
        Link {
            connection,
            deposed: false,
            requests: VecDeque::new(),
            responses: VecDeque::new(),
        }
    }
}

impl CallRecord {
    pub fn new(key: Key, detached: bool, reuse: bool) -> CallRecord {
        CallRecord {
            key,
            detached,
            reuse,
            joined: false,
            token: None,
            holds_lead: false,
            resolved: false,
            cancelled: false,
            answered_for_good: false,
            stopped: false,
            rejoin: None,
            parent: None,
            at_coordinator: None,
        }
    }
}

/// Processes are interchangeable: the coordinator names connections, never
/// slots, and every other part of the state names tokens, keys and calls of
/// a process inside that process. So any permutation of the slots is a state
/// that behaves the same, and the hash, which is all the checker stores of a
/// state (its fingerprint), hashes the processes as a multiset: each one
/// alone, then their hashes in sorted order. Permuted states share one
/// fingerprint, and the checker visits one state per class (symmetry
/// reduction) without building a representative: stateright's
/// `Representative` cloned every generated state to sort its slots, which
/// cost a third of the checker's time in profiles (model/README.md, "Speed").
///
/// Equal states still hash alike (`Eq` stays slot by slot, as derived);
/// permuted ones are merely not equal, which the checker never asks.
impl Hash for State {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        let mut processes: Vec<u64> = self
            .processes
            .iter()
            .map(|process| {
                // SipHash with fixed keys: deterministic, so fingerprints
                // and replayed paths agree between runs.
                let mut alone = std::hash::DefaultHasher::new();
                process.hash(&mut alone);
                alone.finish()
            })
            .collect();
        processes.sort_unstable();
        processes.hash(hasher);
        let State {
            processes: _,
            coordinator,
            deposed,
            durable_epoch,
            next_connection,
            reuse_timers,
            used,
            history,
            last_step,
        } = self;
        coordinator.hash(hasher);
        deposed.hash(hasher);
        durable_epoch.hash(hasher);
        next_connection.hash(hasher);
        reuse_timers.hash(hasher);
        used.hash(hasher);
        history.hash(hasher);
        last_step.hash(hasher);
    }
}
