//! The wait-for graph of nested flights (SPEC.md §17.2): which flight's work
//! waits for which flight, and the search for a cycle that a new call would
//! close.
//!
//! A party whose `run` (or `reassert`) named a `parent` is an edge from the
//! parent's flight to the flight the party leads, joins or waits for. The
//! graph keeps the edges by parent token, not by the parent's key: a parent
//! that is not in progress (it landed, it is of another directory, or its
//! reassert has not arrived yet after a failover) is simply never reached,
//! and an edge whose parent comes back in a grace window counts from then
//! on without being written again.

use std::collections::BTreeMap;

use super::io::ConnectionId;
use crate::protocol::limits::MAX_CYCLE_KEYS;
use crate::protocol::{FencingToken, Key, RequestId};

/// Parties with a parent that one term keeps in its graph at once (SPEC.md
/// §17.2). A run whose parent would make more is treated as a run without
/// one: it is neither checked nor remembered, so it waits as it would without
/// the extension, and no call is ever refused for the bound. Each edge costs a
/// few hundred bytes at most (a key is shared, not copied); 65 536 is the
/// number of open requests one connection may have (SPEC.md §8.9), far above
/// the nested calls of any real fleet, and keeps a hostile client from growing
/// the graph with the connections it may open.
pub const MAX_WAIT_EDGES: usize = 65_536;

/// Edges one search may examine (SPEC.md §17.2). A search visits each key
/// once and examines each edge out of it once, so without this bound one run
/// could cost a walk of the whole graph; a client that builds a wide graph
/// and then sends runs with parents would make every one of them that
/// expensive. 4 096 edges cost microseconds, as decoding a line does, and
/// cover every graph people build by nesting calls (a fan-out of thousands
/// under one flight is not nesting); a search that runs out finds no cycle,
/// and the run waits as without the extension: never a false refusal.
pub const MAX_SEARCH_EDGES: usize = 4_096;

/// One request of one connection, as the coordinator names it.
pub(super) type PartyRef = (ConnectionId, RequestId);

/// What a party with a parent waits for: its key's flight, or, for a rejoin
/// that waits in a grace window, that key's flight only while it is the one
/// the rejoin names (another flight of the key is not the rejoin's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Target {
    key: Key,
    only: Option<FencingToken>,
}

/// The edges of the wait-for graph (SPEC.md §17.2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct WaitFor {
    /// Each party with a parent, and that parent.
    parents: BTreeMap<PartyRef, FencingToken>,
    /// For each parent token, the parties its work made and what each waits
    /// for.
    children: BTreeMap<FencingToken, BTreeMap<PartyRef, Target>>,
}

impl WaitFor {
    /// Whether no party has a parent: the cost of the extension to a
    /// directory that does not use it is this check.
    pub(super) fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// Records that `party`, made by the work of the flight `parent`, waits
    /// for the flight of `key` (`only`: that flight only while it is
    /// `only`). `false`, recording nothing, when the graph is full
    /// ([`MAX_WAIT_EDGES`]).
    pub(super) fn insert(
        &mut self,
        party: PartyRef,
        parent: FencingToken,
        key: Key,
        only: Option<FencingToken>,
    ) -> bool {
        if self.parents.len() >= MAX_WAIT_EDGES {
            return false;
        }
        self.remove(&party);
        self.parents.insert(party.clone(), parent);
        self.children
            .entry(parent)
            .or_default()
            .insert(party, Target { key, only });
        true
    }

    /// The parent of `party`, if it has one in the graph.
    pub(super) fn parent(&self, party: &PartyRef) -> Option<FencingToken> {
        self.parents.get(party).copied()
    }

    /// Forgets `party`'s edge: it was answered for good or withdrawn.
    pub(super) fn remove(&mut self, party: &PartyRef) {
        let Some(parent) = self.parents.remove(party) else {
            return;
        };
        if let Some(children) = self.children.get_mut(&parent) {
            children.remove(party);
            if children.is_empty() {
                self.children.remove(&parent);
            }
        }
    }

    /// The cycle that a party of `key`, made by the work of the flight
    /// `parent`, closes by waiting for `key`'s flight `start` (the token of
    /// the flight in progress it would wait for, if any): the keys from the
    /// parent's to the last before it, each waiting for the next. `flight`
    /// gives the token of a key's flight in progress.
    ///
    /// A breadth-first search from `key`, so the cycle named is a shortest
    /// one, bounded by [`MAX_CYCLE_KEYS`] flights and [`MAX_SEARCH_EDGES`]
    /// edges; past either it finds none.
    pub(super) fn cycle(
        &self,
        key: &Key,
        start: Option<FencingToken>,
        parent: FencingToken,
        flight: impl Fn(&Key) -> Option<FencingToken>,
    ) -> Option<Vec<Key>> {
        let start = start?;
        if start == parent {
            // The flight's work called its own key (a cycle of one).
            return Some(vec![key.clone()]);
        }
        // Each key reached, with the key it was reached from.
        let mut reached: BTreeMap<Key, Option<Key>> = BTreeMap::new();
        reached.insert(key.clone(), None);
        let mut level = vec![(key.clone(), start)];
        let mut examined = 0;
        for _ in 1..MAX_CYCLE_KEYS {
            let mut next = Vec::new();
            for (from, token) in &level {
                let Some(children) = self.children.get(token) else {
                    continue;
                };
                for target in children.values() {
                    examined += 1;
                    if examined > MAX_SEARCH_EDGES {
                        return None;
                    }
                    let Some(to) = flight(&target.key) else {
                        continue;
                    };
                    if target.only.is_some_and(|only| only != to)
                        || reached.contains_key(&target.key)
                    {
                        continue;
                    }
                    reached.insert(target.key.clone(), Some(from.clone()));
                    if to == parent {
                        return Some(path(&reached, &target.key));
                    }
                    next.push((target.key.clone(), to));
                }
            }
            if next.is_empty() {
                return None;
            }
            level = next;
        }
        None
    }

    /// The parties whose parent is one of `tokens`, for tests of the graph's
    /// upkeep.
    #[cfg(test)]
    pub(super) fn children_of(&self, tokens: &[FencingToken]) -> usize {
        tokens
            .iter()
            .filter_map(|token| self.children.get(token))
            .map(BTreeMap::len)
            .sum()
    }

    /// How many parties have a parent.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.parents.len()
    }
}

/// The cycle through `last`, the parent's key, as SPEC.md §17.1 names it:
/// the parent's key first, then the called key and each key after it up to
/// the one before the parent's. `reached` maps each key to the key it was
/// reached from; the called key was reached from none.
fn path(reached: &BTreeMap<Key, Option<Key>>, last: &Key) -> Vec<Key> {
    let mut keys = vec![last.clone()];
    let mut at = reached.get(last).cloned().flatten();
    while let Some(key) = at {
        at = reached.get(&key).cloned().flatten();
        keys.push(key);
    }
    // `keys` runs from the parent's key back to the called key; the cycle
    // reads the parent's key, then forwards from the called key.
    keys[1..].reverse();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Epoch;

    fn token(sequence: u32) -> FencingToken {
        FencingToken::new(Epoch::FIRST, sequence).unwrap()
    }

    fn key(text: &str) -> Key {
        Key::new(text).unwrap()
    }

    fn party(n: u64) -> PartyRef {
        (ConnectionId(n), RequestId::new("1").unwrap())
    }

    /// Flights A:1, B:2, C:3 and D:4 in progress.
    fn flights(k: &Key) -> Option<FencingToken> {
        match k.as_str() {
            "A" => Some(token(1)),
            "B" => Some(token(2)),
            "C" => Some(token(3)),
            "D" => Some(token(4)),
            _ => None,
        }
    }

    /// §17.2: the named cycle starts with the parent's key, then the called
    /// key, in the order each waits for the next.
    #[test]
    fn a_cycle_is_named_from_the_parent() {
        let mut graph = WaitFor::default();
        // A's work waits for B, B's for C.
        graph.insert(party(1), token(1), key("B"), None);
        graph.insert(party(2), token(2), key("C"), None);
        // C's work calls A: C → A → B → C.
        let cycle = graph.cycle(&key("A"), Some(token(1)), token(3), flights);
        assert_eq!(cycle, Some(vec![key("C"), key("A"), key("B")]));
        // A's work calls A.
        let cycle = graph.cycle(&key("A"), Some(token(1)), token(1), flights);
        assert_eq!(cycle, Some(vec![key("A")]));
    }

    /// §17.2: a diamond is no cycle, and a parent that is not in progress
    /// is never reached.
    #[test]
    fn a_diamond_is_no_cycle() {
        let mut graph = WaitFor::default();
        graph.insert(party(1), token(1), key("B"), None);
        graph.insert(party(2), token(1), key("C"), None);
        graph.insert(party(3), token(2), key("D"), None);
        graph.insert(party(4), token(3), key("D"), None);
        assert_eq!(
            graph.cycle(&key("D"), Some(token(4)), token(2), flights),
            None
        );
        assert_eq!(
            graph.cycle(&key("B"), Some(token(2)), token(9), flights),
            None
        );
        assert_eq!(graph.cycle(&key("E"), None, token(1), flights), None);
        graph.remove(&party(3));
        graph.remove(&party(4));
        assert_eq!(graph.children_of(&[token(2), token(3)]), 0);
        assert_eq!(graph.len(), 2);
    }

    /// §17.2: a rejoin's edge counts only while its key's flight is the one
    /// it names.
    #[test]
    fn a_rejoin_waits_for_its_own_flight_only() {
        let mut graph = WaitFor::default();
        graph.insert(party(1), token(1), key("B"), Some(token(7)));
        assert_eq!(
            graph.cycle(&key("A"), Some(token(1)), token(2), flights),
            None
        );
        graph.insert(party(1), token(1), key("B"), Some(token(2)));
        assert!(
            graph
                .cycle(&key("A"), Some(token(1)), token(2), flights)
                .is_some()
        );
    }

    /// §17.2: a cycle longer than MAX_CYCLE_KEYS is not found, one of that
    /// length is; and a search stops after MAX_SEARCH_EDGES edges.
    #[test]
    fn the_search_is_bounded() {
        let chain = |length: u32| {
            let keys: Vec<Key> = (1..=length).map(|n| key(&format!("k{n}"))).collect();
            let mut graph = WaitFor::default();
            // k1 → k2 → … → k<length>, each the flight of token n.
            for n in 1..length {
                graph.insert(
                    party(u64::from(n)),
                    token(n),
                    keys[n as usize].clone(),
                    None,
                );
            }
            let of = move |k: &Key| {
                k.as_str()[1..]
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n <= length)
                    .map(token)
            };
            // The last key's work calls k1.
            graph.cycle(&keys[0], Some(token(1)), token(length), of)
        };
        let at_limit = MAX_CYCLE_KEYS as u32;
        assert_eq!(chain(at_limit).map(|keys| keys.len()), Some(MAX_CYCLE_KEYS));
        assert_eq!(chain(at_limit + 1), None);

        let mut wide = WaitFor::default();
        for n in 0..=MAX_SEARCH_EDGES as u64 {
            wide.insert(party(n + 10), token(1), key("E"), None);
        }
        wide.insert(party(u64::MAX), token(1), key("B"), None);
        // A's work waits for E (many times over) and for B; B's work calls
        // A. The edge to B comes after the bound in the search's order.
        assert_eq!(
            wide.cycle(&key("A"), Some(token(1)), token(2), flights),
            None
        );
        // One edge to E fewer: the edge to B is the last that the bound
        // lets a search examine, and the cycle is found.
        let mut full = WaitFor::default();
        for n in 0..MAX_SEARCH_EDGES as u64 - 1 {
            full.insert(party(n + 10), token(1), key("E"), None);
        }
        full.insert(party(u64::MAX), token(1), key("B"), None);
        assert_eq!(
            full.cycle(&key("A"), Some(token(1)), token(2), flights)
                .map(|keys| keys.len()),
            Some(2)
        );
    }

    /// §17.2: past MAX_WAIT_EDGES a party's parent is not recorded.
    #[test]
    fn the_graph_is_bounded() {
        let mut graph = WaitFor::default();
        for n in 0..MAX_WAIT_EDGES as u64 {
            assert!(graph.insert(party(n), token(1), key("B"), None));
        }
        assert!(!graph.insert(party(u64::MAX), token(1), key("B"), None));
        assert_eq!(graph.len(), MAX_WAIT_EDGES);
    }
}
