//! The client's rules (SPEC.md §9).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::io::{CallId, CallOptions, Effect, Event, Resolution, StopReason};
use crate::protocol::{FencingToken, Key, Outcome, Request, RequestId, Response};

/// The client side of one process: its calls and what it has told the
/// coordinator about them.
///
/// # Driving contract
///
/// Feed every fact as an [`Event`] through [`Client::step`], in order, and
/// carry out the returned [`Effect`]s in the order given: `Send`s go on the
/// current connection in that order. After [`Event::ConnectionLost`], deliver
/// no response until [`Event::ConnectionReady`] for a new connection; the
/// client then replays what the new coordinator must know (SPEC.md §9.4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Client {
    connected: bool,
    calls: BTreeMap<CallId, Call>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Call {
    key: Key,
    options: CallOptions,
    state: CallState,
    /// A joined call whose rejoin (§9.4) has not been answered `joined`
    /// again: an `interrupted` now means its flight was lost in the
    /// failover, not ended by its leader (§9.2).
    rejoining: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum CallState {
    /// `run` sent (or to be sent on the next connection), no answer yet.
    Asked,
    /// Told `joined`: waits for `landed` or `interrupted`.
    Joined { flight: FencingToken },
    /// Told `lead`: the work runs.
    Leading { token: FencingToken },
    /// A detached call that leads, whose caller left (SPEC.md §15.3): the
    /// work runs on for the flight's joiners, until it lands or the
    /// coordinator says `stop`.
    Detached { token: FencingToken },
    /// The work finished and the caller has its result; the `land` is kept
    /// until `ack` or `rejected` (SPEC.md §9.3).
    Landing {
        token: FencingToken,
        outcome: Outcome,
    },
    /// The coordinator refused the reassert: the flight is no longer this
    /// call's. The work still runs (it cannot be taken back, and its token
    /// fences it); its result goes to the caller alone.
    Orphaned { token: FencingToken },
}

impl Client {
    /// A client with no calls, not connected.
    pub fn new() -> Client {
        Client::default()
    }

    /// Whether the client has anything left to do: calls in progress or
    /// lands not yet acknowledged.
    pub fn is_idle(&self) -> bool {
        self.calls.is_empty()
    }

    /// Calls that the coordinator may hold a party for: in progress, or
    /// landing (SPEC.md §8.9).
    pub fn calls_in_progress(&self) -> usize {
        self.calls.len()
    }

    /// The calls that wait for a coordinator's answer (asked, or joined):
    /// those that end `Unavailable` when no coordinator can be had, while
    /// the calls whose work runs go on (SPEC.md §14.6).
    pub fn waiting_calls(&self) -> Vec<CallId> {
        self.calls
            .iter()
            .filter(|(_, entry)| matches!(entry.state, CallState::Asked | CallState::Joined { .. }))
            .map(|(&call, _)| call)
            .collect()
    }

    /// Whether a call waits for an answer that someone must be told of at
    /// once (SPEC.md §10.1): a call that asked or joined waits for its own,
    /// and a detached leader for `stop`. A leader whose work runs, a land
    /// that waits for its `ack` and a leader that lost its flight wait for
    /// nothing anyone is waiting for: what they are told changes no
    /// caller's result and may be read whenever the connection is read
    /// next.
    pub fn awaits_answers(&self) -> bool {
        self.calls.values().any(|entry| {
            matches!(
                entry.state,
                CallState::Asked | CallState::Joined { .. } | CallState::Detached { .. }
            )
        })
    }

    /// Whether `call` is a detached call whose caller left while its work
    /// runs on (SPEC.md §15.3).
    pub fn is_detached(&self, call: CallId) -> bool {
        self.calls
            .get(&call)
            .is_some_and(|entry| matches!(entry.state, CallState::Detached { .. }))
    }

    /// Takes one event and returns what the shell must do (SPEC.md §9.1).
    pub fn step(&mut self, event: Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        match event {
            Event::CallStarted { call, key, options } => {
                if self.calls.contains_key(&call) {
                    return effects;
                }
                let entry = Call {
                    key,
                    options,
                    state: CallState::Asked,
                    rejoining: false,
                };
                if self.connected {
                    effects.push(Effect::Send(entry.run(call, None)));
                }
                self.calls.insert(call, entry);
            }
            Event::ResponseReceived { response } => self.response(response, &mut effects),
            Event::WorkFinished { call, outcome } => self.finished(call, outcome, &mut effects),
            Event::CallCancelled { call } => self.cancel(call, &mut effects),
            Event::ConnectionLost => self.connected = false,
            Event::ConnectionReady => {
                self.connected = true;
                self.replay(&mut effects);
            }
        }
        effects
    }

    /// §9.2: the coordinator's answers.
    fn response(&mut self, response: Response, effects: &mut Vec<Effect>) {
        let Some(call) = CallId::from_request_id(response.id()) else {
            return;
        };
        let Some(entry) = self.calls.get_mut(&call) else {
            // A call cancelled while its answer was on the way.
            return;
        };
        let resolution = match (&entry.state, response) {
            (CallState::Asked, Response::Lead { token, .. }) => {
                entry.state = CallState::Leading { token };
                effects.push(Effect::StartWork { call, token });
                return;
            }
            (CallState::Asked | CallState::Joined { .. }, Response::Joined { flight, .. }) => {
                entry.state = CallState::Joined { flight };
                entry.rejoining = false;
                return;
            }
            (CallState::Joined { flight }, Response::Landed { outcome, .. }) => {
                Resolution::Joined {
                    flight: *flight,
                    // A decoded line's own: taken, not copied.
                    outcome: Arc::unwrap_or_clone(outcome),
                }
            }
            // §16.3: only a call that asked for a kept value takes one; to
            // any other the answer is the coordinator's error, and the call
            // ends as if interrupted rather than take a value it refused.
            (
                CallState::Asked,
                Response::Reused {
                    flight, outcome, ..
                },
            ) if entry.options.reuse.is_some() => Resolution::Reused {
                flight,
                outcome: *outcome,
            },
            (CallState::Asked, Response::Reused { .. }) => Resolution::Interrupted,
            // §17.1: the run or rejoin would close a cycle of nested flights.
            (CallState::Asked | CallState::Joined { .. }, Response::Cycle { keys, .. }) => {
                Resolution::Cycle { keys }
            }
            // §18.3: the host's coordinator could not send the run or
            // rejoin on to the cluster.
            (CallState::Asked | CallState::Joined { .. }, Response::Unavailable { reason, .. }) => {
                Resolution::Unavailable { reason }
            }
            // §15.3: nobody waits for the detached flight any more. A land
            // on the way is refused; there is nobody to hand it to.
            (CallState::Detached { .. }, Response::Stop { .. }) => {
                self.calls.remove(&call);
                effects.push(Effect::StopWork {
                    call,
                    why: StopReason::NobodyWaits,
                });
                return;
            }
            (CallState::Landing { .. }, Response::Stop { .. }) => {
                self.calls.remove(&call);
                effects.push(Effect::LandSettled { call });
                return;
            }
            // A coordinator that does not know `detach` (§15.3): cancel as
            // before the extension.
            (CallState::Detached { .. }, Response::Unsupported { .. }) => {
                self.calls.remove(&call);
                effects.push(Effect::Send(Request::Cancel {
                    id: request_id(call),
                }));
                effects.push(Effect::StopWork {
                    call,
                    why: StopReason::DetachUnsupported,
                });
                return;
            }
            // The flight is not this call's any more, and its caller left.
            (CallState::Detached { .. }, Response::Rejected { .. }) => {
                self.calls.remove(&call);
                effects.push(Effect::StopWork {
                    call,
                    why: StopReason::FlightLost,
                });
                return;
            }
            // §9.2: the flight this call rejoined did not come back on the
            // new coordinator.
            (CallState::Joined { .. }, Response::Interrupted { .. }) if entry.rejoining => {
                Resolution::Lost
            }
            // A coordinator only sends `landed` after `joined`; without it
            // the outcome cannot be tied to a flight, so the call ends as if
            // interrupted rather than trusting it or waiting forever.
            (CallState::Asked, Response::Landed { .. })
            | (CallState::Asked | CallState::Joined { .. }, Response::Interrupted { .. }) => {
                Resolution::Interrupted
            }
            (CallState::Landing { .. }, Response::Ack { .. } | Response::Rejected { .. }) => {
                // The land is settled; the caller had its result already.
                self.calls.remove(&call);
                effects.push(Effect::LandSettled { call });
                return;
            }
            (CallState::Leading { token }, Response::Rejected { .. }) => {
                entry.state = CallState::Orphaned { token: *token };
                return;
            }
            (_, Response::Unsupported { .. }) => Resolution::Unsupported,
            // Anything else does not fit the call's state; ignoring it keeps
            // the call's own protocol on track.
            _ => return,
        };
        self.calls.remove(&call);
        effects.push(Effect::Resolve { call, resolution });
    }

    /// §9.3: the leader's work finished.
    fn finished(&mut self, call: CallId, outcome: Outcome, effects: &mut Vec<Effect>) {
        let Some(entry) = self.calls.get_mut(&call) else {
            // Forgotten (its flight was lost while it was detached, or it
            // never led): no land will be sent.
            effects.push(Effect::LandSettled { call });
            return;
        };
        match entry.state {
            CallState::Leading { token } | CallState::Detached { token } => {
                effects.push(Effect::Resolve {
                    call,
                    resolution: Resolution::Led { token },
                });
                if self.connected {
                    effects.push(Effect::Send(Request::Land {
                        id: request_id(call),
                        outcome: outcome.clone(),
                    }));
                }
                entry.state = CallState::Landing { token, outcome };
            }
            CallState::Orphaned { token } => {
                self.calls.remove(&call);
                effects.push(Effect::Resolve {
                    call,
                    resolution: Resolution::Led { token },
                });
                // §9.3: the flight was lost; no land is sent.
                effects.push(Effect::LandSettled { call });
            }
            // A land is pending already; it settles once.
            CallState::Landing { .. } => {}
            CallState::Asked | CallState::Joined { .. } => {
                effects.push(Effect::LandSettled { call });
            }
        }
    }

    /// §9.5: the caller gave up. A landing call is already resolved; its
    /// land still goes to the joiners. A detached leader's work goes on
    /// (§15.3).
    fn cancel(&mut self, call: CallId, effects: &mut Vec<Effect>) {
        let Some(entry) = self.calls.get_mut(&call) else {
            return;
        };
        match entry.state {
            CallState::Landing { .. } | CallState::Detached { .. } => return,
            CallState::Leading { token } if entry.options.detached => {
                entry.state = CallState::Detached { token };
                if self.connected {
                    effects.push(Effect::Send(Request::Detach {
                        id: request_id(call),
                    }));
                }
                return;
            }
            // Its result was its caller's alone, who left.
            CallState::Orphaned { .. } if entry.options.detached => {
                self.calls.remove(&call);
                effects.push(Effect::StopWork {
                    call,
                    why: StopReason::FlightLost,
                });
                return;
            }
            _ => {}
        }
        let told_coordinator = !matches!(entry.state, CallState::Orphaned { .. });
        self.calls.remove(&call);
        if self.connected && told_coordinator {
            effects.push(Effect::Send(Request::Cancel {
                id: request_id(call),
            }));
        }
    }

    /// §9.4: what a new connection must learn, in call order.
    fn replay(&mut self, effects: &mut Vec<Effect>) {
        for (&call, entry) in &mut self.calls {
            entry.rejoining = matches!(entry.state, CallState::Joined { .. });
            let id = request_id(call);
            let key = entry.key.clone();
            match &entry.state {
                CallState::Asked => effects.push(Effect::Send(entry.run(call, None))),
                CallState::Joined { flight } => {
                    effects.push(Effect::Send(entry.run(call, Some(*flight))))
                }
                CallState::Leading { token } => {
                    effects.push(Effect::Send(Request::Reassert {
                        id,
                        key,
                        token: *token,
                        outcome: None,
                        parent: entry.options.parent,
                    }));
                }
                // §15.3: the flight comes back, then is detached again; the
                // coordinator counts its waiters from the rejoins.
                CallState::Detached { token } => {
                    effects.push(Effect::Send(Request::Reassert {
                        id: id.clone(),
                        key,
                        token: *token,
                        outcome: None,
                        parent: entry.options.parent,
                    }));
                    effects.push(Effect::Send(Request::Detach { id }));
                }
                // The land was not settled: the outcome travels with the
                // reassert, so that the flight does not come back to life
                // (SPEC.md §8.3).
                CallState::Landing { token, outcome } => {
                    // No parent: the flight does not come back, so it waits
                    // for nothing (§17.2).
                    effects.push(Effect::Send(Request::Reassert {
                        id,
                        key,
                        token: *token,
                        outcome: Some(outcome.clone()),
                        parent: None,
                    }));
                }
                CallState::Orphaned { .. } => {}
            }
        }
    }
}

impl Call {
    /// The call's `run`: plain, or a rejoin of `flight`, which never takes a
    /// kept value (it joins that flight or none, §8.2).
    fn run(&self, call: CallId, flight: Option<FencingToken>) -> Request {
        Request::Run {
            id: request_id(call),
            key: self.key.clone(),
            flight,
            reuse: self.options.reuse.filter(|_| flight.is_none()),
            parent: self.options.parent,
        }
    }
}

fn request_id(call: CallId) -> RequestId {
    call.request_id()
}
