//! Deliberately wrong variants of the protocol's own decisions (SPEC.md
//! §12.3), so that the shards' model (§12.9) can show that it catches each
//! of them. The same pattern as the coordinator's (`coordinator/mutant.rs`,
//! whose header says why): only a build with `--cfg single_flight_mutants`
//! makes them reachable (`ShardCount::parent_for_with_mutant`), a shipped
//! build's `Seeded` takes no bytes and every hook is its shipped value, and
//! each hook in shard.rs is one call of `Seeded::hook` whose result is never
//! combined with an operator.

#[cfg(single_flight_mutants)]
use super::{FencingToken, Key, Shard, ShardCount};

/// One seeded bug of the protocol's decisions. Each names the rule of
/// SPEC.md it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    not(single_flight_mutants),
    allow(unreachable_pub, reason = "public only where the model re-exports it")
)]
pub enum Mutant {
    /// §19.5: a call made by a flight's work takes that flight as its
    /// parent whatever the call's shard, so that another shard's
    /// coordinator receives a token of a shard not its own.
    ParentAcrossShards,
}

#[cfg(single_flight_mutants)]
impl Mutant {
    /// Every seeded bug of the protocol's decisions, in the order declared.
    pub const ALL: [Mutant; 1] = [Mutant::ParentAcrossShards];
}

/// The seeded bug that a decision carries, if any.
pub(super) type Seeded = crate::seeded::Seeded<Mutant>;

#[cfg(single_flight_mutants)]
impl ShardCount {
    /// [`ShardCount::parent_for`] with one seeded bug (SPEC.md §12.3), or
    /// none: with `None` it is `parent_for` itself.
    pub fn parent_for_with_mutant(
        self,
        mutant: Option<Mutant>,
        call: &Key,
        parent: Option<(Shard, FencingToken)>,
    ) -> Option<FencingToken> {
        self.route_parent(Seeded::new(mutant), call, parent)
    }
}

/// The shipped configuration: every build but the model's.
#[cfg(all(test, not(single_flight_mutants)))]
mod tests {
    use super::*;

    /// A shipped build carries no seeded bug of the protocol (SPEC.md
    /// §12.3).
    #[test]
    fn a_shipped_build_carries_no_seeded_bug() {
        assert_eq!(std::mem::size_of::<Seeded>(), 0);
        assert!(!Seeded::default().hook(Mutant::ParentAcrossShards, false, true));
    }
}
