//! The shell's clock: where its time is read from, and how a periodic
//! timer of the shell ticks. The system's for the library; the runtime's
//! for the simulation (sim/), whose simulated time only tokio's timers
//! follow (SPEC.md §12.7).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Which clock the shell's time is read from, and its periodic timers run
/// on.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Clock {
    /// The system's: the single-flight thread's runtime never pauses its
    /// clock, and a caller's runtime may (a test with paused time), which
    /// must not move the connector's deadlines. Periodic timers are the
    /// kernel's (below).
    System,
    /// The current runtime's, when every caller runs on the driver's
    /// runtime (the simulation's simulated time).
    #[cfg_attr(not(any(feature = "_internal", test)), allow(dead_code))]
    Runtime,
}

impl Clock {
    pub(super) fn now(self) -> Instant {
        match self {
            Clock::System => Instant::from_std(std::time::Instant::now()),
            Clock::Runtime => Instant::now(),
        }
    }

    /// Ticks every `period`, the first at once.
    ///
    /// On the system's clock the ticks are a kernel timer's (a `timerfd`),
    /// because tokio's timer wheel wakes its thread twice for most sleeps
    /// longer than 64 ms: once where the sleep moves from the wheel's
    /// second level to its first, once at its end (an idle coordinator
    /// woke 20 times a second for its 100 ms check). When the kernel has
    /// no timer to give, tokio's interval does the same, with those wakes.
    pub(super) fn every(self, period: Duration) -> Ticks {
        let kernel = match self {
            Clock::System => kernel_timer(period)
                .inspect_err(|error| {
                    tracing::debug!(%error, "no kernel timer; ticking on the runtime's");
                })
                .ok(),
            Clock::Runtime => None,
        };
        match kernel {
            Some(timer) => Ticks::Kernel {
                timer,
                first: true,
                period,
            },
            None => Ticks::Runtime(tokio::time::interval(period)),
        }
    }
}

/// A periodic timer of [`Clock::every`].
pub(super) enum Ticks {
    Kernel {
        timer: AsyncFd<Timer>,
        /// The first tick is due at once, as tokio's interval's is.
        first: bool,
        /// For tokio's interval, should the timer fail.
        period: Duration,
    },
    Runtime(tokio::time::Interval),
}

impl Ticks {
    /// The next tick, and its time. Ticks missed while the process did not
    /// run (stopped, or a busy thread) come as one: what each does is
    /// looking at the present, which once is enough.
    pub(super) async fn tick(&mut self) -> Instant {
        loop {
            match self {
                Ticks::Runtime(interval) => return interval.tick().await,
                Ticks::Kernel {
                    timer,
                    first,
                    period,
                } => {
                    if std::mem::take(first) {
                        return Clock::System.now();
                    }
                    let Err(error) = kernel_tick(timer).await else {
                        return Clock::System.now();
                    };
                    // Never seen: a timerfd's read fails only for a wrong
                    // buffer or a realtime clock that was set. The checks
                    // must go on whatever happens to the timer.
                    tracing::warn!(%error, "the kernel timer of a periodic check failed; it ticks on the runtime's timer from now on");
                    let period = *period;
                    *self =
                        Ticks::Runtime(tokio::time::interval_at(Instant::now() + period, period));
                }
            }
        }
    }
}

/// Waits for the kernel timer's next expiration, and takes every one that
/// has passed.
async fn kernel_tick(timer: &AsyncFd<Timer>) -> io::Result<()> {
    loop {
        let Ok(mut ready) = timer.readable().await else {
            // The runtime is shutting down: nothing ticks any more (its
            // own timers would not either).
            return std::future::pending().await;
        };
        let mut expirations = [0; 8];
        match rustix::io::read(&ready.get_inner().0, &mut expirations) {
            Ok(_) => {
                // One read takes every expiration: the timer is not ready
                // until the next, which the kernel reports anew (a read to
                // learn it would be a system call per tick for nothing).
                ready.clear_ready();
                return Ok(());
            }
            Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
            Err(error) => return Err(error.into()),
        }
    }
}

/// A `timerfd`, owned.
pub(super) struct Timer(OwnedFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A kernel timer that fires every `period`, registered with the current
/// runtime.
fn kernel_timer(period: Duration) -> io::Result<AsyncFd<Timer>> {
    let timer = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
    )?;
    let every = Timespec::try_from(period).map_err(io::Error::other)?;
    timerfd_settime(
        &timer,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: every,
            it_value: every,
        },
    )?;
    crate::transport::wire::register(Timer(timer), Interest::READABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough that no stall of a loaded machine between two
    /// statements comes near it.
    const MARGIN: Duration = Duration::from_millis(100);

    /// The kernel's first tick is at once, the next a period on.
    #[tokio::test]
    async fn the_kernel_timer_ticks_at_once_then_every_period() {
        let hour = Duration::from_secs(3600);
        let mut ticks = Clock::System.every(hour);
        assert!(matches!(ticks, Ticks::Kernel { .. }), "a kernel timer");
        tokio::time::timeout(Duration::from_secs(10), ticks.tick())
            .await
            .expect("the first tick comes at once");
        assert!(
            tokio::time::timeout(MARGIN, ticks.tick()).await.is_err(),
            "the second comes an hour on"
        );
        let period = 2 * MARGIN;
        let mut ticks = Clock::System.every(period);
        let start = Instant::now();
        ticks.tick().await;
        ticks.tick().await;
        assert!(start.elapsed() >= period, "a tick is never early");
    }

    /// Ticks missed while the thread did not run come as one tick, not as
    /// a burst (tokio's interval would tick three times at once here).
    #[tokio::test]
    async fn missed_kernel_ticks_come_as_one() {
        let period = 2 * MARGIN;
        let mut ticks = Clock::System.every(period);
        ticks.tick().await;
        // Three and a half periods without a look: the next expiration is
        // half a period after the sleep.
        std::thread::sleep(period * 7 / 2);
        ticks.tick().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(1), ticks.tick())
                .await
                .is_err(),
            "the missed ticks came as one"
        );
    }

    /// On the runtime's clock, ticks are tokio's, which the simulation's
    /// paused time moves (the kernel's would tick in real time there).
    #[tokio::test]
    async fn the_runtimes_ticks_are_tokios() {
        let period = 2 * MARGIN;
        let mut ticks = Clock::Runtime.every(period);
        assert!(matches!(ticks, Ticks::Runtime(_)), "tokio's interval");
        let start = Instant::now();
        ticks.tick().await;
        ticks.tick().await;
        assert!(start.elapsed() >= period, "a tick is never early");
    }
}
