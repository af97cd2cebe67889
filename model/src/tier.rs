//! The model of the host tier (SPEC.md §18): hosts whose processes reach the
//! cluster through their host coordinator, checked on the shipped cluster
//! coordinator (with its relay windows, §18.2), the shipped relay machine
//! (§18.3) and the shipped client (§9), through the death of a host
//! coordinator and of the cluster's coordinator (§18.4).
//!
//! Like [`crate::Directory`], a plain [`stateright::Model`] whose
//! connections are pairs of ordered queues that break as a whole, both ends
//! told. Each host has one relay (its host coordinator) and one client
//! process; the cluster has one coordinator. Time is not modelled but for
//! one assumption, the one SPEC.md §18.4 makes: a window (the cluster's
//! grace window, a host's relay window) ends only once every host is
//! connected again and nothing is on its way, so that every replay reached
//! the cluster before it (`calm`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use single_flight_core::client::{self, CallId, Client, Resolution};
use single_flight_core::coordinator::{self, ConnectionId, Coordinator, Term, Timer};
use single_flight_core::protocol::{
    Epoch, FencingToken, HostId, Incoming, Key, Reason, Request, Response,
};
use single_flight_core::relay::{self, Relay};
use stateright::{Model, Property};

use crate::check::Narrated;
use crate::directory::Ending;

/// The grace window and the relay window the cluster's terms are created
/// with. Time is not modelled: a window ends when an action ends it.
const WINDOW: Duration = Duration::from_secs(2);

/// The names of the hosts, by index.
const HOST_NAMES: [&str; 2] = ["host-a", "host-b"];

/// The names of the keys, by index.
const KEY_NAMES: [&str; 2] = ["a", "b"];

/// A cluster of hosts, each with a host coordinator and one process, and
/// the bounds of what may happen to it (each a budget of the action
/// generator, as in [`crate::Directory`]).
#[derive(Clone, Debug)]
pub struct Tier {
    /// Hosts (at most [`HOST_NAMES`]).
    pub hosts: usize,
    /// Keys the calls choose from (at most [`KEY_NAMES`]).
    pub keys: usize,
    /// Calls started in the whole run, by all processes together.
    pub calls: u8,
    /// Calls cancelled by their caller.
    pub cancels: u8,
    /// Host coordinators that die; another is elected on the host at once.
    pub host_coordinator_deaths: u8,
    /// Cluster coordinators that die; the next term (the next epoch, a
    /// grace window) begins at once.
    pub cluster_coordinator_deaths: u8,
    /// Processes that are both a host's coordinator and the cluster's and
    /// die, ending both terms at once.
    pub both_coordinators_deaths: u8,
    /// Attempts of a host coordinator without a connection to reach the
    /// cluster that fail (its etcd, or the cluster's coordinator, refused
    /// it: SPEC.md §18.3, "Unavailable").
    pub reach_failures: u8,
    /// A seeded bug of the cluster coordinator (SPEC.md §12.3), or none.
    pub coordinator_mutant: Option<coordinator::Mutant>,
    /// A seeded bug of the relay, or none.
    pub relay_mutant: Option<relay::Mutant>,
}

impl Tier {
    /// Checked in CI (SPEC.md §12.1, §18): two hosts, one key, three calls,
    /// one death of each kind of coordinator.
    pub fn two_hosts() -> Tier {
        Tier {
            hosts: 2,
            keys: 1,
            calls: 3,
            cancels: 0,
            host_coordinator_deaths: 1,
            cluster_coordinator_deaths: 1,
            both_coordinators_deaths: 0,
            reach_failures: 0,
            coordinator_mutant: None,
            relay_mutant: None,
        }
    }

    /// [`Tier::two_hosts`] with a cancel instead of the cluster's failover:
    /// a leader's caller that leaves, or a joiner's, on either host.
    pub fn cancel() -> Tier {
        Tier {
            cancels: 1,
            cluster_coordinator_deaths: 0,
            ..Tier::two_hosts()
        }
    }

    /// Checked in CI (SPEC.md §18.4): the process that coordinates a host and
    /// the cluster dies, once, instead of each coordinator on its own.
    pub fn both_at_once() -> Tier {
        Tier {
            host_coordinator_deaths: 0,
            cluster_coordinator_deaths: 0,
            both_coordinators_deaths: 1,
            ..Tier::two_hosts()
        }
    }

    /// Checked in CI (SPEC.md §18.3, "Unavailable"): after the cluster's
    /// coordinator dies, a host coordinator's attempt to reach the next one
    /// fails once, and the calls it holds for the cluster end
    /// `Unavailable` while a leader's work goes on.
    pub fn unreachable() -> Tier {
        Tier {
            host_coordinator_deaths: 0,
            reach_failures: 1,
            ..Tier::two_hosts()
        }
    }

    pub fn with_mutants(
        self,
        coordinator_mutant: Option<coordinator::Mutant>,
        relay_mutant: Option<relay::Mutant>,
    ) -> Tier {
        Tier {
            coordinator_mutant,
            relay_mutant,
            ..self
        }
    }

    fn key(index: usize) -> Key {
        Key::new(KEY_NAMES[index]).expect("the model's key names are valid keys")
    }

    fn host_id(host: usize) -> HostId {
        HostId::new(HOST_NAMES[host]).expect("the model's host names are valid host ids")
    }

    fn cluster_coordinator(&self, epoch: Epoch, term: Term) -> Coordinator {
        Coordinator::new(epoch, term)
            .with_relay_window(WINDOW)
            .with_mutant(self.coordinator_mutant)
    }

    fn relay(&self) -> Relay {
        Relay::new().with_mutant(self.relay_mutant)
    }
}

/// One moment of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TierState {
    /// The cluster coordinator of the current term.
    pub cluster: Coordinator,
    /// The next connection number of the cluster's term.
    pub next_cluster_connection: u64,
    /// The timers the cluster's current term started and that have not
    /// fired: its grace window, relay windows. A death drops them.
    pub timers: BTreeSet<Timer>,
    /// The hosts, by index.
    pub hosts: Vec<Host>,
    pub used: Used,
    pub history: History,
    /// What the step that led here broke; cleared at every step.
    pub violations: BTreeSet<Violation>,
}

/// One host: its host coordinator (a relay) and its process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Host {
    pub relay: Relay,
    /// The relay's connection to the cluster's coordinator.
    pub upstream: Option<Queues>,
    /// The next connection number of the relay's term.
    pub next_local_connection: u64,
    pub client: Client,
    /// The process's connection to its host coordinator.
    pub link: Option<Queues>,
    /// The work its leading calls run, under their tokens.
    pub work: BTreeMap<CallId, FencingToken>,
    /// Every call it started, numbered from 1.
    pub calls: BTreeMap<CallId, Call>,
}

/// A connection: requests one way, responses the other, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Queues {
    pub connection: ConnectionId,
    pub requests: VecDeque<Request>,
    pub responses: VecDeque<Response>,
}

impl Queues {
    pub(crate) fn new(connection: ConnectionId) -> Queues {
        Queues {
            connection,
            requests: VecDeque::new(),
            responses: VecDeque::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.responses.is_empty()
    }
}

/// What the model knows of one call, from what its process read and did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    pub key: usize,
    /// The flight it was last answered `joined` to.
    pub joined: Option<FencingToken>,
    /// The token it leads under, once its work started.
    pub token: Option<FencingToken>,
    /// It leads and its work runs, or its land is not settled.
    pub holds_lead: bool,
    pub resolved: bool,
    pub cancelled: bool,
}

/// Budgets of the bounded actions, counted up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Used {
    pub calls: u8,
    pub cancels: u8,
    pub host_coordinator_deaths: u8,
    pub cluster_coordinator_deaths: u8,
    pub both_coordinators_deaths: u8,
    pub reach_failures: u8,
}

/// The past, as far as the properties need it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// The greatest token a work of each key started with.
    pub started: BTreeMap<usize, FencingToken>,
    /// Flights whose leader was told `ack`: the cluster has its outcome,
    /// and every joiner must receive it (§18.3), but for what a failover of
    /// the cluster's coordinator loses (§10.3).
    pub acked: BTreeSet<FencingToken>,
    /// A joiner received an outcome after a host coordinator died.
    pub landed_after_host_death: bool,
    /// A host coordinator died.
    pub host_coordinator_died: bool,
    /// Flights whose `landed` was on its way to a host, or through it, when
    /// its host coordinator died, and was lost with it: its joiners there
    /// may be interrupted (SPEC.md §18.4, what does not hold).
    pub landed_lost: BTreeSet<(usize, FencingToken)>,
    /// A `lead` was on its way to a host, or through it, when its host
    /// coordinator died, and was lost with it: its flight was orphaned with
    /// no process to reassert it (SPEC.md §18.4).
    pub lead_lost: bool,
    /// A call ended `Unavailable`.
    pub unavailable: bool,
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
    /// A joiner received an outcome its flight did not land.
    WrongOutcome,
    /// A joiner was interrupted while its flight's leader held the lead.
    InterruptedWhileLeaderLives,
    /// A joiner was interrupted after its flight's leader was told `ack`.
    AckedLandLost,
    /// A machine sent on a connection that was not open.
    SentOnClosed,
    /// An answer no call of this model asks for (`cycle`, `reused`,
    /// `unsupported`), or `unavailable` where no attempt to reach the
    /// cluster failed.
    UnexpectedAnswer,
    /// A call whose work runs, or whose land is not settled, ended
    /// `Unavailable`: its flight may still come back (SPEC.md §18.3), and
    /// its caller would give up a work that goes on.
    LeaderGivenUp,
}

/// One thing that may happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TierAction {
    CallStarts {
        host: usize,
        key: usize,
    },
    /// The host's process connects to its host coordinator.
    Connects {
        host: usize,
    },
    /// The host coordinator connects to the cluster's coordinator.
    RelayConnects {
        host: usize,
    },
    /// The host coordinator's attempt to reach the cluster fails: it has
    /// no connection, and etcd or the cluster's coordinator refused it.
    RelayUnreached {
        host: usize,
    },
    /// The host coordinator reads its process's next request.
    RequestArrives {
        host: usize,
    },
    /// The process reads its next response.
    ResponseArrives {
        host: usize,
    },
    /// The cluster coordinator reads the host coordinator's next request.
    RelayedRequestArrives {
        host: usize,
    },
    /// The host coordinator reads the cluster coordinator's next response.
    RelayedResponseArrives {
        host: usize,
    },
    WorkFinishes {
        host: usize,
        call: CallId,
    },
    CallerCancels {
        host: usize,
        call: CallId,
    },
    /// The host coordinator's process dies (SPEC.md §18.4): its connections
    /// close at both ends, and another process of the host wins the host
    /// directory's next term at once.
    HostCoordinatorDies {
        host: usize,
    },
    /// The cluster coordinator dies: every relay's upstream connection
    /// closes, and the next cluster term begins with a grace window.
    ClusterCoordinatorDies,
    /// The process that is both the host's coordinator and the cluster's
    /// dies (SPEC.md §18.4): both deaths at once.
    BothCoordinatorsDie {
        host: usize,
    },
    /// A timer of the cluster's term fires (a grace or relay window ends),
    /// only when `calm`.
    TimerFires {
        timer: Timer,
    },
}

impl Narrated for Tier {
    fn apply(&self, state: &TierState, action: &TierAction, log: Option<&mut String>) -> TierState {
        let mut step = Step {
            model: self,
            state: state.clone(),
            log,
        };
        step.state.violations = BTreeSet::new();
        step.act(action);
        step.state
    }

    fn broke(state: &TierState) -> Option<String> {
        (!state.violations.is_empty()).then(|| format!("{:?}", state.violations))
    }
}

impl Model for Tier {
    type State = TierState;
    type Action = TierAction;

    /// The cluster's first term, every host connected to it and idle.
    fn init_states(&self) -> Vec<TierState> {
        let mut cluster = self.cluster_coordinator(Epoch::FIRST, Term::First);
        let began = cluster.step(coordinator::Event::TermBegan);
        debug_assert!(began.is_empty());
        let hosts = (0..self.hosts)
            .map(|_| Host {
                relay: self.relay(),
                upstream: None,
                next_local_connection: 0,
                client: Client::new(),
                link: None,
                work: BTreeMap::new(),
                calls: BTreeMap::new(),
            })
            .collect();
        let state = TierState {
            cluster,
            next_cluster_connection: 0,
            timers: BTreeSet::new(),
            hosts,
            used: Used::default(),
            history: History::default(),
            violations: BTreeSet::new(),
        };
        let mut step = Step {
            model: self,
            state,
            log: None,
        };
        for host in 0..self.hosts {
            step.act(&TierAction::RelayConnects { host });
            step.act(&TierAction::Connects { host });
        }
        vec![step.state]
    }

    fn actions(&self, state: &TierState, actions: &mut Vec<TierAction>) {
        for (index, host) in state.hosts.iter().enumerate() {
            if state.used.calls < self.calls {
                for key in 0..self.keys {
                    actions.push(TierAction::CallStarts { host: index, key });
                }
            }
            match &host.link {
                None => actions.push(TierAction::Connects { host: index }),
                Some(link) => {
                    if !link.requests.is_empty() {
                        actions.push(TierAction::RequestArrives { host: index });
                    }
                    if !link.responses.is_empty() {
                        actions.push(TierAction::ResponseArrives { host: index });
                    }
                }
            }
            match &host.upstream {
                None => {
                    actions.push(TierAction::RelayConnects { host: index });
                    if state.used.reach_failures < self.reach_failures {
                        actions.push(TierAction::RelayUnreached { host: index });
                    }
                }
                Some(upstream) => {
                    if !upstream.requests.is_empty() {
                        actions.push(TierAction::RelayedRequestArrives { host: index });
                    }
                    if !upstream.responses.is_empty() {
                        actions.push(TierAction::RelayedResponseArrives { host: index });
                    }
                }
            }
            for &call in host.work.keys() {
                actions.push(TierAction::WorkFinishes { host: index, call });
            }
            if state.used.cancels < self.cancels {
                for (&call, record) in &host.calls {
                    if !record.resolved && !record.cancelled {
                        actions.push(TierAction::CallerCancels { host: index, call });
                    }
                }
            }
            if state.used.host_coordinator_deaths < self.host_coordinator_deaths {
                actions.push(TierAction::HostCoordinatorDies { host: index });
            }
        }
        if state.used.cluster_coordinator_deaths < self.cluster_coordinator_deaths {
            actions.push(TierAction::ClusterCoordinatorDies);
        }
        if state.used.both_coordinators_deaths < self.both_coordinators_deaths {
            for host in 0..state.hosts.len() {
                actions.push(TierAction::BothCoordinatorsDie { host });
            }
        }
        if calm(state) {
            for timer in &state.timers {
                actions.push(TierAction::TimerFires {
                    timer: timer.clone(),
                });
            }
        }
    }

    fn next_state(&self, state: &TierState, action: TierAction) -> Option<TierState> {
        Some(self.apply(state, &action, None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties(self)
    }
}

/// Every host connected at both levels, and nothing on its way: the moment
/// a window may end (SPEC.md §18.4's assumption about time).
fn calm(state: &TierState) -> bool {
    state.hosts.iter().all(|host| {
        host.link.as_ref().is_some_and(Queues::is_empty)
            && host.upstream.as_ref().is_some_and(Queues::is_empty)
    })
}

/// Nothing can happen but new calls, cancels and deaths: every connection
/// calm, no work running, no window open.
fn settled(state: &TierState) -> bool {
    calm(state) && state.timers.is_empty() && state.hosts.iter().all(|host| host.work.is_empty())
}

pub const NO_TWO_WORKS: &str = "no work of a key starts while another of it runs";
pub const TIER_TOKENS_INCREASE: &str = "tokens increase per key across hosts";
pub const TIER_ANSWERED_ONCE: &str = "a call is answered for good once";
pub const TIER_JOINER_GETS_ITS_OUTCOME: &str = "a joiner on any host gets its flight's outcome";
pub const LIVE_LEADER_NOT_INTERRUPTED: &str =
    "no joiner is interrupted while its flight's leader holds the lead";
pub const ACKED_LAND_REACHES_JOINERS: &str =
    "a land acknowledged to its leader reaches every joiner";
pub const TIER_NOTHING_ON_CLOSED: &str = "nothing is sent on a closed connection";
pub const TIER_NO_CALL_LEFT_WAITING: &str = "no call is left waiting once the cluster is settled";
pub const LANDED_THROUGH_NEW_HOST_COORDINATOR: &str =
    "sometimes: a joiner receives its outcome after a host coordinator died";
pub const LEAD_LOST_THEN_SETTLED: &str =
    "sometimes: a lead is lost with its host coordinator, and every call is answered after";
pub const NO_LEADER_GIVEN_UP: &str =
    "no call whose work runs ends unavailable when its host cannot reach the cluster";
pub const UNAVAILABLE_REACHED: &str =
    "sometimes: a call ends unavailable when its host cannot reach the cluster";

/// The properties of the host tier (SPEC.md §18.3, §18.4). Each
/// `sometimes` one is asked only of a model whose bounds allow what it
/// looks for, so that every one asked is also reached.
pub fn properties(model: &Tier) -> Vec<Property<Tier>> {
    let mut all = vec![
        Property::always(NO_TWO_WORKS, |_, state: &TierState| {
            !state.violations.contains(&Violation::TwoWorksOfOneKey)
        }),
        Property::always(TIER_TOKENS_INCREASE, |_, state: &TierState| {
            !state.violations.contains(&Violation::TokenNotIncreasing)
        }),
        Property::always(TIER_ANSWERED_ONCE, |_, state: &TierState| {
            !state.violations.contains(&Violation::ResolvedTwice)
        }),
        Property::always(TIER_JOINER_GETS_ITS_OUTCOME, |_, state: &TierState| {
            !state.violations.contains(&Violation::WrongOutcome)
                && !state.violations.contains(&Violation::UnexpectedAnswer)
        }),
        Property::always(LIVE_LEADER_NOT_INTERRUPTED, |_, state: &TierState| {
            !state
                .violations
                .contains(&Violation::InterruptedWhileLeaderLives)
        }),
        Property::always(ACKED_LAND_REACHES_JOINERS, |_, state: &TierState| {
            !state.violations.contains(&Violation::AckedLandLost)
        }),
        Property::always(TIER_NOTHING_ON_CLOSED, |_, state: &TierState| {
            !state.violations.contains(&Violation::SentOnClosed)
        }),
        Property::always(TIER_NO_CALL_LEFT_WAITING, |_, state: &TierState| {
            !settled(state)
                || state.hosts.iter().all(|host| {
                    host.calls
                        .values()
                        .all(|call| (call.resolved || call.cancelled) && !call.holds_lead)
                })
        }),
        Property::always(NO_LEADER_GIVEN_UP, |_, state: &TierState| {
            !state.violations.contains(&Violation::LeaderGivenUp)
        }),
    ];
    if model.host_coordinator_deaths + model.both_coordinators_deaths > 0 {
        all.push(Property::sometimes(
            LANDED_THROUGH_NEW_HOST_COORDINATOR,
            |_, state: &TierState| state.history.landed_after_host_death,
        ));
        all.push(Property::sometimes(
            LEAD_LOST_THEN_SETTLED,
            |_, state: &TierState| state.history.lead_lost && settled(state),
        ));
    }
    if model.reach_failures > 0 {
        all.push(Property::sometimes(
            UNAVAILABLE_REACHED,
            |_, state: &TierState| state.history.unavailable,
        ));
    }
    all
}

/// One action being applied: the state machines are stepped and their
/// effects carried out as the shell would.
struct Step<'a> {
    model: &'a Tier,
    state: TierState,
    log: Option<&'a mut String>,
}

impl Step<'_> {
    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some(log) = self.log.as_deref_mut() {
            let _ = writeln!(log, "       {}", text());
        }
    }

    fn act(&mut self, action: &TierAction) {
        match *action {
            TierAction::CallStarts { host, key } => {
                self.state.used.calls += 1;
                let call = CallId(self.state.hosts[host].calls.len() as u64 + 1);
                self.state.hosts[host].calls.insert(
                    call,
                    Call {
                        key,
                        joined: None,
                        token: None,
                        holds_lead: false,
                        resolved: false,
                        cancelled: false,
                    },
                );
                self.client(
                    host,
                    client::Event::CallStarted {
                        call,
                        key: Tier::key(key),
                        options: client::CallOptions::default(),
                    },
                );
            }
            TierAction::Connects { host } => {
                let number = self.state.hosts[host].next_local_connection;
                self.state.hosts[host].next_local_connection += 1;
                let connection = ConnectionId(number);
                self.state.hosts[host].link = Some(Queues::new(connection));
                self.relay(host, relay::Event::ConnectionOpened { connection });
                if self.state.hosts[host].link.is_some() {
                    self.client(host, client::Event::ConnectionReady);
                }
            }
            TierAction::RelayConnects { host } => {
                let connection = ConnectionId(self.state.next_cluster_connection);
                self.state.next_cluster_connection += 1;
                self.state.hosts[host].upstream = Some(Queues::new(connection));
                self.cluster(coordinator::Event::ConnectionOpened {
                    connection,
                    relay: Some(Tier::host_id(host)),
                });
                if self.state.hosts[host].upstream.is_some() {
                    self.relay(host, relay::Event::UpstreamReady);
                }
            }
            TierAction::RelayUnreached { host } => {
                self.state.used.reach_failures += 1;
                let reason = Reason::lossy("etcd refused the host coordinator");
                self.relay(host, relay::Event::UpstreamUnavailable { reason });
            }
            TierAction::RequestArrives { host } => {
                let link = self.state.hosts[host]
                    .link
                    .as_mut()
                    .expect("enabled when connected");
                let connection = link.connection;
                let request = link.requests.pop_front().expect("enabled when queued");
                self.note(|| format!("host {host} coordinator reads {request:?}"));
                self.relay(
                    host,
                    relay::Event::RequestReceived {
                        connection,
                        request: Incoming::Request(request),
                    },
                );
            }
            TierAction::ResponseArrives { host } => {
                let link = self.state.hosts[host]
                    .link
                    .as_mut()
                    .expect("enabled when connected");
                let response = link.responses.pop_front().expect("enabled when queued");
                self.note(|| format!("host {host} process reads {response:?}"));
                self.read(host, &response);
                self.client(host, client::Event::ResponseReceived { response });
            }
            TierAction::RelayedRequestArrives { host } => {
                let upstream = self.state.hosts[host]
                    .upstream
                    .as_mut()
                    .expect("enabled when connected");
                let connection = upstream.connection;
                let request = upstream.requests.pop_front().expect("enabled when queued");
                self.note(|| format!("cluster coordinator reads {request:?} from host {host}"));
                self.cluster(coordinator::Event::RequestReceived {
                    connection,
                    request: Incoming::Request(request),
                });
            }
            TierAction::RelayedResponseArrives { host } => {
                let upstream = self.state.hosts[host]
                    .upstream
                    .as_mut()
                    .expect("enabled when connected");
                let response = upstream.responses.pop_front().expect("enabled when queued");
                self.note(|| {
                    format!("host {host} coordinator reads {response:?} from the cluster")
                });
                self.relay(host, relay::Event::UpstreamResponse(response));
            }
            TierAction::WorkFinishes { host, call } => {
                let token = self.state.hosts[host]
                    .work
                    .remove(&call)
                    .expect("enabled when running");
                let outcome = Ending::of(token).outcome(token);
                self.client(host, client::Event::WorkFinished { call, outcome });
            }
            TierAction::CallerCancels { host, call } => {
                self.state.used.cancels += 1;
                let record = self.state.hosts[host].calls.get_mut(&call).expect("a call");
                record.cancelled = true;
                // The shell drops the work of a call whose caller left.
                if self.state.hosts[host].work.remove(&call).is_some() {
                    self.state.hosts[host]
                        .calls
                        .get_mut(&call)
                        .expect("a call")
                        .holds_lead = false;
                }
                self.client(host, client::Event::CallCancelled { call });
            }
            TierAction::HostCoordinatorDies { host } => {
                self.state.used.host_coordinator_deaths += 1;
                self.host_coordinator_dies(host);
            }
            TierAction::ClusterCoordinatorDies => {
                self.state.used.cluster_coordinator_deaths += 1;
                self.cluster_coordinator_dies();
            }
            TierAction::BothCoordinatorsDie { host } => {
                self.state.used.both_coordinators_deaths += 1;
                // The process dies first as host coordinator, then as the
                // cluster's: the cluster's next term begins after its relay
                // connection closed, which a dead term never reports.
                self.host_coordinator_dies(host);
                self.cluster_coordinator_dies();
            }
            TierAction::TimerFires { ref timer } => {
                self.state.timers.remove(timer);
                self.cluster(coordinator::Event::TimerFired {
                    timer: timer.clone(),
                });
            }
        }
    }

    /// The host coordinator's process dies (SPEC.md §18.4): its connections
    /// close at both ends, and another process of the host wins the host
    /// directory's next term at once. What was on its way through it is
    /// lost with it.
    fn host_coordinator_dies(&mut self, host: usize) {
        self.state.history.host_coordinator_died = true;
        self.state.hosts[host].relay = self.model.relay();
        let link = self.state.hosts[host].link.take();
        let upstream = self.state.hosts[host].upstream.take();
        // What was on its way to or through the dead host coordinator.
        for response in link
            .iter()
            .chain(upstream.iter())
            .flat_map(|queues| queues.responses.iter())
        {
            if let Some(token) = landed_flight(response) {
                self.state.history.landed_lost.insert((host, token));
            }
            if matches!(response, Response::Lead { .. }) {
                self.state.history.lead_lost = true;
            }
        }
        if link.is_some() {
            self.client(host, client::Event::ConnectionLost);
        }
        if let Some(upstream) = upstream {
            self.cluster(coordinator::Event::ConnectionClosed {
                connection: upstream.connection,
            });
        }
    }

    /// The cluster coordinator's process dies: every relay's upstream
    /// connection closes, and the next cluster term begins with a grace
    /// window (SPEC.md §18.4).
    fn cluster_coordinator_dies(&mut self) {
        self.state.timers.clear();
        let epoch = self
            .state
            .cluster
            .epoch()
            .next()
            .expect("the model's epochs are few");
        self.state.cluster = self.model.cluster_coordinator(
            epoch,
            Term::AfterFailover {
                grace_window: WINDOW,
            },
        );
        self.state.next_cluster_connection = 0;
        self.cluster(coordinator::Event::TermBegan);
        for host in 0..self.state.hosts.len() {
            if self.state.hosts[host].upstream.take().is_some() {
                self.relay(host, relay::Event::UpstreamLost);
            }
        }
    }

    /// What the process learns from a response before its client does: the
    /// flight a call joined, and a leader told `ack` (the cluster has its
    /// outcome, §18.3).
    fn read(&mut self, host: usize, response: &Response) {
        let (id, joined) = match response {
            Response::Joined { id, flight } => (id, Some(*flight)),
            Response::Ack { id } => (id, None),
            _ => return,
        };
        let Some(call) = CallId::from_request_id(id) else {
            return;
        };
        let Some(record) = self.state.hosts[host].calls.get_mut(&call) else {
            return;
        };
        match joined {
            Some(flight) => record.joined = Some(flight),
            None => {
                if let Some(token) = record.token {
                    self.state.history.acked.insert(token);
                }
            }
        }
    }

    fn cluster(&mut self, event: coordinator::Event) {
        let effects = self.state.cluster.step(event);
        for effect in effects {
            match effect {
                coordinator::Effect::Send {
                    connection,
                    response,
                } => match self.upstream_of(connection) {
                    Some(host) => {
                        self.note(|| format!("cluster coordinator sends host {host} {response:?}"));
                        let upstream = self.state.hosts[host].upstream.as_mut().expect("found");
                        upstream.responses.push_back(response);
                    }
                    None => {
                        self.state.violations.insert(Violation::SentOnClosed);
                    }
                },
                coordinator::Effect::Close { connection, .. } => {
                    if let Some(host) = self.upstream_of(connection) {
                        self.note(|| {
                            format!("cluster coordinator closes host {host}'s connection")
                        });
                        self.state.hosts[host].upstream = None;
                        self.cluster(coordinator::Event::ConnectionClosed { connection });
                        self.relay(host, relay::Event::UpstreamLost);
                    }
                }
                coordinator::Effect::StartTimer { timer, .. } => {
                    self.state.timers.insert(timer);
                }
                coordinator::Effect::EndTerm { .. } => {
                    unreachable!("no term of the model stops or runs out of tokens")
                }
            }
        }
    }

    fn upstream_of(&self, connection: ConnectionId) -> Option<usize> {
        self.state.hosts.iter().position(|host| {
            host.upstream
                .as_ref()
                .is_some_and(|upstream| upstream.connection == connection)
        })
    }

    fn relay(&mut self, host: usize, event: relay::Event) {
        let effects = self.state.hosts[host].relay.step(event);
        for effect in effects {
            match effect {
                relay::Effect::Send {
                    connection,
                    response,
                } => match self.state.hosts[host].link.as_mut() {
                    Some(link) if link.connection == connection => {
                        link.responses.push_back(response);
                    }
                    _ => {
                        self.state.violations.insert(Violation::SentOnClosed);
                    }
                },
                relay::Effect::Close { connection, .. } => {
                    let open = self.state.hosts[host]
                        .link
                        .as_ref()
                        .is_some_and(|link| link.connection == connection);
                    if open {
                        self.note(|| {
                            format!("host {host} coordinator closes its process's connection")
                        });
                        self.state.hosts[host].link = None;
                        self.relay(host, relay::Event::ConnectionClosed { connection });
                        self.client(host, client::Event::ConnectionLost);
                    }
                }
                relay::Effect::SendUpstream(request) => {
                    match self.state.hosts[host].upstream.as_mut() {
                        Some(upstream) => {
                            upstream.requests.push_back(request);
                        }
                        None => {
                            self.state.violations.insert(Violation::SentOnClosed);
                        }
                    }
                }
            }
        }
    }

    fn client(&mut self, host: usize, event: client::Event) {
        let effects = self.state.hosts[host].client.step(event);
        for effect in effects {
            match effect {
                client::Effect::Send(request) => {
                    if let Some(link) = self.state.hosts[host].link.as_mut() {
                        link.requests.push_back(request);
                    }
                }
                client::Effect::StartWork { call, token } => self.starts(host, call, token),
                client::Effect::Resolve { call, resolution } => {
                    self.resolves(host, call, resolution)
                }
                client::Effect::StopWork { call, .. } => {
                    self.state.hosts[host].work.remove(&call);
                    if let Some(record) = self.state.hosts[host].calls.get_mut(&call) {
                        record.holds_lead = false;
                    }
                }
                client::Effect::LandSettled { call } => {
                    if let Some(record) = self.state.hosts[host].calls.get_mut(&call) {
                        record.holds_lead = false;
                    }
                }
            }
        }
    }

    /// A work starts: no other work of its key runs (§18.4: no rerun while
    /// a run is live), and its token is above every earlier one of its key.
    fn starts(&mut self, host: usize, call: CallId, token: FencingToken) {
        let key = self.state.hosts[host].calls[&call].key;
        let running = self.state.hosts.iter().any(|other| {
            other
                .work
                .keys()
                .any(|running| other.calls[running].key == key)
        });
        if running {
            self.state.violations.insert(Violation::TwoWorksOfOneKey);
        }
        if self
            .state
            .history
            .started
            .get(&key)
            .is_some_and(|&last| last >= token)
        {
            self.state.violations.insert(Violation::TokenNotIncreasing);
        }
        self.state.history.started.insert(key, token);
        self.state.hosts[host].work.insert(call, token);
        let record = self.state.hosts[host].calls.get_mut(&call).expect("a call");
        record.token = Some(token);
        record.holds_lead = true;
        self.note(|| format!("host {host} call {} leads {token}", call.0));
    }

    fn resolves(&mut self, host: usize, call: CallId, resolution: Resolution) {
        self.note(|| format!("host {host} call {} resolves {resolution:?}", call.0));
        let record = self.state.hosts[host].calls.get_mut(&call).expect("a call");
        if record.resolved {
            self.state.violations.insert(Violation::ResolvedTwice);
        }
        record.resolved = true;
        let joined = record.joined;
        match resolution {
            Resolution::Led { .. } => {}
            Resolution::Joined { flight, outcome } => {
                if outcome != Ending::of(flight).outcome(flight) {
                    self.state.violations.insert(Violation::WrongOutcome);
                }
                if self.state.history.host_coordinator_died {
                    self.state.history.landed_after_host_death = true;
                }
            }
            Resolution::Interrupted | Resolution::Lost => {
                let lost = |flight| self.state.history.landed_lost.contains(&(host, flight));
                if let Some(flight) = joined.filter(|&flight| !lost(flight)) {
                    let leader_holds = self.state.hosts.iter().any(|other| {
                        other
                            .calls
                            .values()
                            .any(|call| call.token == Some(flight) && call.holds_lead)
                    });
                    if leader_holds {
                        self.state
                            .violations
                            .insert(Violation::InterruptedWhileLeaderLives);
                    }
                    // A flight of an earlier cluster term may have been
                    // acknowledged by a coordinator that died with its
                    // joiners' `landed` (SPEC.md §10.3).
                    let this_term = flight.epoch() == self.state.cluster.epoch();
                    if this_term && self.state.history.acked.contains(&flight) {
                        self.state.violations.insert(Violation::AckedLandLost);
                    }
                }
            }
            Resolution::Unavailable { .. } => {
                self.state.history.unavailable = true;
                if self.state.used.reach_failures == 0 {
                    self.state.violations.insert(Violation::UnexpectedAnswer);
                }
                let record = &self.state.hosts[host].calls[&call];
                if record.holds_lead || self.state.hosts[host].work.contains_key(&call) {
                    self.state.violations.insert(Violation::LeaderGivenUp);
                }
            }
            Resolution::Reused { .. } | Resolution::Unsupported | Resolution::Cycle { .. } => {
                self.state.violations.insert(Violation::UnexpectedAnswer);
            }
        }
    }
}

/// The flight whose outcome a `landed` carries: every outcome of the model
/// names its token ([`Ending::outcome`]).
fn landed_flight(response: &Response) -> Option<FencingToken> {
    let Response::Landed { outcome, .. } = response else {
        return None;
    };
    let text = match &**outcome {
        single_flight_core::protocol::Outcome::Value(value) => value,
        single_flight_core::protocol::Outcome::Failure(failure) => &failure.message,
    };
    text.parse().ok()
}
