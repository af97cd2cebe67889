//! Deliberately wrong variants of the connector (SPEC.md §12.3), so that the
//! connector's model can show that it catches each of them. The same pattern
//! as the coordinator's (`coordinator/mutant.rs`, whose header says why):
//! only a build with `--cfg single_flight_mutants` makes them reachable
//! (`Connector::with_mutant`), a shipped build's `Seeded` takes no bytes and
//! every hook is its shipped value, and each hook in connector.rs is one call
//! of `Connector::hook` whose result is never combined with an operator.

use super::connector::Connector;

/// One seeded bug of the connector. Each names the rule of SPEC.md it
/// breaks, and the shell bug of issue 27 it brings back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    not(single_flight_mutants),
    allow(unreachable_pub, reason = "public only where the model re-exports it")
)]
pub enum Mutant {
    /// §14.3: a client whose coordinator's term is over leaves it at once,
    /// dropping the answers already on the way (a landed line in its socket
    /// buffer).
    LeavesGoneCoordinatorAtOnce,
    /// §10.1, §14.3: after an attempt that missed or failed, the next one
    /// comes on whatever wakes the process next, not a pause later: with
    /// the election's store down, a busy loop of reads.
    RetriesOnEveryWake,
}

#[cfg(single_flight_mutants)]
impl Mutant {
    /// Every seeded bug of the connector, in the order declared.
    pub const ALL: [Mutant; 2] = [
        Mutant::LeavesGoneCoordinatorAtOnce,
        Mutant::RetriesOnEveryWake,
    ];
}

/// The seeded bug that a connector carries, if any.
pub(super) type Seeded = crate::seeded::Seeded<Mutant>;

#[cfg(single_flight_mutants)]
impl Connector {
    /// This connector with one seeded bug (SPEC.md §12.3).
    pub fn with_mutant(mut self, mutant: Option<Mutant>) -> Connector {
        self.seeded = Seeded::new(mutant);
        self
    }
}

impl Connector {
    /// A hook of the seeded bugs: `shipped`, or `seeded` in a connector
    /// that carries `bug`.
    #[inline(always)]
    pub(super) fn hook<T>(&self, bug: Mutant, shipped: T, seeded: T) -> T {
        self.seeded.hook(bug, shipped, seeded)
    }
}

/// The shipped configuration: every build but the model's.
#[cfg(all(test, not(single_flight_mutants)))]
mod tests {
    use super::*;

    /// A shipped connector carries no seeded bug (SPEC.md §12.3).
    #[test]
    fn a_shipped_build_carries_no_seeded_bug() {
        assert_eq!(std::mem::size_of::<Seeded>(), 0);
        let connector = Connector::new();
        assert!(!connector.hook(Mutant::RetriesOnEveryWake, false, true));
        assert_eq!(connector.hook(Mutant::LeavesGoneCoordinatorAtOnce, 2, 0), 2);
    }
}
