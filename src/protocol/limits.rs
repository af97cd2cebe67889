//! The protocol's size limits (SPEC.md §5). Every number here bounds memory
//! that another process can make us spend, so each carries its reason.

/// Longest line (one JSON message, not counting its `\n`) that either side
/// accepts. A `land` carries the work's whole encoded value, and a coordinator
/// copies it into one `landed` per joiner, so this bounds both the largest
/// shareable value and the memory one hostile line can pin: 8 MiB is enough
/// for the outputs people deduplicate (a rendered page, a resolved manifest, a
/// command's output) and small enough that a few hundred connections at the
/// limit still fit in memory. Larger values belong in a file the work writes,
/// with its path as the value.
pub const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// Longest flight key, in bytes of UTF-8. Keys are often paths or URLs:
/// 4096 is Linux's `PATH_MAX` and above what browsers and proxies accept for a
/// URL, while a coordinator holding ten thousand keys at the limit stays
/// within tens of megabytes.
pub const MAX_KEY_BYTES: usize = 4096;

/// Longest request id, in bytes of UTF-8. Ids only need to be unique per
/// connection; clients use counters. 128 leaves room for a UUID plus a prefix
/// while keeping per-party bookkeeping small.
pub const MAX_ID_BYTES: usize = 128;

/// Longest decimal text of a fencing token: a token is at most `i64::MAX`
/// (SPEC.md §6), which has 19 digits.
pub const MAX_TOKEN_DIGITS: usize = 19;
