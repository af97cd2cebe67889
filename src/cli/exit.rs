//! The exit codes of the command (SPEC.md §13.3). Every code that is not
//! COMMAND's own follows a convention that scripts already know.

/// Everything went well (and, for `run`, COMMAND exited 0).
pub const SUCCESS: u8 = 0;

/// `status`: no coordinator runs in the directory, as LSB init scripts say
/// "program is not running".
pub const NOT_RUNNING: u8 = 3;

/// The flight was interrupted: its leader was killed, cancelled or lost its
/// flight, or could not share its output. Nothing ran for this caller;
/// running it again starts a new flight. `EX_TEMPFAIL` of `sysexits.h`.
pub const INTERRUPTED: u8 = 75;

/// The run was made by the COMMAND of a flight and would have waited for a
/// flight that waits for that one (SPEC.md §17.3): refused at once, where it
/// would have hung. Running it again loops again, so it is not 75; and
/// single-flight did not fail, so it is not 125. `EX_CONFIG` of
/// `sysexits.h`: the flights are set up to call each other.
pub const CYCLE: u8 = 78;

/// `--timeout` passed first, as `timeout(1)` exits.
pub const TIMED_OUT: u8 = 124;

/// single-flight itself failed (a usage error, a refused directory, no
/// coordinator could be elected); COMMAND's status is unknown. As `timeout`,
/// `env` and `nice` use it.
pub const FAILED: u8 = 125;

/// COMMAND was found but could not be executed, as shells exit.
pub const NOT_EXECUTABLE: u8 = 126;

/// COMMAND was not found, as shells exit.
pub const NOT_FOUND: u8 = 127;

/// The exit code of a process that a signal ended, as shells report it.
pub fn of_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal.clamp(0, 127)).unwrap_or(u8::MAX)
}

/// `run`'s exit statuses, for the end of `run --help` and the man page's
/// EXIT STATUS (SPEC.md §13.3).
pub const RUN_STATUSES: &str =
    "  the leader's      COMMAND's exit status, 128+N when a signal N killed it;
                    every joiner exits with the same
  75                the flight was interrupted (its leader was killed or
                    cancelled): nothing ran for this caller, run it again
  78                run in the COMMAND of a flight, it would have waited for
                    its own flight (a cycle, named on stderr): refused at once
  124               --timeout passed
  125               single-flight itself failed (usage, directory, coordinator)
  126               COMMAND cannot be executed (every joiner exits 126 too)
  127               COMMAND was not found (every joiner exits 127 too)
  129, 130, 143     this process was stopped by SIGHUP, SIGINT or SIGTERM";

/// `serve`'s exit statuses (SPEC.md §13.5).
pub const SERVE_STATUSES: &str =
    "  0                 SIGTERM, SIGINT or SIGHUP stopped it and its term ended
                    cleanly
  125               single-flight itself failed (usage, directory, election)";

/// `status`'s exit statuses (SPEC.md §13.5).
pub const STATUS_STATUSES: &str = "  0                 a coordinator answered
  3                 no coordinator runs
  125               single-flight itself failed (usage, directory), or the
                    coordinator could not be asked or did not answer";

/// The exit statuses of `completions` and `man` (SPEC.md §13.7), which only
/// write text made from the command line's definitions.
pub const GENERATOR_STATUSES: &str = "  0                 the text was written to stdout
  125               a usage error (for `completions`, a shell it does not
                    know), or stdout could not be written";

/// The rest of `run --help`, after its exit statuses.
pub const RUN_NOTES: &str = "\
Output:
  The leader forwards COMMAND's stdout and stderr as they come and keeps a
  copy; every joiner writes that copy, byte for byte, to its own stdout and
  stderr, in the order the leader read it. Outputs larger than 4 MiB pass
  through a file in the flight directory (mode 0600) that the last process
  interested in the key removes.

Signals:
  SIGINT, SIGTERM or SIGHUP to a leader: its joiners are interrupted at once
  (they exit 75), and the signal is passed on to COMMAND's process group,
  which is killed (SIGKILL) once COMMAND has exited (with whatever it left in
  the background), 10 s later, or at a second signal, whichever comes first.
  To a joiner: it stops waiting; the flight goes on for the others.

Environment:
  SINGLE_FLIGHT_DIR       the default for --dir
  SINGLE_FLIGHT_GRACE_MS  the default for --grace
  RUST_LOG                when set, the library's logs on stderr
  COMMAND runs with SINGLE_FLIGHT_TOKEN (the flight's fencing token, a decimal
  number greater than every earlier flight's: pass it to what COMMAND writes,
  so that a stale leader's writes can be refused), SINGLE_FLIGHT_KEY and
  SINGLE_FLIGHT_PLACE (its directory or cluster). A `run` in COMMAND with
  both, of the same directory or cluster, names the flight as its parent: if
  it would wait for its own flight, directly or through other nested runs,
  it exits 78 at once and names the cycle.

Standard input:
  COMMAND reads the leader's standard input, except when that is a terminal:
  COMMAND runs in a process group of its own (so that signals reach all of
  it), and a background group cannot read the terminal; it reads /dev/null.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_as_shells_do() {
        assert_eq!(of_signal(2), 130);
        assert_eq!(of_signal(9), 137);
        assert_eq!(of_signal(15), 143);
        assert_eq!(of_signal(64), 192);
    }
}
