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

/// Longest outcome a flight can share, counted as the JSON text this
/// implementation writes for it (SPEC.md §3.4). An outcome crosses the wire in
/// three kinds of line: the leader's `land`, a landed `reassert` after a
/// failover (with the flight's key and token), and one `landed` per joiner
/// (with that joiner's id); every one of them must fit in
/// [`MAX_FRAME_BYTES`], whoever the joiners are. A fixed bound, rather than
/// one computed from the joiners of the moment, is also the only one that
/// holds for a rejoin that arrives after its flight has landed (SPEC.md
/// §8.4), whose id nobody knew at the land.
pub const MAX_OUTCOME_BYTES: usize = MAX_FRAME_BYTES - OUTCOME_ENVELOPE_BYTES;

/// Room in a line for everything around its outcome. The longest envelope is
/// a landed `reassert` whose key and id are at their limits and made of
/// control characters, each written as six bytes (`\u0001`), with the largest
/// token: 25 419 bytes. 32 KiB covers it with room for a member a later
/// version may add, and costs 0.4 % of the frame.
pub const OUTCOME_ENVELOPE_BYTES: usize = 32 * 1024;

/// Longest `reason` of an `unavailable` answer, in bytes (SPEC.md §18.3):
/// an error message of the host coordinator's, which names a user, a key, a
/// file or a certificate in some hundred bytes. A longer one is cut at a
/// character's end, so that what a relay echoes to every waiting call stays
/// small beside any frame.
pub const MAX_REASON_BYTES: usize = 4096;

/// Longest `op`, in bytes. An `op` is matched against a handful of names;
/// anything longer is no op of any version, and would only be echoed back in
/// errors. It is the id's limit, so that the envelope of a message has one
/// bound.
pub const MAX_OP_BYTES: usize = MAX_ID_BYTES;

/// Deepest nesting of arrays and objects in a line, the message object
/// counting as the first level (SPEC.md §3.7). Messages nest three levels at
/// most (a failure in an outcome in a `land`, a flight in a `status` answer's
/// list); the bound only matters for members a receiver ignores, which are
/// still read, and keeps a hostile line from exhausting the reader's stack.
/// It is serde_json's own recursion limit, which the decoders rely on rather
/// than count again; a test pins it.
pub const MAX_NESTING_DEPTH: usize = 127;

/// Room in a `status` answer for its lists of hosts and flights (SPEC.md
/// §3.5): the frame less [`STATUS_ENVELOPE_BYTES`] for the rest of the
/// answer. A coordinator with more hosts and flights than fit lists the
/// hosts first, then the first flights in key order, and says how many of
/// each it left out, rather than send a line that the client would refuse.
pub const STATUS_FLIGHTS_BYTES: usize = MAX_FRAME_BYTES - STATUS_ENVELOPE_BYTES;

/// Room in a `status` answer for everything but its lists of hosts and
/// flights: at most 1 367 bytes, for an id at its limit written with an
/// escape for every byte, the counts, the `stats` with every counter at its
/// largest and the counts of `hosts` (a test pins the figure). 2 KiB covers
/// it with room for a few more counters.
pub const STATUS_ENVELOPE_BYTES: usize = 2 * 1024;

/// Longest reuse window a call may ask for, in milliseconds (SPEC.md §16.1):
/// one hour. A kept value is a memory of a landing just past, for callers
/// that arrive seconds or minutes late (cron jobs, CI jobs, a cache refill);
/// it has no invalidation, so a value wanted for longer belongs in a cache of
/// its own. It also keeps the window within a `u32` of milliseconds.
pub const MAX_REUSE_WINDOW_MS: u32 = 3_600_000;

/// Most values one coordinator keeps for reuse at once (SPEC.md §16.2). The
/// coordinator looks a key up among them for every run that has a window,
/// and each holds a key of up to `MAX_KEY_BYTES`; 4 096 keys of cron jobs,
/// artifacts or cache entries is far more than run staggered on one
/// directory or cluster, and bounds the keys' memory to 16 MiB.
pub const MAX_KEPT_VALUES: usize = 4096;

/// Most bytes of kept values one coordinator holds at once, counted as
/// their outcomes' JSON text and their keys (SPEC.md §16.2): 64 MiB, eight
/// values at the largest outcome, thousands of ordinary ones. The
/// coordinator is one process of the fleet that everyone's calls go
/// through; it should not become its memory hog.
pub const MAX_KEPT_BYTES: usize = 64 * 1024 * 1024;

/// Most keys a `cycle` answer names, and the longest cycle of nested flights
/// a coordinator finds (SPEC.md §17.2): a search from a run's key stops after
/// this many flights. Nested calls deeper than a few levels are rare (a build
/// step that fetches a dependency, a cache fill that needs another key), so
/// 64 finds every cycle people make; it bounds the search's depth, and the
/// answer: 64 keys at their limit, each byte escaped, are 1.6 MiB, well
/// within a frame. A longer cycle is not refused: its calls wait as if the
/// extension did not exist, until their deadlines.
pub const MAX_CYCLE_KEYS: usize = 64;
