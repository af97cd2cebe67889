//! The command line (SPEC.md §13): `run`, `serve` and `status`, and
//! `completions` and `man`, which print what the shells and man(1) need to
//! know of the other three.
//!
//! This is shell code, like the library's `shell` module: it reads clocks,
//! sleeps, spawns processes and handles signals.

mod capture;
mod completions;
mod exit;
mod man;
mod metrics;
mod nested;
mod output;
mod place;
mod run;
mod serve;
mod signals;
mod spill;
mod status;

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "single-flight",
    version,
    about = "Run a command once among every concurrent caller: the first runs it, the others receive its output and exit status.",
    long_about = "Run a command once among every concurrent caller: the first runs it, the others receive its output and exit status.\n\nProcesses of one user on one machine that share a flight directory elect a coordinator among themselves (no daemon is needed); with --etcd, processes on several machines do, through etcd, and talk over TCP with mutual TLS (cluster mode). `single-flight run --key KEY -- COMMAND` runs COMMAND unless a run of the same key is in progress; then it waits for that run and prints its output and exits with its exit status instead. Use it where flock(1) would make every waiter run the command again: a cache fill, a download, a build step, a cron job.\n\nThe protocol and its guarantees: SPEC.md in the source repository (§13 describes this command).",
    subcommand_value_name = "SUBCOMMAND",
    subcommand_help_heading = "Subcommands",
    after_help = "Examples:\n  single-flight run --key fetch-deps -- ./fetch-deps.sh\n  single-flight run --key nightly --timeout 3600 -- make release\n  single-flight status --json\n  single-flight status --format openmetrics\n  single-flight run --etcd https://10.0.0.5:2379 --listen 10.0.0.1:0 --tls-ca ca.pem --tls-cert host.pem --tls-key host-key.pem --key artifact -- ./fetch.sh"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Run(RunArgs),
    Serve(ServeArgs),
    Status(StatusArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
}

/// The end of a subcommand's `--help`: its exit statuses, then whatever else
/// it has to say. The man page prints the two apart (man.rs): the statuses of
/// every subcommand together in its EXIT STATUS section, the notes in the
/// subcommand's own section.
#[derive(Clone, Copy, Debug)]
struct Epilogue {
    /// The rows of its exit statuses, from exit.rs.
    statuses: &'static str,
    /// What else it says, in blocks of a heading line ending in `:` and
    /// indented lines, which the page turns into subsections.
    notes: Option<&'static str>,
}

impl Epilogue {
    /// The text that `--help` ends with.
    fn help(self) -> String {
        match self.notes {
            Some(notes) => format!("Exit status:\n{}\n\n{notes}", self.statuses),
            None => format!("Exit status:\n{}", self.statuses),
        }
    }
}

const RUN_EPILOGUE: Epilogue = Epilogue {
    statuses: exit::RUN_STATUSES,
    notes: Some(exit::RUN_NOTES),
};

const SERVE_EPILOGUE: Epilogue = Epilogue {
    statuses: exit::SERVE_STATUSES,
    notes: None,
};

const STATUS_EPILOGUE: Epilogue = Epilogue {
    statuses: exit::STATUS_STATUSES,
    notes: Some(STATUS_HELP),
};

const COMPLETIONS_EPILOGUE: Epilogue = Epilogue {
    statuses: exit::GENERATOR_STATUSES,
    notes: Some(COMPLETIONS_HELP),
};

const MAN_EPILOGUE: Epilogue = Epilogue {
    statuses: exit::GENERATOR_STATUSES,
    notes: None,
};

/// Every subcommand's epilogue, in the order of `--help`, for the man page.
/// A test holds it to the subcommands' `--help`.
const EPILOGUES: [(&str, Epilogue); 5] = [
    ("run", RUN_EPILOGUE),
    ("serve", SERVE_EPILOGUE),
    ("status", STATUS_EPILOGUE),
    ("completions", COMPLETIONS_EPILOGUE),
    ("man", MAN_EPILOGUE),
];

/// Run COMMAND once among the concurrent callers of KEY.
///
/// The first caller runs COMMAND; every caller that comes while it runs
/// receives its output and exit status instead of running it again.
#[derive(Debug, Args)]
#[command(
    override_usage = "single-flight run [OPTIONS] --key <KEY> -- <COMMAND> [ARGS]...",
    after_help = "See `single-flight run --help` for exit statuses, signals and the environment.",
    after_long_help = RUN_EPILOGUE.help()
)]
struct RunArgs {
    #[command(flatten)]
    place: place::PlaceArgs,

    /// The flight's name: concurrent runs of one key share one run of COMMAND.
    ///
    /// 1 to 4096 bytes of UTF-8, compared byte for byte. Runs of the same key
    /// in the same directory (or cluster) receive each other's output, so put in the key
    /// whatever the output depends on (a path, a version, a date).
    #[arg(long, value_parser = parse_key)]
    key: String,

    /// The grace window after a coordinator died, in milliseconds [default: 500].
    ///
    /// When this process becomes the coordinator after another one died, new
    /// flights wait this long so that the flights of the previous term can be
    /// reclaimed (SPEC.md §10.2); 2000 in cluster mode (§14.4), where less
    /// than 1000 is refused: a leader needs up to 500 ms to leave a
    /// coordinator that is gone and more to reach the next one. Every process
    /// of a directory or cluster should use the same.
    #[arg(long, value_name = "MS", env = "SINGLE_FLIGHT_GRACE_MS")]
    grace: Option<u64>,

    /// Give up after SECS seconds (decimal digits, e.g. 30 or 0.5) and exit 124.
    ///
    /// A leader stops COMMAND (SIGTERM to its process group, SIGKILL once
    /// COMMAND has exited or 10 s later) and interrupts its joiners; a joiner
    /// stops waiting. The time
    /// counts from the start, waiting for a coordinator included.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    timeout: Option<Duration>,

    /// Keep COMMAND running for the runs that joined it when this one gives up.
    ///
    /// A leader that gets SIGINT, SIGTERM or SIGHUP, or reaches --timeout,
    /// stops writing COMMAND's output but lets it run while any run of the
    /// key, in any process, waits for it; they get its output. It exits
    /// 128+N (124 at --timeout) once COMMAND ends, or once nobody waits any
    /// more (then COMMAND is stopped). A second signal kills COMMAND at once
    /// and interrupts the runs that joined it (SPEC.md §15.4).
    #[arg(long)]
    detach: bool,

    /// Reuse an output of the key that landed less than SECS seconds ago.
    ///
    /// A run with --reuse whose key has an output kept by the coordinator
    /// prints it and exits with its status at once, without running
    /// COMMAND. If this run leads, its output and exit status, whatever the
    /// status, are kept for SECS for the runs with --reuse that come after;
    /// a COMMAND that could not start is not. 0.001 <= SECS <= 3600, in
    /// decimal digits. The coordinator keeps outputs in memory for its term:
    /// a run with --reuse that finds no coordinator first starts one in the
    /// background, which ends once no run uses it and nothing is kept, so
    /// that the output outlives this run (SPEC.md §16.4).
    #[arg(long, value_name = "SECS", value_parser = parse_reuse)]
    reuse: Option<Duration>,

    /// Say on stderr whether this run led or joined, and the fencing token.
    ///
    /// One line after the output: "led" (this process ran COMMAND) or
    /// "joined" (it received the output of the process that ran it).
    #[arg(short, long)]
    verbose: bool,

    /// The command and its arguments, after `--`.
    ///
    /// It runs with SINGLE_FLIGHT_TOKEN (the flight's fencing token),
    /// SINGLE_FLIGHT_KEY and SINGLE_FLIGHT_PLACE in its environment; a `run`
    /// in it names the flight as its parent, and exits 78 at once instead
    /// of waiting for its own flight. It is not run through a shell: use
    /// `sh -c '...'` for pipes and redirections.
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(OsString)
    )]
    command: Vec<OsString>,
}

/// Hold the coordinator of DIR (or of a cluster) in the foreground until SIGTERM or SIGINT.
///
/// Logs go to stderr (RUST_LOG chooses them, `info` by default). Without a
/// `serve`, the processes that run flights coordinate themselves, and a new
/// term starts whenever the coordinating process exits; with one the term
/// lasts.
#[derive(Debug, Args)]
#[command(after_long_help = SERVE_EPILOGUE.help())]
struct ServeArgs {
    #[command(flatten)]
    place: place::PlaceArgs,

    /// The grace window after a coordinator died, in milliseconds [default: 500].
    ///
    /// A term that follows one that died opens with it (SPEC.md §10.2); 2000
    /// in cluster mode (§14.4), where less than 1000 is refused: a leader
    /// needs up to 500 ms to leave a coordinator that is gone and more to
    /// reach the next one. Every process of a directory or cluster should use
    /// the same.
    #[arg(long, value_name = "MS", env = "SINGLE_FLIGHT_GRACE_MS")]
    grace: Option<u64>,

    /// Serve only while needed (SPEC.md §16.4): one attempt at the election,
    /// then one term until no client and no kept output is left. What `run
    /// --reuse` starts in the background; not for people.
    #[arg(long, hide = true)]
    while_needed: bool,
}

/// Show the coordinator of DIR (or of a cluster), the flights in progress and the term's counters.
///
/// Prints the coordinator's epoch, host name, process id and (in cluster
/// mode) advertised address, the key, fencing token and number of joiners
/// of every flight in progress, and what the coordinator counted in its
/// term.
#[derive(Debug, Args)]
#[command(after_long_help = STATUS_EPILOGUE.help())]
struct StatusArgs {
    #[command(flatten)]
    place: place::PlaceArgs,

    /// What to print: text for people, one JSON object, or the OpenMetrics
    /// text format for a scraper.
    ///
    /// json: {"directory": DIR, "coordinator": {"pid": N, "epoch": "E",
    /// "grace_window": {"waiting": N} or null, "stats": {...} or null} or
    /// null, "flights": [{"key": K, "token": "T", "joiners": N, "detached":
    /// true}], "omitted": N}; "detached" is there only for a flight whose
    /// leader left it running for its joiners (run --detach); later versions
    /// may add members to any object, so ignore those you do not know.
    /// Epochs and tokens are decimal strings, grace_window is null when
    /// no grace window is open, and omitted counts the flights left out of an
    /// answer too long for one message (0 when all are listed). In cluster
    /// mode "directory" is null, "cluster": {"name": NAME, "etcd": [URL]}
    /// names the cluster, and the coordinator has "host" (its host name),
    /// "address" (what it advertises) and "hosts", its connections by host:
    /// {"direct": N, "relays": [{"host": ID, "connections": N, "parties": N,
    /// "window": true, "orphans": N}], "omitted": N} ("window" and
    /// "orphans" only while that host's relay window is open, "omitted"
    /// only when hosts were left out). Asked through this host's
    /// coordinator, the report also has "host_coordinator": {"pid": N,
    /// "host": NAME, "host_id": ID, "epoch": "E", "connections": N,
    /// "groups": [{"key": K, "token": "T" or null, "parties": N}],
    /// "omitted": N}. "stats" holds the counters of the
    /// coordinator's term, each an integer: "flights_led", "joins",
    /// "lands_value", "lands_failure", "interruptions", "reasserts_accepted",
    /// "reasserts_rejected", "rejoins", "grace_windows", "connections_open",
    /// "connections_refused", and "dedupe_ratio" (joins ÷ the runs answered
    /// lead or joined, null before the first); it is null when the
    /// coordinator is too old to count. A cluster of several shards
    /// (--shards) prints a JSON array of such reports, one per shard's
    /// coordinator in shard order, each with "shard" (its index) and
    /// "shards" (their number); its text shows each under "shard I of S:".
    ///
    /// openmetrics: every metric is named single_flight_*, counters end in
    /// _total and start again at 0 with each term, every sample is labelled
    /// with the directory (or the cluster, and with several shards its
    /// "shard"), and the text ends with "# EOF". With no coordinator it
    /// holds single_flight_coordinator_up 0.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

/// Print the completion script of SHELL on stdout.
///
/// The script completes the subcommands, their options and the values of
/// options that have a fixed set of them; it is made from the same
/// definitions as the command line itself (SPEC.md §13.7).
#[derive(Debug, Args)]
#[command(after_long_help = COMPLETIONS_EPILOGUE.help())]
struct CompletionsArgs {
    /// The shell that runs the script.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Where each shell looks for completion scripts, for the end of
/// `completions --help`.
const COMPLETIONS_HELP: &str = "\
Where to put the script, for your user:
  bash        single-flight completions bash > ~/.local/share/bash-completion/completions/single-flight
  zsh         single-flight completions zsh > ~/.zfunc/_single-flight
              (with fpath+=~/.zfunc before compinit in ~/.zshrc)
  fish        single-flight completions fish > ~/.config/fish/completions/single-flight.fish
  elvish      single-flight completions elvish >> ~/.config/elvish/rc.elv
  powershell  single-flight completions powershell >> $PROFILE";

/// Print the man page of single-flight on stdout (roff), every subcommand included.
///
/// One page, single-flight(1): what `--help` says of the command and of each
/// subcommand, and the exit statuses of all of them (SPEC.md §13.7). Install it
/// with `single-flight man > ~/.local/share/man/man1/single-flight.1`.
#[derive(Debug, Args)]
#[command(after_long_help = MAN_EPILOGUE.help())]
struct ManArgs {}

/// What `status` prints (SPEC.md §13.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Openmetrics,
}

/// The end of `status --help`, after its exit statuses.
const STATUS_HELP: &str = "\
OpenMetrics:
  The OpenMetrics form is complete whether a coordinator answered (exit 0) or
  none runs (exit 3). For Prometheus' node-exporter textfile collector, write
  it whole so that the collector never reads half of it:
    single-flight status --format openmetrics > single-flight.prom.tmp; [ $? -le 3 ] && mv single-flight.prom.tmp single-flight.prom";

/// Whether log lines on stderr may carry ANSI colour codes (SPEC.md §13.1):
/// only on a terminal, so that a log in a file or a pipe stays plain text,
/// and not when `NO_COLOR` is set to anything but the empty string, the
/// convention for turning colours off.
fn log_in_colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// [`log_in_colour`] for this process's stderr and environment.
fn log_colours() -> bool {
    log_in_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// A key as the protocol accepts it (SPEC.md §3.1), checked before anything
/// starts.
fn parse_key(text: &str) -> Result<String, String> {
    single_flight_core::protocol::Key::new(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

/// A positive number of seconds (SPEC.md §13.2): decimal digits with at
/// most one point (`30`, `0.5`, `.5`). Not what `str::parse::<f64>` also
/// takes — a sign, an exponent, `inf`, `nan` — nor white space: a value
/// written one way in a crontab means one thing, and a typo is refused
/// rather than read as a number nobody meant.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    let points = text.bytes().filter(|&byte| byte == b'.').count();
    if digits == 0 || points > 1 || digits + points != text.len() {
        return Err(format!(
            "{text:?} is not a number of seconds: write decimal digits with at most one point, for example 30 or 0.5"
        ));
    }
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (for example 30 or 0.5)"))?;
    if seconds <= 0.0 {
        return Err("it must be more than 0 seconds".into());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text} seconds is too long"))
}

/// A reuse window in seconds (decimals allowed), within SPEC.md §16.1: from
/// the protocol's unit, 1 ms, to an hour; a fraction of a millisecond is
/// rounded up.
fn parse_reuse(text: &str) -> Result<Duration, String> {
    let window = parse_seconds(text)?;
    let most = single_flight_core::protocol::limits::MAX_REUSE_WINDOW_MS / 1000;
    if window < Duration::from_millis(1) {
        return Err(
            "the reuse window must be at least 0.001 seconds: the protocol counts it in milliseconds (SPEC.md §16.1)"
                .into(),
        );
    }
    if single_flight_core::protocol::ReuseWindow::from_duration(window).is_none() {
        return Err(format!("the reuse window must be at most {most} seconds"));
    }
    Ok(window)
}

/// Parses the command line and runs the subcommand; the exit code follows
/// SPEC.md §13.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            // `--help` and `--version` are not errors. A usage error exits
            // 125 rather than clap's 2, so that it cannot be mistaken for an
            // exit status of COMMAND (as `timeout`, `env` and `nice` do).
            return ExitCode::from(if error.use_stderr() {
                exit::FAILED
            } else {
                exit::SUCCESS
            });
        }
    };
    ExitCode::from(match cli.command {
        Command::Run(args) => on_a_runtime(run::run(args)),
        Command::Serve(args) => on_a_runtime(serve::serve(args)),
        Command::Status(args) => on_a_runtime(status::status(args)),
        // These two only write text made from the definitions above: they
        // need no runtime and touch no directory.
        Command::Completions(args) => completions::completions(args.shell),
        Command::Man(ManArgs {}) => man::man(),
    })
}

/// Writes what `completions` or `man` made to stdout; returns the exit code
/// (SPEC.md §13.7).
fn print_text(what: &str, text: &[u8]) -> u8 {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            eprintln!("single-flight: cannot write {what} to stdout: {error}");
            exit::FAILED
        }
    }
}

/// Runs a subcommand to its exit code on a runtime of its own.
fn on_a_runtime(subcommand: impl Future<Output = u8>) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("single-flight: cannot start: {error}");
            return exit::FAILED;
        }
    };
    let code = runtime.block_on(subcommand);
    // Do not wait for blocking writes to an output nobody reads any more:
    // everything this process had to say was flushed before `code`.
    runtime.shutdown_background();
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The man page takes every subcommand's exit statuses and notes from
    /// `EPILOGUES` (man.rs): each subcommand has one there, and its `--help`
    /// ends with it.
    #[test]
    fn every_subcommand_ends_its_help_with_its_epilogue() {
        let command = Cli::command();
        let names: Vec<&str> = command
            .get_subcommands()
            .map(clap::Command::get_name)
            .collect();
        let listed: Vec<&str> = EPILOGUES.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, listed);
        for (name, epilogue) in EPILOGUES {
            let subcommand = command.find_subcommand(name).expect("listed above");
            let help = subcommand.get_after_long_help().map(ToString::to_string);
            assert_eq!(help, Some(epilogue.help()), "{name}");
        }
    }

    /// §13.2: seconds are decimal digits with at most one point; nothing
    /// else that a float parser reads (issue 28).
    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(parse_seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_seconds(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        for bad in [
            "0", "0.0", "-3", "+5", "1e3", "NaN", "inf", " 5", "5 ", "1.2.3", ".", "", "soon",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }

    /// §16.4: a reuse window from 1 ms to an hour; below the protocol's
    /// millisecond it is refused, saying why.
    #[test]
    fn reuse_windows_are_within_the_protocols_bounds() {
        assert_eq!(parse_reuse("0.001"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_reuse("3600"), Ok(Duration::from_secs(3600)));
        let refused = parse_reuse("0.0001").unwrap_err();
        assert!(refused.contains("at least 0.001 seconds"), "{refused}");
        for bad in ["3600.001", "1e3", "+5", "inf", " 5"] {
            assert!(parse_reuse(bad).is_err(), "{bad:?}");
        }
    }

    /// §13.1: colours on a terminal only, and never with a non-empty
    /// `NO_COLOR`.
    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        let set = |value: &'static str| Some(OsStr::new(value));
        assert!(log_in_colour(true, None));
        assert!(log_in_colour(true, set("")));
        assert!(!log_in_colour(true, set("1")));
        assert!(!log_in_colour(false, None));
        assert!(!log_in_colour(false, set("")));
    }

    #[test]
    fn keys_are_checked_like_the_protocol_does() {
        assert!(parse_key("build:app").is_ok());
        assert!(parse_key("").is_err());
        assert!(parse_key(&"k".repeat(4097)).is_err());
    }
}
