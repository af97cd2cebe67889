//! Which flight's work is running here, so that a call made by that work
//! names it as its parent without the caller doing anything (SPEC.md
//! §17.1): a task-local for the async works (a leader's and a detached
//! one's), a thread-local for the blocking works, which run on their
//! caller's thread.
//!
//! Each names the `SingleFlight` whose flight it is, by a number given when
//! it was opened: a token is unique within its directory or cluster only
//! (every directory's epochs start at 1), so a call of another
//! `SingleFlight` made by the work ignores it, rather than let the
//! coordinator of another place take it for one of its own flights. The
//! shards of one cluster share the number; within it, a call takes the
//! flight as its parent only when its key is of the flight's shard
//! (SPEC.md §19.5, `ShardCount::parent_for`).

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::{FencingToken, Key, Shard};

/// The flight `token` of the shard `shard` of the `SingleFlight` numbered
/// `place`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Working {
    pub(super) place: u64,
    pub(super) shard: Shard,
    pub(super) token: FencingToken,
}

tokio::task_local! {
    static TASK: Working;
}

thread_local! {
    static THREAD: Cell<Option<Working>> = const { Cell::new(None) };
}

/// The number of the next `SingleFlight` this process opens.
static NEXT_PLACE: AtomicU64 = AtomicU64::new(1);

/// A number for a `SingleFlight` being opened, never given to another in
/// this process.
pub(super) fn new_place() -> u64 {
    NEXT_PLACE.fetch_add(1, Ordering::Relaxed)
}

/// `work`, polled as the work of `working`: the calls it makes on its own
/// task name that flight as their parent.
pub(super) fn scope<F: Future>(working: Working, work: F) -> impl Future<Output = F::Output> {
    TASK.scope(working, work)
}

/// Calls `work` as the work of `working` on this thread, then puts back
/// what was there (a nested blocking leader's work runs inside its
/// parent's), even when it panics.
pub(super) fn on_this_thread<R>(working: Working, work: impl FnOnce() -> R) -> R {
    struct Restore(Option<Working>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD.with(|slot| slot.set(self.0));
        }
    }
    let _restore = Restore(THREAD.with(|slot| slot.replace(Some(working))));
    work()
}

/// The parent of a call of `key` made on the shard `shard` of the
/// `SingleFlight` numbered `place`: the flight whose work is running here
/// (the task's first, then the thread's) when it is of that `SingleFlight`
/// and of `key`'s shard (SPEC.md §19.5).
pub(super) fn current(place: u64, shard: Shard, key: &Key) -> Option<FencingToken> {
    let working = TASK
        .try_with(|working| *working)
        .ok()
        .or_else(|| THREAD.with(Cell::get))
        .filter(|working| working.place == place)?;
    shard
        .count()
        .parent_for(key, Some((working.shard, working.token)))
}
