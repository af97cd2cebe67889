//! Exhaustive checks of the shards' model (SPEC.md §19, §12.9): every
//! property holds in every state the bounds allow, every `sometimes` one is
//! reached, and the routing's seeded bug is caught.

use single_flight_core::protocol::Mutant;
use single_flight_model::check::{Narrated, THREADS, exhaust};
use single_flight_model::shards::{self, Shards};
use stateright::{Checker, HasDiscoveries, Model};

/// Unique states of the configuration. A change means the explored space
/// changed (a machine or the model gained or lost a behaviour): find out
/// why before updating the number.
const TWO_SHARDS_UNIQUE_STATES: usize = 1_488_895;

/// Checks `shards` to the end; returns the unique states, and fails with the
/// path of every property broken or never reached.
fn keeps_every_property(shards: Shards) -> usize {
    exhaust(&shards).unwrap_or_else(|problems| panic!("{problems}"))
}

#[test]
fn two_shards_through_a_failover_of_one_with_nested_calls_across_them() {
    let states = keeps_every_property(Shards::two_shards());
    assert_eq!(states, TWO_SHARDS_UNIQUE_STATES);
}

/// SPEC.md §19.5: the seeded routing sends a work's flight as the parent
/// of its call of the other shard, and both properties about parents catch
/// it: the send itself, and, further on, a refusal. Tokens of two shards may
/// be equal (§19.3), so the other shard's coordinator takes the token for
/// one of its own flights: for instance, `b`'s work
/// (shard 0, 1:1) calls `a`, whose flight is 1:1 of shard 1, whose work
/// calls `b` back with its parent 1:1, which shard 0 reads as `b`'s own
/// flight and refuses as "`b` waits for itself".
#[test]
fn a_routing_that_sends_a_parent_to_another_shard_is_caught() {
    for mutant in Mutant::ALL {
        // Each seeded bug of the protocol's decisions, and the properties
        // that must catch it: a new one does not compile until it has its.
        let caught_by = match mutant {
            Mutant::ParentAcrossShards => [shards::PARENT_OF_ITS_SHARD, shards::NO_FALSE_CYCLE],
        };
        let shards = Shards::two_shards().with_mutant(Some(mutant));
        let checker = shards
            .clone()
            .checker()
            .threads(THREADS)
            .finish_when(HasDiscoveries::AllOf(caught_by.into_iter().collect()))
            .spawn_dfs()
            .join();
        for name in caught_by {
            let path = checker
                .discovery(name)
                .unwrap_or_else(|| panic!("{mutant:?} is not caught by {name:?}"));
            eprintln!(
                "{mutant:?} caught by {name:?}:\n{}",
                shards.narrate(&path.into_actions())
            );
        }
    }
}
