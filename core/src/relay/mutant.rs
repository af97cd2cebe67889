//! Deliberately wrong variants of the relay (SPEC.md §12.3, §18), so that
//! the model of the host tier can show that it catches each of them. Only a
//! build with `--cfg single_flight_mutants` makes them reachable; why a
//! `cfg`, and why each hook is a plain call: `coordinator/mutant.rs`'s
//! header.

use super::machine::Relay;

/// One seeded bug of the relay. Each names the rule of SPEC.md it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    not(single_flight_mutants),
    allow(unreachable_pub, reason = "public only where the model re-exports it")
)]
pub enum Mutant {
    /// §18.3, "Land": the leader's land is acknowledged, and its joiners
    /// answered, as soon as it goes upstream, before the cluster's
    /// coordinator acknowledged it: an ack that the host coordinator's
    /// death can still make a lie.
    AcksBeforeUpstream,
    /// §18.3, "Unavailable": a failed attempt to reach the cluster also
    /// ends the groups of leaders' `reassert`s, whose work goes on and whose
    /// flight may still come back.
    UnavailableEndsReasserts,
}

#[cfg(single_flight_mutants)]
impl Mutant {
    /// Every seeded bug of the relay, in the order declared.
    pub const ALL: [Mutant; 2] = [Mutant::AcksBeforeUpstream, Mutant::UnavailableEndsReasserts];
}

/// The seeded bug that a relay carries, if any.
pub(super) type Seeded = crate::seeded::Seeded<Mutant>;

#[cfg(single_flight_mutants)]
impl Relay {
    /// This relay with one seeded bug (SPEC.md §12.3).
    pub fn with_mutant(mut self, mutant: Option<Mutant>) -> Relay {
        self.seeded = Seeded::new(mutant);
        self
    }
}

impl Relay {
    /// A hook of the seeded bugs: `shipped`, or `seeded` in a relay that
    /// carries `bug`.
    #[inline(always)]
    pub(super) fn hook<T>(&self, bug: Mutant, shipped: T, seeded: T) -> T {
        self.seeded.hook(bug, shipped, seeded)
    }
}

/// The shipped configuration: every build but the model's.
#[cfg(all(test, not(single_flight_mutants)))]
mod tests {
    use super::*;

    /// A shipped relay carries no seeded bug (SPEC.md §12.3).
    #[test]
    fn a_shipped_build_carries_no_seeded_bug() {
        assert_eq!(std::mem::size_of::<Seeded>(), 0);
        assert!(!Relay::new().hook(Mutant::AcksBeforeUpstream, false, true));
    }
}
