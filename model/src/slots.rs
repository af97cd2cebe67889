//! The connection slots of one term (SPEC.md §11.3), a model of its own:
//! the shell accepts connections, refuses some in their handshake (the
//! transport's check of the peer, a hello that is not one, none in time),
//! sees peers leave before their hello, opens the rest and closes them,
//! and the **shipped** coordinator decides which connection takes a slot
//! and counts the refused ones (§8.11). Issue 27's bug 5 was a connection
//! refused before its hello that kept its slot for good, until enough
//! failed handshakes shut every client out; the properties here catch it
//! (`Mutant::KeepsRefusedSlots`).
//!
//! Why not actions of [`Directory`](crate::Directory): slots matter only
//! near the limit, which the directory's few processes never reach, and
//! handshakes there would multiply its pinned state counts for no rule of
//! §8 that depends on them. Here the limit is two and the budget five
//! connections: every order of accepts, refusals, departures, opens and
//! closes, a few thousand states, checked in CI in well under a second.

use std::collections::{BTreeMap, BTreeSet};

use single_flight_core::coordinator::{
    CloseReason, ConnectionId, Coordinator, Effect, Event, Mutant, Term,
};
use single_flight_core::protocol::Epoch;
use stateright::{Model, Property};

pub const REFUSED_HOLDS_NO_SLOT: &str = "a refused connection never holds a slot";
pub const ADMITTED_WHEN_FREE: &str = "a connection is admitted exactly when a slot is free";
pub const REFUSALS_COUNTED: &str = "every refused connection is counted";
pub const REFUSED_AT_ACCEPT: &str = "sometimes: a connection is refused at accept";
pub const FREED_SLOT_TAKEN: &str = "sometimes: a slot that a refusal freed is taken again";

/// The bounds of the slots model.
#[derive(Clone, Debug)]
pub struct Slots {
    /// The coordinator's limit (`Coordinator::with_connection_limit`), for
    /// `MAX_CONNECTIONS`.
    pub limit: usize,
    /// Connections accepted in the whole run.
    pub accepts: u8,
    /// The seeded bug the coordinator carries, if any (SPEC.md §12.3).
    pub mutant: Option<Mutant>,
}

impl Slots {
    /// The configuration CI checks: two slots, five connections, enough for
    /// a refusal at accept after a refusal in a handshake, and for a freed
    /// slot to be taken again.
    pub fn small() -> Slots {
        Slots {
            limit: 2,
            accepts: 5,
            mutant: None,
        }
    }

    /// These bounds, with the coordinator carrying `mutant`.
    pub fn with_mutant(self, mutant: Option<Mutant>) -> Slots {
        Slots { mutant, ..self }
    }
}

/// Where an accepted connection is, as the shell sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Handshake,
    Open,
}

/// One state of a term's connections.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotState {
    pub coordinator: Coordinator,
    /// The connections the shell serves: accepted, and not refused or gone.
    pub links: BTreeMap<ConnectionId, Phase>,
    /// Connections accepted so far, which is also the next one's number.
    pub accepted: u64,
    /// Every connection refused, at accept or in its handshake.
    pub refused: BTreeSet<ConnectionId>,
    /// How many of them were refused in their handshake.
    pub handshake_refusals: u64,
    /// Whether a connection was admitted that would have found every slot
    /// held had the refusals in handshakes kept theirs.
    pub freed_slot_taken: bool,
    /// What the last step showed.
    pub last: SlotFacts,
}

/// What one step showed; reset before every step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotFacts {
    /// A connection was refused at accept.
    pub refused_at_accept: bool,
    /// A connection was admitted with every slot held, or refused at accept
    /// with one free.
    pub admission_wrong: bool,
}

/// What the shell does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotAction {
    /// A connection is accepted.
    Accept,
    /// The shell refuses a connection in its handshake.
    Refuse(ConnectionId),
    /// The peer closes a connection before its hello.
    Leave(ConnectionId),
    /// A connection's handshake succeeds.
    Open(ConnectionId),
    /// An open connection closes.
    Close(ConnectionId),
}

impl Model for Slots {
    type State = SlotState;
    type Action = SlotAction;

    fn init_states(&self) -> Vec<SlotState> {
        let mut coordinator = Coordinator::new(Epoch::FIRST, Term::First)
            .with_connection_limit(self.limit)
            .with_mutant(self.mutant);
        let began = coordinator.step(Event::TermBegan);
        debug_assert!(began.is_empty());
        vec![SlotState {
            coordinator,
            links: BTreeMap::new(),
            accepted: 0,
            refused: BTreeSet::new(),
            handshake_refusals: 0,
            freed_slot_taken: false,
            last: SlotFacts::default(),
        }]
    }

    fn actions(&self, state: &SlotState, actions: &mut Vec<SlotAction>) {
        if state.accepted < u64::from(self.accepts) {
            actions.push(SlotAction::Accept);
        }
        for (&connection, phase) in &state.links {
            match phase {
                Phase::Handshake => actions.extend([
                    SlotAction::Refuse(connection),
                    SlotAction::Leave(connection),
                    SlotAction::Open(connection),
                ]),
                Phase::Open => actions.push(SlotAction::Close(connection)),
            }
        }
    }

    fn next_state(&self, state: &SlotState, action: SlotAction) -> Option<SlotState> {
        let mut next = state.clone();
        next.last = SlotFacts::default();
        match action {
            SlotAction::Accept => {
                let connection = ConnectionId(next.accepted);
                next.accepted += 1;
                let free = next.links.len() < self.limit;
                let effects = next
                    .coordinator
                    .step(Event::ConnectionAccepted { connection });
                let refused = effects.iter().any(|effect| {
                    *effect
                        == Effect::Close {
                            connection,
                            reason: CloseReason::TooManyConnections,
                        }
                });
                next.last.admission_wrong = refused == free;
                if refused {
                    next.last.refused_at_accept = true;
                    next.refused.insert(connection);
                } else {
                    // Had refusals kept their slots, every one would be
                    // held now.
                    let held = state.links.len() as u64 + state.handshake_refusals;
                    next.freed_slot_taken |= held >= self.limit as u64;
                    next.links.insert(connection, Phase::Handshake);
                }
            }
            SlotAction::Refuse(connection) => {
                next.links.remove(&connection);
                next.refused.insert(connection);
                next.handshake_refusals += 1;
                next.coordinator
                    .step(Event::ConnectionRefused { connection });
            }
            SlotAction::Leave(connection) | SlotAction::Close(connection) => {
                next.links.remove(&connection);
                next.coordinator
                    .step(Event::ConnectionClosed { connection });
            }
            SlotAction::Open(connection) => {
                next.links.insert(connection, Phase::Open);
                next.coordinator.step(Event::ConnectionOpened {
                    connection,
                    relay: None,
                });
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Slots>::always(REFUSED_HOLDS_NO_SLOT, |_, state: &SlotState| {
                state.refused.iter().all(|connection| {
                    !state.coordinator.in_handshake(*connection)
                        && !state.coordinator.is_open(*connection)
                })
            }),
            Property::<Slots>::always(ADMITTED_WHEN_FREE, |_, state: &SlotState| {
                !state.last.admission_wrong
            }),
            Property::<Slots>::always(REFUSALS_COUNTED, |_, state: &SlotState| {
                state.coordinator.counters().connections_refused == state.refused.len() as u64
            }),
            Property::<Slots>::sometimes(REFUSED_AT_ACCEPT, |_, state: &SlotState| {
                state.last.refused_at_accept
            }),
            Property::<Slots>::sometimes(FREED_SLOT_TAKEN, |_, state: &SlotState| {
                state.freed_slot_taken
            }),
        ]
    }
}
