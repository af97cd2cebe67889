//! SIGINT, SIGTERM and SIGHUP, the ways to ask this process to stop
//! (SPEC.md §13.4). Once installed, they no longer end the process by
//! themselves: every subcommand handles them. SIGHUP is among them because a
//! closed terminal sends it, and a leader that died of it would leave its
//! command running unwatched in its own process group.

use std::io;

use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// A stop request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    Interrupt,
    Terminate,
    HangUp,
}

impl Received {
    /// The same signal, to pass on to COMMAND.
    pub fn signal(self) -> Signal {
        match self {
            Received::Interrupt => Signal::INT,
            Received::Terminate => Signal::TERM,
            Received::HangUp => Signal::HUP,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Received::Interrupt => "SIGINT",
            Received::Terminate => "SIGTERM",
            Received::HangUp => "SIGHUP",
        }
    }

    /// The exit code of a process stopped by it, as shells report one.
    pub fn exit_code(self) -> u8 {
        super::exit::of_signal(self.signal().as_raw())
    }
}

/// The stop requests this process receives.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hang_up: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hang_up: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop request.
    pub async fn recv(&mut self) -> Received {
        tokio::select! {
            _ = self.interrupt.recv() => Received::Interrupt,
            _ = self.terminate.recv() => Received::Terminate,
            _ = self.hang_up.recv() => Received::HangUp,
        }
    }
}
