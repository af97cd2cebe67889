//! The leader's side of `run` (SPEC.md §13.2): start COMMAND, forward its
//! output live, keep a copy for the joiners, and report how it ended.

use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Pid, Signal, kill_process_group};
use single_flight::{Failure, FailureCode, FencingToken};
use single_flight_core::protocol::limits::MAX_FRAME_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::exit;
use super::output::{Exit, Output, Ran, Stream, record_header};
use super::spill;

/// The most output, as records, that travels inside the flight's value. Its
/// base64 text is a third larger (5⅓ MiB), which leaves room in an outcome
/// of `MAX_OUTCOME_BYTES` (8 MiB − 32 KiB) for the rest of the value (SPEC.md
/// §3.4, §5). Larger outputs go through a spill file.
pub const INLINE_OUTPUT_BYTES: usize = MAX_FRAME_BYTES / 2;

/// How much is read from one of COMMAND's pipes at once (what a pipe holds
/// by default on Linux).
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The failure names that cross to joiners when COMMAND cannot start
/// (SPEC.md §13.2); a joiner exits as a shell would.
pub const NOT_FOUND: &str = "CommandNotFound";
pub const NOT_EXECUTABLE: &str = "CommandNotExecutable";

/// What the leader runs.
#[derive(Clone, Debug)]
pub struct CommandLine {
    pub program: OsString,
    pub arguments: Vec<OsString>,
    /// The directory or cluster of the flight, as `SINGLE_FLIGHT_PLACE`
    /// names it to COMMAND (SPEC.md §17.3).
    pub place: String,
}

/// How far the leader's command has come, for the process's signal handling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not started (this process may never lead).
    NotStarted,
    /// Running in its own process group.
    Running { group: Pid },
    /// COMMAND itself exited, but its output is still being read: a process
    /// it started in the background holds a pipe (SPEC.md §13.4).
    Exited { group: Pid },
    /// Exited, and its output was read to the end.
    Finished,
}

/// Shared between the leader's command and the rest of the process.
#[derive(Clone, Debug)]
pub struct Control {
    /// Set once the process stops the call: a command not started yet must
    /// not start any more.
    pub stopping: Arc<AtomicBool>,
    /// Set when a detached leader's caller has left (SPEC.md §15.4): COMMAND
    /// runs on for the joiners, but its output no longer reaches this
    /// process's stdout and stderr.
    pub muted: Arc<AtomicBool>,
    /// Held while COMMAND is started (the `stopping` check, the spawn and
    /// `Progress::Running`) and while the process decides to stop, so that
    /// neither sees the other half done: a detached leader's COMMAND starts
    /// on another thread than the one that handles signals (SPEC.md §15.3).
    pub gate: Arc<std::sync::Mutex<()>>,
    /// Told when a detached leader's work was dropped before COMMAND ended:
    /// nobody waits for it any more (§15.4), and COMMAND must be stopped.
    pub dropped: Arc<tokio::sync::Notify>,
    /// Set when a detached leader is stopped by a second stop signal
    /// (SPEC.md §15.4): what COMMAND wrote must not reach the joiners as its
    /// output, so the work never lands and the flight is interrupted.
    pub abandoned: Arc<AtomicBool>,
    pub progress: watch::Sender<Progress>,
}

impl Control {
    pub fn new() -> Control {
        Control {
            stopping: Arc::new(AtomicBool::new(false)),
            muted: Arc::new(AtomicBool::new(false)),
            dropped: Arc::new(tokio::sync::Notify::new()),
            abandoned: Arc::new(AtomicBool::new(false)),
            gate: Arc::new(std::sync::Mutex::new(())),
            progress: watch::Sender::new(Progress::NotStarted),
        }
    }
}

/// Runs COMMAND as the leader of flight `token`: forwards what it writes to
/// this process's stdout and stderr as it comes, keeps a copy (in memory, or
/// in the flight's spill file past [`INLINE_OUTPUT_BYTES`]), and waits for
/// it to exit. A command that cannot start is a [`Failure`] for every
/// caller.
pub async fn lead(
    command: CommandLine,
    key: String,
    token: FencingToken,
    spill_path: Option<PathBuf>,
    control: Control,
) -> Result<Ran, Failure> {
    // The check, the spawn and `Running` happen under the gate, so that a
    // stop that the process decides cannot slip in between, on this thread
    // or another. No `await` while it is held.
    let gate = control
        .gate
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if control.stopping.load(Ordering::SeqCst) {
        return Err(Failure {
            name: "Stopped".into(),
            message: "the leader was stopped before its command started".into(),
            code: None,
        });
    }
    // A background process group that reads the terminal is stopped
    // (SIGTTIN) forever, with every joiner waiting (SPEC.md §13.2).
    let stdin = if io::stdin().is_terminal() {
        Stdio::null()
    } else {
        Stdio::inherit()
    };
    let spawned = tokio::process::Command::new(&command.program)
        .args(&command.arguments)
        .env("SINGLE_FLIGHT_TOKEN", token.to_string())
        .env("SINGLE_FLIGHT_KEY", &key)
        .env(super::nested::PLACE_VARIABLE, &command.place)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that stopping it reaches everything it
        // started, as `timeout(1)` does.
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Err(start_failure(&command.program, &error)),
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
        .expect("a child that was just spawned has a process id");
    let mut guard = GroupGuard { group, armed: true };
    control.progress.send_replace(Progress::Running { group });
    drop(gate);

    let mut capture = Capture::new(spill_path);
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    // COMMAND's exit is watched while its output is read, not after: a
    // process it left in the background may hold its pipes open, and a
    // leader that is stopping kills the group once COMMAND has exited
    // (SPEC.md §13.4).
    let forwarding = forward(
        stdout,
        stderr,
        own_stream(io::stdout().as_fd()),
        own_stream(io::stderr().as_fd()),
        &mut capture,
        &control.muted,
    );
    let exiting = async {
        let status = child.wait().await;
        control.progress.send_if_modified(|progress| {
            let running = matches!(progress, Progress::Running { .. });
            if running {
                *progress = Progress::Exited { group };
            }
            running
        });
        status
    };
    let ((), status) = tokio::join!(forwarding, exiting);
    let status = status.map_err(|error| Failure {
        name: "WaitFailed".into(),
        message: format!("cannot learn how the command ended: {error}"),
        code: error
            .raw_os_error()
            .map(|errno| FailureCode::Number(errno.into())),
    })?;
    guard.armed = false;
    control.progress.send_replace(Progress::Finished);
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(u8::try_from(code).unwrap_or(u8::MAX)),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(u8::MAX),
    };
    Ok(Ran {
        exit,
        output: capture.finish(),
    })
}

/// One of this process's own streams, for writing without blocking the
/// runtime: a duplicate of its descriptor, written on tokio's blocking
/// threads (the crate's tokio has no `io-std` feature; `fs` does the same).
/// `None` when the stream is closed.
fn own_stream(fd: BorrowedFd<'_>) -> Option<tokio::fs::File> {
    let owned = fd.try_clone_to_owned().ok()?;
    Some(tokio::fs::File::from_std(std::fs::File::from(owned)))
}

/// Why COMMAND could not start, in the words and with the exit status a
/// shell would use: 127 when it does not exist, 126 when it cannot be run.
fn start_failure(program: &OsString, error: &io::Error) -> Failure {
    let shown = program.to_string_lossy();
    // A path (not a name looked up in PATH) to a file that exists.
    let existing_file = Path::new(program).components().count() > 1 && Path::new(program).exists();
    let (name, message) = if error.kind() == io::ErrorKind::NotFound && !existing_file {
        (
            NOT_FOUND,
            format!("cannot run {shown:?}: command not found"),
        )
    } else if error.kind() == io::ErrorKind::NotFound {
        // The file exists, so what is missing is its interpreter (`#!`).
        (
            NOT_EXECUTABLE,
            format!("cannot run {shown:?}: its interpreter was not found ({error})"),
        )
    } else {
        (NOT_EXECUTABLE, format!("cannot run {shown:?}: {error}"))
    };
    Failure {
        name: name.into(),
        message,
        code: error
            .raw_os_error()
            .map(|errno| FailureCode::Number(errno.into())),
    }
}

/// The exit code of a failure that a leader shared (SPEC.md §13.3).
pub fn exit_code_of(failure: &Failure) -> u8 {
    match failure.name.as_str() {
        NOT_FOUND => exit::NOT_FOUND,
        NOT_EXECUTABLE => exit::NOT_EXECUTABLE,
        // The leader ran COMMAND but could not keep its output (§13.2).
        "EncodeError" => exit::INTERRUPTED,
        _ => exit::FAILED,
    }
}

/// Kills COMMAND's process group unless disarmed: when the leader's work is
/// dropped (its call stopped, or the process ends) COMMAND must not go on
/// unwatched.
struct GroupGuard {
    group: Pid,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = kill_process_group(self.group, Signal::KILL);
        }
    }
}

/// Reads both pipes until both end, writing each piece to this process's
/// matching stream and to `capture`, in the order read.
async fn forward(
    mut command_stdout: impl AsyncRead + Unpin,
    mut command_stderr: impl AsyncRead + Unpin,
    stdout: Option<impl AsyncWrite + Unpin>,
    stderr: Option<impl AsyncWrite + Unpin>,
    capture: &mut Capture,
    muted: &AtomicBool,
) {
    let mut stdout = LiveSink { writer: stdout };
    let mut stderr = LiveSink { writer: stderr };
    let mut out_buffer = vec![0; READ_CHUNK_BYTES];
    let mut err_buffer = vec![0; READ_CHUNK_BYTES];
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        tokio::select! {
            read = command_stdout.read(&mut out_buffer), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(read) => {
                    if !muted.load(Ordering::SeqCst) {
                        stdout.write(&out_buffer[..read]).await;
                    }
                    capture.push(Stream::Stdout, &out_buffer[..read]);
                }
            },
            read = command_stderr.read(&mut err_buffer), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(read) => {
                    if !muted.load(Ordering::SeqCst) {
                        stderr.write(&err_buffer[..read]).await;
                    }
                    capture.push(Stream::Stderr, &err_buffer[..read]);
                }
            },
        }
    }
}

/// One of this process's streams, written until it fails (its reader went
/// away); COMMAND's output is still kept for the joiners then.
struct LiveSink<W> {
    writer: Option<W>,
}

impl<W: AsyncWrite + Unpin> LiveSink<W> {
    async fn write(&mut self, bytes: &[u8]) {
        if let Some(writer) = &mut self.writer {
            let written = async {
                writer.write_all(bytes).await?;
                writer.flush().await
            };
            if written.await.is_err() {
                self.writer = None;
            }
        }
    }
}

/// The copy of COMMAND's output that the joiners receive, as records
/// (SPEC.md §13.2).
struct Capture {
    inline: Vec<u8>,
    /// `None` where there is no flight directory to spill into (a cluster,
    /// SPEC.md §14.8): the output is shared up to the inline limit only.
    spill_path: Option<PathBuf>,
    spill: Option<BufWriter<std::fs::File>>,
    spilled_bytes: u64,
    failed: Option<String>,
}

impl Capture {
    fn new(spill_path: Option<PathBuf>) -> Capture {
        Capture {
            inline: Vec::new(),
            spill_path,
            spill: None,
            spilled_bytes: 0,
            failed: None,
        }
    }

    fn push(&mut self, stream: Stream, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let header = record_header(stream, data.len());
        if self.spill.is_none()
            && self.inline.len() + header.len() + data.len() <= INLINE_OUTPUT_BYTES
        {
            self.inline.extend_from_slice(&header);
            self.inline.extend_from_slice(data);
            return;
        }
        let Some(spill_path) = self.spill_path.clone() else {
            self.failed = Some(format!(
                "COMMAND's output is over {} MiB, the most a flight shares without a flight directory to spill into (cluster mode, SPEC.md §14.8); keep a large result in storage every host reads and print where it is",
                INLINE_OUTPUT_BYTES >> 20
            ));
            self.inline = Vec::new();
            return;
        };
        if let Err(error) = self.spill(&spill_path, &header, data) {
            self.failed = Some(format!(
                "the leader could not keep COMMAND's output ({} bytes and more) in {}: {error}; run again, or free space in the flight directory",
                self.spilled_bytes + self.inline.len() as u64,
                spill_path.display()
            ));
            self.inline = Vec::new();
            // Remove the file only if this process made it: the name may
            // have been taken by someone else.
            if self.spill.take().is_some() {
                let _ = std::fs::remove_file(&spill_path);
            }
        }
    }

    /// Appends a record to the spill file, creating it with what was kept
    /// in memory so far.
    fn spill(&mut self, path: &Path, header: &[u8], data: &[u8]) -> io::Result<()> {
        if self.spill.is_none() {
            let mut file = BufWriter::new(spill::create_spill(path)?);
            file.write_all(&self.inline)?;
            self.spilled_bytes = self.inline.len() as u64;
            self.inline = Vec::new();
            self.spill = Some(file);
        }
        let file = self.spill.as_mut().expect("created above");
        file.write_all(header)?;
        file.write_all(data)?;
        self.spilled_bytes += (header.len() + data.len()) as u64;
        Ok(())
    }

    fn finish(mut self) -> Output {
        if let Some(reason) = self.failed.take() {
            return Output::Unshared(reason);
        }
        match self.spill.take() {
            None => Output::Inline(self.inline),
            Some(file) => match file.into_inner().map_err(|error| error.into_error()) {
                Ok(_) => Output::Spilled {
                    bytes: self.spilled_bytes,
                },
                Err(error) => {
                    // A spill file was made, so it has a path.
                    let path = self.spill_path.unwrap_or_default();
                    let _ = std::fs::remove_file(&path);
                    Output::Unshared(format!(
                        "the leader could not finish writing COMMAND's output to {}: {error}; run again, or free space in the flight directory",
                        path.display()
                    ))
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::output::{RECORD_HEADER_BYTES, Sink, replay};

    fn scratch(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sf-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).unwrap();
        path
    }

    fn replayed(output: &Output, spill_path: &Path) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        {
            let mut stdout_sink = Sink::new(&mut out);
            let mut stderr_sink = Sink::new(&mut err);
            match output {
                Output::Inline(records) => {
                    replay(&records[..], &mut stdout_sink, &mut stderr_sink).unwrap()
                }
                Output::Spilled { bytes } => {
                    let file = std::fs::File::open(spill_path).unwrap();
                    assert_eq!(file.metadata().unwrap().len(), *bytes);
                    replay(file, &mut stdout_sink, &mut stderr_sink).unwrap()
                }
                Output::Unshared(reason) => panic!("{reason}"),
            }
        }
        (out, err)
    }

    #[test]
    fn small_outputs_stay_in_memory() {
        let dir = scratch("capture-small");
        let path = dir.join("spill");
        let mut capture = Capture::new(Some(path.clone()));
        capture.push(Stream::Stdout, b"out\0\xff");
        capture.push(Stream::Stderr, b"err");
        let output = capture.finish();
        assert!(matches!(output, Output::Inline(_)));
        assert!(!path.exists());
        assert_eq!(
            replayed(&output, &path),
            (b"out\0\xff".to_vec(), b"err".to_vec())
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn large_outputs_spill_to_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("capture-large");
        let path = dir.join("spill");
        let mut capture = Capture::new(Some(path.clone()));
        let piece = vec![b'x'; READ_CHUNK_BYTES];
        let mut expected = Vec::new();
        while expected.len() <= INLINE_OUTPUT_BYTES {
            capture.push(Stream::Stdout, &piece);
            expected.extend_from_slice(&piece);
        }
        capture.push(Stream::Stderr, b"done");
        let output = capture.finish();
        assert!(matches!(output, Output::Spilled { .. }), "{output:?}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(replayed(&output, &path), (expected, b"done".to_vec()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_output_that_cannot_be_kept_is_unshared() {
        let dir = scratch("capture-unshared");
        // The spill file's name is taken: it is never written over.
        let path = dir.join("spill");
        std::fs::write(&path, b"someone else's").unwrap();
        let mut capture = Capture::new(Some(path.clone()));
        capture.push(Stream::Stdout, &vec![0; INLINE_OUTPUT_BYTES + 1]);
        assert!(matches!(capture.finish(), Output::Unshared(_)));
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// §14.8: without a directory, an output over the inline limit is not
    /// shared, and says why; one within it is shared as everywhere.
    #[test]
    fn without_a_directory_large_outputs_are_unshared() {
        let mut capture = Capture::new(None);
        capture.push(
            Stream::Stdout,
            &vec![b'x'; INLINE_OUTPUT_BYTES - RECORD_HEADER_BYTES],
        );
        assert!(matches!(capture.finish(), Output::Inline(_)));
        let mut capture = Capture::new(None);
        capture.push(Stream::Stdout, &vec![b'x'; INLINE_OUTPUT_BYTES]);
        capture.push(Stream::Stderr, b"more");
        match capture.finish() {
            Output::Unshared(reason) => assert!(reason.contains("§14.8"), "{reason}"),
            other => panic!("shared without a directory: {other:?}"),
        }
    }

    #[test]
    fn commands_that_cannot_start_fail_as_in_a_shell() {
        let missing = io::Error::from_raw_os_error(2);
        let failure = start_failure(&"no-such-command".into(), &missing);
        assert_eq!(failure.name, NOT_FOUND);
        assert_eq!(exit_code_of(&failure), 127);
        let denied = io::Error::from_raw_os_error(13);
        let failure = start_failure(&"/etc/hostname".into(), &denied);
        assert_eq!(failure.name, NOT_EXECUTABLE);
        assert_eq!(exit_code_of(&failure), 126);
        // A script whose `#!` interpreter is missing exists itself.
        let failure = start_failure(&"/etc/hostname".into(), &missing);
        assert_eq!(failure.name, NOT_EXECUTABLE);
    }
}
