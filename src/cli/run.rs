//! `single-flight run` (SPEC.md §13): one call of the library whose work is
//! COMMAND, and everything around it that a process needs: signals, a
//! timeout, the output of a joiner, the exit code.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::process::{Signal, kill_process_group};
use single_flight::{Failure, FencingToken, Landed, Role, RunError, SingleFlight, StatusError};

use super::RunArgs;
use super::capture::{self, CommandLine, Control, Progress};
use super::exit;
use super::nested;
use super::output::{Output, Ran, RanCodec, Sink, replay};
use super::signals::{Received, Signals};
use super::spill;

/// How long a leader's COMMAND has to exit after the signal that stops it
/// (the SIGINT, SIGTERM or SIGHUP this process received, passed on; SIGTERM
/// at `--timeout`) before its process group is killed: room to remove a
/// temporary file or release a lock, as `docker stop` gives.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// How the call ended.
enum Ending {
    Returned(Result<Landed<Ran>, RunError<Failure>>),
    Signalled(Received),
    TimedOut(Duration),
}

/// Runs the subcommand; returns the exit code (SPEC.md §13.3).
pub async fn run(args: RunArgs) -> u8 {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => {
            say(format_args!("cannot handle signals: {error}"));
            return exit::FAILED;
        }
    };
    if std::env::var_os("RUST_LOG").is_some() {
        // Only on request: otherwise stderr carries COMMAND's bytes alone.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(super::log_colours())
            .try_init();
    }
    let place = match args.place.place() {
        Ok(place) => place,
        Err(error) => {
            say(error);
            return exit::FAILED;
        }
    };
    if args.reuse.is_some() {
        keep_a_coordinator(&place, &args).await;
    }
    // Spill files need a directory every process shares; a cluster has
    // none, and its outputs are bounded instead (SPEC.md §14.8).
    let directory = place.directory().map(Path::to_owned);
    let builder = match place.builder_with_grace(args.grace) {
        Ok(builder) => builder,
        Err(error) => {
            say(error);
            return exit::FAILED;
        }
    };
    let flights = match builder.open().await {
        Ok(flights) => flights,
        Err(error) => {
            say(error);
            return exit::FAILED;
        }
    };
    // After opening, which creates the directory that it resolves.
    let identity = nested::identity(&place, &args.key);
    let spill = directory.map(|directory| Spill {
        tag: spill::key_tag(&args.key),
        directory,
    });
    let interest = match &spill {
        None => None,
        Some(spill) => {
            let interest = tokio::select! {
                interest = spill::declare_interest(&spill.directory, &spill.tag) => interest,
                received = signals.recv() => {
                    flights.close().await;
                    return received.exit_code();
                }
            };
            match interest {
                Ok(interest) => Some(interest),
                Err(error) => {
                    say(format_args!(
                        "cannot lock the output files of {:?} in {}: {error}",
                        args.key,
                        spill.directory.display()
                    ));
                    flights.close().await;
                    return exit::FAILED;
                }
            }
        }
    };

    let control = Control::new();
    let mut ending = call(
        &flights,
        &identity,
        &args,
        spill.as_ref(),
        &control,
        &mut signals,
        args.reuse,
    )
    .await;
    if let Ending::Returned(Ok(Landed {
        role: Role::Reused,
        value,
        token,
    })) = &ending
        && matches!(value.output, Output::Spilled { .. })
        && spill
            .as_ref()
            .is_none_or(|spill| !spill.path(*token).exists())
    {
        // §16.4: the kept output's spill file was swept once nobody was
        // interested in it; the value is of no use, so the call is made
        // again as if without --reuse.
        say(format_args!(
            "the reused output of {:?} (token {token}) was in a spill file that is gone; running the call again without --reuse",
            args.key
        ));
        ending = call(
            &flights,
            &identity,
            &args,
            spill.as_ref(),
            &control,
            &mut signals,
            None,
        )
        .await;
    }
    let code = match ending {
        Ending::Returned(result) => tokio::select! {
            code = finish(result, &args, spill.as_ref()) => code,
            received = signals.recv() => received.exit_code(),
        },
        Ending::Signalled(received) if args.detach && leading(&control) => {
            let left = format!("stopped by {}", received.name());
            outlive(&control, &left, received.signal(), &mut signals, &args).await;
            received.exit_code()
        }
        Ending::TimedOut(timeout) if args.detach && leading(&control) => {
            let left = format!("no outcome within {timeout:?} (--timeout)");
            outlive(&control, &left, Signal::TERM, &mut signals, &args).await;
            exit::TIMED_OUT
        }
        Ending::Signalled(received) => {
            stop_command(&control, received.signal(), &mut signals).await;
            if args.verbose {
                say(format_args!(
                    "stopped by {}; the call for {:?} was withdrawn",
                    received.name(),
                    args.key
                ));
            }
            received.exit_code()
        }
        Ending::TimedOut(timeout) => {
            let led = stop_command(&control, Signal::TERM, &mut signals).await;
            say(format_args!(
                "no outcome for {:?} within {timeout:?} (--timeout); {}",
                args.key,
                if led {
                    "stopped the command and interrupted the flight's joiners"
                } else {
                    "stopped waiting"
                }
            ));
            exit::TIMED_OUT
        }
    };
    // Lets this process's land reach the joiners, and ends its term cleanly
    // if it coordinates (SPEC.md §10.4).
    flights.close().await;
    drop(interest);
    if let Some(spill) = &spill {
        spill::sweep(&spill.directory);
    }
    code
}

/// How long a run with `--reuse` waits for the coordinator it started in
/// the background to take office (SPEC.md §16.4): a process start and one
/// election, far less on any machine; past it the run goes on without, as
/// if it could not be started.
const BACKGROUND_COORDINATOR_PATIENCE: Duration = Duration::from_secs(5);

/// How often that wait looks whether a coordinator answers: the election's
/// own poll interval (SPEC.md §7.2).
const BACKGROUND_COORDINATOR_POLL: Duration = Duration::from_millis(10);

/// §16.4: outputs are kept by the coordinator for its term, and a `run` that
/// coordinates takes its term with it when it exits. So a run with `--reuse`
/// that finds no coordinator starts one in the background first — this
/// binary's `serve --while-needed`, in a process group and with standard
/// streams of its own, which ends once no client and no kept output is
/// left — and waits until some process coordinates. Where that cannot be
/// done, it says on stderr that its output is kept only while it runs.
async fn keep_a_coordinator(place: &super::place::Place, args: &RunArgs) {
    // Only when nobody coordinates: any other answer (a coordinator, or an
    // error that opening the place will report better) leaves it at that.
    let nobody = |status| matches!(status, Err(StatusError::NoCoordinator { .. }));
    if !nobody(place.status().await) {
        return;
    }
    let Some(directory) = place.directory() else {
        say(format_args!(
            "no coordinator runs in {}, and this run's output would be kept (--reuse) only until it exits: keep `single-flight serve` running on a host of the cluster so that later runs reuse it (SPEC.md §16.4)",
            place.describe()
        ));
        return;
    };
    use std::os::unix::process::CommandExt;
    let started = std::env::current_exe().and_then(|binary| {
        // It runs in `/`, so as not to keep the caller's working directory
        // busy for its lifetime; hence the directory's absolute path.
        let directory = std::path::absolute(directory)?;
        let mut command = std::process::Command::new(binary);
        command
            .current_dir("/")
            .arg("serve")
            .arg("--while-needed")
            .arg("--dir")
            .arg(directory);
        if let Some(grace) = args.grace {
            command.arg("--grace").arg(grace.to_string());
        }
        command
            // Nothing of the caller's: a pipe it reads to its end (`$(…)`,
            // a cron job's mail) must close when this run exits, and a
            // terminal's SIGINT or SIGHUP is for the run, not for the
            // coordinator that outlives it.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
    });
    let mut child = match started {
        Ok(child) => child,
        Err(error) => {
            say(format_args!(
                "cannot start a coordinator to keep the output of {:?} after this run ({error}); it is kept (--reuse) only until this run exits (SPEC.md §16.4)",
                args.key
            ));
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + BACKGROUND_COORDINATOR_PATIENCE;
    // Until someone coordinates: the background one, or another process
    // that won the election first (the background one then exits, and this
    // run's output lasts as long as that term). Its exit is reaped here; once
    // this run exits it is no longer this run's child.
    while nobody(place.status().await) {
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_))
            || tokio::time::Instant::now() >= deadline
        {
            return;
        }
        tokio::time::sleep(BACKGROUND_COORDINATOR_POLL).await;
    }
}

/// Where the spill files of this run's key go (SPEC.md §13.2).
#[derive(Clone)]
struct Spill {
    directory: PathBuf,
    tag: String,
}

impl Spill {
    fn path(&self, token: FencingToken) -> PathBuf {
        spill::spill_path(&self.directory, &self.tag, token)
    }
}

/// Stops COMMAND from starting, if it has not, and says how far it has
/// come, under the gate that its start holds (`capture::lead`), so that a
/// COMMAND starting on another thread is either running here or never
/// starts.
fn stop_starting(control: &Control) -> Progress {
    let _gate = control
        .gate
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    control.stopping.store(true, Ordering::SeqCst);
    *control.progress.borrow()
}

/// Whether this process's COMMAND runs: it leads the flight. From now on a
/// COMMAND that had not started never does.
fn leading(control: &Control) -> bool {
    matches!(
        stop_starting(control),
        Progress::Running { .. } | Progress::Exited { .. }
    )
}

/// A detached leader's caller left (SPEC.md §15.4): COMMAND's output stops
/// reaching this process's stdout and stderr, and COMMAND runs on while
/// anyone waits for the flight. Returns once COMMAND has ended (its output
/// is landed for the joiners), or has been stopped because nobody waits any
/// more or because a second stop request came.
async fn outlive(
    control: &Control,
    why: &str,
    signal: Signal,
    signals: &mut Signals,
    args: &RunArgs,
) {
    control.muted.store(true, Ordering::SeqCst);
    if args.verbose {
        say(format_args!(
            "{why}; the command of {:?} goes on for the runs that joined it (--detach)",
            args.key
        ));
    }
    let mut progress = control.progress.subscribe();
    tokio::select! {
        _ = progress.wait_for(|now| *now == Progress::Finished) => {
            if args.verbose {
                say(format_args!("the command of {:?} ended; its output goes to the runs that joined it", args.key));
            }
        }
        () = control.dropped.notified() => {
            if args.verbose {
                say(format_args!("nobody waits for the flight of {:?} any more; stopping its command", args.key));
            }
            stop_command(control, signal, signals).await;
        }
        _ = signals.recv() => {
            // §15.4: the caller asked twice. COMMAND is killed at once, and
            // what it wrote so far is not its output: the work never lands,
            // so its joiners are interrupted when this process ends (§8.7).
            control.abandoned.store(true, Ordering::SeqCst);
            if let Progress::Running { group } | Progress::Exited { group } = stop_starting(control) {
                let _ = kill_process_group(group, Signal::KILL);
            }
            if args.verbose {
                say(format_args!("stopped again; killed the command of {:?} and interrupted the runs that joined it", args.key));
            }
        }
    }
}

/// Tells `control` when a detached leader's work is dropped before its end
/// (SPEC.md §15.4).
struct Dropped {
    control: Option<Control>,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        if let Some(control) = self.control.take() {
            control.dropped.notify_one();
        }
    }
}

/// Makes the call and waits for it, a stop request or the timeout. On a
/// stop or the timeout the call is withdrawn: a leader's joiners are
/// interrupted at once (SPEC.md §8.6), while its COMMAND is still stopping;
/// with `--detach`, a leader's flight goes on for them (§15.4).
async fn call(
    flights: &SingleFlight,
    place: &str,
    args: &RunArgs,
    spill: Option<&Spill>,
    control: &Control,
    signals: &mut Signals,
    reuse: Option<Duration>,
) -> Ending {
    let command = CommandLine {
        program: args.command[0].clone(),
        arguments: args.command[1..].to_vec(),
        place: place.to_owned(),
    };
    let work = {
        let (key, control) = (args.key.clone(), control.clone());
        // Owned: a detached work runs on a thread of its own (SPEC.md §15.3).
        let spill = spill.cloned();
        move |token: FencingToken| async move {
            let spill_path = spill.map(|spill| spill.path(token));
            let mut dropped = Dropped {
                control: Some(control.clone()),
            };
            let abandoned = control.abandoned.clone();
            // A task of its own, so that COMMAND is still watched (and its
            // output still forwarded) while it stops after the call was
            // withdrawn.
            let leading = tokio::spawn(capture::lead(command, key, token, spill_path, control));
            let ran = leading.await.unwrap_or_else(|error| {
                Err(Failure {
                    name: "LeaderFailed".into(),
                    message: format!("the leader's task ended abnormally: {error}"),
                    code: None,
                })
            });
            dropped.control = None;
            if abandoned.load(Ordering::SeqCst) {
                // A detached leader stopped twice (§15.4): nothing lands, and
                // the flight ends with this process, interrupted.
                std::future::pending::<()>().await;
            }
            ran
        }
    };
    let mut call = flights.call(&args.key).codec(RanCodec);
    if let Some(window) = reuse {
        call = call.reuse_for(window);
    }
    if let Some(parent) = nested::parent_of(place) {
        call = call.parent(parent);
    }
    let running: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> = if args.detach {
        Box::pin(call.detached().run(work))
    } else {
        Box::pin(call.run(work))
    };
    let timeout = async {
        match args.timeout {
            Some(timeout) => {
                tokio::time::sleep(timeout).await;
                timeout
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = running => Ending::Returned(result),
        received = signals.recv() => Ending::Signalled(received),
        timeout = timeout => Ending::TimedOut(timeout),
    }
}

/// Stops a leader's COMMAND once its call was withdrawn: passes `signal` on
/// to its process group, and kills the group once COMMAND has exited,
/// [`KILL_GRACE`] later, or at the next stop request, whichever comes first,
/// unless its output has been read to the end by then. Returns whether this
/// process was leading.
async fn stop_command(control: &Control, signal: Signal, signals: &mut Signals) -> bool {
    let mut progress = control.progress.subscribe();
    let group = match stop_starting(control) {
        Progress::NotStarted => return false,
        Progress::Finished => return true,
        Progress::Running { group } | Progress::Exited { group } => group,
    };
    let _ = kill_process_group(group, signal);
    // §13.4: the group is killed once COMMAND itself has exited (what it
    // left in the background would otherwise hold the leader, and its
    // output, until it ends), or at the bound, or at the next stop request.
    tokio::select! {
        _ = progress.wait_for(|now| !matches!(now, Progress::Running { .. })) => {}
        () = tokio::time::sleep(KILL_GRACE) => {}
        _ = signals.recv() => {}
    }
    if *progress.borrow() != Progress::Finished {
        let _ = kill_process_group(group, Signal::KILL);
    }
    true
}

/// What a call that returned means for this process: the output of a
/// joiner, messages, and the exit code.
async fn finish(
    result: Result<Landed<Ran>, RunError<Failure>>,
    args: &RunArgs,
    spill: Option<&Spill>,
) -> u8 {
    let key = &args.key;
    match result {
        Ok(Landed {
            value,
            role: Role::Led,
            token,
        }) => {
            // COMMAND's output was forwarded as it came.
            if let Output::Unshared(reason) = &value.output {
                say(format_args!("{reason} (its joiners exit 75)"));
            }
            if args.verbose {
                say(format_args!("led the flight of {key:?} (token {token})"));
            }
            value.exit.status()
        }
        Ok(Landed {
            value,
            role: role @ (Role::Joined | Role::Reused),
            token,
        }) => {
            let spill_path = spill.map(|spill| spill.path(token));
            let written =
                tokio::task::spawn_blocking(move || write_output(value.output, spill_path))
                    .await
                    .unwrap_or_else(|error| Err(format!("writing the output failed: {error}")));
            if let Err(error) = written {
                say(format_args!(
                    "the output of the flight of {key:?} is lost: {error}; nothing ran here: run again to start a new flight"
                ));
                return exit::INTERRUPTED;
            }
            if args.verbose {
                if role == Role::Reused {
                    say(format_args!(
                        "reused the output of the flight of {key:?} (token {token}), which landed within --reuse; nothing ran"
                    ));
                } else {
                    say(format_args!(
                        "joined the flight of {key:?} (token {token}) led by another process"
                    ));
                }
            }
            value.exit.status()
        }
        // This process led, and COMMAND could not start; its joiners get
        // the same failure.
        Err(RunError::Work(failure)) => {
            say(&failure.message);
            capture::exit_code_of(&failure)
        }
        Err(RunError::FlightFailed { failure, .. }) => {
            let code = capture::exit_code_of(&failure);
            match code {
                exit::NOT_FOUND | exit::NOT_EXECUTABLE => say(&failure.message),
                exit::INTERRUPTED => say(format_args!(
                    "the leader of the flight of {key:?} ran the command but could not share its output ({}); nothing ran here: run again to start a new flight",
                    failure.message
                )),
                _ => say(format_args!(
                    "the flight of {key:?} failed in its leader's process: {failure}"
                )),
            }
            code
        }
        // §17.3: COMMAND of another flight made this run, which would have
        // waited for a flight that waits for that one.
        Err(error @ RunError::Cycle { .. }) => {
            say(error);
            exit::CYCLE
        }
        Err(RunError::Interrupted {
            lost_in_failover: false,
            ..
        }) => {
            say(format_args!(
                "the flight of {key:?} was interrupted: its leader was killed or stopped before the command finished; nothing ran here: run again to start a new flight"
            ));
            exit::INTERRUPTED
        }
        // §13.3: the leader may well have finished; say what is known.
        // (A killed leader that was its own coordinator ends here too.)
        Err(RunError::Interrupted {
            lost_in_failover: true,
            ..
        }) => {
            say(format_args!(
                "the flight of {key:?} was interrupted when its coordinator changed: its leader did not bring the flight back to the new coordinator within the grace window (the leader was killed or stopped, or it finished or went on but did not reach the new coordinator in time); nothing ran here: run again to start a new flight"
            ));
            exit::INTERRUPTED
        }
        Err(error) => {
            say(error);
            exit::FAILED
        }
    }
}

/// Writes a joined flight's output to this process's stdout and stderr;
/// `spill_path` is `None` where there is no flight directory (a cluster).
fn write_output(output: Output, spill_path: Option<PathBuf>) -> Result<(), String> {
    let mut stdout = Sink::new(std::io::stdout().lock());
    let mut stderr = Sink::new(std::io::stderr().lock());
    match output {
        Output::Inline(records) => replay(&records[..], &mut stdout, &mut stderr),
        Output::Spilled { bytes } => {
            let Some(spill_path) = spill_path else {
                // Only a leader with a directory spills; this one is of
                // another build or mode (SPEC.md §14.8).
                return Err(format!(
                    "the leader wrote its {bytes} bytes to a spill file, and a cluster has no flight directory to read it from"
                ));
            };
            let spill_path = spill_path.as_path();
            // This process's interest in the key keeps the file until it
            // is done (§13.2).
            let file = spill::open_spill(spill_path)
                .map_err(|error| format!("cannot open {}: {error}", spill_path.display()))?;
            let length = file
                .metadata()
                .map_err(|error| format!("cannot inspect {}: {error}", spill_path.display()))?
                .len();
            if length != bytes {
                return Err(format!(
                    "{} holds {length} bytes, but the leader wrote {bytes}",
                    spill_path.display()
                ));
            }
            replay(BufReader::new(file), &mut stdout, &mut stderr)
        }
        Output::Unshared(reason) => Err(reason),
    }
}

/// One line on stderr, said by single-flight itself, in one `write` so
/// that the lines of processes sharing a terminal or a pipe do not mix
/// (`eprintln!` writes its pieces one by one to the unbuffered stderr).
fn say(message: impl std::fmt::Display) {
    let line = format!("single-flight: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}
