//! The model of a sharded cluster (SPEC.md §19, §12.9): S coordinators, one
//! per shard, each the shipped [`Coordinator`] with its own term and epochs,
//! and processes that keep one shipped [`Client`] per shard and route each
//! call to the client of its key's shard (`ShardCount::of`, §19.4). A call
//! made by a flight's work names that flight as its parent through the
//! shipped routing decision, `ShardCount::parent_for` (§19.5), which gives
//! it only to a call of the parent's own shard.
//!
//! Like [`crate::tier`], a plain [`stateright::Model`] whose connections are
//! pairs of ordered queues ([`Queues`]) that break as a whole, both ends
//! told. One shard's coordinator may die (its next term begins at once, with
//! a grace window, as in the directory's model); the other shards' terms
//! live on, and their clients must see nothing of it. Time is not modelled
//! but for the one assumption of SPEC.md §18.4 that the host tier's model
//! makes: a shard's grace window ends only once every process's client of
//! that shard is connected and nothing is on its way to or from it
//! ([`calm`]), so that every leader's reassert reached the new term first.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use single_flight_core::client::{self, CallId, Client, Resolution};
use single_flight_core::coordinator::{self, ConnectionId, Coordinator, Term, Timer};
use single_flight_core::protocol::{
    self, Epoch, FencingToken, Incoming, Key, Outcome, Request, Response, Shard, ShardCount,
};
use stateright::{Model, Property};

use crate::check::Narrated;
use crate::directory::Ending;
use crate::tier::Queues;

/// The grace window a shard's term after a failover is created with. Time
/// is not modelled: the window ends when an action ends it.
const GRACE_WINDOW: Duration = Duration::from_millis(500);

/// The shards of the modelled cluster: the fewest that have one shard fail
/// over beside another that does not.
const SHARD_COUNT: u32 = 2;

/// The keys, by index: `b` is of shard 0 and `a` of shard 1 with two shards
/// (SPEC.md §19.1's test vectors; [`Shards::shard_of`] computes it with the
/// shipped function, and a test of this module checks it). One key a shard:
/// every cycle within a shard is then a work that calls its own key, and
/// every other cycle crosses the shards.
pub const KEY_NAMES: [&str; 2] = ["b", "a"];

/// A sharded cluster of processes that call keys of both shards, and the
/// bounds of what may happen to it (each a budget of the action generator,
/// as in [`crate::Directory`]).
#[derive(Clone, Debug)]
pub struct Shards {
    /// Processes, each with one client per shard.
    pub processes: usize,
    /// Calls started by the processes' callers, of any key.
    pub calls: u8,
    /// Calls made by running works (SPEC.md §17), of any key: a work does
    /// not finish while a call it made waits.
    pub nested: u8,
    /// Deaths of each shard's coordinator, by shard; each is followed at
    /// once by the shard's next term, with a grace window.
    pub coordinator_deaths: [u8; SHARD_COUNT as usize],
    /// A seeded bug of the routing decision (SPEC.md §12.3), or none.
    pub mutant: Option<protocol::Mutant>,
}

impl Shards {
    /// Checked in CI (SPEC.md §12.9): two processes, two shards of one key
    /// each, two calls and three nested calls, and one death of shard 0's
    /// coordinator. Within the bounds: a work of shard 0 calls its own key
    /// (a cycle, refused) or shard 1's, whose work may call shard 0's back
    /// (a cycle across shards, which waits); a call of a key joins another
    /// process's flight; shard 0 fails over while calls of shard 1 wait.
    pub fn two_shards() -> Shards {
        Shards {
            processes: 2,
            calls: 2,
            nested: 3,
            coordinator_deaths: [1, 0],
            mutant: None,
        }
    }

    pub fn with_mutant(self, mutant: Option<protocol::Mutant>) -> Shards {
        Shards { mutant, ..self }
    }

    fn count() -> ShardCount {
        ShardCount::new(u64::from(SHARD_COUNT)).expect("the model's shard count is valid")
    }

    pub fn key(index: usize) -> Key {
        Key::new(KEY_NAMES[index]).expect("the model's key names are valid keys")
    }

    /// The shard of the `key`-th key: the shipped function (SPEC.md §19.1).
    pub fn shard_of(key: usize) -> usize {
        Shards::count().of(&Shards::key(key)).index() as usize
    }

    fn shard(index: usize) -> Shard {
        Shards::count()
            .shard(index as u32)
            .expect("the model's shards are of its count")
    }

    /// The parent that a call of the `key`-th key made by the work of
    /// `parent` (its shard and token) sends: the shipped routing decision
    /// (SPEC.md §19.5), or its seeded bug.
    fn parent_for(&self, key: usize, parent: (usize, FencingToken)) -> Option<FencingToken> {
        let key = Shards::key(key);
        let parent = Some((Shards::shard(parent.0), parent.1));
        match self.mutant {
            None => Shards::count().parent_for(&key, parent),
            Some(mutant) => Shards::count().parent_for_with_mutant(Some(mutant), &key, parent),
        }
    }

    /// The outcome of the work of the `key`-th key under `token`. It names
    /// both, since two shards mint equal tokens (SPEC.md §19.3).
    pub fn outcome(key: usize, token: FencingToken) -> Outcome {
        Ending::of(token).named(format!("{} {token}", KEY_NAMES[key]))
    }
}

/// One moment of the sharded cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardsState {
    /// Each shard's coordinator of its current term, by shard.
    pub coordinators: Vec<ShardTerm>,
    /// The processes, by index.
    pub processes: Vec<ShardedProcess>,
    pub used: Used,
    pub history: History,
    /// What the step that led here broke; cleared at every step.
    pub violations: BTreeSet<Violation>,
    /// What the step that led here showed; cleared at every step.
    pub witnessed: BTreeSet<Witness>,
}

/// One shard's current term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardTerm {
    pub coordinator: Coordinator,
    /// The next connection number of the term.
    pub next_connection: u64,
}

/// One process: a client per shard (SPEC.md §19.4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardedProcess {
    /// By shard.
    pub clients: Vec<ShardClient>,
}

/// One process's client of one shard, with its connection to the shard's
/// coordinator, the works its leading calls run, and its calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardClient {
    pub client: Client,
    pub link: Option<Queues>,
    /// The work its leading calls run, under their tokens.
    pub work: BTreeMap<CallId, FencingToken>,
    /// Every call routed to it, numbered from 1.
    pub calls: BTreeMap<CallId, Call>,
}

/// What the model knows of one call, from what its process read and did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    pub key: usize,
    /// For a call made by a work: the shard and call whose work made it.
    pub made_by: Option<(usize, CallId)>,
    /// The flight it was last answered `joined` to.
    pub joined: Option<FencingToken>,
    /// The token it leads under, once its work started.
    pub token: Option<FencingToken>,
    pub resolved: bool,
}

/// Budgets of the bounded actions, counted up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Used {
    pub calls: u8,
    pub nested: u8,
    /// By shard.
    pub coordinator_deaths: [u8; SHARD_COUNT as usize],
}

/// The past, as far as the properties need it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// The greatest token a work of each key started with.
    pub started: BTreeMap<usize, FencingToken>,
    /// The works that finished, by key and token: each produced
    /// [`Shards::outcome`].
    pub finished: BTreeSet<(usize, FencingToken)>,
}

/// A rule a step broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Violation {
    /// A work started while another of its key ran.
    TwoWorksOfOneKey,
    /// A work started with a token not above every earlier one of its key.
    TokenNotIncreasing,
    /// A call resolved twice.
    ResolvedTwice,
    /// A joiner received an outcome its flight's work did not produce.
    WrongOutcome,
    /// A machine sent on a connection that was not open.
    SentOnClosed,
    /// An answer no call of this model asks for (`reused`, `unsupported`,
    /// `unavailable`, a stop of a work).
    UnexpectedAnswer,
    /// A client of a shard whose coordinator never died lost its
    /// connection, replayed a call (a reassert or a rejoin), or had a call
    /// interrupted or lost.
    UntouchedShardDisturbed,
    /// A request carried a parent that is not the token of the flight whose
    /// work made the call, in the coordinator's own shard; or a call made by
    /// a work of its own shard carried none.
    ParentOfAnotherShard,
    /// A `cycle` answer went to a call whose key's flight in progress is not
    /// its parent: with one key a shard, the only cycle within a shard is a
    /// work that calls its own key.
    FalseCycleRefusal,
}

/// Something worth reaching that a step showed (`sometimes` properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Witness {
    /// A coordinator answered `cycle`.
    CycleRefused,
    /// A call made by a work of another shard was sent without a parent.
    CrossShardCallWithoutParent,
    /// A call made by the work of a call that a work of the first call's
    /// shard made joined that work's flight: a cycle across two shards,
    /// which neither coordinator can see.
    CrossShardCycle,
    /// A shard's coordinator died while a call of another shard waited.
    FailoverBesideWaitingCall,
    /// A joiner received the outcome of a flight of an earlier term of its
    /// shard.
    JoinedAcrossFailover,
}

/// One thing that may happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShardsAction {
    /// A caller of `process` starts a call for the `key`-th key, routed to
    /// the client of the key's shard.
    CallStarts { process: usize, key: usize },
    /// The work that `parent` of `process`'s client of `shard` leads makes a
    /// call for the `key`-th key, routed to the client of the key's shard
    /// with the parent the routing decision gives (SPEC.md §19.5).
    NestedCallStarts {
        process: usize,
        shard: usize,
        parent: CallId,
        key: usize,
    },
    /// `process`'s client of `shard` connects to the shard's coordinator.
    Connects { process: usize, shard: usize },
    /// The shard's coordinator reads the client's next request.
    RequestArrives { process: usize, shard: usize },
    /// The client reads its next response.
    ResponseArrives { process: usize, shard: usize },
    WorkFinishes {
        process: usize,
        shard: usize,
        call: CallId,
    },
    /// The shard's coordinator dies: its connections close, and the shard's
    /// next term begins with a grace window.
    CoordinatorDies { shard: usize },
    /// The shard's grace window ends, only when the shard is [`calm`].
    GraceWindowEnds { shard: usize },
}

impl Narrated for Shards {
    fn apply(
        &self,
        state: &ShardsState,
        action: &ShardsAction,
        log: Option<&mut String>,
    ) -> ShardsState {
        let mut step = Step {
            model: self,
            state: state.clone(),
            log,
        };
        step.state.violations = BTreeSet::new();
        step.state.witnessed = BTreeSet::new();
        step.act(action);
        step.state
    }

    fn broke(state: &ShardsState) -> Option<String> {
        (!state.violations.is_empty()).then(|| format!("{:?}", state.violations))
    }
}

impl Model for Shards {
    type State = ShardsState;
    type Action = ShardsAction;

    /// Every shard's first term, every process's clients connected and
    /// idle.
    fn init_states(&self) -> Vec<ShardsState> {
        let coordinators = (0..SHARD_COUNT)
            .map(|_| {
                let mut coordinator = Coordinator::new(Epoch::FIRST, Term::First);
                let began = coordinator.step(coordinator::Event::TermBegan);
                debug_assert!(began.is_empty());
                ShardTerm {
                    coordinator,
                    next_connection: 0,
                }
            })
            .collect();
        let processes = (0..self.processes)
            .map(|_| ShardedProcess {
                clients: (0..SHARD_COUNT)
                    .map(|_| ShardClient {
                        client: Client::new(),
                        link: None,
                        work: BTreeMap::new(),
                        calls: BTreeMap::new(),
                    })
                    .collect(),
            })
            .collect();
        let mut step = Step {
            model: self,
            state: ShardsState {
                coordinators,
                processes,
                used: Used::default(),
                history: History::default(),
                violations: BTreeSet::new(),
                witnessed: BTreeSet::new(),
            },
            log: None,
        };
        for process in 0..self.processes {
            for shard in 0..SHARD_COUNT as usize {
                step.act(&ShardsAction::Connects { process, shard });
            }
        }
        vec![step.state]
    }

    /// Always in the same order, so that a path can be replayed.
    fn actions(&self, state: &ShardsState, actions: &mut Vec<ShardsAction>) {
        for (index, process) in state.processes.iter().enumerate() {
            if state.used.calls < self.calls {
                for key in 0..KEY_NAMES.len() {
                    actions.push(ShardsAction::CallStarts {
                        process: index,
                        key,
                    });
                }
            }
            for (shard, client) in process.clients.iter().enumerate() {
                match &client.link {
                    None => actions.push(ShardsAction::Connects {
                        process: index,
                        shard,
                    }),
                    Some(link) => {
                        if !link.requests.is_empty() {
                            actions.push(ShardsAction::RequestArrives {
                                process: index,
                                shard,
                            });
                        }
                        if !link.responses.is_empty() {
                            actions.push(ShardsAction::ResponseArrives {
                                process: index,
                                shard,
                            });
                        }
                    }
                }
                for &call in client.work.keys() {
                    if state.used.nested < self.nested {
                        for key in 0..KEY_NAMES.len() {
                            actions.push(ShardsAction::NestedCallStarts {
                                process: index,
                                shard,
                                parent: call,
                                key,
                            });
                        }
                    }
                    // A work waits for the calls it made (SPEC.md §17).
                    if !waits(process, (shard, call)) {
                        actions.push(ShardsAction::WorkFinishes {
                            process: index,
                            shard,
                            call,
                        });
                    }
                }
            }
        }
        for (shard, term) in state.coordinators.iter().enumerate() {
            if state.used.coordinator_deaths[shard] < self.coordinator_deaths[shard] {
                actions.push(ShardsAction::CoordinatorDies { shard });
            }
            if term.coordinator.in_grace() && calm(state, shard) {
                actions.push(ShardsAction::GraceWindowEnds { shard });
            }
        }
    }

    fn next_state(&self, state: &ShardsState, action: ShardsAction) -> Option<ShardsState> {
        Some(self.apply(state, &action, None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties(self)
    }
}

/// Whether the work of `maker` (a shard and a call) waits for a call it
/// made, of any shard.
fn waits(process: &ShardedProcess, maker: (usize, CallId)) -> bool {
    process
        .clients
        .iter()
        .flat_map(|client| client.calls.values())
        .any(|call| call.made_by == Some(maker) && !call.resolved)
}

/// Every process's client of `shard` connected, and nothing on its way to or
/// from the shard's coordinator: the moment its grace window may end
/// (SPEC.md §18.4's assumption about time, as in the host tier's model).
pub fn calm(state: &ShardsState, shard: usize) -> bool {
    state.processes.iter().all(|process| {
        process.clients[shard]
            .link
            .as_ref()
            .is_some_and(Queues::is_empty)
    })
}

/// Nothing can happen but new calls and deaths: every shard calm, no window
/// open, no work running.
fn settled(state: &ShardsState) -> bool {
    (0..state.coordinators.len()).all(|shard| calm(state, shard))
        && state
            .coordinators
            .iter()
            .all(|term| !term.coordinator.in_grace())
        && state
            .processes
            .iter()
            .flat_map(|process| process.clients.iter())
            .all(|client| client.work.is_empty())
}

pub const NO_TWO_WORKS: &str = "no work of a key starts while another of it runs";
pub const TOKENS_INCREASE: &str = "tokens increase per key";
pub const ANSWERED_ONCE: &str = "a call is answered for good once";
pub const JOINER_GETS_ITS_OUTCOME: &str = "a joiner gets its flight's outcome";
pub const NOTHING_ON_CLOSED: &str = "nothing is sent on a closed connection";
pub const OTHER_SHARDS_UNTOUCHED: &str =
    "a shard whose coordinator never died sees nothing of another's failover";
pub const PARENT_OF_ITS_SHARD: &str =
    "a parent is sent only to its own shard's coordinator, and always there";
pub const NO_FALSE_CYCLE: &str = "a call refused for a cycle was in one, within its shard";
pub const NO_CALL_LEFT_WAITING: &str = "no call is left waiting once every shard is settled";
pub const CYCLE_REFUSED: &str = "sometimes: a work's call of its own shard is refused for a cycle";
pub const CROSS_SHARD_WITHOUT_PARENT: &str =
    "sometimes: a work's call of another shard is sent without a parent";
pub const CROSS_SHARD_CYCLE_WAITS: &str =
    "sometimes: a cycle across two shards is made, and no coordinator refuses it";
pub const FAILOVER_BESIDE_WAITING_CALL: &str =
    "sometimes: a shard fails over while a call of another shard waits";
pub const JOINED_ACROSS_FAILOVER: &str =
    "sometimes: a joiner receives the outcome of a flight of an earlier term of its shard";

/// The properties of the shards (SPEC.md §19.4, §19.5, §12.9).
pub fn properties(model: &Shards) -> Vec<Property<Shards>> {
    let mut all = vec![
        Property::always(NO_TWO_WORKS, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::TwoWorksOfOneKey)
        }),
        Property::always(TOKENS_INCREASE, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::TokenNotIncreasing)
        }),
        Property::always(ANSWERED_ONCE, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::ResolvedTwice)
        }),
        Property::always(JOINER_GETS_ITS_OUTCOME, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::WrongOutcome)
                && !state.violations.contains(&Violation::UnexpectedAnswer)
        }),
        Property::always(NOTHING_ON_CLOSED, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::SentOnClosed)
        }),
        Property::always(OTHER_SHARDS_UNTOUCHED, |_, state: &ShardsState| {
            !state
                .violations
                .contains(&Violation::UntouchedShardDisturbed)
        }),
        Property::always(PARENT_OF_ITS_SHARD, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::ParentOfAnotherShard)
        }),
        Property::always(NO_FALSE_CYCLE, |_, state: &ShardsState| {
            !state.violations.contains(&Violation::FalseCycleRefusal)
        }),
        Property::always(NO_CALL_LEFT_WAITING, |_, state: &ShardsState| {
            !settled(state)
                || state
                    .processes
                    .iter()
                    .flat_map(|process| process.clients.iter())
                    .all(|client| client.calls.values().all(|call| call.resolved))
        }),
    ];
    if model.nested > 0 {
        all.push(Property::sometimes(
            CYCLE_REFUSED,
            |_, state: &ShardsState| state.witnessed.contains(&Witness::CycleRefused),
        ));
        all.push(Property::sometimes(
            CROSS_SHARD_WITHOUT_PARENT,
            |_, state: &ShardsState| {
                state
                    .witnessed
                    .contains(&Witness::CrossShardCallWithoutParent)
            },
        ));
    }
    if model.nested > 1 {
        all.push(Property::sometimes(
            CROSS_SHARD_CYCLE_WAITS,
            |_, state: &ShardsState| state.witnessed.contains(&Witness::CrossShardCycle),
        ));
    }
    if model.coordinator_deaths.iter().any(|&deaths| deaths > 0) {
        all.push(Property::sometimes(
            FAILOVER_BESIDE_WAITING_CALL,
            |_, state: &ShardsState| {
                state
                    .witnessed
                    .contains(&Witness::FailoverBesideWaitingCall)
            },
        ));
        all.push(Property::sometimes(
            JOINED_ACROSS_FAILOVER,
            |_, state: &ShardsState| state.witnessed.contains(&Witness::JoinedAcrossFailover),
        ));
    }
    all
}

/// One action being applied: the state machines are stepped and their
/// effects carried out as the shell would.
struct Step<'a> {
    model: &'a Shards,
    state: ShardsState,
    log: Option<&'a mut String>,
}

impl Step<'_> {
    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some(log) = self.log.as_deref_mut() {
            let _ = writeln!(log, "       {}", text());
        }
    }

    fn violate(&mut self, violation: Violation) {
        self.state.violations.insert(violation);
    }

    fn witness(&mut self, witness: Witness) {
        self.state.witnessed.insert(witness);
    }

    fn act(&mut self, action: &ShardsAction) {
        match *action {
            ShardsAction::CallStarts { process, key } => {
                self.state.used.calls += 1;
                self.call_starts(process, key, None);
            }
            ShardsAction::NestedCallStarts {
                process,
                shard,
                parent,
                key,
            } => {
                self.state.used.nested += 1;
                self.call_starts(process, key, Some((shard, parent)));
            }
            ShardsAction::Connects { process, shard } => {
                let term = &mut self.state.coordinators[shard];
                let connection = ConnectionId(term.next_connection);
                term.next_connection += 1;
                self.state.processes[process].clients[shard].link = Some(Queues::new(connection));
                self.coordinator(
                    shard,
                    coordinator::Event::ConnectionOpened {
                        connection,
                        relay: None,
                    },
                );
                if self.state.processes[process].clients[shard].link.is_some() {
                    self.client(process, shard, client::Event::ConnectionReady);
                }
            }
            ShardsAction::RequestArrives { process, shard } => {
                let link = self.state.processes[process].clients[shard]
                    .link
                    .as_mut()
                    .expect("enabled when connected");
                let connection = link.connection;
                let request = link.requests.pop_front().expect("enabled when queued");
                self.note(|| format!("shard {shard}'s coordinator reads {request:?}"));
                self.coordinator(
                    shard,
                    coordinator::Event::RequestReceived {
                        connection,
                        request: Incoming::Request(request),
                    },
                );
            }
            ShardsAction::ResponseArrives { process, shard } => {
                let link = self.state.processes[process].clients[shard]
                    .link
                    .as_mut()
                    .expect("enabled when connected");
                let response = link.responses.pop_front().expect("enabled when queued");
                self.note(|| {
                    format!("process {process}'s client of shard {shard} reads {response:?}")
                });
                self.read(process, shard, &response);
                self.client(process, shard, client::Event::ResponseReceived { response });
            }
            ShardsAction::WorkFinishes {
                process,
                shard,
                call,
            } => {
                let client = &mut self.state.processes[process].clients[shard];
                let token = client.work.remove(&call).expect("enabled when running");
                let key = client.calls[&call].key;
                self.state.history.finished.insert((key, token));
                let outcome = Shards::outcome(key, token);
                self.client(
                    process,
                    shard,
                    client::Event::WorkFinished { call, outcome },
                );
            }
            ShardsAction::CoordinatorDies { shard } => {
                self.state.used.coordinator_deaths[shard] += 1;
                self.coordinator_dies(shard);
            }
            ShardsAction::GraceWindowEnds { shard } => {
                self.coordinator(
                    shard,
                    coordinator::Event::TimerFired {
                        timer: Timer::GraceWindow,
                    },
                );
            }
        }
    }

    /// A call of the `key`-th key starts at the client of the key's shard
    /// (SPEC.md §19.4); one made by the work of `made_by` (a shard and a
    /// call) takes the parent that the routing decision gives (§19.5).
    fn call_starts(&mut self, process: usize, key: usize, made_by: Option<(usize, CallId)>) {
        let shard = Shards::shard_of(key);
        let parent = made_by.and_then(|(maker_shard, maker)| {
            let token = self.state.processes[process].clients[maker_shard].work[&maker];
            self.model.parent_for(key, (maker_shard, token))
        });
        let client = &mut self.state.processes[process].clients[shard];
        let call = CallId(client.calls.len() as u64 + 1);
        client.calls.insert(
            call,
            Call {
                key,
                made_by,
                joined: None,
                token: None,
                resolved: false,
            },
        );
        self.note(|| {
            format!(
                "process {process}'s call {} of shard {shard}, parent {parent:?}",
                call.0
            )
        });
        self.client(
            process,
            shard,
            client::Event::CallStarted {
                call,
                key: Shards::key(key),
                options: client::CallOptions {
                    parent,
                    ..client::CallOptions::default()
                },
            },
        );
    }

    /// The shard's coordinator dies: every connection to it closes, what was
    /// on its way is lost, and the shard's next term begins at once with a
    /// grace window. The other shards' terms and connections live on.
    fn coordinator_dies(&mut self, shard: usize) {
        let waiting_elsewhere = self.state.processes.iter().any(|process| {
            process.clients.iter().enumerate().any(|(other, client)| {
                other != shard && client.calls.values().any(|call| !call.resolved)
            })
        });
        if waiting_elsewhere {
            self.witness(Witness::FailoverBesideWaitingCall);
        }
        let term = &mut self.state.coordinators[shard];
        let epoch = term
            .coordinator
            .epoch()
            .next()
            .expect("the model's epochs are few");
        term.coordinator = Coordinator::new(
            epoch,
            Term::AfterFailover {
                grace_window: GRACE_WINDOW,
            },
        );
        term.next_connection = 0;
        self.coordinator(shard, coordinator::Event::TermBegan);
        for process in 0..self.state.processes.len() {
            if self.state.processes[process].clients[shard]
                .link
                .take()
                .is_some()
            {
                self.client(process, shard, client::Event::ConnectionLost);
            }
        }
    }

    /// What the process learns from a response before its client does: the
    /// flight a call joined, and whether that closes a cycle across shards.
    fn read(&mut self, process: usize, shard: usize, response: &Response) {
        let Response::Joined { id, flight } = response else {
            return;
        };
        let Some(call) = CallId::from_request_id(id) else {
            return;
        };
        let clients = &mut self.state.processes[process].clients;
        let Some(record) = clients[shard].calls.get_mut(&call) else {
            return;
        };
        record.joined = Some(*flight);
        // A cycle across two shards: this call was made by the work of a
        // call of another shard, itself made by the work of a flight of this
        // shard, which this call now waits for.
        let Some((maker_shard, maker)) = record.made_by else {
            return;
        };
        let Some((first_shard, first)) = clients[maker_shard].calls[&maker].made_by else {
            return;
        };
        if maker_shard != shard
            && first_shard == shard
            && clients[first_shard].calls[&first].token == Some(*flight)
        {
            self.witness(Witness::CrossShardCycle);
        }
    }

    fn coordinator(&mut self, shard: usize, event: coordinator::Event) {
        let effects = self.state.coordinators[shard].coordinator.step(event);
        for effect in effects {
            match effect {
                coordinator::Effect::Send {
                    connection,
                    response,
                } => {
                    match self.linked(shard, connection) {
                        Some(process) => {
                            self.note(|| {
                            format!("shard {shard}'s coordinator sends process {process} {response:?}")
                        });
                            if let Response::Cycle { id, .. } = &response {
                                self.check_refusal(process, shard, id);
                            }
                            let link = self.state.processes[process].clients[shard]
                                .link
                                .as_mut()
                                .expect("found by its link");
                            link.responses.push_back(response);
                        }
                        None => self.violate(Violation::SentOnClosed),
                    }
                }
                coordinator::Effect::Close { connection, .. } => {
                    if let Some(process) = self.linked(shard, connection) {
                        self.note(|| {
                            format!(
                                "shard {shard}'s coordinator closes process {process}'s connection"
                            )
                        });
                        self.state.processes[process].clients[shard].link = None;
                        self.coordinator(
                            shard,
                            coordinator::Event::ConnectionClosed { connection },
                        );
                        self.client(process, shard, client::Event::ConnectionLost);
                    }
                }
                // The grace window's timer: the model ends the window by an
                // action of its own. No call has a reuse window.
                coordinator::Effect::StartTimer { .. } => {}
                coordinator::Effect::EndTerm { .. } => {
                    unreachable!("no term of the model stops or runs out of tokens")
                }
            }
        }
    }

    /// The process whose client of `shard` has `connection`.
    fn linked(&self, shard: usize, connection: ConnectionId) -> Option<usize> {
        self.state.processes.iter().position(|process| {
            process.clients[shard]
                .link
                .as_ref()
                .is_some_and(|link| link.connection == connection)
        })
    }

    /// A `cycle` answer (SPEC.md §17.2, §19.5): the call was made by a work
    /// of its own shard, and its key's flight in progress at the shard's
    /// coordinator is that work's flight (with one key a shard, the only
    /// cycle within a shard).
    fn check_refusal(&mut self, process: usize, shard: usize, id: &protocol::RequestId) {
        self.witness(Witness::CycleRefused);
        let clients = &self.state.processes[process].clients;
        let Some(record) =
            CallId::from_request_id(id).and_then(|call| clients[shard].calls.get(&call))
        else {
            return self.violate(Violation::FalseCycleRefusal);
        };
        let parent = record
            .made_by
            .filter(|(maker_shard, _)| *maker_shard == shard)
            .and_then(|(_, maker)| clients[shard].work.get(&maker).copied());
        let key = Shards::key(record.key);
        let in_progress = self.state.coordinators[shard]
            .coordinator
            .flights()
            .find(|(of, _)| **of == key)
            .map(|(_, token)| token);
        if parent.is_none() || parent != in_progress {
            self.violate(Violation::FalseCycleRefusal);
        }
    }

    /// Checks what a client of `shard` sends (SPEC.md §19.4, §19.5).
    fn check_request(&mut self, process: usize, shard: usize, request: &Request) {
        let (id, parent, replay) = match request {
            Request::Run {
                id, parent, flight, ..
            } => (id, *parent, flight.is_some()),
            Request::Reassert { id, parent, .. } => (id, *parent, true),
            _ => return,
        };
        if replay && self.state.used.coordinator_deaths[shard] == 0 {
            self.violate(Violation::UntouchedShardDisturbed);
        }
        let clients = &self.state.processes[process].clients;
        let Some(record) =
            CallId::from_request_id(id).and_then(|call| clients[shard].calls.get(&call))
        else {
            return;
        };
        // The token of the flight whose work made the call, when that flight
        // is of this shard: the only parent this coordinator may be sent.
        let own = record.made_by.and_then(|(maker_shard, maker)| {
            (maker_shard == shard).then(|| clients[shard].work.get(&maker).copied())
        });
        let cross_shard = record
            .made_by
            .is_some_and(|(maker_shard, _)| maker_shard != shard);
        match (parent, own) {
            (Some(parent), Some(Some(token))) if parent == token => {}
            // A running reassert carries its call's parent; a landed one,
            // and a run of a call that no work of this shard made, none.
            (None, None) => {
                if cross_shard {
                    self.witness(Witness::CrossShardCallWithoutParent);
                }
            }
            (None, Some(_))
                if matches!(
                    request,
                    Request::Reassert {
                        outcome: Some(_),
                        ..
                    }
                ) => {}
            _ => self.violate(Violation::ParentOfAnotherShard),
        }
    }

    fn client(&mut self, process: usize, shard: usize, event: client::Event) {
        if matches!(event, client::Event::ConnectionLost)
            && self.state.used.coordinator_deaths[shard] == 0
        {
            self.violate(Violation::UntouchedShardDisturbed);
        }
        let effects = self.state.processes[process].clients[shard]
            .client
            .step(event);
        for effect in effects {
            match effect {
                client::Effect::Send(request) => {
                    self.check_request(process, shard, &request);
                    match self.state.processes[process].clients[shard].link.as_mut() {
                        Some(link) => link.requests.push_back(request),
                        None => self.violate(Violation::SentOnClosed),
                    }
                }
                client::Effect::StartWork { call, token } => {
                    self.starts(process, shard, call, token)
                }
                client::Effect::Resolve { call, resolution } => {
                    self.resolves(process, shard, call, resolution)
                }
                client::Effect::StopWork { .. } => self.violate(Violation::UnexpectedAnswer),
                // The model's works do not panic: nobody waits for a land.
                client::Effect::LandSettled { .. } => {}
            }
        }
    }

    /// A work starts: no other work of its key runs, in any process or
    /// shard, and its token is above every earlier one of its key.
    fn starts(&mut self, process: usize, shard: usize, call: CallId, token: FencingToken) {
        let key = self.state.processes[process].clients[shard].calls[&call].key;
        let running = self
            .state
            .processes
            .iter()
            .flat_map(|process| process.clients.iter())
            .any(|client| {
                client
                    .work
                    .keys()
                    .any(|running| client.calls[running].key == key)
            });
        if running {
            self.violate(Violation::TwoWorksOfOneKey);
        }
        if self
            .state
            .history
            .started
            .get(&key)
            .is_some_and(|&last| last >= token)
        {
            self.violate(Violation::TokenNotIncreasing);
        }
        self.state.history.started.insert(key, token);
        let client = &mut self.state.processes[process].clients[shard];
        client.work.insert(call, token);
        client.calls.get_mut(&call).expect("a call").token = Some(token);
        self.note(|| {
            format!(
                "process {process}'s call {} of shard {shard} leads {token}",
                call.0
            )
        });
    }

    fn resolves(&mut self, process: usize, shard: usize, call: CallId, resolution: Resolution) {
        self.note(|| {
            format!(
                "process {process}'s call {} of shard {shard} resolves {resolution:?}",
                call.0
            )
        });
        let record = self.state.processes[process].clients[shard]
            .calls
            .get_mut(&call)
            .expect("a call");
        let twice = record.resolved;
        record.resolved = true;
        let key = record.key;
        if twice {
            self.violate(Violation::ResolvedTwice);
        }
        match resolution {
            Resolution::Led { .. } | Resolution::Cycle { .. } => {}
            Resolution::Joined { flight, outcome } => {
                if outcome != Shards::outcome(key, flight)
                    || !self.state.history.finished.contains(&(key, flight))
                {
                    self.violate(Violation::WrongOutcome);
                }
                if flight.epoch() < self.state.coordinators[shard].coordinator.epoch() {
                    self.witness(Witness::JoinedAcrossFailover);
                }
            }
            Resolution::Interrupted | Resolution::Lost => {
                if self.state.used.coordinator_deaths[shard] == 0 {
                    self.violate(Violation::UntouchedShardDisturbed);
                }
            }
            Resolution::Reused { .. }
            | Resolution::Unsupported
            | Resolution::Unavailable { .. } => self.violate(Violation::UnexpectedAnswer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys are of the shards the model says, by the shipped function
    /// (SPEC.md §19.1's test vectors: `b` → 0, `a` → 1 with two shards).
    #[test]
    fn s19_1_the_models_keys_fall_in_both_shards() {
        assert_eq!(Shards::shard_of(0), 0);
        assert_eq!(Shards::shard_of(1), 1);
    }
}
