//! When a term served while it is needed ends by itself (SPEC.md §16.4): the
//! decision of the shell's periodic check, as a pure machine beside the
//! [`Coordinator`]. The shell tells it what happened and how long the term
//! has been served; it answers whether the term ends. A stop asked by the
//! process is the coordinator's own decision ([`Event::StopRequested`],
//! §10.4), and a term that is lost (its lock file, its lease, its tokens)
//! ends at once and is not decided here.
//!
//! [`Coordinator`]: super::Coordinator
//! [`Event::StopRequested`]: super::Event::StopRequested

use std::time::Duration;

/// How long a term served only while it is needed waits for its first
/// connection before it counts as idle: the process that started it
/// connects as soon as it sees it coordinate, a poll interval and a
/// handshake later, which this leaves wide room for on a loaded machine.
/// Past it, a term nobody connected to ends.
pub const FIRST_CONNECTION_PATIENCE: Duration = Duration::from_secs(5);

/// How long a term is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// Until it is stopped or lost.
    UntilStopped,
    /// Also ends, cleanly, once it is idle (SPEC.md §16.4): no connection,
    /// no flight, no grace window and no value kept for a reuse window,
    /// after its first connection or [`FIRST_CONNECTION_PATIENCE`].
    WhileNeeded,
}

/// What may still need the term at a check, as the shell and the
/// coordinator know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needed {
    /// The coordinator's grace window is open (SPEC.md §8.4).
    pub in_grace: bool,
    /// Connections open or in their handshake.
    pub connections: usize,
    /// A flight is in progress.
    pub flights: bool,
    /// Values kept for a reuse window, counted by their timers (a timer
    /// outlives a value forgotten early, so this errs on staying).
    pub kept: usize,
}

/// The ending of one served term by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    lifetime: Lifetime,
    /// A connection has been accepted in this term.
    connected: bool,
}

impl Ending {
    /// A term that has just begun.
    pub fn new(lifetime: Lifetime) -> Ending {
        Ending {
            lifetime,
            connected: false,
        }
    }

    /// A connection was accepted.
    pub fn connection_accepted(&mut self) {
        self.connected = true;
    }

    /// At the shell's periodic check, `served` after the term began: `true`
    /// when it ends now, which a term served while needed does once nobody
    /// needs it (§16.4). Checked on the
    /// period rather than after every event, so that a client that leaves and
    /// comes straight back finds the term still there.
    pub fn ends_at_check(&self, served: Duration, needed: &Needed) -> bool {
        let waited = self.connected || served >= FIRST_CONNECTION_PATIENCE;
        let idle = waited
            && !needed.in_grace
            && needed.connections == 0
            && !needed.flights
            && needed.kept == 0;
        self.lifetime == Lifetime::WhileNeeded && idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Needed = Needed {
        in_grace: false,
        connections: 0,
        flights: false,
        kept: 0,
    };
    const SOON: Duration = Duration::from_millis(1);

    #[test]
    fn a_term_served_until_stopped_never_ends_by_itself() {
        let mut ending = Ending::new(Lifetime::UntilStopped);
        ending.connection_accepted();
        assert!(!ending.ends_at_check(Duration::from_secs(3600), &IDLE));
    }

    #[test]
    fn s16_4_a_term_served_while_needed_ends_when_its_last_client_is_gone() {
        let mut ending = Ending::new(Lifetime::WhileNeeded);
        ending.connection_accepted();
        let one = Needed {
            connections: 1,
            ..IDLE
        };
        assert!(!ending.ends_at_check(SOON, &one));
        assert!(ending.ends_at_check(SOON, &IDLE));
    }

    #[test]
    fn s16_4_a_flight_a_kept_value_or_the_grace_window_keeps_it() {
        let mut ending = Ending::new(Lifetime::WhileNeeded);
        ending.connection_accepted();
        for needed in [
            Needed {
                flights: true,
                ..IDLE
            },
            Needed { kept: 1, ..IDLE },
            Needed {
                in_grace: true,
                ..IDLE
            },
        ] {
            assert!(!ending.ends_at_check(SOON, &needed), "{needed:?}");
        }
    }

    #[test]
    fn s16_4_the_first_client_has_its_patience_to_connect() {
        let ending = Ending::new(Lifetime::WhileNeeded);
        assert!(!ending.ends_at_check(FIRST_CONNECTION_PATIENCE - SOON, &IDLE));
        assert!(ending.ends_at_check(FIRST_CONNECTION_PATIENCE, &IDLE));
    }
}
