//! Long random event sequences through the relay, local and upstream, with
//! the invariants of SPEC.md §18.3 checked after every step. Upstream is a
//! plausible cluster coordinator: it answers only the parties the relay has
//! open there, with what §8 lets it say at that point. The observer sees
//! only the lines on both sides, so it checks the relay's behaviour, not a
//! copy of its state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;

use super::super::*;
use crate::coordinator::ConnectionId;
use crate::protocol::{
    Epoch, FencingToken, Incoming, Key, Outcome, Request, RequestId, Response, ReuseWindow,
};

const KEYS: [&str; 2] = ["a", "b"];
/// Small, so that groups wait for it.
const UPSTREAM_LIMIT: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Open,
    Close(usize),
    Run(usize, usize),
    Rejoin(usize, usize, usize),
    /// A run with a reuse window: a group of its own (§18.3).
    Reuse(usize, usize),
    /// A reassert, landed when the flag is set.
    Reassert(usize, usize, usize, bool),
    Land(usize, usize),
    Cancel(usize, usize),
    Detach(usize, usize),
    Status(usize),
    Unknown(usize),
    Duplicate(usize, usize),
    Ready,
    Lost,
    /// An attempt to reach the cluster failed (§18.3, "Unavailable").
    Unavailable,
    /// Upstream answers one of the parties open there.
    Answer(usize, usize),
    /// Upstream answers an id that is not open there.
    Stale(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..64usize;
    prop_oneof![
        2 => Just(Op::Open),
        1 => n.clone().prop_map(Op::Close),
        6 => (n.clone(), n.clone()).prop_map(|(c, k)| Op::Run(c, k)),
        2 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, k, t)| Op::Rejoin(c, k, t)),
        1 => (n.clone(), n.clone()).prop_map(|(c, k)| Op::Reuse(c, k)),
        1 => (n.clone(), n.clone(), n.clone(), any::<bool>())
            .prop_map(|(c, k, t, l)| Op::Reassert(c, k, t, l)),
        3 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Land(c, p)),
        2 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Cancel(c, p)),
        2 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Detach(c, p)),
        1 => n.clone().prop_map(Op::Status),
        1 => n.clone().prop_map(Op::Unknown),
        1 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Duplicate(c, p)),
        1 => Just(Op::Ready),
        1 => Just(Op::Lost),
        1 => Just(Op::Unavailable),
        10 => (n.clone(), n.clone()).prop_map(|(u, a)| Op::Answer(u, a)),
        1 => n.prop_map(Op::Stale),
    ]
}

type Party = (ConnectionId, RequestId);

/// What the cluster's coordinator knows of one request of the relay.
#[derive(Clone, Debug)]
struct Upstream {
    kind: Kind,
    state: State,
    /// A `detach` of it was read.
    detached: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Run { reuse: bool },
    Reassert,
    Status,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Asked,
    Led,
    Joined,
    /// A land, or a landed reassert, was read: it is answered `ack` or
    /// `rejected`, and the party is over for the bound.
    Landing,
}

/// A perfect witness of both sides, and the checks it makes.
#[derive(Default)]
struct Observer {
    connections: Vec<ConnectionId>,
    open: BTreeSet<ConnectionId>,
    next_id: u64,
    parties: BTreeMap<ConnectionId, Vec<RequestId>>,
    /// Every response each local party got, in order.
    answers: BTreeMap<Party, Vec<Response>>,
    /// The upstream connection is ready.
    ready: bool,
    /// What upstream has open, by the relay's id.
    upstream: BTreeMap<RequestId, Upstream>,
    /// Tokens for rejoins and reasserts: earlier terms', then those led.
    tokens: Vec<FencingToken>,
    next_sequence: u32,
    values: u64,
    /// The party whose land (or landed reassert) carries each outcome.
    land_of_outcome: BTreeMap<String, Party>,
    /// The party and outcome of each land that went upstream, by its id.
    lands: BTreeMap<RequestId, (Party, Outcome)>,
    /// Parties withdrawn by their own cancel.
    withdrawn: BTreeSet<Party>,
}

impl Observer {
    fn new() -> Observer {
        let mut observer = Observer {
            next_sequence: 1,
            ..Observer::default()
        };
        for sequence in 1..=3 {
            let token = FencingToken::new(Epoch::new(1).unwrap(), sequence).unwrap();
            observer.tokens.push(token);
        }
        observer
    }

    fn connection(&self, n: usize) -> Option<ConnectionId> {
        (!self.connections.is_empty()).then(|| self.connections[n % self.connections.len()])
    }

    fn new_id(&mut self, connection: ConnectionId) -> RequestId {
        self.next_id += 1;
        let id = RequestId::new(self.next_id.to_string()).unwrap();
        self.parties.entry(connection).or_default().push(id.clone());
        id
    }

    fn party(&self, connection: ConnectionId, n: usize) -> Option<RequestId> {
        let ids = self.parties.get(&connection)?;
        (!ids.is_empty()).then(|| ids[n % ids.len()].clone())
    }

    fn outcome(&mut self) -> Outcome {
        self.values += 1;
        Outcome::Value(format!("v{}", self.values))
    }

    fn is_final(response: &Response) -> bool {
        matches!(
            response,
            Response::Landed { .. }
                | Response::Interrupted { .. }
                | Response::Ack { .. }
                | Response::Reused { .. }
                | Response::Cycle { .. }
                | Response::Unavailable { .. }
                | Response::Stop { .. }
        )
    }

    /// The upstream parties open for the bound: what the cluster's
    /// coordinator will count once it has read what was sent.
    fn upstream_parties(&self) -> usize {
        self.upstream
            .values()
            .filter(|up| up.kind != Kind::Status && up.state != State::Landing)
            .count()
    }

    /// A plausible answer of the cluster's coordinator to `id`, by `choice`.
    fn answer(&mut self, id: &RequestId, choice: usize) -> Option<Response> {
        let up = self.upstream[id].clone();
        let id = id.clone();
        let mut options = match (up.kind, up.state) {
            (Kind::Status, _) => vec![
                Response::Status {
                    id: id.clone(),
                    flights: vec![],
                    waiting: None,
                    omitted: None,
                    stats: None,
                    hosts: None,
                    relay: None,
                },
                Response::Unsupported { id: id.clone() },
            ],
            (_, State::Asked) => {
                let token = FencingToken::new(Epoch::new(2).unwrap(), self.next_sequence).unwrap();
                let known = self.tokens[choice % self.tokens.len()];
                let mut options = vec![
                    Response::Lead {
                        id: id.clone(),
                        token,
                    },
                    Response::Joined {
                        id: id.clone(),
                        flight: known,
                    },
                    Response::Landed {
                        id: id.clone(),
                        outcome: Arc::new(Outcome::Value(format!("up{choice}"))),
                    },
                    Response::Interrupted { id: id.clone() },
                ];
                if up.kind == (Kind::Run { reuse: true }) {
                    options.push(Response::Reused {
                        id: id.clone(),
                        flight: known,
                        outcome: Box::new(Outcome::Value("kept".into())),
                    });
                }
                options
            }
            (_, State::Joined) => vec![
                Response::Landed {
                    id: id.clone(),
                    outcome: Arc::new(Outcome::Value(format!("up{choice}"))),
                },
                Response::Interrupted { id: id.clone() },
            ],
            // A reassert refused, or superseded by a later one (§8.3); a
            // leader of a flight it led is sent nothing unasked.
            (Kind::Reassert, State::Led) => vec![Response::Rejected { id: id.clone() }],
            (_, State::Led) => vec![],
            (_, State::Landing) => vec![
                Response::Ack { id: id.clone() },
                Response::Rejected { id: id.clone() },
            ],
        };
        if up.detached && up.state != State::Landing {
            options.push(Response::Stop { id: id.clone() });
            options.push(Response::Unsupported { id: id.clone() });
        }
        (!options.is_empty()).then(|| options.swap_remove(choice % options.len()))
    }

    /// What upstream learns from its own answer.
    fn answered(&mut self, response: &Response) {
        let id = response.id().clone();
        match response {
            Response::Lead { token, .. } => {
                self.next_sequence += 1;
                self.tokens.push(*token);
                if let Some(up) = self.upstream.get_mut(&id) {
                    up.state = State::Led;
                }
            }
            Response::Joined { .. } => {
                if let Some(up) = self.upstream.get_mut(&id) {
                    up.state = State::Joined;
                }
            }
            Response::Unsupported { .. } if self.upstream[&id].kind != Kind::Status => {
                if let Some(up) = self.upstream.get_mut(&id) {
                    up.detached = false;
                }
            }
            _ => {
                self.upstream.remove(&id);
            }
        }
    }

    /// Checks one step's effects and learns from them. `event` is the
    /// step's upstream answer, if it was one.
    fn check(&mut self, relay: &Relay, event: Option<&Response>, effects: &[Effect]) {
        let mut closed_now = Vec::new();
        let mut acks = 0;
        for effect in effects {
            match effect {
                Effect::Send {
                    connection,
                    response,
                } => {
                    assert!(
                        self.open.contains(connection),
                        "§18.3: sent on a closed connection: {effect:?}"
                    );
                    let party = (*connection, response.id().clone());
                    let earlier = self.answers.entry(party.clone()).or_default();
                    // `rejected` answers a land, not the party: a land of a
                    // party that is over, or of one that never led.
                    if !matches!(response, Response::Rejected { .. }) {
                        assert!(
                            !earlier.iter().any(Self::is_final),
                            "§18.3: answered after a final answer: {response:?} after {earlier:?}"
                        );
                    }
                    match response {
                        Response::Lead { .. } => assert!(
                            !earlier.iter().any(|r| matches!(r, Response::Joined { .. })),
                            "§18.3: a party answered joined was answered lead"
                        ),
                        Response::Ack { .. } => {
                            acks += 1;
                            let Some(Response::Ack { id: upstream }) = event else {
                                panic!("§18.3: ack {party:?} without an upstream ack");
                            };
                            let (landed_by, _) = self
                                .lands
                                .get(upstream)
                                .expect("§18.3: the upstream ack answers a land");
                            assert_eq!(
                                *landed_by, party,
                                "§18.3: ack for another party than the land's"
                            );
                        }
                        Response::Landed { outcome, .. } => {
                            if let Some(Response::Ack { id: upstream }) = event {
                                assert_eq!(
                                    Some(&**outcome),
                                    self.lands.get(upstream).map(|(_, outcome)| outcome),
                                    "§18.3: a joiner got another outcome than the land's"
                                );
                            }
                        }
                        _ => {}
                    }
                    earlier.push(response.clone());
                }
                Effect::Close { connection, .. } => closed_now.push(*connection),
                Effect::SendUpstream(request) => {
                    assert!(self.ready, "§18.3: sent upstream with no connection");
                    self.sent_upstream(request);
                }
            }
        }
        assert!(acks <= 1, "§18.3: one upstream ack acknowledges one land");
        for connection in closed_now {
            self.open.remove(&connection);
        }
        assert!(
            self.upstream_parties() <= UPSTREAM_LIMIT,
            "§18.3: {} upstream parties open",
            self.upstream_parties()
        );
        assert!(relay.upstream_parties() <= UPSTREAM_LIMIT);
    }

    fn sent_upstream(&mut self, request: &Request) {
        let id = request.id().clone();
        let opened = match request {
            Request::Run { reuse, .. } => Some((
                Kind::Run {
                    reuse: reuse.is_some(),
                },
                State::Asked,
            )),
            Request::Reassert { outcome, .. } => {
                if let Some(outcome) = outcome {
                    self.land_went_up(&id, outcome);
                }
                let state = match outcome {
                    Some(_) => State::Landing,
                    None => State::Led,
                };
                Some((Kind::Reassert, state))
            }
            Request::Status { .. } => Some((Kind::Status, State::Asked)),
            Request::Land { outcome, .. } => {
                self.land_went_up(&id, outcome);
                if let Some(up) = self.upstream.get_mut(&id) {
                    up.state = State::Landing;
                }
                None
            }
            Request::Cancel { .. } => {
                self.upstream.remove(&id);
                None
            }
            Request::Detach { .. } => {
                if let Some(up) = self.upstream.get_mut(&id) {
                    up.detached = true;
                }
                None
            }
        };
        if let Some((kind, state)) = opened {
            assert!(
                !self.upstream.contains_key(&id),
                "§18.3: upstream id {id:?} of an open party used again"
            );
            self.upstream.insert(
                id,
                Upstream {
                    kind,
                    state,
                    detached: false,
                },
            );
        }
    }

    fn land_went_up(&mut self, id: &RequestId, outcome: &Outcome) {
        let Outcome::Value(text) = outcome else {
            return;
        };
        let party = self.land_of_outcome[text].clone();
        self.lands.insert(id.clone(), (party, outcome.clone()));
    }
}

fn run_sequence(ops: Vec<Op>) {
    let mut relay = Relay::new().with_upstream_limit(UPSTREAM_LIMIT);
    let mut observer = Observer::new();
    let request = |connection, request| Event::RequestReceived {
        connection,
        request: Incoming::Request(request),
    };
    for op in ops {
        match op {
            Op::Open => {
                let connection = ConnectionId(observer.connections.len() as u64);
                observer.connections.push(connection);
                observer.open.insert(connection);
                let effects = relay.step(Event::ConnectionOpened { connection });
                assert_eq!(effects, vec![]);
            }
            Op::Close(n) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                observer.open.remove(&connection);
                let effects = relay.step(Event::ConnectionClosed { connection });
                observer.check(&relay, None, &effects);
            }
            Op::Run(n, k) | Op::Rejoin(n, k, _) | Op::Reuse(n, k) | Op::Reassert(n, k, ..) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let id = observer.new_id(connection);
                let key = Key::new(KEYS[k % KEYS.len()]).unwrap();
                let token = |t: usize| observer.tokens[t % observer.tokens.len()];
                let event = match op {
                    Op::Run(..) | Op::Rejoin(..) | Op::Reuse(..) => request(
                        connection,
                        Request::Run {
                            id,
                            key,
                            flight: match op {
                                Op::Rejoin(.., t) => Some(token(t)),
                                _ => None,
                            },
                            reuse: match op {
                                Op::Reuse(..) => ReuseWindow::from_millis(1000),
                                _ => None,
                            },
                            parent: None,
                        },
                    ),
                    Op::Reassert(.., t, landed) => {
                        let t = token(t);
                        let outcome = landed.then(|| observer.outcome());
                        if let Some(Outcome::Value(text)) = &outcome {
                            observer
                                .land_of_outcome
                                .insert(text.clone(), (connection, id.clone()));
                        }
                        request(
                            connection,
                            Request::Reassert {
                                id,
                                key,
                                token: t,
                                outcome,
                                parent: None,
                            },
                        )
                    }
                    _ => unreachable!(),
                };
                let effects = relay.step(event);
                if !observer.open.contains(&connection) {
                    assert_eq!(
                        effects,
                        vec![],
                        "requests of closed connections are ignored"
                    );
                }
                observer.check(&relay, None, &effects);
            }
            Op::Land(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                let outcome = observer.outcome();
                if let Outcome::Value(text) = &outcome {
                    observer
                        .land_of_outcome
                        .insert(text.clone(), (connection, id.clone()));
                }
                let effects = relay.step(request(connection, Request::Land { id, outcome }));
                observer.check(&relay, None, &effects);
            }
            Op::Cancel(n, p) | Op::Detach(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                let withdrawal = match op {
                    Op::Cancel(..) => {
                        observer.withdrawn.insert((connection, id.clone()));
                        Request::Cancel { id }
                    }
                    _ => Request::Detach { id },
                };
                let effects = relay.step(request(connection, withdrawal));
                observer.check(&relay, None, &effects);
            }
            Op::Status(n) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                observer.next_id += 1;
                let id = RequestId::new(format!("s{}", observer.next_id)).unwrap();
                let effects = relay.step(request(connection, Request::Status { id }));
                observer.check(&relay, None, &effects);
            }
            Op::Unknown(n) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let id = RequestId::new("probe").unwrap();
                let before = relay.clone();
                let effects = relay.step(Event::RequestReceived {
                    connection,
                    request: Incoming::Unknown {
                        op: "probe".into(),
                        id: id.clone(),
                    },
                });
                assert_eq!(relay, before, "§3.6: an unknown op changes nothing");
                let expected = if observer.open.contains(&connection) {
                    vec![Effect::Send {
                        connection,
                        response: Response::Unsupported { id },
                    }]
                } else {
                    vec![]
                };
                assert_eq!(effects, expected);
            }
            Op::Duplicate(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                let party = (connection, id.clone());
                let answers = observer.answers.get(&party).map(Vec::as_slice);
                // Only a party surely still open: not withdrawn, nothing
                // final, and no `rejected`, which may have refused its
                // reassert or its land.
                let over = observer.withdrawn.contains(&party)
                    || answers
                        .unwrap_or(&[])
                        .iter()
                        .any(|r| Observer::is_final(r) || matches!(r, Response::Rejected { .. }));
                if over || !observer.open.contains(&connection) {
                    continue;
                }
                let before = relay.clone();
                let effects = relay.step(request(
                    connection,
                    Request::Run {
                        id,
                        key: Key::new("a").unwrap(),
                        flight: None,
                        reuse: None,
                        parent: None,
                    },
                ));
                assert_eq!(effects, vec![], "§8.8: a second request with an open id");
                assert_eq!(relay, before, "§8.8: a second request with an open id");
            }
            Op::Ready => {
                let was = observer.ready;
                observer.ready = true;
                let effects = relay.step(Event::UpstreamReady);
                if was {
                    assert_eq!(effects, vec![]);
                }
                observer.check(&relay, None, &effects);
            }
            Op::Lost => {
                let effects = relay.step(Event::UpstreamLost);
                if observer.ready {
                    let expected: Vec<Effect> = observer
                        .open
                        .iter()
                        .map(|&connection| Effect::Close {
                            connection,
                            reason: CloseReason::UpstreamLost,
                        })
                        .collect();
                    assert_eq!(effects, expected, "§18.3: every local connection closes");
                    observer.open.clear();
                    observer.upstream.clear();
                    assert_eq!((relay.groups(), relay.upstream_parties()), (0, 0));
                } else {
                    assert_eq!(effects, vec![], "a loss with no upstream changes nothing");
                }
                observer.ready = false;
            }
            Op::Unavailable => {
                let reason = crate::protocol::Reason::new("refused").unwrap();
                let effects = relay.step(Event::UpstreamUnavailable { reason });
                assert!(
                    effects.iter().all(|effect| matches!(
                        effect,
                        Effect::Send {
                            response: Response::Unavailable { .. },
                            ..
                        }
                    )),
                    "§18.3: only waiting calls are told: {effects:?}"
                );
                if observer.ready {
                    assert_eq!(effects, vec![], "an upstream connection is ready");
                }
                observer.check(&relay, None, &effects);
            }
            Op::Answer(u, choice) => {
                let open: Vec<RequestId> = observer.upstream.keys().cloned().collect();
                if !observer.ready || open.is_empty() {
                    continue;
                }
                let id = &open[u % open.len()];
                let Some(response) = observer.answer(id, choice) else {
                    continue;
                };
                observer.answered(&response);
                let effects = relay.step(Event::UpstreamResponse(response.clone()));
                observer.check(&relay, Some(&response), &effects);
            }
            Op::Stale(u) => {
                let id = RequestId::new(format!("{}", 1000 + u)).unwrap();
                if !observer.ready || observer.upstream.contains_key(&id) {
                    continue;
                }
                let before = relay.clone();
                let effects = relay.step(Event::UpstreamResponse(Response::Interrupted { id }));
                assert_eq!(effects, vec![], "§18.3: an answer to no open party");
                assert_eq!(relay, before);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// §18.3's invariants over random sequences of local and upstream
    /// events.
    #[test]
    fn invariants_hold(ops in prop::collection::vec(op(), 1..120)) {
        run_sequence(ops);
    }
}
