//! The hash tables of the coordinator's hot path: flights by key, parties by
//! connection and id (BENCHMARKS.md, "`step` with hash tables").
//!
//! Ordered maps compared keys and ids byte by byte several times per event;
//! a hash table hashes each once. Two things an ordered map gave for free are
//! kept by hand here: a hash of the contents that does not depend on the
//! order of insertion (the model checker stores coordinators by their hash,
//! model/src/state.rs, and two equal states must stay one state), and a
//! deterministic order wherever the coordinator walks a table, which its
//! callers sort (`Table::sorted`).

// The one home of a hash map in the core (core/clippy.toml): `Table` is what
// the lint asks for, `Hash + Eq` and walked in key order.
#![allow(clippy::disallowed_types)]

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// A hash map whose `Hash` is that of its entries in key order, as an ordered
/// map's is; its equality is the map's, which ignores order already.
#[derive(Clone, Debug)]
pub(super) struct Table<K, V>(HashMap<K, V, BuildHasherDefault<Fx>>);

impl<K: Eq + Hash, V: PartialEq> PartialEq for Table<K, V> {
    fn eq(&self, other: &Table<K, V>) -> bool {
        self.0 == other.0
    }
}

impl<K: Eq + Hash, V: Eq> Eq for Table<K, V> {}

impl<K, V> Default for Table<K, V> {
    fn default() -> Table<K, V> {
        Table(HashMap::default())
    }
}

/// The capacity under which a table is not shrunk: a few kilobytes at most
/// (an entry is 50 to 100 bytes), so that a connection or a term that once
/// had a burst keeps no more than that, while a table that stays small never
/// pays for a rehash.
const MIN_SHRINK_CAPACITY: usize = 32;

impl<K: Eq + Hash, V> Table<K, V> {
    /// Removes `key`'s entry, as the map's `remove` does (this method is
    /// found before the map's), and gives memory back once the table holds
    /// under a quarter of its capacity. A hash table keeps its largest size
    /// otherwise: a burst of 100 000 flights would keep 22 MB for the rest of
    /// the term (BENCHMARKS.md), and a connection that once had its 65 536
    /// open requests several more. Shrinking to twice the entries left
    /// rehashes them, which the removals since the last resize pay for.
    pub(super) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.0.remove(key);
        let capacity = self.0.capacity();
        if capacity > MIN_SHRINK_CAPACITY && self.0.len() < capacity / 4 {
            self.0.shrink_to(self.0.len() * 2);
        }
        removed
    }
}

impl<K: Ord, V> Table<K, V> {
    /// The entries in key order: for every walk whose order the coordinator
    /// shows (the order of its effects, `status`, `flights()`).
    pub(super) fn sorted(&self) -> Vec<(&K, &V)> {
        let mut entries: Vec<_> = self.0.iter().collect();
        entries.sort_unstable_by_key(|(key, _)| *key);
        entries
    }

    /// The entries in key order, taken out of the table.
    pub(super) fn into_sorted(self) -> Vec<(K, V)> {
        let mut entries: Vec<_> = self.0.into_iter().collect();
        entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        entries
    }
}

impl<K: Ord + Hash, V: Hash> Hash for Table<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for entry in self.sorted() {
            entry.hash(state);
        }
    }
}

impl<K, V> Deref for Table<K, V> {
    type Target = HashMap<K, V, BuildHasherDefault<Fx>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<K, V> DerefMut for Table<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The multiply-and-rotate hash of the Rust compiler's tables ("FxHash"): a
/// few instructions per 8 bytes, where the standard library's SipHash costs
/// about as much as the ordered map's comparisons it replaces. It has no
/// random seed, so the core stays deterministic (no randomness, SPEC.md §8.1).
/// It does not resist keys chosen to collide; the keys and ids come from the
/// directory's own processes or the cluster's authenticated hosts (SPEC.md
/// §11.2), and each connection's ids are bounded
/// ([`MAX_OPEN_REQUESTS_PER_CONNECTION`](super::MAX_OPEN_REQUESTS_PER_CONNECTION)).
#[derive(Clone, Copy, Default)]
pub(super) struct Fx(u64);

/// The multiplier of FxHash: an odd constant with well-mixed bits.
const FX_MULTIPLIER: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX_MULTIPLIER);
    }
}

impl Hasher for Fx {
    fn write(&mut self, mut bytes: &[u8]) {
        while let Some((word, rest)) = bytes.split_first_chunk::<8>() {
            self.add(u64::from_le_bytes(*word));
            bytes = rest;
        }
        if let Some((word, rest)) = bytes.split_first_chunk::<4>() {
            self.add(u64::from(u32::from_le_bytes(*word)));
            bytes = rest;
        }
        for &byte in bytes {
            self.add(u64::from(byte));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn hash_of(table: &Table<u64, &str>) -> u64 {
        BuildHasherDefault::<Fx>::default().hash_one(table)
    }

    /// The model stores coordinators by their hash: the same entries must
    /// hash alike whatever order they came in, and even after the table grew
    /// and shrank.
    #[test]
    fn the_hash_is_the_contents_whatever_the_order() {
        let mut forward = Table::default();
        let mut backward = Table::default();
        for n in 0..100 {
            forward.insert(n, "x");
            backward.insert(99 - n, "x");
        }
        for n in 10..100 {
            backward.remove(&n);
        }
        let mut small = Table::default();
        for n in (0..10).rev() {
            small.insert(n, "x");
        }
        assert_eq!(hash_of(&forward), hash_of(&backward_with_all(backward)));
        assert_eq!(hash_of(&small), {
            let mut again = Table::default();
            for n in 0..10 {
                again.insert(n, "x");
            }
            hash_of(&again)
        });
        assert_ne!(hash_of(&small), hash_of(&forward));
        assert_ne!(small, forward, "tables of other entries are not equal");
        let mut again = Table::default();
        for n in (0..100).rev() {
            again.insert(n, "x");
        }
        assert_eq!(forward, again, "tables of the same entries are equal");
        assert_eq!(
            forward.sorted().first().map(|(key, _)| **key),
            Some(0),
            "walks are in key order"
        );
    }

    /// A table shrunk as its entries go keeps room for twice those left, so
    /// that a few insertions after a shrink do not grow it again at once;
    /// and it never holds more than four times its entries for long.
    #[test]
    fn a_shrunk_table_keeps_room_for_twice_its_entries() {
        let mut table = Table::default();
        for n in 0..10_000u64 {
            table.insert(n, "x");
        }
        let mut shrinks = 0;
        // In a scattered order, as flights end: the removals leave
        // tombstones, and the table's capacity is not a power of two's.
        for n in 0..10_000u64 {
            let before = table.capacity();
            table.remove(&(n * 7_919 % 10_000));
            if table.capacity() < before {
                shrinks += 1;
                assert!(
                    table.capacity() >= 2 * table.len(),
                    "{} entries in {} slots",
                    table.len(),
                    table.capacity()
                );
            }
        }
        assert!(shrinks > 1, "shrunk {shrinks} times");
    }

    /// The table's hasher reads every byte of a key: keys that differ in
    /// any byte, at any length, hash apart (a hasher that ignored some
    /// would put them all in one bucket, and every lookup would walk it).
    #[test]
    fn keys_that_differ_hash_apart() {
        let hash = |bytes: &[u8]| {
            let mut hasher = Fx::default();
            hasher.write(bytes);
            hasher.finish()
        };
        let keys: Vec<Vec<u8>> = (0..=16)
            .flat_map(|length| {
                (0..length).map(move |at| {
                    let mut key = vec![b'k'; length];
                    key[at] = b'j';
                    key
                })
            })
            .collect();
        let hashes: std::collections::BTreeSet<u64> = keys.iter().map(|key| hash(key)).collect();
        assert_eq!(hashes.len(), keys.len());
    }

    /// A table that never held more than `MIN_SHRINK_CAPACITY` entries keeps
    /// its capacity as they go: it never pays for a rehash.
    #[test]
    fn a_small_table_is_never_shrunk() {
        let mut table = Table::default();
        for n in 0..20u64 {
            table.insert(n, "x");
        }
        let capacity = table.capacity();
        assert!(capacity <= MIN_SHRINK_CAPACITY);
        for n in 0..19u64 {
            table.remove(&n);
        }
        assert_eq!(table.capacity(), capacity);
    }

    fn backward_with_all(mut table: Table<u64, &'static str>) -> Table<u64, &'static str> {
        for n in 10..100 {
            table.insert(n, "x");
        }
        table
    }

    /// After a burst, a table gives its memory back as its entries go.
    #[test]
    fn a_table_shrinks_as_its_entries_go() {
        let mut table = Table::default();
        for n in 0..100_000u64 {
            table.insert(n, "x");
        }
        assert!(table.capacity() >= 100_000);
        for n in 0..100_000u64 {
            table.remove(&n);
        }
        assert!(table.is_empty());
        assert!(
            table.capacity() <= MIN_SHRINK_CAPACITY,
            "an empty table keeps {} slots",
            table.capacity()
        );
    }
}
