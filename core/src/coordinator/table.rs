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

impl<K: Ord, V> Table<K, V> {
    /// The entries in key order: for every walk whose order the coordinator
    /// shows (the order of its effects, `status`, `flights()`).
    pub(super) fn sorted(&self) -> Vec<(&K, &V)> {
        let mut entries: Vec<_> = self.0.iter().collect();
        entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
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
