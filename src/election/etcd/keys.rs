//! The etcd keys of one cluster and of one of its shards (SPEC.md §14.1,
//! §19.2): with one shard, `P coordinator`, `P epoch` and `P clean`, as
//! before shards; with more, `P shard-I/coordinator`, `…/epoch`, `…/clean`
//! and `…/host` for shard I; and `P shards`, the cluster's count, whatever
//! the shard. `P` is `<prefix>/<cluster>/`.

use super::EtcdOptions;
use crate::protocol::Shard;

/// The keys that one election reads and writes (SPEC.md §14.1, §19.2).
#[derive(Clone, Debug)]
pub(super) struct Keys {
    /// `P`: every key of the cluster starts so, and the least-privilege
    /// role is granted this prefix (SPEC.md §14.9).
    pub(super) base: String,
    /// The cluster's name, for messages.
    pub(super) cluster: String,
    /// The shard this election is for.
    pub(super) shard: Shard,
    pub(super) coordinator: String,
    pub(super) epoch: String,
    pub(super) clean: String,
    /// `P shard-I/host`, the host of the process that holds the shard's
    /// term (§19.3); `None` with one shard, which keeps §14.1's keys only.
    pub(super) host: Option<String>,
    /// `P shards`, the cluster's number of shards (§19.2).
    pub(super) shards: String,
    /// `P epoch`, whose existence without `P shards` says that the cluster
    /// was used before shards, with one (§19.2).
    pub(super) unsharded_epoch: String,
}

/// What a shard's keys begin with after `P`, before its index.
const SHARD_KEY_PREFIX: &str = "shard-";

/// What a shard's host key ends with, after `P shard-I`.
const HOST_KEY_SUFFIX: &str = "/host";

impl Keys {
    pub(super) fn new(options: &EtcdOptions) -> Keys {
        let base = format!(
            "{}/{}/",
            options.prefix.trim_end_matches('/'),
            options.cluster
        );
        let shard = options.shard;
        // §19.2: a cluster of one keeps §14.1's keys, so that a cluster used
        // before shards keeps its epochs.
        let own = if shard.count().get() == 1 {
            base.clone()
        } else {
            format!("{base}{SHARD_KEY_PREFIX}{}/", shard.index())
        };
        Keys {
            coordinator: format!("{own}coordinator"),
            epoch: format!("{own}epoch"),
            clean: format!("{own}clean"),
            host: (shard.count().get() > 1).then(|| format!("{own}host")),
            shards: format!("{base}shards"),
            unsharded_epoch: format!("{base}epoch"),
            cluster: options.cluster.clone(),
            shard,
            base,
        }
    }

    /// `P`, for the range that a campaign reads and for messages.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// The index of the shard whose host key `key` is, when it is one of
    /// this cluster's (§19.3).
    pub(super) fn host_key_shard(&self, key: &[u8]) -> Option<u32> {
        let index = key
            .strip_prefix(self.base.as_bytes())?
            .strip_prefix(SHARD_KEY_PREFIX.as_bytes())?
            .strip_suffix(HOST_KEY_SUFFIX.as_bytes())?;
        // Decimal without leading zeros, as the keys are written.
        let text = std::str::from_utf8(index).ok()?;
        let valid = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        if valid { text.parse().ok() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ShardCount;

    fn keys(shard: Shard) -> Keys {
        let mut options = EtcdOptions::new(vec![], "ci");
        options.shard = shard;
        Keys::new(&options)
    }

    /// §19.2: a cluster of one keeps §14.1's keys; shard I of more has its
    /// own under `P shard-I/`, with a host key; the count is the cluster's.
    #[test]
    fn one_shard_keeps_the_clusters_keys_and_more_have_their_own() {
        let one = keys(Shard::ONLY);
        assert_eq!(one.base(), "single-flight/ci/");
        assert_eq!(one.coordinator, "single-flight/ci/coordinator");
        assert_eq!(one.epoch, "single-flight/ci/epoch");
        assert_eq!(one.clean, "single-flight/ci/clean");
        assert_eq!(one.host, None);
        assert_eq!(one.shards, "single-flight/ci/shards");
        assert_eq!(one.unsharded_epoch, "single-flight/ci/epoch");
        let twelve = keys(ShardCount::new(16).unwrap().shard(12).unwrap());
        assert_eq!(twelve.base(), "single-flight/ci/");
        assert_eq!(twelve.coordinator, "single-flight/ci/shard-12/coordinator");
        assert_eq!(twelve.epoch, "single-flight/ci/shard-12/epoch");
        assert_eq!(twelve.clean, "single-flight/ci/shard-12/clean");
        assert_eq!(
            twelve.host.as_deref(),
            Some("single-flight/ci/shard-12/host")
        );
        assert_eq!(twelve.shards, "single-flight/ci/shards");
        assert_eq!(twelve.unsharded_epoch, "single-flight/ci/epoch");
    }

    /// §19.3: only the host keys of this cluster's shards are counted.
    #[test]
    fn host_keys_are_told_by_their_exact_form() {
        let keys = keys(ShardCount::new(4).unwrap().shard(1).unwrap());
        assert_eq!(
            keys.host_key_shard(b"single-flight/ci/shard-0/host"),
            Some(0)
        );
        assert_eq!(
            keys.host_key_shard(b"single-flight/ci/shard-63/host"),
            Some(63)
        );
        for other in [
            &b"single-flight/ci/shard-1/coordinator"[..],
            b"single-flight/ci/shard-/host",
            b"single-flight/ci/shard-01/host",
            b"single-flight/ci/shard-x/host",
            b"single-flight/ci2/shard-0/host",
            b"single-flight/ci/shard-0/host/more",
            b"single-flight/ci/epoch",
        ] {
            assert_eq!(
                keys.host_key_shard(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
