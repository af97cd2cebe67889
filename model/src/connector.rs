//! The connector's model (SPEC.md §12.6): one process's real
//! [`Connector`] (and the [`Client`](single_flight_core::client::Client) it
//! owns) with modelled time, against coordinators that answer, lead, land,
//! go away with answers still buffered at the client, break, or refuse, and
//! attempts that connect, miss or fail.
//!
//! Time is a [`Duration`] in the state. It moves only by [`Action::Tick`],
//! which jumps to the connector's own [`Connector::poll_timeout`], as
//! quinn-proto's test pair advances to the next wake-up: every other fact
//! happens at the current time, in any order, so a fact "between" two
//! timers is one that happens at the earlier one, and the state space stays
//! finite. One assumption about speed, which the shell's reader keeps: what
//! a connection has buffered at the client is read before any timer of the
//! connector fires (a tick waits for the buffer to be empty). Without it no
//! drain could be proven, since a reader that never reads loses everything.
//!
//! The coordinator side is a script, not the real coordinator (the
//! directory's model checks that one): a plain run is answered `lead` or
//! `joined`, a rejoin `joined`, a land or landed reassert `ack`, and a
//! joined call may be answered `landed` at any moment while the term lasts.
//! Each connection reaches a new term.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use single_flight_core::client::connector::{Attempted, Effect, Event};
use single_flight_core::client::{self, CallId, CallOptions, Connector, Mutant, Resolution};
use single_flight_core::protocol::{Epoch, FencingToken, Key, Outcome, Request, Response};
use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::simulate::SplitMix64;

/// The pause after a missed or failed attempt: the shell's poll interval
/// (its value does not matter to the model, only that it is not zero).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The longest random walk; every action spends a budget or consumes what
/// one made, so walks end far sooner (a safety net only).
const MAX_WALK_STEPS: usize = 1_000;

/// One configuration of the connector's model: the budgets of its actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectorModel {
    /// Calls the process starts.
    pub calls: u64,
    /// Attempts that find no coordinator.
    pub misses: u8,
    /// Attempts that fail: the waiting calls end `Unavailable`.
    pub refusals: u8,
    /// Terms that end while the process is connected to them (the
    /// election's key is deleted).
    pub gones: u8,
    /// Connections that break (the coordinator's process died, or the
    /// network closed it).
    pub breaks: u8,
    /// Whether the process is closed at some point.
    pub close: bool,
    /// The seeded bug the connector carries, if any (SPEC.md §12.3).
    pub mutant: Option<Mutant>,
}

impl ConnectorModel {
    /// The configuration CI checks exhaustively: two calls, one of each
    /// fault, and a close.
    pub fn small() -> ConnectorModel {
        ConnectorModel {
            calls: 2,
            misses: 1,
            refusals: 1,
            gones: 1,
            breaks: 1,
            close: true,
            mutant: None,
        }
    }

    /// The same with one seeded bug.
    pub fn with_mutant(self, mutant: Option<Mutant>) -> ConnectorModel {
        ConnectorModel { mutant, ..self }
    }
}

/// What the model's state holds: the connector, the time, the current
/// connection, and what the properties need.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnectorState {
    pub connector: Connector,
    pub now: Duration,
    /// Whether an attempt runs (between `StartAttempt` and its end).
    pub attempting: bool,
    /// The current connection, from `Connected` to `Disconnect`.
    pub wire: Option<Wire>,
    /// Terms reached so far; each connection reaches the next.
    pub terms: u32,
    /// Calls started so far (call numbers are 1 up).
    pub started: u64,
    /// Works that run.
    pub running: BTreeSet<CallId>,
    /// Budgets spent: misses, refusals, gones, breaks.
    pub spent: [u8; 4],
    pub closed: bool,
    /// The earliest time the next attempt may start, after one that missed
    /// or failed (SPEC.md §10.1, §14.3).
    pub earliest_attempt: Option<Duration>,
    /// Calls told how they ended (resolved, or unavailable).
    pub ended: BTreeSet<CallId>,
    /// Broken properties, for good.
    pub flaws: BTreeSet<Flaw>,
    /// What the last step showed, for the `sometimes` properties.
    pub seen: BTreeSet<Sight>,
}

/// One connection, both ends.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Wire {
    /// Requests the coordinator has not read yet.
    pub requests: VecDeque<Request>,
    /// Responses on the way, buffered at the client.
    pub responses: VecDeque<Response>,
    /// Calls the coordinator answered `joined` and has not landed.
    pub joined: BTreeSet<CallId>,
    /// Calls whose rejoin the coordinator answered `joined`.
    pub rejoined: BTreeSet<CallId>,
    /// The coordinator answers nothing more (its term is over, or the
    /// connection broke).
    pub silent: bool,
    /// The connection closed: the client reads what is buffered, then the
    /// end.
    pub closed: bool,
    /// The client was told that this coordinator's term is over.
    pub gone_seen: bool,
    /// Responses the client read on it.
    pub received: u64,
}

/// A property broken in some step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flaw {
    /// A `landed` that was buffered at the client when it was told its
    /// coordinator was gone was dropped with the connection (issue 27's
    /// bug 2).
    DroppedLanded,
    /// An attempt started within the pause after a missed or failed one
    /// (issue 27's bug 3).
    AttemptTooSoon,
    /// The connector sent a request with no connection.
    SentWithoutConnection,
    /// A call was told two endings.
    ResolvedTwice,
}

/// What a step showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sight {
    /// A `landed` read from a coordinator already known to be gone.
    LandedFromGone,
    /// An attempt started after the pause of a missed or failed one.
    AttemptAfterPause,
    /// A failed attempt ended a waiting call `Unavailable`.
    RefusalEndedCall,
    /// The connector stopped at the close's deadline with a land unsettled.
    StoppedAtDeadline,
    /// The connector stopped when nothing was left to do.
    StoppedIdle,
    /// A joined call replayed as a rejoin was answered again and landed.
    RejoinLanded,
}

/// One thing that can happen.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The caller starts a call.
    Start,
    /// A running work finishes.
    Finish(CallId),
    /// The coordinator reads a plain run and answers `lead`.
    Lead,
    /// The coordinator reads its next request and answers it otherwise:
    /// `joined` to a run or rejoin, `ack` to a land, nothing to the rest.
    Answer,
    /// The coordinator lands a joined call's flight.
    Land(CallId),
    /// The client reads a buffered response.
    Deliver,
    /// The coordinator's term ends; the election tells the client.
    Gone,
    /// The connection breaks.
    Break,
    /// The client reads the end of a closed connection.
    Closed,
    /// The attempt connects (to the next term).
    Connect,
    /// The attempt finds no coordinator.
    Miss,
    /// The attempt fails: the waiting calls end.
    Refuse,
    /// Time moves to the connector's next timer.
    Tick,
    /// The process closes.
    Close,
}

const MISSES: usize = 0;
const REFUSALS: usize = 1;
const GONES: usize = 2;
const BREAKS: usize = 3;

impl Model for ConnectorModel {
    type State = ConnectorState;
    type Action = Action;

    fn init_states(&self) -> Vec<ConnectorState> {
        let mut state = ConnectorState {
            connector: Connector::new().with_mutant(self.mutant),
            now: Duration::ZERO,
            attempting: false,
            wire: None,
            terms: 0,
            started: 0,
            running: BTreeSet::new(),
            spent: [0; 4],
            closed: false,
            earliest_attempt: None,
            ended: BTreeSet::new(),
            flaws: BTreeSet::new(),
            seen: BTreeSet::new(),
        };
        // The shell's first timer is at its origin (the driving contract).
        feed(&mut state, Event::TimerFired { received: 0 });
        vec![state]
    }

    fn actions(&self, state: &ConnectorState, actions: &mut Vec<Action>) {
        if state.connector.is_stopped() {
            return;
        }
        if state.started < self.calls {
            actions.push(Action::Start);
        }
        actions.extend(state.running.iter().map(|&call| Action::Finish(call)));
        if let Some(wire) = &state.wire {
            if !wire.silent {
                match wire.requests.front() {
                    Some(Request::Run { flight: None, .. }) => {
                        actions.push(Action::Lead);
                        actions.push(Action::Answer);
                    }
                    Some(_) => actions.push(Action::Answer),
                    None => {}
                }
                actions.extend(wire.joined.iter().map(|&call| Action::Land(call)));
                if state.spent[GONES] < self.gones {
                    actions.push(Action::Gone);
                }
                if state.spent[BREAKS] < self.breaks {
                    actions.push(Action::Break);
                }
            }
            if !wire.responses.is_empty() {
                actions.push(Action::Deliver);
            } else if wire.closed {
                actions.push(Action::Closed);
            }
        }
        if state.attempting {
            actions.push(Action::Connect);
            if state.spent[MISSES] < self.misses {
                actions.push(Action::Miss);
            }
            if state.spent[REFUSALS] < self.refusals {
                actions.push(Action::Refuse);
            }
        }
        let buffered = state
            .wire
            .as_ref()
            .is_some_and(|wire| !wire.responses.is_empty());
        if !buffered
            && state
                .connector
                .poll_timeout()
                .is_some_and(|at| at > state.now)
        {
            actions.push(Action::Tick);
        }
        if self.close && !state.closed {
            actions.push(Action::Close);
        }
    }

    fn next_state(&self, last: &ConnectorState, action: Action) -> Option<ConnectorState> {
        let mut state = last.clone();
        state.seen.clear();
        let event = match action {
            Action::Start => {
                state.started += 1;
                Event::CallStarted {
                    call: CallId(state.started),
                    key: Key::new("k").expect("a valid key"),
                    options: CallOptions::default(),
                }
            }
            Action::Finish(call) => {
                state.running.remove(&call);
                Event::WorkFinished {
                    call,
                    outcome: Outcome::Value(format!("{}", call.0)),
                }
            }
            Action::Lead | Action::Answer => {
                let epoch = Epoch::new(u64::from(state.terms)).expect("terms count from 1");
                let wire = state.wire.as_mut()?;
                let request = wire.requests.pop_front()?;
                let answer = answer(epoch, &request, action == Action::Lead);
                if let Some(Response::Joined { id, .. }) = &answer {
                    wire.joined.extend(CallId::from_request_id(id));
                    if matches!(
                        request,
                        Request::Run {
                            flight: Some(_),
                            ..
                        }
                    ) {
                        wire.rejoined.extend(CallId::from_request_id(id));
                    }
                }
                wire.responses.extend(answer);
                return Some(state);
            }
            Action::Land(call) => {
                let wire = state.wire.as_mut()?;
                wire.joined.remove(&call);
                wire.responses.push_back(Response::Landed {
                    id: call.request_id(),
                    outcome: std::sync::Arc::new(Outcome::Value("landed".into())),
                });
                return Some(state);
            }
            Action::Deliver => {
                let wire = state.wire.as_mut()?;
                let response = wire.responses.pop_front()?;
                wire.received += 1;
                if wire.gone_seen && matches!(response, Response::Landed { .. }) {
                    state.seen.insert(Sight::LandedFromGone);
                }
                Event::ResponseReceived { response }
            }
            Action::Gone => {
                state.spent[GONES] += 1;
                let wire = state.wire.as_mut()?;
                wire.silent = true;
                wire.requests.clear();
                wire.gone_seen = true;
                Event::CoordinatorGone {
                    received: wire.received,
                }
            }
            Action::Break => {
                state.spent[BREAKS] += 1;
                let wire = state.wire.as_mut()?;
                wire.silent = true;
                wire.closed = true;
                wire.requests.clear();
                return Some(state);
            }
            Action::Closed => Event::ConnectionLost,
            Action::Connect => {
                state.attempting = false;
                state.terms += 1;
                state.wire = Some(Wire {
                    requests: VecDeque::new(),
                    responses: VecDeque::new(),
                    joined: BTreeSet::new(),
                    rejoined: BTreeSet::new(),
                    silent: false,
                    closed: false,
                    gone_seen: false,
                    received: 0,
                });
                Event::AttemptEnded {
                    attempt: Attempted::Connected,
                }
            }
            Action::Miss | Action::Refuse => {
                state.attempting = false;
                state.spent[if action == Action::Miss {
                    MISSES
                } else {
                    REFUSALS
                }] += 1;
                state.earliest_attempt = Some(state.now + POLL_INTERVAL);
                let pause = POLL_INTERVAL;
                Event::AttemptEnded {
                    attempt: if action == Action::Miss {
                        Attempted::Missed { pause }
                    } else {
                        Attempted::Failed { pause }
                    },
                }
            }
            Action::Tick => {
                state.now = state.connector.poll_timeout()?;
                Event::TimerFired {
                    received: state.wire.as_ref().map_or(0, |wire| wire.received),
                }
            }
            Action::Close => {
                state.closed = true;
                Event::CloseRequested
            }
        };
        feed(&mut state, event);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<ConnectorModel>> {
        vec![
            Property::always(
                "a landed answer that reached a client before its coordinator was seen gone is delivered",
                |_, state: &ConnectorState| !state.flaws.contains(&Flaw::DroppedLanded),
            ),
            Property::always(
                "no attempt starts within the pause after a missed or failed one",
                |_, state: &ConnectorState| !state.flaws.contains(&Flaw::AttemptTooSoon),
            ),
            Property::always(
                "requests go on a connection",
                |_, state: &ConnectorState| !state.flaws.contains(&Flaw::SentWithoutConnection),
            ),
            Property::always("a call ends once", |_, state: &ConnectorState| {
                !state.flaws.contains(&Flaw::ResolvedTwice)
            }),
            Property::sometimes(
                "a landed answer is read from a coordinator seen gone",
                |_, state: &ConnectorState| state.seen.contains(&Sight::LandedFromGone),
            ),
            Property::sometimes(
                "an attempt starts after the pause of a missed or failed one",
                |_, state: &ConnectorState| state.seen.contains(&Sight::AttemptAfterPause),
            ),
            Property::sometimes(
                "a failed attempt ends a waiting call unavailable",
                |_, state: &ConnectorState| state.seen.contains(&Sight::RefusalEndedCall),
            ),
            Property::sometimes(
                "a close stops at its deadline with a land unsettled",
                |_, state: &ConnectorState| state.seen.contains(&Sight::StoppedAtDeadline),
            ),
            Property::sometimes(
                "a close stops with nothing left to do",
                |_, state: &ConnectorState| state.seen.contains(&Sight::StoppedIdle),
            ),
            Property::sometimes(
                "a rejoin after a reconnect gets its flight's value",
                |_, state: &ConnectorState| state.seen.contains(&Sight::RejoinLanded),
            ),
        ]
    }
}

/// The scripted coordinator's answer to `request` in the term `epoch`.
fn answer(epoch: Epoch, request: &Request, lead: bool) -> Option<Response> {
    let token = |sequence| FencingToken::new(epoch, sequence).expect("a valid token");
    match request {
        Request::Run { id, flight, .. } => Some(match (flight, lead) {
            (None, true) => Response::Lead {
                id: id.clone(),
                token: token(1),
            },
            // A rejoin joins its own flight, taken back by its leader.
            (Some(flight), _) => Response::Joined {
                id: id.clone(),
                flight: *flight,
            },
            (None, false) => Response::Joined {
                id: id.clone(),
                flight: token(2),
            },
        }),
        Request::Land { id, .. }
        | Request::Reassert {
            id,
            outcome: Some(_),
            ..
        } => Some(Response::Ack { id: id.clone() }),
        _ => None,
    }
}

/// Feeds `event` to the connector at the state's time and carries out the
/// effects, as the shell's driver does, recording what the properties need.
fn feed(state: &mut ConnectorState, event: Event) {
    let effects = state.connector.step(state.now, event);
    for effect in effects {
        match effect {
            Effect::Call(client::Effect::Send(request)) => match &mut state.wire {
                // A silent coordinator reads nothing more.
                Some(wire) if !wire.silent => wire.requests.push_back(request),
                Some(_) => {}
                None => {
                    state.flaws.insert(Flaw::SentWithoutConnection);
                }
            },
            Effect::Call(client::Effect::StartWork { call, .. }) => {
                state.running.insert(call);
            }
            Effect::Call(client::Effect::StopWork { call, .. }) => {
                state.running.remove(&call);
            }
            Effect::Call(client::Effect::Resolve { call, resolution }) => {
                if matches!(resolution, Resolution::Joined { .. })
                    && state
                        .wire
                        .as_ref()
                        .is_some_and(|wire| wire.rejoined.contains(&call))
                {
                    state.seen.insert(Sight::RejoinLanded);
                }
                if !state.ended.insert(call) {
                    state.flaws.insert(Flaw::ResolvedTwice);
                }
            }
            Effect::Call(client::Effect::LandSettled { .. }) => {}
            Effect::StartAttempt => {
                match state.earliest_attempt.take() {
                    Some(at) if state.now < at => {
                        state.flaws.insert(Flaw::AttemptTooSoon);
                    }
                    Some(_) => {
                        state.seen.insert(Sight::AttemptAfterPause);
                    }
                    None => {}
                }
                state.attempting = true;
            }
            Effect::Disconnect => {
                if let Some(wire) = state.wire.take()
                    && wire.gone_seen
                    && wire
                        .responses
                        .iter()
                        .any(|response| matches!(response, Response::Landed { .. }))
                {
                    state.flaws.insert(Flaw::DroppedLanded);
                }
            }
            Effect::Unavailable { call } => {
                state.seen.insert(Sight::RefusalEndedCall);
                if !state.ended.insert(call) {
                    state.flaws.insert(Flaw::ResolvedTwice);
                }
            }
            Effect::Stop => {
                state.attempting = false;
                state.wire = None;
                state.running.clear();
                if state.connector.client().is_idle() {
                    state.seen.insert(Sight::StoppedIdle);
                } else {
                    state.seen.insert(Sight::StoppedAtDeadline);
                }
            }
        }
    }
}

/// What one exhaustive check of a [`ConnectorModel`] found.
#[derive(Debug)]
pub struct ConnectorReport {
    pub unique_states: usize,
    pub max_depth: usize,
    /// Whether every state the budgets allow was visited.
    pub complete: bool,
    /// The path to each discovery, by property name.
    pub discoveries: BTreeMap<&'static str, Vec<Action>>,
}

/// Checks `model` exhaustively (depth-first, no cap), as [`crate::check::check`]
/// does the directory's.
pub fn check(model: ConnectorModel) -> ConnectorReport {
    let properties = model.properties().len();
    let checker = model
        .checker()
        .threads(crate::check::THREADS)
        .spawn_dfs()
        .join();
    let discoveries: BTreeMap<&'static str, Vec<Action>> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name, path.into_actions()))
        .collect();
    ConnectorReport {
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        // Stateright reports a run done when every property has a
        // discovery; with no cap, a run that ends short of that saw all.
        complete: checker.is_done() && discoveries.len() < properties,
        discoveries,
    }
}

/// Checks `model` until an `always` property fails: for the seeded bugs.
pub fn hunt(model: ConnectorModel) -> ConnectorReport {
    let always: BTreeSet<&'static str> = model
        .properties()
        .into_iter()
        .filter(|property| property.expectation == stateright::Expectation::Always)
        .map(|property| property.name)
        .collect();
    let checker = model
        .checker()
        .threads(crate::check::THREADS)
        .finish_when(HasDiscoveries::AnyOf(always))
        .spawn_dfs()
        .join();
    ConnectorReport {
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        complete: false,
        discoveries: checker
            .discoveries()
            .into_iter()
            .map(|(name, path)| (name, path.into_actions()))
            .collect(),
    }
}

/// Walks `model` at random, `traces` traces from `seed` (trace i from the
/// i-th splitmix64 output, choosing uniformly among the enabled actions),
/// checking every `always` property in every state: the index of the first
/// trace that breaks one, and which, if any does.
pub fn walk(model: &ConnectorModel, seed: u64, traces: u64) -> Option<(u64, &'static str)> {
    let always: Vec<Property<ConnectorModel>> = model
        .properties()
        .into_iter()
        .filter(|property| property.expectation == stateright::Expectation::Always)
        .collect();
    let seeds = SplitMix64::new(seed);
    let mut actions = Vec::new();
    for index in 0..traces {
        let mut random = SplitMix64::new(seeds.nth(index));
        let mut state = model.init_states().remove(0);
        for _ in 0..MAX_WALK_STEPS {
            if let Some(broken) = always
                .iter()
                .find(|property| !(property.condition)(model, &state))
            {
                return Some((index, broken.name));
            }
            actions.clear();
            model.actions(&state, &mut actions);
            if actions.is_empty() {
                break;
            }
            let action = actions.swap_remove(random.below(actions.len()));
            match model.next_state(&state, action) {
                Some(next) => state = next,
                None => break,
            }
        }
    }
    None
}
