//! The spread of a sharded cluster's terms over its hosts (SPEC.md §19.3):
//! a campaign pauses one window longer for each other shard that its host
//! already coordinates, so that shards whose terms are free at once end on
//! different hosts. Plain functions of what a read found and of the random
//! draw, which the election passes in.

use std::time::Duration;

use super::keys::Keys;

/// How many shards other than this election's own the host `host`
/// coordinates, by the host keys among `found` (§19.3).
pub(super) fn held<'a>(
    keys: &Keys,
    found: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    host: &str,
) -> u32 {
    let own = keys.shard.index();
    let mut held = 0;
    for (key, value) in found {
        if keys
            .host_key_shard(key)
            .is_some_and(|shard| shard != own && shard < keys.shard.count().get())
            && value == host.as_bytes()
        {
            held += 1;
        }
    }
    held
}

/// The pause before a campaign (§14.3, §19.3): `window × (held + √draw)`,
/// `draw` uniform in [0, 1). With `held` = 0, §14.3's `window × √draw`: a
/// host that coordinates k shards ends its pause after every host that
/// coordinates fewer and began at the same time.
pub(super) fn first_pause(window: Duration, held: u32, draw: f64) -> Duration {
    window.mul_f64(f64::from(held) + draw.sqrt())
}

/// The pause after a pause for `paused_for` shards held, when the read
/// after it found `held` (§19.3): its host won other shards meanwhile, so
/// it pauses as long again as the shards it gained add; `None` when it
/// gained none.
pub(super) fn further_pause(window: Duration, paused_for: u32, held: u32) -> Option<Duration> {
    (held > paused_for).then(|| window * (held - paused_for))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::etcd::EtcdOptions;
    use crate::protocol::ShardCount;

    fn keys(index: u32, count: u64) -> Keys {
        let mut options = EtcdOptions::new(vec![], "ci");
        options.shard = ShardCount::new(count).unwrap().shard(index).unwrap();
        Keys::new(&options)
    }

    /// §19.3: the count is of the other shards whose host key names this
    /// host, not of its own shard's, other keys or other hosts.
    #[test]
    fn held_counts_the_other_shards_whose_host_is_this_one() {
        let keys = keys(1, 4);
        let found: Vec<(&[u8], &[u8])> = vec![
            (b"single-flight/ci/shard-0/host", b"host-a"),
            (b"single-flight/ci/shard-0/coordinator", b"host-a"),
            (b"single-flight/ci/shard-1/host", b"host-a"),
            (b"single-flight/ci/shard-2/host", b"host-b"),
            (b"single-flight/ci/shard-3/host", b"host-a"),
            (b"single-flight/ci/shard-7/host", b"host-a"),
            (b"single-flight/other/shard-2/host", b"host-a"),
        ];
        assert_eq!(held(&keys, found.iter().copied(), "host-a"), 2);
        assert_eq!(held(&keys, found.iter().copied(), "host-b"), 1);
        assert_eq!(held(&keys, found.iter().copied(), "host-c"), 0);
        assert_eq!(held(&keys, found.iter().copied(), "host"), 0);
    }

    /// §19.3: a host that holds a shard pauses a window more than one that
    /// holds none, whatever either draws; with none held, §14.3's pause.
    #[test]
    fn a_host_that_holds_a_shard_pauses_longer_than_one_that_holds_none() {
        let window = Duration::from_millis(500);
        assert_eq!(first_pause(window, 0, 0.25), Duration::from_millis(250));
        assert_eq!(first_pause(window, 0, 0.0), Duration::ZERO);
        assert_eq!(first_pause(window, 1, 0.0), Duration::from_millis(500));
        assert_eq!(first_pause(window, 1, 0.25), Duration::from_millis(750));
        assert_eq!(first_pause(window, 3, 0.5625), Duration::from_millis(1875));
        // The largest draw below 1 has a square root that rounds to 1: the
        // longest pause of a host that holds none is at most the shortest
        // of one that holds one.
        let largest_draw = 1.0 - f64::EPSILON / 2.0;
        assert!(largest_draw < 1.0);
        assert_eq!(first_pause(window, 0, largest_draw), window);
        assert_eq!(first_pause(window, 1, 0.0), window);
        assert_eq!(first_pause(window, 2, 0.0), window * 2);
    }

    /// §19.3: a host that won shards during its pause pauses again, a
    /// window per shard gained; one that gained none campaigns.
    #[test]
    fn a_host_that_won_shards_meanwhile_pauses_again_for_them() {
        let window = Duration::from_millis(500);
        assert_eq!(further_pause(window, 0, 0), None);
        assert_eq!(further_pause(window, 2, 2), None);
        assert_eq!(further_pause(window, 2, 1), None);
        assert_eq!(
            further_pause(window, 0, 1),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            further_pause(window, 1, 3),
            Some(Duration::from_millis(1000))
        );
    }
}
