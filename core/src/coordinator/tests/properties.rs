//! Long random event sequences through the coordinator, with the invariants
//! of SPEC.md §8.10 checked by an observer after every step. The observer
//! sees only what a client could see (requests and responses), so it checks
//! the coordinator's behaviour, not a copy of its state. Some connections
//! are relay connections of two hosts (SPEC.md §18.2), and the relay
//! windows' timers fire at any moment, late ones too.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::super::*;
use super::{AFTER_FAILOVER, GRACE_ENDED};
use crate::protocol::{Epoch, FencingToken, Incoming, Key, Outcome, Request, RequestId, Response};

const KEYS: [&str; 3] = ["a", "b", "c"];
const EPOCH: u64 = 3;
/// The hosts whose coordinators relay (SPEC.md §18.1): two, so that a
/// host's second connection closes its first and another host's does not.
const HOSTS: [&str; 2] = ["h0", "h1"];

#[derive(Clone, Debug)]
enum Op {
    Open,
    /// A relay connection of one of [`HOSTS`] (SPEC.md §18.1).
    OpenRelay(usize),
    Close(usize),
    Run(usize, usize),
    /// A run made by the work of a flight (SPEC.md §17): its parent is one
    /// of the tokens minted so far.
    Nested(usize, usize, usize),
    Rejoin(usize, usize, usize),
    Land(usize, usize),
    Cancel(usize, usize),
    Reassert(usize, usize, usize),
    /// A landed reassert (SPEC.md §8.3, §18.2).
    LandedReassert(usize, usize, usize),
    Duplicate(usize, usize),
    Unknown(usize),
    GraceEnds,
    /// One of the relay windows' timers started so far fires (SPEC.md
    /// §18.2), whether its window was opened again since or not.
    RelayWindowEnds(usize),
    /// A flight that a closed connection led or joined, claimed again as a
    /// host coordinator's replay would (§18.4): a running reassert, a
    /// landed one, or a rejoin, on any connection; random tokens alone
    /// would rarely name one.
    Reclaim(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..64usize;
    prop_oneof![
        2 => Just(Op::Open),
        2 => n.clone().prop_map(Op::OpenRelay),
        2 => n.clone().prop_map(Op::Close),
        6 => (n.clone(), n.clone()).prop_map(|(c, k)| Op::Run(c, k)),
        2 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, k, t)| Op::Nested(c, k, t)),
        2 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, k, t)| Op::Rejoin(c, k, t)),
        3 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Land(c, p)),
        2 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Cancel(c, p)),
        2 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, k, t)| Op::Reassert(c, k, t)),
        1 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, k, t)| Op::LandedReassert(c, k, t)),
        1 => (n.clone(), n.clone()).prop_map(|(c, p)| Op::Duplicate(c, p)),
        1 => n.clone().prop_map(Op::Unknown),
        1 => Just(Op::GraceEnds),
        1 => n.clone().prop_map(Op::RelayWindowEnds),
        3 => (n.clone(), n.clone(), n.clone()).prop_map(|(c, f, k)| Op::Reclaim(c, f, k)),
    ]
}

type Party = (ConnectionId, RequestId);

/// What a perfect client-side witness knows, and the checks it makes.
#[derive(Default)]
struct Observer {
    connections: Vec<ConnectionId>,
    open: BTreeSet<ConnectionId>,
    next_id: u64,
    parties: BTreeMap<ConnectionId, Vec<RequestId>>,
    /// Every response each party got, in order.
    answers: BTreeMap<Party, Vec<Response>>,
    /// Parties that were withdrawn by their own cancel.
    cancelled: BTreeSet<Party>,
    /// Leads not yet settled: party → (key, token).
    live_leads: BTreeMap<Party, (Key, FencingToken)>,
    /// The flight each joiner joined or rejoined.
    flight_of: BTreeMap<Party, FencingToken>,
    /// The outcomes each flight's leaders handed over: one, but for a
    /// flight whose clients claim it twice (a landed reassert of a flight a
    /// running reassert brought back, §8.3), which no real client does.
    landed: BTreeMap<FencingToken, Vec<Outcome>>,
    /// The relay windows' timers started and not fired yet (§18.2).
    relay_timers: Vec<Timer>,
    /// The flights that closed connections led or joined, by key index
    /// and token, for [`Op::Reclaim`].
    lost: Vec<(usize, FencingToken)>,
    /// The key each party asked for.
    key_of: BTreeMap<Party, Key>,
    last_minted: Option<FencingToken>,
    tokens: Vec<FencingToken>,
    values: u64,
    /// The step being checked happens inside the grace window.
    grace: bool,
}

impl Observer {
    fn new() -> Observer {
        let mut observer = Observer::default();
        // Tokens of earlier terms, for reasserts and rejoins.
        for epoch in 1..EPOCH {
            for sequence in 1..=3 {
                let token = FencingToken::new(Epoch::new(epoch).unwrap(), sequence).unwrap();
                observer.tokens.push(token);
            }
        }
        observer
    }

    fn connection(&self, n: usize) -> Option<ConnectionId> {
        (!self.connections.is_empty()).then(|| self.connections[n % self.connections.len()])
    }

    fn new_party(&mut self, connection: ConnectionId) -> RequestId {
        self.next_id += 1;
        let id = RequestId::new(self.next_id.to_string()).unwrap();
        self.parties.entry(connection).or_default().push(id.clone());
        id
    }

    fn party(&self, connection: ConnectionId, n: usize) -> Option<RequestId> {
        let ids = self.parties.get(&connection)?;
        (!ids.is_empty()).then(|| ids[n % ids.len()].clone())
    }

    fn is_final(response: &Response) -> bool {
        matches!(
            response,
            Response::Landed { .. } | Response::Interrupted { .. } | Response::Cycle { .. }
        )
    }

    /// Whether the coordinator must still consider `party` open.
    fn known_open(&self, party: &Party) -> bool {
        let answers = self.answers.get(party).map(Vec::as_slice).unwrap_or(&[]);
        self.open.contains(&party.0)
            && !self.cancelled.contains(party)
            && (self.live_leads.contains_key(party)
                || (answers.iter().any(|r| matches!(r, Response::Joined { .. }))
                    && !answers.iter().any(Self::is_final)))
    }

    /// Checks one step's effects and learns from them.
    fn check(&mut self, effects: &[Effect]) {
        let mut closed_now = Vec::new();
        for effect in effects {
            match effect {
                Effect::Send {
                    connection,
                    response,
                } => {
                    assert!(
                        self.open.contains(connection),
                        "§8.10: sent on a closed connection: {effect:?}"
                    );
                    let party = (*connection, response.id().clone());
                    let earlier = self.answers.entry(party.clone()).or_default();
                    // `rejected` answers a land of a party that is over, not the party.
                    let answers_party = !matches!(response, Response::Rejected { .. });
                    assert!(
                        !answers_party || !earlier.iter().any(Self::is_final),
                        "§8.10: answered after a final answer: {response:?} after {earlier:?}"
                    );
                    match response {
                        Response::Lead { token, .. } => {
                            assert!(
                                !self.grace,
                                "§8.4: a flight was led during the grace window"
                            );
                            assert!(
                                !earlier.iter().any(|r| matches!(r, Response::Joined { .. })),
                                "§8.2: a joined party led"
                            );
                            assert!(
                                self.last_minted < Some(*token),
                                "§6: token {token:?} not greater than {:?}",
                                self.last_minted
                            );
                            assert_eq!(
                                token.epoch().get() as u64,
                                EPOCH,
                                "§6: minted with another epoch"
                            );
                            self.last_minted = Some(*token);
                            let key = self.key_of[&party].clone();
                            self.live_leads.insert(party.clone(), (key, *token));
                            self.tokens.push(*token);
                        }
                        Response::Joined { flight, .. } => {
                            self.flight_of.insert(party.clone(), *flight);
                        }
                        Response::Landed { outcome, .. } => {
                            let flight = self
                                .flight_of
                                .get(&party)
                                .expect("§8.5: landed for a party that joined nothing");
                            assert!(
                                self.landed
                                    .get(flight)
                                    .is_some_and(|outcomes| outcomes.contains(outcome)),
                                "§8.5: a joiner got another outcome than its flight's"
                            );
                        }
                        Response::Ack { .. }
                        | Response::Rejected { .. }
                        | Response::Stop { .. } => {
                            self.live_leads.remove(&party);
                        }
                        _ => {}
                    }
                    earlier.push(response.clone());
                }
                Effect::Close { connection, .. } => closed_now.push(*connection),
                Effect::EndTerm { .. } => panic!("the sequence cannot run out here"),
                Effect::StartTimer { timer, .. } => match timer {
                    Timer::GraceWindow => {}
                    Timer::RelayWindow { .. } => self.relay_timers.push(timer.clone()),
                    Timer::Reuse { .. } => {
                        panic!("§16.2: no run of these sequences has a reuse window")
                    }
                },
            }
        }
        for connection in closed_now {
            self.closed(connection);
        }
        // §8.10: one live leader per key.
        let mut keys = BTreeSet::new();
        for (key, _) in self.live_leads.values() {
            assert!(
                keys.insert(key.clone()),
                "§8.10: two live leaders for {key:?}"
            );
        }
    }

    fn closed(&mut self, connection: ConnectionId) {
        let was_open = self.open.contains(&connection);
        let joined = self
            .flight_of
            .iter()
            .filter(|(party, _)| party.0 == connection && self.known_open(party))
            .map(|(party, token)| (self.key_of[party].clone(), *token));
        let led = self
            .live_leads
            .iter()
            .filter(|(party, _)| party.0 == connection)
            .map(|(_, (key, token))| (key.clone(), *token));
        let lost: Vec<(Key, FencingToken)> = led.chain(joined).collect();
        if was_open {
            for (key, token) in lost {
                let k = KEYS.iter().position(|k| *k == key.as_str()).unwrap();
                self.lost.push((k, token));
            }
        }
        self.open.remove(&connection);
        self.live_leads.retain(|(c, _), _| *c != connection);
    }
}

fn run_sequence(after_failover: bool, relay_windows: bool, ops: Vec<Op>) {
    let term = if after_failover {
        AFTER_FAILOVER
    } else {
        Term::First
    };
    let mut coordinator = Coordinator::new(Epoch::new(EPOCH).unwrap(), term);
    if relay_windows {
        coordinator = coordinator.with_relay_window(std::time::Duration::from_secs(2));
    }
    let mut observer = Observer::new();
    for op in ops {
        // A reclaim is a reassert or a rejoin of a flight that was lost.
        let op = match op {
            Op::Reclaim(n, f, kind) if !observer.lost.is_empty() => {
                let (k, token) = observer.lost[f % observer.lost.len()];
                let t = observer.tokens.iter().position(|t| *t == token).unwrap();
                match kind % 3 {
                    0 => Op::Reassert(n, k, t),
                    1 => Op::LandedReassert(n, k, t),
                    _ => Op::Rejoin(n, k, t),
                }
            }
            Op::Reclaim(..) => continue,
            op => op,
        };
        // §8.4: nothing leads during the grace window, except at its end.
        observer.grace = coordinator.in_grace() && !matches!(op, Op::GraceEnds);
        let request = |connection, request| Event::RequestReceived {
            connection,
            request: Incoming::Request(request),
        };
        match op {
            Op::Open => {
                let connection = ConnectionId(observer.connections.len() as u64);
                observer.connections.push(connection);
                observer.open.insert(connection);
                let effects = coordinator.step(Event::ConnectionOpened {
                    connection,
                    relay: None,
                });
                assert_eq!(effects, vec![]);
            }
            Op::OpenRelay(h) => {
                let connection = ConnectionId(observer.connections.len() as u64);
                observer.connections.push(connection);
                observer.open.insert(connection);
                let host = crate::protocol::HostId::new(HOSTS[h % HOSTS.len()]).unwrap();
                let effects = coordinator.step(Event::ConnectionOpened {
                    connection,
                    relay: Some(host),
                });
                // §18.2: at most the host's older connection closes.
                assert!(
                    effects.iter().all(|effect| !matches!(
                        effect,
                        Effect::Close { connection: closed, .. } if *closed == connection
                    )),
                    "§18.2: the newer relay connection stays open: {effects:?}"
                );
                observer.check(&effects);
            }
            Op::LandedReassert(n, k, t) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let id = observer.new_party(connection);
                let key = Key::new(KEYS[k % KEYS.len()]).unwrap();
                observer
                    .key_of
                    .insert((connection, id.clone()), key.clone());
                let token = observer.tokens[t % observer.tokens.len()];
                observer.values += 1;
                let outcome = Outcome::Value(format!("v{}", observer.values));
                // Handed over only if accepted: `ack`, decided below.
                observer
                    .landed
                    .entry(token)
                    .or_default()
                    .push(outcome.clone());
                let effects = coordinator.step(request(
                    connection,
                    Request::Reassert {
                        id: id.clone(),
                        key,
                        token,
                        outcome: Some(outcome),
                        parent: None,
                    },
                ));
                let acknowledged = effects.iter().any(|e| {
                    matches!(
                        e,
                        Effect::Send {
                            connection: c,
                            response: Response::Ack { id: r },
                        } if *c == connection && *r == id
                    )
                });
                if !acknowledged && let Some(outcomes) = observer.landed.get_mut(&token) {
                    outcomes.pop();
                }
                observer.check(&effects);
            }
            Op::RelayWindowEnds(n) => {
                if observer.relay_timers.is_empty() {
                    continue;
                }
                let at = n % observer.relay_timers.len();
                let timer = observer.relay_timers.remove(at);
                let effects = coordinator.step(Event::TimerFired { timer });
                // §18.2: a window's end only interrupts.
                assert!(
                    effects.iter().all(|e| matches!(
                        e,
                        Effect::Send {
                            response: Response::Interrupted { .. },
                            ..
                        }
                    )),
                    "§18.2: a relay window's end answers only `interrupted`: {effects:?}"
                );
                observer.check(&effects);
            }
            Op::Close(n) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let was_open = observer.open.contains(&connection);
                observer.closed(connection);
                let effects = coordinator.step(Event::ConnectionClosed { connection });
                if !was_open {
                    assert_eq!(effects, vec![], "§8.1: a second close changes nothing");
                }
                observer.check(&effects);
            }
            Op::Run(n, k) | Op::Nested(n, k, _) | Op::Rejoin(n, k, _) | Op::Reassert(n, k, _) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let id = observer.new_party(connection);
                let key = Key::new(KEYS[k % KEYS.len()]).unwrap();
                observer
                    .key_of
                    .insert((connection, id.clone()), key.clone());
                let token = |t: usize| observer.tokens[t % observer.tokens.len()];
                let (event, reasserted) = match op {
                    Op::Nested(.., t) => (
                        request(
                            connection,
                            Request::Run {
                                id: id.clone(),
                                key: key.clone(),
                                flight: None,
                                reuse: None,
                                parent: Some(token(t)),
                            },
                        ),
                        None,
                    ),
                    Op::Run(..) => (
                        request(
                            connection,
                            Request::Run {
                                id: id.clone(),
                                key: key.clone(),
                                flight: None,
                                reuse: None,
                                parent: None,
                            },
                        ),
                        None,
                    ),
                    Op::Rejoin(.., t) => {
                        let flight = token(t);
                        observer.flight_of.insert((connection, id.clone()), flight);
                        (
                            request(
                                connection,
                                Request::Run {
                                    id: id.clone(),
                                    key: key.clone(),
                                    flight: Some(flight),
                                    reuse: None,
                                    parent: None,
                                },
                            ),
                            None,
                        )
                    }
                    _ => {
                        let Op::Reassert(.., t) = op else {
                            unreachable!()
                        };
                        let t = token(t);
                        (
                            request(
                                connection,
                                Request::Reassert {
                                    id: id.clone(),
                                    key: key.clone(),
                                    token: t,
                                    outcome: None,
                                    parent: None,
                                },
                            ),
                            Some(t),
                        )
                    }
                };
                let effects = coordinator.step(event);
                if !observer.open.contains(&connection) {
                    assert_eq!(
                        effects,
                        vec![],
                        "§8.1: requests of closed connections are ignored"
                    );
                }
                // Only a `rejected` for this request refuses it; one for
                // another leader means this reassert superseded its flight.
                let rejected = effects.iter().any(|e| {
                    matches!(
                        e,
                        Effect::Send {
                            connection: c,
                            response: Response::Rejected { id: r },
                        } if *c == connection && *r == id
                    )
                });
                if let Some(token) =
                    reasserted.filter(|_| !rejected && observer.open.contains(&connection))
                {
                    observer.live_leads.insert((connection, id), (key, token));
                }
                observer.check(&effects);
            }
            Op::Land(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                observer.values += 1;
                let outcome = Outcome::Value(format!("v{}", observer.values));
                let party = (connection, id.clone());
                if let Some((_, token)) = observer.live_leads.get(&party) {
                    observer
                        .landed
                        .entry(*token)
                        .or_default()
                        .push(outcome.clone());
                }
                let leads = observer.live_leads.contains_key(&party);
                let effects = coordinator.step(request(
                    connection,
                    Request::Land {
                        id: id.clone(),
                        outcome,
                    },
                ));
                if leads {
                    assert_eq!(
                        effects.last(),
                        Some(&Effect::Send {
                            connection,
                            response: Response::Ack { id }
                        }),
                        "§8.5: the leader's land is acknowledged last"
                    );
                }
                observer.check(&effects);
            }
            Op::Cancel(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                let party = (connection, id.clone());
                let led = observer.live_leads.remove(&party).is_some();
                observer.cancelled.insert(party);
                let effects = coordinator.step(request(connection, Request::Cancel { id }));
                if !led {
                    assert_eq!(
                        effects,
                        vec![],
                        "§8.6: only a leader's cancel answers anyone"
                    );
                }
                assert!(effects.iter().all(|e| matches!(
                    e,
                    Effect::Send {
                        response: Response::Interrupted { .. },
                        ..
                    }
                )));
                observer.check(&effects);
            }
            Op::Duplicate(n, p) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let Some(id) = observer.party(connection, p) else {
                    continue;
                };
                if observer.known_open(&(connection, id.clone())) {
                    let key = Key::new("a").unwrap();
                    let effects = coordinator.step(request(
                        connection,
                        Request::Run {
                            id,
                            key,
                            flight: None,
                            reuse: None,
                            parent: None,
                        },
                    ));
                    assert_eq!(
                        effects,
                        vec![],
                        "§8.8: a second request with an open id is ignored"
                    );
                }
            }
            Op::Unknown(n) => {
                let Some(connection) = observer.connection(n) else {
                    continue;
                };
                let id = RequestId::new("probe").unwrap();
                let before = coordinator.clone();
                let effects = coordinator.step(Event::RequestReceived {
                    connection,
                    request: Incoming::Unknown {
                        op: "probe".into(),
                        id: id.clone(),
                    },
                });
                assert_eq!(coordinator, before, "§8.8: an unknown op changes nothing");
                if observer.open.contains(&connection) {
                    assert_eq!(
                        effects,
                        vec![Effect::Send {
                            connection,
                            response: Response::Unsupported { id }
                        }]
                    );
                } else {
                    assert_eq!(effects, vec![]);
                }
            }
            Op::Reclaim(..) => unreachable!("a reclaim is resolved before the match"),
            Op::GraceEnds => {
                let effects = coordinator.step(GRACE_ENDED);
                observer.check(&effects);
            }
        }
        assert!(
            coordinator
                .flights()
                .all(|(_, token)| token.epoch().get() as u64 <= EPOCH)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// §8.10 over random sequences, with and without a grace window, with
    /// and without relay windows (§18.2).
    #[test]
    fn invariants_hold(
        after_failover in any::<bool>(),
        relay_windows in any::<bool>(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run_sequence(after_failover, relay_windows, ops);
    }
}
