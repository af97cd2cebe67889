//! The model of one directory (SPEC.md §12.1): its actions and how each one
//! drives the real coordinator and clients.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use single_flight_core::client::{self, CallId, Resolution};
use single_flight_core::coordinator::{
    self, ConnectionId, Coordinator, EndReason, Mutant, Term, Timer,
};
use single_flight_core::protocol::{Epoch, FencingToken};
use single_flight_core::protocol::{
    Failure, Incoming, Key, Outcome, Request, RequestId, Response, ReuseWindow,
};
use stateright::{Model, Property};

use crate::check::Narrated;
use crate::properties;
use crate::state::{
    CallRecord, Deposed, History, Link, Process, Rejoin, State, StepFacts, Used, Violation, Witness,
};

/// A directory shared by a bounded number of processes, and the bounds of
/// what may happen to it. Every bound is a budget the action generator
/// spends; none is a depth limit, so every run the bounds allow is explored
/// to its end.
#[derive(Clone, Debug)]
pub struct Directory {
    /// Client processes (interchangeable: see `State`'s `Hash`).
    pub processes: usize,
    /// Keys the calls choose from (at most [`KEY_NAMES`]).
    pub keys: usize,
    /// Calls started in the whole run, by all processes together.
    pub calls: u8,
    /// Calls cancelled by their caller.
    pub cancels: u8,
    /// Client processes that die (each closes its connection).
    pub process_deaths: u8,
    /// Whether a dead process comes back as a fresh one (in the same slot),
    /// as well as staying dead.
    pub restarts: bool,
    /// Connections that break while both of their processes live (an I/O
    /// error, or a malformed line, SPEC.md §3.7); the client reconnects to
    /// the same term.
    pub disconnects: u8,
    /// Coordinator processes that die; each is followed by a new term with
    /// the next epoch and a grace window.
    pub coordinator_deaths: u8,
    /// Terms that begin while the coordinator of the previous one goes on
    /// serving the connections it has (SPEC.md §12.5): one deposed
    /// coordinator at a time, which stops at any later moment.
    pub overlaps: u8,
    /// Times the current coordinator's process asks its term to stop
    /// (SPEC.md §10.4), at any moment; the term ends when its coordinator
    /// says so, and the next one begins, without a grace window when no
    /// flight was in progress.
    pub stops: u8,
    /// Whether each work may end either way. When not, the token decides
    /// ([`Ending::of`]), so that both kinds of outcome still occur: the core
    /// never looks inside an outcome, and choosing for every flight would
    /// triple the states.
    pub failures: bool,
    /// Which calls are detached (SPEC.md §15): a leading call whose caller
    /// cancels lets its work run on for the flight's joiners.
    pub detached: Choice,
    /// Which calls have a reuse window (SPEC.md §16). With any, the pending
    /// windows expire at arbitrary moments ([`Action::ReuseExpires`]).
    pub reuse: Choice,
    /// Nested calls started in the whole run (SPEC.md §17): a call made by
    /// the work of a flight in progress, for any key, with that flight as
    /// its parent. A work does not finish while a call it made waits.
    pub nested: u8,
    /// A seeded bug of the coordinator (SPEC.md §12.3), or none.
    pub mutant: Option<Mutant>,
}

/// Whether calls have an option (detached, a reuse window): none, all, or
/// each call either way (a branch of every call start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Never,
    Always,
    PerCall,
}

impl Choice {
    /// The values a call start may give the option.
    fn values(self) -> &'static [bool] {
        match self {
            Choice::Never => &[false],
            Choice::Always => &[true],
            Choice::PerCall => &[false, true],
        }
    }
}

/// The reuse window of every call that has one. Time is not modelled: the
/// window ends when the model delivers its expiry, so its length is only a
/// valid value.
const REUSE_WINDOW: ReuseWindow = match ReuseWindow::from_millis(1000) {
    Some(window) => window,
    None => panic!("one second is a valid reuse window"),
};

/// The grace window a term after a failover is created with. Time is not
/// modelled: the window ends when an action ends it, whatever its length,
/// and the model ignores the timer the coordinator starts for it.
const GRACE_WINDOW: Duration = Duration::from_millis(500);

/// The coordinator's grace-window timer, fired (SPEC.md §8.4).
const GRACE_WINDOW_ENDED: coordinator::Event = coordinator::Event::TimerFired {
    timer: Timer::GraceWindow,
};

/// The names of the keys, in the order the model uses them. A configuration
/// uses the first `keys` of them, so a longer list changes no configuration
/// that uses fewer; four are what [`Directory::fleet`] needs.
pub const KEY_NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// One thing that may happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A caller of `process` starts a call for the `key`-th key, detached
    /// or not, with a reuse window or not.
    CallStarts {
        process: usize,
        key: usize,
        detached: bool,
        reuse: bool,
    },
    /// The work that `parent` of `process` leads makes a call for the
    /// `key`-th key, naming its flight as the call's parent (SPEC.md §17).
    NestedCallStarts {
        process: usize,
        parent: CallId,
        key: usize,
    },
    /// `process` connects to the current coordinator; the handshake is not
    /// modelled (SPEC.md §4.2): the coordinator learns the connection
    /// opened, then the client that it is ready.
    Connects { process: usize },
    /// The coordinator reads the first request waiting on `process`'s
    /// connection.
    RequestArrives { process: usize },
    /// `process` reads the first response waiting on its connection.
    ResponseArrives { process: usize },
    /// The work that `call` of `process` leads finishes.
    WorkFinishes {
        process: usize,
        call: CallId,
        ending: Ending,
    },
    /// The caller of `call` of `process` gives up.
    CallerCancels { process: usize, call: CallId },
    /// `process` dies: its connection closes and both ends learn it, its
    /// work stops, and (when `restarts`) a fresh process takes its slot.
    ProcessDies { process: usize, restarts: bool },
    /// `process`'s connection breaks; both ends learn it, both processes
    /// live on, and whatever was queued on it is lost.
    ConnectionBreaks { process: usize },
    /// The coordinator's process dies: every connection closes, the
    /// responses not yet read are lost, and a surviving process wins the
    /// next term with the next epoch and a grace window (SPEC.md §10).
    CoordinatorDies,
    /// The grace window of the current term ends (SPEC.md §8.4). In a term
    /// asked to stop, only once every live process is connected to it and
    /// nothing is on its way on any connection: the window is long enough
    /// for the rejoiners to come back (SPEC.md §10.2, §10.4), the one
    /// assumption about time the model makes there.
    GraceWindowEnds,
    /// The current coordinator's process asks its term to stop (SPEC.md
    /// §10.4): `Event::StopRequested`. The term ends when the coordinator
    /// answers `EndTerm`: its last answers are flushed (each client reads
    /// what was queued for it), every connection closes, what the clients
    /// sent is lost, and the next term begins, without a grace window when
    /// no flight was in progress (the clean end of §10.4, `flight.clean`).
    StopRequested,
    /// A new term begins (the next epoch, a grace window) while the current
    /// coordinator goes on serving every connection it has, as the deposed
    /// one (SPEC.md §12.5). Processes that connect from now on reach the
    /// new term; a connection to the deposed one moves when it breaks.
    TermOverlaps,
    /// The deposed coordinator stops (its process ends, or it learns it
    /// lost the election, SPEC.md §7.2, §14.3): every connection it served
    /// closes, and what was queued on them is lost.
    DeposedStops,
    /// The deposed coordinator's grace window ends (the current term began
    /// while it was in its own).
    DeposedGraceWindowEnds,
    /// A reuse window's timer of the deposed coordinator fires.
    DeposedReuseExpires { key: Key, token: FencingToken },
    /// The reuse window of the value that flight `token` of `key` landed
    /// ends: its timer, started by a `StartTimer` of this term
    /// (`Timer::Reuse`), fires (SPEC.md §16.2). Any pending timer may fire
    /// next, however long its window.
    ReuseExpires { key: Key, token: FencingToken },
}

/// How work ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ending {
    Value,
    Failure,
}

impl Ending {
    /// The outcome of the work under `token` that ends so. It names its
    /// token, so that a joiner's outcome shows which flight's work produced
    /// it.
    pub fn outcome(self, token: FencingToken) -> Outcome {
        self.named(token.to_string())
    }

    /// The outcome that ends so, whose text is `name`: where tokens alone
    /// do not name a flight (two shards mint equal ones, SPEC.md §19.3),
    /// the caller names it by its key as well.
    pub fn named(self, name: String) -> Outcome {
        match self {
            Ending::Value => Outcome::Value(name),
            Ending::Failure => Outcome::Failure(Failure {
                name: "Error".to_owned(),
                message: name,
                code: None,
            }),
        }
    }

    /// The ending of the work under `token` when the model does not choose:
    /// a value for an odd sequence, a failure for an even one.
    pub fn of(token: FencingToken) -> Ending {
        if token.sequence() % 2 == 1 {
            Ending::Value
        } else {
            Ending::Failure
        }
    }
}

impl Directory {
    /// Checked in CI (SPEC.md §12.1): one key; a cancel, and a process
    /// death (which may restart it) besides the failover. Three calls are
    /// the fewest that show a flight led, joined, and led again after it.
    /// The seeded bugs are hunted in this configuration.
    pub fn small() -> Directory {
        Directory {
            processes: 2,
            keys: 1,
            calls: 3,
            cancels: 1,
            process_deaths: 1,
            restarts: true,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    /// Checked in CI (SPEC.md §12.1): two keys, so that flights of
    /// different keys interleave through a failover (the grace window
    /// settles waiting runs key by key).
    pub fn two_keys() -> Directory {
        Directory {
            processes: 2,
            keys: 2,
            calls: 3,
            cancels: 0,
            process_deaths: 1,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    /// Checked in CI (SPEC.md §12.1): a connection breaks while both
    /// processes live, so that a client replays to the same term, outside
    /// any grace window (reasserts rejected, rejoins of a flight still in
    /// progress). One such break multiplies the states by ten in
    /// [`Directory::small`], hence a configuration of its own.
    pub fn disconnect() -> Directory {
        Directory {
            processes: 2,
            keys: 1,
            calls: 3,
            cancels: 0,
            process_deaths: 0,
            restarts: false,
            disconnects: 1,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    /// Checked in CI (SPEC.md §12.1): detached calls (SPEC.md §15). Every
    /// call is detached (calls that are not are the other configurations'),
    /// and two cancels let a leader's caller leave and then its last
    /// joiner; a failover replays a detached flight's reassert and detach.
    /// A closed connection under a detached flight has a configuration of
    /// its own (a process death here would make it 1.6 times larger).
    pub fn detach() -> Directory {
        Directory {
            processes: 2,
            keys: 1,
            calls: 3,
            cancels: 2,
            process_deaths: 0,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Always,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    /// Checked in CI (SPEC.md §12.1): reuse windows (SPEC.md §16). Each
    /// call has a window or not, so that a value kept for one reaches
    /// another, never a call without one; three calls are the fewest in
    /// which a failure (the even second flight) lands with a window and a
    /// third call asks for it. The failover forgets kept values.
    pub fn reuse() -> Directory {
        Directory {
            processes: 2,
            keys: 1,
            calls: 3,
            cancels: 0,
            process_deaths: 0,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::PerCall,
            nested: 0,
            mutant: None,
        }
    }

    /// Run on request (SPEC.md §12.1): detached calls with reuse windows
    /// together, so that a detached flight that lands is kept and one that
    /// is stopped is not. A cancel lets a leader's caller leave or its last
    /// joiner; the two options' own rules are checked in CI by
    /// [`Directory::detach`] and [`Directory::reuse`].
    pub fn detach_and_reuse() -> Directory {
        Directory {
            cancels: 1,
            detached: Choice::Always,
            ..Directory::reuse()
        }
    }

    /// The larger configuration, checked in CI (SPEC.md §12.1): three
    /// processes, two keys, two failovers.
    pub fn large() -> Directory {
        Directory {
            processes: 3,
            keys: 2,
            calls: 3,
            cancels: 0,
            process_deaths: 0,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 2,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    /// Checked in CI (SPEC.md §12.5): a term begins while the previous
    /// coordinator goes on serving the connections it has, and stops at any
    /// later moment; a broken connection moves a process from the deposed
    /// coordinator to the current one before that.
    pub fn overlap() -> Directory {
        Directory {
            coordinator_deaths: 0,
            overlaps: 1,
            ..Directory::disconnect()
        }
    }

    /// Walked at random, never checked exhaustively (SPEC.md §12.1,
    /// `simulate`): far past every bound an exhaustive check reaches. Six
    /// processes and four keys give flights of several keys at once, each
    /// joined by several processes; twenty calls keep them busy through five
    /// failovers (two failovers and a broken connection are the shape of both
    /// bugs the model found), three broken connections, three process deaths
    /// that may restart, and a few cancels; every work ends either way, and
    /// every call is detached or not and has a reuse window or not, so that
    /// every rule of SPEC.md §15 and §16 meets the failovers.
    pub fn fleet() -> Directory {
        Directory {
            processes: 6,
            keys: 4,
            calls: 20,
            cancels: 4,
            process_deaths: 3,
            restarts: true,
            disconnects: 3,
            coordinator_deaths: 5,
            overlaps: 2,
            stops: 0,
            failures: true,
            detached: Choice::PerCall,
            reuse: Choice::PerCall,
            nested: 0,
            mutant: None,
        }
    }

    /// The goal configuration, run on request (model/README.md): `large`
    /// with a broken connection, the shape of both core bugs the checker
    /// found (two failovers, or one and a broken connection).
    pub fn goal() -> Directory {
        Directory {
            disconnects: 1,
            ..Directory::large()
        }
    }

    /// Checked in CI (SPEC.md §12.1): nested calls (SPEC.md §17). Two keys
    /// and two nested calls make every kind of cycle the bounds allow: a
    /// work that calls its own key, and a work that calls a key whose
    /// work calls it back; a plain call of the other key makes a nested
    /// call that is no cycle (it joins a flight that waits for nothing).
    /// One failover brings the graph back from the reasserts and rejoins.
    pub fn nested() -> Directory {
        Directory {
            processes: 2,
            keys: 2,
            calls: 2,
            cancels: 0,
            process_deaths: 0,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 0,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 2,
            mutant: None,
        }
    }

    /// [`Directory::fleet`] with one coordinator at a time: where the walk
    /// hunts the seeded bug of held flights (`tests/simulation.rs` says
    /// why).
    pub fn fleet_without_overlaps() -> Directory {
        Directory {
            overlaps: 0,
            ..Directory::fleet()
        }
    }

    /// Checked in CI (SPEC.md §10.4): the coordinator's process asks its
    /// term to stop, at any moment, after or before the failover that
    /// opens a grace window; nothing else befalls the processes, so that
    /// every rejoiner of a flight that landed in the window can come back
    /// for its outcome. The stop's seeded bug is hunted here.
    pub fn stop() -> Directory {
        Directory {
            processes: 2,
            keys: 1,
            calls: 3,
            cancels: 0,
            process_deaths: 0,
            restarts: false,
            disconnects: 0,
            coordinator_deaths: 1,
            overlaps: 0,
            stops: 1,
            failures: false,
            detached: Choice::Never,
            reuse: Choice::Never,
            nested: 0,
            mutant: None,
        }
    }

    pub fn with_mutant(self, mutant: Option<Mutant>) -> Directory {
        Directory { mutant, ..self }
    }

    fn key(&self, index: usize) -> Key {
        Key::new(KEY_NAMES[index]).expect("the model's key names are valid keys")
    }

    fn coordinator(&self, epoch: Epoch, term: Term) -> Coordinator {
        Coordinator::new(epoch, term).with_mutant(self.mutant)
    }
}

impl Narrated for Directory {
    /// Applies `action` to a copy of `state`; with `log`, says what happened
    /// in it, message by message (for counterexamples and the explorer).
    fn apply(&self, state: &State, action: &Action, log: Option<&mut String>) -> State {
        let mut step = Step {
            model: self,
            state: state.clone(),
            log,
            on_deposed: false,
            deposed_ends: false,
        };
        step.state.last_step = StepFacts::default();
        step.act(action);
        step.state
    }

    /// The facts of the step into `state` that break a property (the
    /// text printed for a counterexample).
    fn broke(state: &State) -> Option<String> {
        let facts = properties::describe(&state.last_step);
        (!facts.is_empty()).then_some(facts)
    }
}

impl Model for Directory {
    type State = State;
    type Action = Action;

    /// The first term, with every process connected to it and idle.
    fn init_states(&self) -> Vec<State> {
        let mut coordinator = self.coordinator(Epoch::FIRST, Term::First);
        let began = coordinator.step(coordinator::Event::TermBegan);
        debug_assert!(began.is_empty());
        let mut processes = Vec::new();
        for number in 0..self.processes {
            let connection = ConnectionId(number as u64);
            let opened = coordinator.step(coordinator::Event::ConnectionOpened {
                connection,
                relay: None,
            });
            debug_assert!(opened.is_empty());
            let mut process = Process::fresh();
            let ready = process.client.step(client::Event::ConnectionReady);
            debug_assert!(ready.is_empty());
            process.link = Some(Link::new(connection));
            processes.push(Some(process));
        }
        vec![State {
            processes,
            coordinator,
            deposed: None,
            durable_epoch: Epoch::FIRST,
            next_connection: self.processes as u64,
            reuse_timers: BTreeSet::new(),
            used: Used::default(),
            history: History::default(),
            last_step: StepFacts::default(),
        }]
    }

    /// Always in the same order: by process slot, then the coordinator's
    /// actions, so that a path of action indices can be replayed.
    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (index, process) in state.processes.iter().enumerate() {
            let Some(process) = process else { continue };
            if state.used.calls < self.calls {
                for key in 0..self.keys {
                    for &detached in self.detached.values() {
                        for &reuse in self.reuse.values() {
                            actions.push(Action::CallStarts {
                                process: index,
                                key,
                                detached,
                                reuse,
                            });
                        }
                    }
                }
            }
            match &process.link {
                None => actions.push(Action::Connects { process: index }),
                Some(link) => {
                    if !link.requests.is_empty() {
                        actions.push(Action::RequestArrives { process: index });
                    }
                    if !link.responses.is_empty() {
                        actions.push(Action::ResponseArrives { process: index });
                    }
                }
            }
            if state.used.nested < self.nested {
                for &parent in process.work.keys() {
                    for key in 0..self.keys {
                        actions.push(Action::NestedCallStarts {
                            process: index,
                            parent,
                            key,
                        });
                    }
                }
            }
            for (&call, &token) in &process.work {
                // A work waits for the calls it made (SPEC.md §17).
                let waits = process.calls.values().any(|record| {
                    record.parent == Some(token) && !record.resolved && !record.cancelled
                });
                if waits {
                    continue;
                }
                if self.failures {
                    for ending in [Ending::Value, Ending::Failure] {
                        actions.push(Action::WorkFinishes {
                            process: index,
                            call,
                            ending,
                        });
                    }
                } else {
                    actions.push(Action::WorkFinishes {
                        process: index,
                        call,
                        ending: Ending::of(token),
                    });
                }
            }
            if state.used.cancels < self.cancels {
                for (&call, record) in &process.calls {
                    if !record.resolved && !record.cancelled {
                        actions.push(Action::CallerCancels {
                            process: index,
                            call,
                        });
                    }
                }
            }
            if process.link.is_some() && state.used.disconnects < self.disconnects {
                actions.push(Action::ConnectionBreaks { process: index });
            }
            if state.used.process_deaths < self.process_deaths {
                actions.push(Action::ProcessDies {
                    process: index,
                    restarts: false,
                });
                if self.restarts {
                    actions.push(Action::ProcessDies {
                        process: index,
                        restarts: true,
                    });
                }
            }
        }
        if state.used.coordinator_deaths < self.coordinator_deaths {
            actions.push(Action::CoordinatorDies);
        }
        // SPEC.md §10.4: a term asked to stop serves its window out, and the
        // window is long enough for every process to come back and be
        // answered (see `Action::GraceWindowEnds`).
        if state.coordinator.in_grace() && (!state.history.stopping || all_answered(state)) {
            actions.push(Action::GraceWindowEnds);
        }
        if state.used.stops < self.stops {
            actions.push(Action::StopRequested);
        }
        for (key, token) in &state.reuse_timers {
            actions.push(Action::ReuseExpires {
                key: key.clone(),
                token: *token,
            });
        }
        match &state.deposed {
            None if state.used.overlaps < self.overlaps => actions.push(Action::TermOverlaps),
            None => {}
            Some(deposed) => {
                actions.push(Action::DeposedStops);
                if deposed.coordinator.in_grace() {
                    actions.push(Action::DeposedGraceWindowEnds);
                }
                for (key, token) in &deposed.reuse_timers {
                    actions.push(Action::DeposedReuseExpires {
                        key: key.clone(),
                        token: *token,
                    });
                }
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        Some(self.apply(state, &action, None))
    }

    fn format_step(&self, state: &State, action: Action) -> Option<String> {
        let mut log = String::new();
        let next = self.apply(state, &action, Some(&mut log));
        Some(format!("{log}\n{next:#?}"))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::of(self)
    }
}

/// One step in progress.
struct Step<'a> {
    model: &'a Directory,
    state: State,
    log: Option<&'a mut String>,
    /// The step acts on the deposed coordinator, whose fields are swapped
    /// into the current term's ([`Step::as_deposed`]): only connections to
    /// it are its own.
    on_deposed: bool,
    /// The deposed coordinator ended its term (`EndTerm`) during the step:
    /// it stops once the step is back on the current term.
    deposed_ends: bool,
}

impl Step<'_> {
    fn act(&mut self, action: &Action) {
        match *action {
            Action::CallStarts {
                process,
                key,
                detached,
                reuse,
            } => self.call_starts(process, key, detached, reuse),
            Action::NestedCallStarts {
                process,
                parent,
                key,
            } => self.nested_call_starts(process, parent, key),
            Action::Connects { process } => self.connects(process),
            Action::RequestArrives { process } => {
                if self.to_deposed(process) {
                    self.as_deposed(|step| step.request_arrives(process));
                } else {
                    self.request_arrives(process);
                }
            }
            Action::ResponseArrives { process } => self.response_arrives(process),
            Action::WorkFinishes {
                process,
                call,
                ending,
            } => self.work_finishes(process, call, ending),
            Action::CallerCancels { process, call } => self.caller_cancels(process, call),
            Action::ProcessDies { process, restarts } => self.process_dies(process, restarts),
            Action::ConnectionBreaks { process } => {
                self.state.used.disconnects += 1;
                let connection = self
                    .process(process)
                    .link
                    .as_ref()
                    .map(|link| link.connection);
                match connection {
                    Some(connection) if self.to_deposed(process) => {
                        self.as_deposed(|step| step.close(connection));
                    }
                    Some(connection) => self.close(connection),
                    None => {}
                }
            }
            Action::CoordinatorDies => {
                self.state.used.coordinator_deaths += 1;
                self.fail_over();
            }
            Action::GraceWindowEnds => {
                self.coordinator(GRACE_WINDOW_ENDED);
            }
            Action::StopRequested => {
                self.state.used.stops += 1;
                self.state.history.stopping = true;
                self.coordinator(coordinator::Event::StopRequested);
            }
            Action::ReuseExpires { ref key, token } => self.reuse_expires(key, token),
            Action::TermOverlaps => self.overlap(),
            Action::DeposedStops => self.deposed_stops(),
            Action::DeposedGraceWindowEnds => {
                self.as_deposed(|step| step.coordinator(GRACE_WINDOW_ENDED));
            }
            Action::DeposedReuseExpires { ref key, token } => {
                self.as_deposed(|step| step.reuse_expires(key, token));
            }
        }
        if self.deposed_ends {
            self.deposed_stops();
        }
    }

    fn reuse_expires(&mut self, key: &Key, token: FencingToken) {
        self.state.reuse_timers.remove(&(key.clone(), token));
        self.state.history.reusable.remove(&(key.clone(), token));
        self.coordinator(coordinator::Event::TimerFired {
            timer: Timer::Reuse {
                key: key.clone(),
                token,
            },
        });
    }

    /// The coordinator the step acts on, for the narration.
    fn who(&self) -> &'static str {
        if self.on_deposed {
            "deposed coordinator"
        } else {
            "coordinator"
        }
    }

    /// Whether `index`'s connection is to the deposed coordinator.
    fn to_deposed(&self, index: usize) -> bool {
        self.state.processes[index]
            .as_ref()
            .and_then(|process| process.link.as_ref())
            .is_some_and(|link| link.deposed)
    }

    /// Runs `act` on the deposed coordinator: its fields take the current
    /// term's places for the while, so that every step function, and every
    /// check in it, serves either coordinator unchanged.
    fn as_deposed<R>(&mut self, act: impl FnOnce(&mut Self) -> R) -> R {
        self.swap_terms();
        self.on_deposed = true;
        let result = act(self);
        self.on_deposed = false;
        self.swap_terms();
        result
    }

    fn swap_terms(&mut self) {
        use std::mem::swap;
        let state = &mut self.state;
        let deposed = state
            .deposed
            .as_mut()
            .expect("the model acts on a deposed coordinator only while there is one");
        swap(&mut state.coordinator, &mut deposed.coordinator);
        swap(&mut state.reuse_timers, &mut deposed.reuse_timers);
        swap(&mut state.history.last_minted, &mut deposed.last_minted);
        swap(&mut state.history.reasserted, &mut deposed.reasserted);
        swap(&mut state.history.landed, &mut deposed.landed);
        swap(&mut state.history.reusable, &mut deposed.reusable);
    }

    /// The process whose connection `connection` of the coordinator this
    /// step acts on is (the two terms number their connections apart).
    fn linked(&self, connection: ConnectionId) -> Option<usize> {
        self.state.processes.iter().position(|process| {
            process
                .as_ref()
                .and_then(|process| process.link.as_ref())
                .is_some_and(|link| {
                    link.connection == connection && link.deposed == self.on_deposed
                })
        })
    }

    fn call_starts(&mut self, index: usize, key: usize, detached: bool, reuse: bool) {
        self.state.used.calls += 1;
        let key = self.model.key(key);
        let process = self.process(index);
        let call = CallId(process.calls.len() as u64 + 1);
        process
            .calls
            .insert(call, CallRecord::new(key.clone(), detached, reuse));
        let effects = process.client.step(client::Event::CallStarted {
            call,
            key,
            options: client::CallOptions {
                detached,
                reuse: reuse.then_some(REUSE_WINDOW),
                parent: None,
            },
        });
        self.client_effects(index, effects);
    }

    fn nested_call_starts(&mut self, index: usize, parent: CallId, key: usize) {
        self.state.used.nested += 1;
        let key = self.model.key(key);
        let process = self.process(index);
        let token = *process
            .work
            .get(&parent)
            .expect("enabled only while the parent's work runs");
        let call = CallId(process.calls.len() as u64 + 1);
        let mut record = CallRecord::new(key.clone(), false, false);
        record.parent = Some(token);
        process.calls.insert(call, record);
        let effects = process.client.step(client::Event::CallStarted {
            call,
            key,
            options: client::CallOptions {
                parent: Some(token),
                ..client::CallOptions::default()
            },
        });
        self.client_effects(index, effects);
    }

    fn connects(&mut self, index: usize) {
        let connection = ConnectionId(self.state.next_connection);
        self.state.next_connection += 1;
        self.process(index).link = Some(Link::new(connection));
        self.coordinator(coordinator::Event::ConnectionOpened {
            connection,
            relay: None,
        });
        let effects = self
            .process(index)
            .client
            .step(client::Event::ConnectionReady);
        self.client_effects(index, effects);
    }

    fn request_arrives(&mut self, index: usize) {
        let coordinator = &self.state.coordinator;
        let in_grace = coordinator.in_grace();
        let in_progress: BTreeSet<FencingToken> =
            coordinator.flights().map(|(_, token)| token).collect();
        let process = self.state.processes[index]
            .as_mut()
            .expect("actions name live processes only");
        let link = process.link.as_mut().expect("enabled only when connected");
        let connection = link.connection;
        let request = link
            .requests
            .pop_front()
            .expect("enabled only with a request waiting");
        if let Request::Run { id, flight, .. } = &request
            && let Some(record) = call_of(id).and_then(|call| process.calls.get_mut(&call))
        {
            record.rejoin = flight.map(|flight| Rejoin {
                flight,
                answerable: in_grace || in_progress.contains(&flight),
            });
            // It waits until an answer says what it leads or joins.
            if record.parent.is_some() {
                record.at_coordinator = Some(None);
            }
        }
        let who = self.who();
        self.note(format_args!("{who} reads {request:?}"));
        // What the request is, for the checks after the coordinator's step:
        // a land (or a landed reassert, SPEC.md §8.3) may be rejected; a
        // running reassert is accepted silently, a landed one with `ack`.
        let answered_by_outcome = matches!(
            request,
            Request::Land { .. }
                | Request::Reassert {
                    outcome: Some(_),
                    ..
                }
        );
        let land = matches!(request, Request::Land { .. });
        let reassert = match &request {
            Request::Reassert {
                key,
                token,
                outcome,
                ..
            } => Some((key.clone(), *token, outcome.is_some())),
            _ => None,
        };
        let id = request.id().clone();
        let sent = self.coordinator(coordinator::Event::RequestReceived {
            connection,
            request: Incoming::Request(request),
        });
        let answer = |wanted: fn(&Response) -> bool| {
            sent.iter()
                .any(|(to, response)| *to == connection && *response.id() == id && wanted(response))
        };
        if answered_by_outcome && answer(|response| matches!(response, Response::Rejected { .. })) {
            self.state.last_step.witness(Witness::StaleLandRejected);
        }
        if land && answer(|response| matches!(response, Response::Ack { .. })) {
            self.landed_in_term(index, &id);
        }
        // SPEC.md §8.3: a reassert may supersede a flight, which interrupts
        // that flight's rejoins, but never a plain run of this term: a
        // reasserted flight is held, nobody joins it during the window.
        if reassert.is_some()
            && sent.iter().any(|(to, response)| {
                matches!(response, Response::Interrupted { .. })
                    && self.plain_run(*to, response.id())
            })
        {
            self.state
                .last_step
                .violate(Violation::SupersededRunInterrupted);
        }
        let Some((key, token, landed)) = reassert else {
            return;
        };
        let accepted = if landed {
            answer(|response| matches!(response, Response::Ack { .. }))
        } else {
            // A running reassert that is accepted sends nothing: it shows as
            // its flight in progress again.
            self.state
                .coordinator
                .flights()
                .any(|(in_progress, t)| *in_progress == key && t == token)
        };
        if !accepted {
            return;
        }
        if !landed && let Some(record) = self.record_mut(index, &id) {
            // A running reassert's flight waits for nothing new: only a
            // nested call's party is an edge (SPEC.md §17.2).
            if record.parent.is_some() {
                record.at_coordinator = Some(Some(token));
            }
        }
        if !in_grace {
            self.state
                .last_step
                .violate(Violation::ReassertOutsideGrace);
        }
        self.state.history.reasserted.insert(token);
        if landed {
            self.state
                .last_step
                .witness(Witness::LandedReassertAcknowledged);
        } else {
            if self.state.history.ever_landed.contains(&token) {
                self.state.last_step.violate(Violation::LandedFlightResumed);
            }
            self.state.last_step.witness(Witness::ReassertAccepted);
        }
    }

    /// The `land` of call `id` of `index` was acknowledged: the flight
    /// landed in this term. It is its key's latest landing, so no older
    /// value of the key may be reused any more; its own value, of a leader
    /// with a reuse window, may be handed out as `reused` until its expiry
    /// event (SPEC.md §16.2).
    fn landed_in_term(&mut self, index: usize, id: &RequestId) {
        let history = &mut self.state.history;
        let Some(record) = self.state.processes[index]
            .as_ref()
            .and_then(|process| call_of(id).and_then(|call| process.calls.get(&call)))
        else {
            return;
        };
        if record.token.is_some() {
            history.reusable.retain(|(key, _)| *key != record.key);
        }
        if let Some(token) = record.token
            && record.reuse
            && history.outcomes.get(&token) == Some(&Ending::Value)
        {
            history.reusable.insert((record.key.clone(), token));
        }
    }

    /// Whether `id` on `connection` is a call whose request in this term
    /// was a plain run (not a rejoin).
    fn plain_run(&self, connection: ConnectionId, id: &RequestId) -> bool {
        self.linked(connection)
            .and_then(|index| self.state.processes[index].as_ref())
            .and_then(|process| call_of(id).and_then(|call| process.calls.get(&call)))
            .is_some_and(|record| record.rejoin.is_none())
    }

    fn response_arrives(&mut self, index: usize) {
        let facts = &mut self.state.last_step;
        let process = self.state.processes[index]
            .as_mut()
            .expect("actions name live processes only");
        let link = process.link.as_mut().expect("enabled only when connected");
        let response = link
            .responses
            .pop_front()
            .expect("enabled only with a response waiting");
        if let Some(record) = call_of(response.id()).and_then(|call| process.calls.get_mut(&call)) {
            match response {
                // A call knows it joined only once it reads `joined`: one
                // lost with its coordinator leaves it asking (SPEC.md §9.4).
                Response::Joined { .. } => record.joined = true,
                Response::Lead { .. } if record.joined => facts.violate(Violation::JoinedLeads),
                // `ack` settles a land; `rejected` takes the flight from a
                // leader whose reassert came too late (SPEC.md §9.3). Either
                // way the client no longer holds the lead.
                // `stop` ends a detached call's work (SPEC.md §15.3).
                Response::Ack { .. } | Response::Rejected { .. } | Response::Stop { .. } => {
                    record.holds_lead = false
                }
                _ => {}
            }
        }
        let effects = process.client.step(client::Event::ResponseReceived {
            response: response.clone(),
        });
        self.note(format_args!("process {index} reads {response:?}"));
        self.client_effects(index, effects);
    }

    fn work_finishes(&mut self, index: usize, call: CallId, ending: Ending) {
        let process = self.process(index);
        let token = process
            .work
            .remove(&call)
            .expect("enabled only while the work runs");
        let effects = process.client.step(client::Event::WorkFinished {
            call,
            outcome: ending.outcome(token),
        });
        self.state.history.outcomes.insert(token, ending);
        self.client_effects(index, effects);
    }

    fn caller_cancels(&mut self, index: usize, call: CallId) {
        self.state.used.cancels += 1;
        let process = self.state.processes[index]
            .as_mut()
            .expect("actions name live processes only");
        let effects = process.client.step(client::Event::CallCancelled { call });
        let detached = process.client.is_detached(call);
        let record = process
            .calls
            .get_mut(&call)
            .expect("enabled only for a started call");
        record.cancelled = true;
        if detached {
            // SPEC.md §15.3: the caller of a detached leading call left; its
            // work runs on for the flight's joiners.
            if let Some(token) = record.token {
                self.state.history.caller_left.insert(token);
            }
        } else {
            // The shell drops the work of a cancelled call.
            record.holds_lead = false;
            process.work.remove(&call);
        }
        self.client_effects(index, effects);
    }

    fn process_dies(&mut self, index: usize, restarts: bool) {
        self.state.used.process_deaths += 1;
        self.leader_disconnected(index);
        let process = self.state.processes[index]
            .take()
            .expect("enabled only for a live process");
        if restarts {
            self.state.processes[index] = Some(Process::fresh());
        }
        // The process is gone before the coordinator learns it, so that
        // anything sent to it afterwards counts as sent on a closed
        // connection.
        if let Some(link) = process.link {
            let closed = coordinator::Event::ConnectionClosed {
                connection: link.connection,
            };
            if link.deposed {
                self.as_deposed(|step| step.coordinator(closed));
            } else {
                self.coordinator(closed);
            }
        }
    }

    /// The coordinator ended its term at a stop (SPEC.md §10.4): every
    /// connection to it closes, and the next term begins, without a grace
    /// window when no flight was in progress (the shell writes
    /// `flight.clean`). The flights that landed in its window are known to
    /// no later term: a rejoin of one is never answered `interrupted` after
    /// this, since every rejoiner came back in the window (see
    /// `Action::GraceWindowEnds`).
    fn stopped(&mut self) {
        let clean = self.state.coordinator.flights().next().is_none();
        // The shell flushes the term's last answers before it closes the
        // connections (§10.4): each client reads what was queued for it.
        // What the clients send in return is lost with the connection.
        for index in 0..self.state.processes.len() {
            while self.state.processes[index]
                .as_ref()
                .and_then(|process| process.link.as_ref())
                .is_some_and(|link| !link.deposed && !link.responses.is_empty())
            {
                self.response_arrives(index);
            }
        }
        let landed = std::mem::take(&mut self.state.history.landed_in_window);
        if !landed.is_empty() {
            self.state.last_step.witness(Witness::StopServedWindow);
        }
        self.state.history.stopped_with.extend(landed);
        self.end_term(!clean);
        let epoch = self.state.durable_epoch;
        if clean {
            self.note(format_args!(
                "the term stops cleanly; term {epoch} begins without a grace window"
            ));
        } else {
            self.note(format_args!(
                "the term stops with a flight in progress; term {epoch} begins with a grace window"
            ));
        }
    }

    /// The coordinator's process is gone (it died, or resigned after
    /// `EndTerm`): every connection to it closes, and the next term begins.
    fn fail_over(&mut self) {
        self.state.history.landed_in_window.clear();
        self.end_term(true);
        let epoch = self.state.durable_epoch;
        self.note(format_args!(
            "term {epoch} begins with a grace window; every connection to the last one is closed"
        ));
    }

    /// Every connection to the current coordinator closes, and the next
    /// term begins, with a grace window or not.
    fn end_term(&mut self, grace: bool) {
        self.state.history.reasserted.clear();
        self.state.history.landed.clear();
        // Kept values and their timers die with the coordinator (SPEC.md
        // §16.2).
        self.state.history.reusable.clear();
        self.state.reuse_timers.clear();
        for index in 0..self.state.processes.len() {
            let current = self.state.processes[index]
                .as_ref()
                .and_then(|process| process.link.as_ref())
                .is_some_and(|link| !link.deposed);
            if current {
                self.lose_link(index);
            }
        }
        self.begin_term(grace);
    }

    /// A new term begins while the current coordinator goes on serving,
    /// deposed (SPEC.md §12.5): it keeps its connections and what its term
    /// owns.
    fn overlap(&mut self) {
        self.state.used.overlaps += 1;
        let state = &mut self.state;
        let deposed = Deposed {
            coordinator: state.coordinator.clone(),
            reuse_timers: std::mem::take(&mut state.reuse_timers),
            last_minted: state.history.last_minted,
            reasserted: std::mem::take(&mut state.history.reasserted),
            landed: std::mem::take(&mut state.history.landed),
            reusable: std::mem::take(&mut state.history.reusable),
        };
        state.deposed = Some(deposed);
        for link in state
            .processes
            .iter_mut()
            .flatten()
            .filter_map(|process| process.link.as_mut())
        {
            link.deposed = true;
        }
        let epoch = self.begin_term(true);
        self.note(format_args!(
            "term {epoch} begins with a grace window; the last term's coordinator goes on \
             serving its connections"
        ));
    }

    /// The deposed coordinator stops: every connection to it closes.
    fn deposed_stops(&mut self) {
        self.deposed_ends = false;
        self.state.deposed = None;
        for index in 0..self.state.processes.len() {
            if self.to_deposed(index) {
                self.lose_link(index);
            }
        }
        self.note(format_args!(
            "the deposed coordinator stops; every connection to it is closed"
        ));
    }

    /// The next term's coordinator takes the current one's place, with the
    /// next epoch and a grace window or none; returns its epoch.
    fn begin_term(&mut self, grace: bool) -> Epoch {
        let previous = self.state.durable_epoch;
        let epoch = previous
            .next()
            .expect("the model's few terms stay far below Epoch::MAX");
        self.state.durable_epoch = epoch;
        self.state.history.stopping = false;
        let term = if grace {
            Term::AfterFailover {
                grace_window: GRACE_WINDOW,
            }
        } else {
            Term::First
        };
        self.state.coordinator = self.model.coordinator(epoch, term);
        if self.state.coordinator.epoch() <= previous {
            self.state.last_step.violate(Violation::EpochNotIncreasing);
        }
        self.coordinator(coordinator::Event::TermBegan);
        self.state.next_connection = 0;
        epoch
    }

    /// Process `index` learns that its connection closed: what was queued
    /// on it is lost, the answers its calls had on it no longer bind the
    /// next one, and the client reconnects later.
    fn lose_link(&mut self, index: usize) {
        let process = self.process(index);
        process.link = None;
        for record in process.calls.values_mut() {
            record.answered_for_good = false;
            record.stopped = false;
            record.rejoin = None;
            record.at_coordinator = None;
        }
        let effects = process.client.step(client::Event::ConnectionLost);
        self.client_effects(index, effects);
    }

    /// The connection of process `index` closes: the flights its detached
    /// calls lead are interrupted (SPEC.md §8.7), and their joiners with
    /// them.
    fn leader_disconnected(&mut self, index: usize) {
        let Some(process) = self.state.processes[index].as_ref() else {
            return;
        };
        let tokens: Vec<FencingToken> = process
            .calls
            .values()
            .filter(|record| record.detached)
            .filter_map(|record| record.token)
            .collect();
        self.state.history.leader_disconnected.extend(tokens);
    }

    /// Feeds `event` to the coordinator, carries out its effects, and checks
    /// what it did. Returns the responses it sent.
    fn coordinator(&mut self, event: coordinator::Event) -> Vec<(ConnectionId, Response)> {
        let before: BTreeMap<Key, FencingToken> = self
            .state
            .coordinator
            .flights()
            .map(|(key, token)| (key.clone(), token))
            .collect();
        let effects = self.state.coordinator.step(event);
        let mut sent = Vec::new();
        let mut sends = Sends::default();
        let mut term_ended = None;
        for effect in effects {
            match effect {
                coordinator::Effect::Send {
                    connection,
                    response,
                } => {
                    self.send(connection, response.clone(), &before, &mut sends);
                    sent.push((connection, response));
                }
                coordinator::Effect::Close { connection, .. } => self.close(connection),
                coordinator::Effect::EndTerm { reason } => term_ended = Some(reason),
                // The shell starts the timer that reports the expiry
                // (SPEC.md §16.2); the model fires it at any later moment.
                coordinator::Effect::StartTimer {
                    timer: Timer::Reuse { key, token },
                    ..
                } => {
                    let who = self.who();
                    self.note(format_args!("{who} keeps {key:?} of {token:?}"));
                    self.state.reuse_timers.insert((key, token));
                }
                // The model ends a grace window at any moment while it is
                // open (an action), not after its length: time is not
                // modelled.
                coordinator::Effect::StartTimer {
                    timer: Timer::GraceWindow,
                    ..
                } => {}
                // The model opens no relay connection (SPEC.md §18.5), so
                // no relay window starts.
                coordinator::Effect::StartTimer {
                    timer: Timer::RelayWindow { .. },
                    ..
                } => {}
            }
        }
        if !sends.led.is_empty() && self.state.coordinator.in_grace() {
            self.state.last_step.violate(Violation::LeadInGrace);
        }
        // SPEC.md §15.2: a flight stopped while somebody joined it
        // interrupts that joiner in the same step (§8.6).
        if !sends.stopped.is_disjoint(&sends.interrupted) {
            self.state.last_step.violate(Violation::StoppedWhileJoined);
        }
        // Outside a stopped window, what landed in the window no longer
        // needs it: a rejoin that comes later is answered `interrupted`, by
        // this term or the next, as the protocol allows.
        if !self.state.coordinator.in_grace() && term_ended != Some(EndReason::Stopped) {
            self.state.history.landed_in_window.clear();
        }
        if term_ended.is_some() && self.on_deposed {
            // Its fields are swapped in: it stops when the step is back.
            self.deposed_ends = true;
        } else if term_ended == Some(EndReason::Stopped) {
            self.stopped();
        } else if term_ended.is_some() {
            // SPEC.md §8.9: the shell resigns and the processes fail over.
            // Unreachable with the model's few tokens per term; handled so
            // that a change to that limit cannot silently stall the model.
            self.fail_over();
        }
        sent
    }

    /// Carries out the coordinator's `Send`, checking it against the rules
    /// of SPEC.md §8.10.
    fn send(
        &mut self,
        connection: ConnectionId,
        response: Response,
        flights_before: &BTreeMap<Key, FencingToken>,
        sends: &mut Sends,
    ) {
        let who = self.who();
        self.note(format_args!("{who} sends {response:?} on {connection:?}"));
        let coordinator_epoch = self.state.coordinator.epoch();
        // Only the configurations with stops record the lands of a window,
        // so that the others explore exactly the states they did.
        let lands_in_window = self.model.stops > 0 && self.state.coordinator.in_grace();
        let Some(index) = self.linked(connection) else {
            self.state.last_step.violate(Violation::SentOnClosed);
            return;
        };
        if let Response::Cycle { id, .. } = &response {
            self.check_refusal(index, id);
        }
        let history = &mut self.state.history;
        let facts = &mut self.state.last_step;
        let process = self.state.processes[index]
            .as_mut()
            .expect("found among the live processes");
        if let Some(record) = call_of(response.id()).and_then(|call| process.calls.get_mut(&call)) {
            // A land that crossed a `stop` is answered `rejected` (§8.5):
            // the flight is over.
            if record.answered_for_good
                || (record.stopped && !matches!(response, Response::Rejected { .. }))
            {
                facts.violate(Violation::AnsweredAfterFinal);
            }
            if record.parent.is_some() {
                record.at_coordinator = match &response {
                    Response::Lead { token: flight, .. } | Response::Joined { flight, .. } => {
                        Some(Some(*flight))
                    }
                    _ => None,
                };
            }
            match &response {
                Response::Cycle { .. } => record.answered_for_good = true,
                Response::Lead { token, .. } => {
                    if record.joined {
                        facts.violate(Violation::JoinedLeads);
                    }
                    if flights_before.contains_key(&record.key)
                        || !sends.led.insert(record.key.clone())
                    {
                        facts.violate(Violation::SecondFlight);
                    }
                    if history.last_minted.is_some_and(|last| *token <= last)
                        || token.epoch() != coordinator_epoch
                    {
                        facts.violate(Violation::TokenNotIncreasing);
                    }
                    history.last_minted = Some(*token);
                }
                Response::Landed { .. } => record.answered_for_good = true,
                Response::Interrupted { .. } => {
                    record.answered_for_good = true;
                    if let Some(rejoin) = record.rejoin {
                        facts.witness(Witness::RejoinInterrupted);
                        if rejoin.answerable
                            && history.reasserted.contains(&rejoin.flight)
                            && history.landed.contains(&rejoin.flight)
                        {
                            facts.violate(Violation::RejoinMissedOutcome);
                        }
                        if history.stopped_with.contains(&rejoin.flight) {
                            facts.violate(Violation::StopLostLanding);
                        }
                    }
                    // The flight it waited for: a rejoin names it; a plain
                    // run is only ever interrupted as a joiner of its key's
                    // flight in progress (§8.6).
                    let flight = match record.rejoin {
                        Some(rejoin) => Some(rejoin.flight),
                        None => flights_before.get(&record.key).copied(),
                    };
                    if let Some(flight) = flight {
                        sends.interrupted.insert(flight);
                        // §15.2: a detached flight whose caller left goes on
                        // for its joiners. Excused: its leader's connection
                        // closed (§8.7), a coordinator died since it was led
                        // (an earlier epoch: the new term may not take it
                        // back), or the rejoin arrived after the flight had
                        // ended (the joiner's own connection closed, and its
                        // withdrawal may have left nobody waiting).
                        let excused = history.leader_disconnected.contains(&flight)
                            || flight.epoch() < coordinator_epoch
                            || record.rejoin.is_some_and(|rejoin| !rejoin.answerable);
                        if history.caller_left.contains(&flight) && !excused {
                            facts.violate(Violation::DetachedJoinerInterrupted);
                        }
                    }
                }
                Response::Stop { .. } => {
                    record.stopped = true;
                    facts.witness(Witness::StopSent);
                    if !record.cancelled {
                        facts.violate(Violation::StoppedForWaitingCaller);
                    }
                    if let Some(token) = record.token {
                        sends.stopped.insert(token);
                    }
                }
                Response::Reused {
                    flight, outcome, ..
                } => {
                    record.answered_for_good = true;
                    if !record.reuse {
                        facts.violate(Violation::ReusedWithoutWindow);
                    }
                    if !history.reusable.contains(&(record.key.clone(), *flight))
                        || !history.produced(*flight, outcome)
                    {
                        facts.violate(Violation::ReusedNotKept);
                    }
                }
                Response::Ack { .. } => {
                    if let Some(token) = record.token {
                        history.landed.insert(token);
                        history.ever_landed.insert(token);
                        if lands_in_window {
                            history.landed_in_window.insert(token);
                        }
                    }
                }
                _ => {}
            }
        }
        process
            .link
            .as_mut()
            .expect("found by its link")
            .responses
            .push_back(response);
    }

    /// SPEC.md §17.2: the call `id` of `index` is refused for a cycle. It
    /// must be a nested call whose parent's work runs, and the flight of its
    /// key that it would have waited for (a rejoin's own flight only) must
    /// wait for that parent through the works' nested calls, or be it.
    fn check_refusal(&mut self, index: usize, id: &RequestId) {
        self.state.last_step.witness(Witness::CycleRefused);
        let Some(record) = self.state.processes[index]
            .as_ref()
            .and_then(|process| call_of(id).and_then(|call| process.calls.get(&call)))
        else {
            return self.state.last_step.violate(Violation::FalseCycleRefusal);
        };
        let waited_for = self
            .state
            .coordinator
            .flights()
            .find(|(key, _)| **key == record.key)
            .map(|(_, token)| token)
            .filter(|token| record.rejoin.is_none_or(|rejoin| rejoin.flight == *token));
        let real = match (record.parent, waited_for) {
            (Some(parent), Some(start)) => {
                self.state.running().contains(&parent)
                    && State::reaches(&self.state.waits_for(), start, parent)
            }
            _ => false,
        };
        if !real {
            self.state.last_step.violate(Violation::FalseCycleRefusal);
        }
    }

    /// `connection` closes while both of its processes live (it broke, or
    /// the coordinator closed it, SPEC.md §8.9): the client learns it, then
    /// the coordinator; what was queued on it is lost, and the client
    /// reconnects later.
    fn close(&mut self, connection: ConnectionId) {
        if let Some(index) = self.linked(connection) {
            self.leader_disconnected(index);
            self.lose_link(index);
        }
        self.coordinator(coordinator::Event::ConnectionClosed { connection });
    }

    /// Carries out a client's effects, checking them against SPEC.md §9.
    fn client_effects(&mut self, index: usize, effects: Vec<client::Effect>) {
        let coordinator_epoch = self.state.coordinator.epoch();
        for effect in effects {
            self.note(format_args!("process {index}: {effect:?}"));
            let history = &self.state.history;
            let facts = &mut self.state.last_step;
            let process = self.state.processes[index]
                .as_mut()
                .expect("effects come from a live process");
            match effect {
                client::Effect::Send(request) => match process.link.as_mut() {
                    Some(link) => link.requests.push_back(request),
                    None => facts.violate(Violation::SentOnClosed),
                },
                // A detached call's caller left; the shell drops its work
                // (SPEC.md §15.3).
                client::Effect::StopWork { call, .. } => {
                    process.work.remove(&call);
                    if let Some(record) = process.calls.get_mut(&call) {
                        record.holds_lead = false;
                        if !record.cancelled {
                            facts.violate(Violation::StoppedForWaitingCaller);
                        }
                    }
                }
                // The shell tells a leader that waits for its land after a
                // panic (SPEC.md §9.6); the model's works do not panic, so
                // nobody waits.
                client::Effect::LandSettled { .. } => {}
                client::Effect::StartWork { call, token } => {
                    process.work.insert(call, token);
                    if let Some(record) = process.calls.get_mut(&call) {
                        if record.joined {
                            facts.violate(Violation::JoinedLeads);
                        }
                        record.token = Some(token);
                        record.holds_lead = true;
                    }
                }
                client::Effect::Resolve { call, resolution } => {
                    let Some(record) = process.calls.get_mut(&call) else {
                        continue;
                    };
                    if record.resolved {
                        facts.violate(Violation::ResolvedTwice);
                    }
                    record.resolved = true;
                    match &resolution {
                        Resolution::Joined { flight, outcome } => {
                            if !history.produced(*flight, outcome) {
                                facts.violate(Violation::WrongOutcome);
                            }
                            if flight.epoch() < coordinator_epoch
                                && matches!(outcome, Outcome::Value(_))
                            {
                                facts.witness(Witness::ValueAfterFailover);
                            }
                            if history.caller_left.contains(flight) {
                                facts.witness(Witness::DetachedFlightLanded);
                            }
                        }
                        Resolution::Reused { .. } => {
                            if !record.reuse {
                                facts.violate(Violation::ReusedWithoutWindow);
                            }
                            facts.witness(Witness::ValueReused);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn record_mut(&mut self, index: usize, id: &RequestId) -> Option<&mut CallRecord> {
        self.state.processes[index]
            .as_mut()
            .and_then(|process| call_of(id).and_then(|call| process.calls.get_mut(&call)))
    }

    fn process(&mut self, index: usize) -> &mut Process {
        self.state.processes[index]
            .as_mut()
            .expect("actions name live processes only")
    }

    fn note(&mut self, line: std::fmt::Arguments<'_>) {
        if let Some(log) = self.log.as_deref_mut() {
            let _ = writeln!(log, "       {line}");
        }
    }
}

/// What one coordinator step sent, for the checks that look at the whole
/// step.
#[derive(Default)]
struct Sends {
    /// Keys answered `lead`.
    led: BTreeSet<Key>,
    /// Flights whose joiners (or rejoins) were answered `interrupted`.
    interrupted: BTreeSet<FencingToken>,
    /// Flights whose leader was answered `stop`.
    stopped: BTreeSet<FencingToken>,
}

/// The call a request id names, by the client's own map (SPEC.md §9.1):
/// only the canonical decimal text of a call number, as the client reads it.
fn call_of(id: &RequestId) -> Option<CallId> {
    CallId::from_request_id(id)
}

/// Every live process is connected to the current term, and nothing is on
/// its way on any connection: what a term asked to stop waits for before
/// its grace window may end (`Action::GraceWindowEnds`).
fn all_answered(state: &State) -> bool {
    state.processes.iter().flatten().all(|process| {
        process.link.as_ref().is_some_and(|link| {
            !link.deposed && link.requests.is_empty() && link.responses.is_empty()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC.md §9.1: the model names a call as the client does, so a
    /// response the client ignores (`01` is no call's id) is not counted for
    /// call 1 by the properties.
    #[test]
    fn the_model_reads_call_ids_as_the_client_does() {
        let id = |text: &str| RequestId::new(text.to_owned()).expect("a valid id");
        assert_eq!(call_of(&id("1")), Some(CallId(1)));
        assert_eq!(call_of(&id("01")), None);
        assert_eq!(call_of(&id("+1")), None);
    }
}
