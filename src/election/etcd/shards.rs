//! The cluster's number of shards as etcd keeps it (SPEC.md §19.2): what a
//! read of `P shards` and `P epoch` says, whether this process's own count
//! agrees, and what it is told when not. The decisions are plain functions
//! of what was read; the requests are the election's.

use super::EtcdError;
use super::keys::Keys;
use crate::protocol::{MAX_SHARDS, ShardCount};

/// What etcd says of the cluster's number of shards (SPEC.md §19.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kept {
    /// `P shards` holds it; `revision` is the key's last modification's,
    /// which a campaign's transaction compares (§19.2).
    Recorded { count: ShardCount, revision: i64 },
    /// `P epoch` exists without `P shards`: the cluster was used before
    /// shards, or only with one, and has one.
    BeforeShards,
    /// Neither exists: nobody has used the cluster yet.
    Unrecorded,
}

impl Kept {
    /// What a read found: `P shards`' value and last modification's
    /// revision, if it exists, and whether `P epoch` exists. A value that is
    /// not a count fails closed, naming the key.
    pub(super) fn read(
        keys: &Keys,
        shards: Option<(&[u8], i64)>,
        epoch_exists: bool,
    ) -> Result<Kept, EtcdError> {
        match shards {
            Some((value, revision)) => Ok(Kept::Recorded {
                count: parse_count(&keys.shards, value)?,
                revision,
            }),
            None if epoch_exists => Ok(Kept::BeforeShards),
            None => Ok(Kept::Unrecorded),
        }
    }

    /// The count the cluster has, if it was used.
    fn count(self) -> Option<ShardCount> {
        match self {
            Kept::Recorded { count, .. } => Some(count),
            Kept::BeforeShards => Some(ShardCount::ONE),
            Kept::Unrecorded => None,
        }
    }

    /// The revision a campaign's transaction compares `P shards` with: 0
    /// while it does not exist (§19.2).
    pub(super) fn revision(self) -> i64 {
        match self {
            Kept::Recorded { revision, .. } => revision,
            Kept::BeforeShards | Kept::Unrecorded => 0,
        }
    }

    /// Whether a process configured with `configured` shards may use the
    /// cluster: the count it was first used with, or any while it has none
    /// yet. Refused otherwise, with the message of §19.2.
    pub(super) fn admits(self, keys: &Keys, configured: ShardCount) -> Result<(), EtcdError> {
        match self.count() {
            Some(kept) if kept != configured => Err(EtcdError::EtcdShardCount {
                cluster: keys.cluster.clone(),
                kept: kept.get(),
                whence: match self {
                    Kept::BeforeShards => format!(
                        "it was used before shards: etcd has {} and no {}",
                        keys.unsharded_epoch, keys.shards
                    ),
                    _ => format!("kept in etcd at {} since it was first used", keys.shards),
                },
                configured: configured.get(),
            }),
            _ => Ok(()),
        }
    }
}

/// The longest value of `P shards` that is parsed: two digits hold every
/// count, and a longer value is not one.
const MAX_COUNT_DIGITS: usize = 2;

/// Parses `P shards` (SPEC.md §19.2): the decimal digits of 1 to
/// [`MAX_SHARDS`], or fails closed naming the key.
pub(super) fn parse_count(key: &str, value: &[u8]) -> Result<ShardCount, EtcdError> {
    std::str::from_utf8(value)
        .ok()
        .filter(|text| {
            (1..=MAX_COUNT_DIGITS).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit())
        })
        .and_then(|text| text.parse::<u64>().ok())
        .and_then(|count| ShardCount::new(count).ok())
        .ok_or_else(|| EtcdError::EtcdShardsCorrupt {
            key: key.to_owned(),
            value: String::from_utf8_lossy(&value[..value.len().min(64)]).into_owned(),
            max: MAX_SHARDS,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::etcd::EtcdOptions;

    fn keys(count: u32) -> Keys {
        let mut options = EtcdOptions::new(vec![], "ci");
        options.shard = ShardCount::new(u64::from(count)).unwrap().shard(0).unwrap();
        Keys::new(&options)
    }

    fn count(n: u64) -> ShardCount {
        ShardCount::new(n).unwrap()
    }

    /// §19.2: a count is the decimal digits of 1 to 64, or fails closed
    /// naming the key.
    #[test]
    fn counts_that_are_not_1_to_64_fail_closed_naming_the_key() {
        assert_eq!(parse_count("k", b"1").unwrap(), count(1));
        assert_eq!(parse_count("k", b"64").unwrap(), count(64));
        assert_eq!(parse_count("k", b"04").unwrap(), count(4));
        for bad in [
            &b""[..],
            b"0",
            b"00",
            b"65",
            b"100",
            b"004",
            b"-1",
            b"+4",
            b" 4",
            b"4\n",
            b"four",
            b"\xff",
        ] {
            let error = parse_count("p/ci/shards", bad).unwrap_err().to_string();
            assert!(error.contains("p/ci/shards"), "{error}");
            assert!(error.contains("1 to 64"), "{error}");
        }
    }

    /// §19.2: what a read of the two keys says.
    #[test]
    fn the_count_is_the_keys_or_one_after_an_epoch_or_none_yet() {
        let keys = keys(4);
        let four = Kept::Recorded {
            count: count(4),
            revision: 17,
        };
        assert_eq!(Kept::read(&keys, Some((b"4", 17)), true).unwrap(), four);
        assert_eq!(Kept::read(&keys, Some((b"4", 17)), false).unwrap(), four);
        assert_eq!(four.revision(), 17);
        assert_eq!(Kept::read(&keys, None, true).unwrap(), Kept::BeforeShards);
        assert_eq!(Kept::read(&keys, None, false).unwrap(), Kept::Unrecorded);
        assert!(Kept::read(&keys, Some((b"x", 17)), true).is_err());
        assert_eq!(Kept::BeforeShards.revision(), 0);
        assert_eq!(Kept::Unrecorded.revision(), 0);
    }

    /// §19.2: the count the cluster was first used with admits its own
    /// number only; an unused cluster admits any.
    #[test]
    fn a_process_of_another_count_is_refused() {
        let recorded = Kept::Recorded {
            count: count(4),
            revision: 3,
        };
        recorded.admits(&keys(4), count(4)).unwrap();
        Kept::BeforeShards.admits(&keys(1), count(1)).unwrap();
        Kept::Unrecorded.admits(&keys(2), count(2)).unwrap();
        Kept::Unrecorded.admits(&keys(1), count(1)).unwrap();
        assert!(recorded.admits(&keys(1), count(1)).is_err());
        assert!(Kept::BeforeShards.admits(&keys(4), count(4)).is_err());
    }

    /// §19.2: the refusal names the cluster, both numbers, where each came
    /// from and what to do.
    #[test]
    fn the_refusal_names_the_cluster_both_numbers_the_key_and_the_options() {
        let recorded = Kept::Recorded {
            count: count(4),
            revision: 3,
        };
        assert_eq!(
            recorded.admits(&keys(2), count(2)).unwrap_err().to_string(),
            "cluster \"ci\" has 4 shards (kept in etcd at single-flight/ci/shards since it was \
             first used); this process was configured with 2 (--shards, SINGLE_FLIGHT_SHARDS, \
             Cluster::shards): give it 4. The number cannot change while the cluster has keys \
             (SPEC.md §19.2)"
        );
        assert_eq!(
            Kept::BeforeShards
                .admits(&keys(4), count(4))
                .unwrap_err()
                .to_string(),
            "cluster \"ci\" has 1 shard (it was used before shards: etcd has \
             single-flight/ci/epoch and no single-flight/ci/shards); this process was configured \
             with 4 (--shards, SINGLE_FLIGHT_SHARDS, Cluster::shards): give it 1. The number \
             cannot change while the cluster has keys (SPEC.md §19.2)"
        );
    }
}
