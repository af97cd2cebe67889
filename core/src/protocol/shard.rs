//! A key's shard (SPEC.md §19.1): the stable function of a key's bytes that
//! every process of a sharded cluster computes alike, on every platform and
//! in every version, so that two processes never send one key to two
//! shards' coordinators.

use std::fmt;

use super::mutant::{Mutant, Seeded};
use super::{FencingToken, Key};

/// The most shards a cluster can have (SPEC.md §19.1). Every process of a
/// sharded cluster keeps one connection and one client per shard, and every
/// host one host coordinator per shard with its own connection to etcd and
/// to the shard's coordinator, and etcd one lease per shard renewed six
/// times a TTL (§14.2): 64 shards already split a cluster's coordinating
/// work over 64 processes, far more cores than the coordinating work of the
/// largest cluster measured needs (BENCHMARKS.md), at 64 times the per-process
/// cost.
pub const MAX_SHARDS: u32 = 64;

/// How many shards a cluster has: 1 to [`MAX_SHARDS`] (SPEC.md §19.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardCount(u32);

/// A shard count outside 1 to [`MAX_SHARDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardCountError(pub u64);

impl fmt::Display for ShardCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} shards: a cluster has 1 to {MAX_SHARDS} shards (SPEC.md §19.1)",
            self.0
        )
    }
}

impl std::error::Error for ShardCountError {}

impl ShardCount {
    /// One shard: a cluster whose one coordinator decides every key, as
    /// before shards (SPEC.md §19.1).
    pub const ONE: ShardCount = ShardCount(1);

    /// `count` shards, when it is 1 to [`MAX_SHARDS`].
    pub fn new(count: u64) -> Result<ShardCount, ShardCountError> {
        match u32::try_from(count) {
            Ok(count @ 1..=MAX_SHARDS) => Ok(ShardCount(count)),
            _ => Err(ShardCountError(count)),
        }
    }

    /// The number of shards.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Shard `index` of this many, when it is one of them.
    pub fn shard(self, index: u32) -> Option<Shard> {
        (index < self.0).then_some(Shard { index, count: self })
    }

    /// Every shard of the cluster, in order.
    pub fn shards(self) -> impl Iterator<Item = Shard> {
        (0..self.0).map(move |index| Shard { index, count: self })
    }

    /// The shard of `key` (SPEC.md §19.1).
    pub fn of(self, key: &Key) -> Shard {
        self.of_bytes(key.as_str().as_bytes())
    }

    /// The shard of a key given as its UTF-8 bytes (SPEC.md §19.1).
    pub fn of_bytes(self, key: &[u8]) -> Shard {
        let hash = mix(fnv1a(key));
        // The high 64 bits of hash × count: `count` equal ranges of the
        // hash's values, one per shard, with no bias a remainder would have.
        let index = ((u128::from(hash) * u128::from(self.0)) >> 64) as u32;
        Shard { index, count: self }
    }

    /// The parent that a call of `call`'s key sends with its run (SPEC.md
    /// §19.5), when the call is made by the work of the flight `parent`
    /// names (its shard, and its token there; `None` for a call no work
    /// makes): that flight's token when `call` is of the same shard, and
    /// none otherwise. A token names a flight within its shard only
    /// (§19.3), so sent to another shard's coordinator it would name one of
    /// that shard's flights, or none, and could make it refuse a call that
    /// closes no cycle. A parent's shard of another count than `self` is
    /// of another cluster (§17.3), and gives none either.
    pub fn parent_for(
        self,
        call: &Key,
        parent: Option<(Shard, FencingToken)>,
    ) -> Option<FencingToken> {
        self.route_parent(Seeded::default(), call, parent)
    }

    /// [`parent_for`](Self::parent_for), with the seeded bug `seeded`
    /// carries (protocol/mutant.rs).
    pub(super) fn route_parent(
        self,
        seeded: Seeded,
        call: &Key,
        parent: Option<(Shard, FencingToken)>,
    ) -> Option<FencingToken> {
        let (shard, token) = parent?;
        let same_shard = self.of(call) == shard;
        seeded
            .hook(Mutant::ParentAcrossShards, same_shard, true)
            .then_some(token)
    }
}

impl fmt::Display for ShardCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// One shard of a cluster: its index, 0 to `count` − 1, and the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard {
    index: u32,
    count: ShardCount,
}

impl Shard {
    /// The one shard of a cluster of one.
    pub const ONLY: Shard = Shard {
        index: 0,
        count: ShardCount::ONE,
    };

    /// The shard's index, 0 to [`count`](Self::count) − 1.
    pub fn index(self) -> u32 {
        self.index
    }

    /// The cluster's number of shards.
    pub fn count(self) -> ShardCount {
        self.count
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {} of {}", self.index, self.count)
    }
}

/// FNV-1a, 64 bits: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// MurmurHash3's 64-bit finalizer: FNV-1a's high bits depend little on a
/// key's last bytes (`build:1` and `build:2` would share a shard far more
/// often than chance), and this spreads every bit of the hash over all of
/// them.
fn mix(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(count: u64) -> ShardCount {
        ShardCount::new(count).unwrap()
    }

    /// SPEC.md §19.1's test vectors: another implementation must compute
    /// these, and no version of this one may change them.
    #[test]
    fn s19_1_the_test_vectors_of_the_spec() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        for (key, mixed, shards) in VECTORS {
            assert_eq!(mix(fnv1a(key.as_bytes())), *mixed, "{key:?}");
            for (count_of, index) in [2, 4, 8, 64].into_iter().zip(shards) {
                assert_eq!(
                    count(count_of).of_bytes(key.as_bytes()).index(),
                    *index,
                    "{key:?} in {count_of} shards"
                );
            }
        }
    }

    /// Keys, their mixed hash, and their shard in 2, 4, 8 and 64 shards.
    const VECTORS: &[(&str, u64, [u32; 4])] = &[
        ("", 0xefd0_1f60_ba99_2926, [1, 3, 7, 59]),
        ("a", 0x82a2_a958_a9be_ce5b, [1, 2, 4, 32]),
        ("b", 0x6e67_3288_764a_d2d0, [0, 1, 3, 27]),
        ("build:0", 0x2517_6799_7331_020b, [0, 0, 1, 9]),
        ("build:1", 0xd58b_7163_2493_9006, [1, 3, 6, 53]),
        ("build:2", 0xbcc5_af15_cbe7_5bbb, [1, 2, 5, 47]),
        ("fetch:a", 0x2b42_4719_07d1_771c, [0, 0, 1, 10]),
        ("report:2026-11", 0xc9bc_b8c7_0a28_aedc, [1, 3, 6, 50]),
        ("ключ", 0x5905_20d7_1827_5ed5, [0, 1, 2, 22]),
    ];

    #[test]
    fn s19_1_one_shard_takes_every_key_and_shards_are_in_range() {
        for key in ["", "a", "build:1", "\u{10ffff}"] {
            assert_eq!(ShardCount::ONE.of_bytes(key.as_bytes()), Shard::ONLY);
            for shards in 1..=u64::from(MAX_SHARDS) {
                assert!(count(shards).of_bytes(key.as_bytes()).index() < shards as u32);
            }
        }
    }

    #[test]
    fn s19_1_counts_outside_one_to_the_maximum_are_refused() {
        assert_eq!(ShardCount::new(0), Err(ShardCountError(0)));
        assert_eq!(ShardCount::new(65), Err(ShardCountError(65)));
        assert_eq!(
            ShardCount::new(u64::from(u32::MAX) + 1),
            Err(ShardCountError(u64::from(u32::MAX) + 1))
        );
        assert_eq!(count(64).get(), 64);
        assert_eq!(count(4).shard(3).map(Shard::index), Some(3));
        assert_eq!(count(4).shard(4), None);
        assert_eq!(
            count(4).shards().map(Shard::index).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
    }

    fn key(text: &str) -> Key {
        Key::new(text).unwrap()
    }

    fn token(epoch: u64, sequence: u32) -> FencingToken {
        FencingToken::new(super::super::Epoch::new(epoch).unwrap(), sequence).unwrap()
    }

    /// SPEC.md §19.5: a work's call takes the work's flight as its parent
    /// only when the call's key is of the flight's shard. With two shards,
    /// `b` is of shard 0 and `a` of shard 1 (§19.1's vectors).
    #[test]
    fn s19_5_a_call_takes_its_parent_only_within_the_parents_shard() {
        let two = count(2);
        let (zero, one) = (two.shard(0).unwrap(), two.shard(1).unwrap());
        let parent = token(3, 7);
        assert_eq!(
            two.parent_for(&key("b"), Some((zero, parent))),
            Some(parent)
        );
        assert_eq!(two.parent_for(&key("a"), Some((one, parent))), Some(parent));
        assert_eq!(two.parent_for(&key("a"), Some((zero, parent))), None);
        assert_eq!(two.parent_for(&key("b"), Some((one, parent))), None);
        assert_eq!(two.parent_for(&key("b"), None), None);
        assert_eq!(two.parent_for(&key("a"), None), None);
    }

    /// SPEC.md §19.5, §17.3: one shard takes every call's parent, as before
    /// shards; a parent's shard of another count is of another cluster.
    #[test]
    fn s19_5_one_shard_takes_every_parent_and_another_count_none() {
        let parent = token(1, 1);
        for text in ["a", "b", "build:1"] {
            assert_eq!(
                ShardCount::ONE.parent_for(&key(text), Some((Shard::ONLY, parent))),
                Some(parent)
            );
            let of_four = count(4).of(&key(text));
            assert_eq!(
                count(2).parent_for(&key(text), Some((of_four, parent))),
                None
            );
            assert_eq!(
                count(4).parent_for(&key(text), Some((of_four, parent))),
                Some(parent)
            );
        }
    }

    /// Keys that differ in their last byte spread over the shards about
    /// evenly: of 4 000 keys `build:0`…, each of 4 shards holds 1 000 ± 15 %.
    #[test]
    fn s19_1_similar_keys_spread_evenly() {
        let shards = count(4);
        let mut held = [0u32; 4];
        for n in 0..4_000 {
            held[shards.of_bytes(format!("build:{n}").as_bytes()).index() as usize] += 1;
        }
        assert!(held.iter().all(|&n| (850..=1_150).contains(&n)), "{held:?}");
    }
}
