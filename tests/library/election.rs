//! Election and the flight directory (SPEC.md §7), with real processes.
//!
//! Tests that need other processes run this test binary again as a child
//! (support/child.rs) in a role of [`child`], on the directory named by
//! `ELECTION_CHILD_DIRECTORY`. A child reports each fact as a line, which
//! the test receives with the instant its reader read it. A child that
//! holds the claim keeps it until the test closes its standard input.

use std::env;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use single_flight::_internal::election::local::{
    DirectoryError, DirectoryOptions, EPOCH_FILE, EPOCH_TEMP_PREFIX, ElectionOptions, EpochProblem,
    LOCK_FILE, LeaderElection, LocalError, prepare_directory,
};

use crate::support::PATIENCE;
use crate::support::child::{self, Children, Report, say};

const DIRECTORY: &str = "ELECTION_CHILD_DIRECTORY";
const TIMEOUT_MS: &str = "ELECTION_CHILD_TIMEOUT_MS";
const TERMS: &str = "ELECTION_CHILD_TERMS";

/// An attempt at the claim while another process holds it must return well
/// before rusqlite's default busy timeout of 5 s (SPEC.md §7.2). Generous,
/// because the machine may be busy; it only has to tell "returns" from
/// "sleeps in SQLite for 5 s".
const NOT_BLOCKED: Duration = Duration::from_millis(2500);

// ---------------------------------------------------------------------------
// The child side.

/// A child of this module in `role` (support/child.rs); its exit code. A
/// child that fails says `error` and why.
pub fn child(role: &str) -> i32 {
    match run_child(role) {
        Ok(()) => 0,
        Err(message) => {
            say(format_args!("error {message}"));
            2
        }
    }
}

fn number_from_env(name: &str) -> Result<u64, String> {
    env::var(name)
        .map_err(|_| format!("{name} is not set"))?
        .parse()
        .map_err(|_| format!("{name} is not a number"))
}

fn run_child(role: &str) -> Result<(), String> {
    let directory = PathBuf::from(env::var(DIRECTORY).map_err(|_| "no directory".to_owned())?);
    let election = LeaderElection::new(&directory, ElectionOptions::default())
        .map_err(|error| error.to_string())?;
    match role {
        "campaign-and-hold" | "campaign-and-resign" => {
            let timeout = Duration::from_millis(number_from_env(TIMEOUT_MS)?);
            say("ready");
            match election
                .campaign(timeout)
                .map_err(|error| error.to_string())?
            {
                None => say("lost"),
                Some(term) => {
                    say(format_args!("won {}", term.epoch()));
                    if role == "campaign-and-hold" {
                        // Hold the claim until the test closes our stdin (or
                        // dies, which closes it too).
                        let _ = io::stdin().read_to_end(&mut Vec::new());
                        term.check().map_err(|error| error.to_string())?;
                    }
                    term.resign().map_err(|error| error.to_string())?;
                    say("resigned");
                }
            }
        }
        "terms" => {
            for _ in 0..number_from_env(TERMS)? {
                let term = election
                    .campaign(PATIENCE)
                    .map_err(|error| error.to_string())?
                    .ok_or("no term within the patience bound")?;
                let epoch = u64::from(term.epoch().get());
                // A marker only one holder at a time can create: a second
                // holder would find it in place.
                let marker = directory.join("holder");
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&marker)
                    .map_err(|error| format!("two holders at once at epoch {epoch}: {error}"))?;
                let last_path = directory.join("last-epoch");
                let last: u64 = match fs::read_to_string(&last_path) {
                    Ok(text) => text.parse().map_err(|_| "bad last-epoch")?,
                    Err(_) => 0,
                };
                if epoch <= last {
                    return Err(format!("epoch {epoch} is not above the last {last}"));
                }
                fs::write(&last_path, epoch.to_string()).map_err(|error| error.to_string())?;
                fs::remove_file(&marker).map_err(|error| error.to_string())?;
                say(format_args!("term {epoch}"));
                term.resign().map_err(|error| error.to_string())?;
            }
            say("done");
        }
        other => return Err(format!("unknown role {other}")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The test side.

/// The epoch of a `won <epoch>` report.
fn won(report: &Report) -> Option<u32> {
    report.line.strip_prefix("won ")?.parse().ok()
}

/// What the tests of the election do with their children.
trait Campaigns {
    /// Starts a child in `role` on `directory`, with further environment.
    fn spawn_role(&mut self, role: &str, directory: &Path, environment: &[(&str, String)])
    -> usize;

    fn spawn_campaign(&mut self, role: &str, directory: &Path, timeout: Duration) -> usize {
        let timeout = timeout.as_millis().to_string();
        self.spawn_role(role, directory, &[(TIMEOUT_MS, timeout)])
    }

    /// The next report of any child other than `ready`.
    fn next_outcome(&mut self) -> Report;

    /// Runs a child that makes one attempt (or several, within `timeout`),
    /// resigns if it won, and exits; returns its outcome line.
    fn campaign_once(&mut self, directory: &Path, timeout: Duration) -> String;
}

impl Campaigns for Children {
    fn spawn_role(
        &mut self,
        role: &str,
        directory: &Path,
        environment: &[(&str, String)],
    ) -> usize {
        let mut command = child::command("election", role);
        command
            .env(DIRECTORY, directory)
            .envs(environment.iter().map(|(name, value)| (name, value)));
        self.spawn(command)
    }

    fn next_outcome(&mut self) -> Report {
        loop {
            let report = self.next();
            if report.line != "ready" {
                return report;
            }
        }
    }

    fn campaign_once(&mut self, directory: &Path, timeout: Duration) -> String {
        let child = self.spawn_campaign("campaign-and-resign", directory, timeout);
        let outcome = loop {
            let report = self.next();
            assert_eq!(report.child, child, "{report:?}");
            if report.line != "ready" {
                break report.line;
            }
        };
        if outcome.starts_with("won ") {
            assert_eq!(self.next().line, "resigned");
        }
        let status = self.wait(child);
        assert!(
            outcome.starts_with("error") || status.success(),
            "{outcome}: {status}"
        );
        outcome
    }
}

/// A scratch directory for one test, removed at the end; the flight directory
/// inside it does not exist until the test prepares it.
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = env::temp_dir().join(format!(
            "single-flight-election-{}-{}-{name}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir(&base).expect("creating a scratch directory");
        Scratch { base }
    }

    fn flight(&self) -> PathBuf {
        self.base.join("flight")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn election(directory: &Path) -> LeaderElection {
    LeaderElection::new(directory, ElectionOptions::default()).expect("a valid flight directory")
}

/// A flight directory, prepared, with an election on it.
fn prepared(scratch: &Scratch) -> (PathBuf, LeaderElection) {
    let directory = scratch.flight();
    let election = election(&directory);
    (directory, election)
}

fn temp_files(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(directory)
        .expect("listing the flight directory")
        .map(|entry| entry.expect("a directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with(EPOCH_TEMP_PREFIX))
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------------------
// §7.2 The claim.

/// §7.2: of several processes campaigning on one directory, exactly one wins.
#[test]
fn s7_2_exactly_one_of_several_processes_wins() {
    let scratch = Scratch::new("one-winner");
    let (directory, _election) = prepared(&scratch);
    let mut children = Children::new();
    const CONTENDERS: usize = 6;
    for _ in 0..CONTENDERS {
        children.spawn_campaign("campaign-and-hold", &directory, Duration::from_millis(500));
    }
    let mut winners = Vec::new();
    let mut losers = 0;
    while winners.len() + losers < CONTENDERS {
        let report = children.next_outcome();
        match report.line.as_str() {
            "lost" => losers += 1,
            _ => {
                assert_eq!(won(&report), Some(1), "{report:?}");
                winners.push(report.child);
            }
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    children.close_stdin(winners[0]);
    assert_eq!(children.next_outcome().line, "resigned");
    assert!(children.wait(winners[0]).success());
}

/// §7.2, §7.3: `kill -9` of the holder lets one waiting process win, with
/// the next epoch; the time from the kill to the new term is printed.
#[test]
fn s7_2_kill_9_of_the_holder_lets_another_win_with_the_next_epoch() {
    let scratch = Scratch::new("kill-9");
    let (directory, _election) = prepared(&scratch);
    let mut children = Children::new();
    const PROCESSES: usize = 5;
    for _ in 0..PROCESSES {
        children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
    }
    children.until_said("ready", PROCESSES);
    let mut killed_at: Option<Instant> = None;
    let mut takeovers = Vec::new();
    for epoch in 1..=PROCESSES as u32 {
        let report = children.next_outcome();
        assert_eq!(won(&report), Some(epoch), "{report:?}");
        if let Some(killed_at) = killed_at {
            // A win read before the kill would mean two holders at once.
            assert!(
                report.at >= killed_at,
                "a process won before the holder died"
            );
            takeovers.push(report.at - killed_at);
        }
        // Nobody else may win while this holder lives; the others keep trying
        // every 10 ms meanwhile.
        children.assert_silent_for(Duration::from_millis(50));
        killed_at = Some(children.kill(report.child));
    }
    let shown: Vec<String> = takeovers
        .iter()
        .map(|takeover| format!("{:.1} ms", takeover.as_secs_f64() * 1000.0))
        .collect();
    eprintln!(
        "§7.2 takeover after kill -9 (from the signal to the new holder's report, epoch written durably): {}",
        shown.join(", ")
    );
}

/// §7.2: a failed attempt returns at once; it does not sleep in SQLite's
/// busy handler (rusqlite's default busy timeout is 5 s).
#[test]
fn s7_2_a_failed_attempt_does_not_wait_for_sqlite() {
    let scratch = Scratch::new("zero-busy-timeout");
    let (directory, election) = prepared(&scratch);
    let mut children = Children::new();
    let holder = children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
    assert_eq!(won(&children.next_outcome()), Some(1));

    let start = Instant::now();
    assert!(
        election
            .campaign(Duration::ZERO)
            .expect("an attempt")
            .is_none()
    );
    let single = start.elapsed();

    let timeout = Duration::from_millis(200);
    let start = Instant::now();
    assert!(election.campaign(timeout).expect("a campaign").is_none());
    let campaign = start.elapsed();

    eprintln!(
        "§7.2 a refused attempt took {single:?}; a refused 200 ms campaign took {campaign:?}"
    );
    assert!(single < NOT_BLOCKED, "one attempt blocked for {single:?}");
    assert!(campaign >= timeout, "gave up early, after {campaign:?}");
    assert!(
        campaign < timeout + NOT_BLOCKED,
        "a 200 ms campaign took {campaign:?}"
    );
    children.close_stdin(holder);
    assert_eq!(children.next_outcome().line, "resigned");
}

/// §7.2: while this process holds the claim, checking it, preparing the
/// directory again, and campaigning again from this process (a second SQLite
/// connection on the lock file) leave the claim in place: another process
/// still cannot win.
#[test]
fn s7_2_the_holder_keeps_its_claim_through_its_own_operations() {
    let scratch = Scratch::new("holder-operations");
    let (directory, election) = prepared(&scratch);
    let term = election
        .campaign(Duration::ZERO)
        .expect("a campaign")
        .expect("the claim on a fresh directory");
    for _ in 0..10 {
        term.check().expect("the claim holds");
    }
    prepare_directory(&directory, &DirectoryOptions::default()).expect("the same directory");
    let second = self::election(&directory);
    assert!(
        second
            .campaign(Duration::ZERO)
            .expect("an attempt")
            .is_none()
    );
    assert!(
        second
            .campaign(Duration::from_millis(30))
            .expect("a campaign")
            .is_none()
    );
    fs::metadata(directory.join(LOCK_FILE)).expect("stat, which opens nothing");
    term.check().expect("the claim still holds");

    let mut children = Children::new();
    assert_eq!(
        children.campaign_once(&directory, Duration::ZERO),
        "lost",
        "another process won while this one held the claim"
    );
    assert_eq!(term.epoch().get(), 1);
    term.resign().expect("resigning");
    assert_eq!(children.campaign_once(&directory, Duration::ZERO), "won 2");
}

/// §7.2, the trap the test above guards against: opening and closing the
/// lock file in the holder's process any other way drops the claim, and
/// another process wins while this one still believes it holds it.
#[test]
fn s7_2_opening_the_lock_file_outside_sqlite_drops_the_claim() {
    let scratch = Scratch::new("second-descriptor");
    let (directory, election) = prepared(&scratch);
    let term = election
        .campaign(Duration::ZERO)
        .expect("a campaign")
        .expect("the claim on a fresh directory");
    let mut children = Children::new();
    assert_eq!(children.campaign_once(&directory, Duration::ZERO), "lost");
    drop(File::open(directory.join(LOCK_FILE)).expect("opening the lock file"));
    assert_eq!(
        children.campaign_once(&directory, Duration::ZERO),
        "won 2",
        "closing a second descriptor should have released the POSIX lock"
    );
    drop(term);
}

/// §7.2: a lock file unlinked while held ends the term at the next check, and
/// a second process can indeed win a claim on the new file meanwhile.
#[test]
fn s7_2_an_unlinked_lock_file_ends_the_term() {
    let scratch = Scratch::new("unlinked");
    let (directory, election) = prepared(&scratch);
    let lock = directory.join(LOCK_FILE);
    let term = election
        .campaign(Duration::ZERO)
        .expect("a campaign")
        .expect("the claim on a fresh directory");
    term.check().expect("the claim holds");
    fs::remove_file(&lock).expect("unlinking the lock file");
    let error = term.check().expect_err("the check must notice");
    assert!(
        matches!(&error, LocalError::LockFileMoved { path } if *path == lock),
        "{error:?}"
    );
    assert!(error.to_string().contains(&lock.display().to_string()));

    let mut children = Children::new();
    let second = children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
    assert_eq!(won(&children.next_outcome()), Some(2), "a second holder");
    children.close_stdin(second);
    assert_eq!(children.next_outcome().line, "resigned");
    drop(term);
}

/// §7.2: the same for a lock file renamed away.
#[test]
fn s7_2_a_renamed_lock_file_ends_the_term() {
    let scratch = Scratch::new("renamed");
    let (directory, election) = prepared(&scratch);
    let lock = directory.join(LOCK_FILE);
    let term = election
        .campaign(Duration::ZERO)
        .expect("a campaign")
        .expect("the claim on a fresh directory");
    fs::rename(&lock, directory.join("flight.lock.old")).expect("renaming the lock file");
    assert!(matches!(
        term.check(),
        Err(LocalError::LockFileMoved { .. })
    ));
}

/// §7.2: a process that was already campaigning on a lock file that is then
/// unlinked does not win when that file's holder dies: the file it would win
/// is no longer the one at the path, where another process holds the claim.
#[test]
fn s7_2_a_campaigner_on_an_unlinked_lock_file_does_not_win() {
    let scratch = Scratch::new("stale-campaigner");
    let (directory, _election) = prepared(&scratch);
    let lock = directory.join(LOCK_FILE);
    let mut children = Children::new();
    let first = children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
    assert_eq!(won(&children.next_outcome()), Some(1));

    let campaigner = {
        let directory = directory.clone();
        thread::spawn(move || {
            let term = election(&directory).campaign(PATIENCE);
            (term, Instant::now())
        })
    };
    // Wait until the campaign has the old file open (read through
    // /proc/self/fd, which opens nothing).
    let start = Instant::now();
    while !process_has_open(&lock) {
        assert!(
            start.elapsed() < PATIENCE,
            "the campaign never opened the lock file"
        );
        thread::sleep(Duration::from_millis(1));
    }
    fs::remove_file(&lock).expect("unlinking the lock file");
    let second = children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
    let report = children.next_outcome();
    assert_eq!((report.child, won(&report)), (second, Some(2)));

    children.kill(first);
    // Time for a campaigner that ignored the move to win the old file.
    thread::sleep(Duration::from_millis(300));
    let released_at = Instant::now();
    children.close_stdin(second);
    let (term, won_at) = campaigner.join().expect("the campaign thread");
    let term = term
        .expect("a campaign")
        .expect("a term once the holder resigned");
    assert!(
        won_at >= released_at,
        "won while another process held the claim on the current lock file"
    );
    assert_eq!(term.epoch().get(), 3);
    term.check().expect("the claim holds");
}

/// Whether this process has `path` open, by the links in /proc/self/fd.
fn process_has_open(path: &Path) -> bool {
    fs::read_dir("/proc/self/fd")
        .expect("listing /proc/self/fd")
        .filter_map(Result::ok)
        .filter_map(|entry| fs::read_link(entry.path()).ok())
        .any(|target| target == path)
}

/// §7.1: a lock file that is not an SQLite database is reported with its
/// path, not overwritten or ignored.
#[test]
fn s7_1_a_damaged_lock_file_is_reported() {
    let scratch = Scratch::new("damaged-lock");
    let (directory, election) = prepared(&scratch);
    let lock = directory.join(LOCK_FILE);
    fs::write(&lock, vec![b'x'; 4096]).expect("damaging the lock file");
    let error = election
        .campaign(Duration::ZERO)
        .expect_err("a damaged lock file");
    assert!(
        matches!(&error, LocalError::Claim { path, .. } if *path == lock),
        "{error:?}"
    );
    assert!(error.to_string().contains(&lock.display().to_string()));
}

/// The first bytes of an SQLite rollback journal that is ready to be played
/// back (SQLite's `aJournalMagic`): a journal that starts with them is hot
/// for a database that has pages.
const JOURNAL_MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];

/// A real hot journal: the rollback journal of a write transaction on another
/// database, taken while the transaction has already written pages to that
/// database (a one-page cache spills them), so that SQLite would play it back
/// on the next open of a database with pages.
fn hot_journal(scratch: &Scratch) -> Vec<u8> {
    let path = scratch.base.join("other.db");
    let database = rusqlite::Connection::open(&path).expect("opening another database");
    database
        .execute_batch(
            "PRAGMA cache_size = 1;
             CREATE TABLE t (x);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
             INSERT INTO t SELECT randomblob(3000) FROM n;
             BEGIN;
             UPDATE t SET x = randomblob(3000);",
        )
        .expect("a write transaction that spills");
    let journal = fs::read(scratch.base.join("other.db-journal")).expect("its journal");
    assert_eq!(
        journal[..8],
        JOURNAL_MAGIC,
        "a journal ready to be played back"
    );
    journal
}

/// §7.1: during a term SQLite keeps its rollback journal,
/// `flight.lock-journal` (512 bytes, the lock file's mode), beside the empty
/// lock file, and a holder killed with `kill -9` leaves it behind. A leftover
/// journal never disturbs the next term: the lock file has no pages, so the
/// next claim deletes the journal instead of playing it back, even a real
/// hot journal put in its place; each next holder wins with the next epoch,
/// the lock file stays empty, and a clean end of the term removes the
/// journal.
#[test]
fn s7_1_a_journal_left_by_a_killed_holder_never_disturbs_the_next_term() {
    let scratch = Scratch::new("journal");
    let (directory, _election) = prepared(&scratch);
    let lock = directory.join(LOCK_FILE);
    let journal = directory.join(format!("{LOCK_FILE}-journal"));
    let hot = hot_journal(&scratch);
    let mut children = Children::new();
    let mut holder = None;
    for epoch in 1..=3 {
        if epoch == 3 {
            fs::write(&journal, &hot).expect("putting a hot journal in place");
        }
        let child = children.spawn_campaign("campaign-and-hold", &directory, PATIENCE);
        let report = children.next_outcome();
        assert_eq!(won(&report), Some(epoch), "{report:?}");
        let metadata = fs::metadata(&journal).expect("a journal during the term");
        assert_eq!(metadata.len(), 512, "the journal's header, and no page");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&lock).expect("the lock file").len(), 0);
        if epoch < 3 {
            children.kill(child);
            assert!(journal.exists(), "kill -9 leaves the journal behind");
        }
        holder = Some(child);
    }
    let holder = holder.expect("the last holder");
    children.close_stdin(holder);
    assert_eq!(children.next_outcome().line, "resigned");
    assert!(children.wait(holder).success());
    assert!(!journal.exists(), "a clean end removes the journal");
    assert_eq!(fs::metadata(&lock).expect("the lock file").len(), 0);
}

// ---------------------------------------------------------------------------
// §7.3 The epoch.

/// §7.3: a hundred successive terms, won by four processes in turn, have the
/// epochs 1 to 100; each process checks in its term that no other holds the
/// claim and that its epoch is above the previous term's.
#[test]
fn s7_3_a_hundred_successive_terms_have_strictly_increasing_epochs() {
    let scratch = Scratch::new("hundred-terms");
    let (directory, _election) = prepared(&scratch);
    let mut children = Children::new();
    const PROCESSES: usize = 4;
    const TERMS_EACH: usize = 25;
    for _ in 0..PROCESSES {
        children.spawn_role("terms", &directory, &[(TERMS, TERMS_EACH.to_string())]);
    }
    let mut epochs = Vec::new();
    let mut done = 0;
    while done < PROCESSES {
        let report = children.next_outcome();
        if report.line == "done" {
            done += 1;
            continue;
        }
        let epoch: u32 = report
            .line
            .strip_prefix("term ")
            .and_then(|epoch| epoch.parse().ok())
            .unwrap_or_else(|| panic!("{report:?}"));
        epochs.push(epoch);
    }
    for child in 0..PROCESSES {
        assert!(children.wait(child).success());
    }
    epochs.sort_unstable();
    assert_eq!(
        epochs,
        (1..=(PROCESSES * TERMS_EACH) as u32).collect::<Vec<_>>()
    );
    assert_eq!(
        fs::read_to_string(directory.join(EPOCH_FILE)).expect("the epoch file"),
        "100\n"
    );
    assert_eq!(temp_files(&directory), Vec::<String>::new());
}

/// §7.3: a missing epoch file starts at 1; a repaired one continues from its
/// number.
#[test]
fn s7_3_epochs_start_at_one_and_continue_from_the_file() {
    let scratch = Scratch::new("epoch-start");
    let (directory, election) = prepared(&scratch);
    let epoch_file = directory.join(EPOCH_FILE);
    let term = election.campaign(Duration::ZERO).unwrap().unwrap();
    assert_eq!(term.epoch().get(), 1);
    assert_eq!(fs::read_to_string(&epoch_file).unwrap(), "1\n");
    let mode = fs::metadata(&epoch_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    term.resign().unwrap();
    for written in ["41", "41\n", " 41 \n"] {
        fs::write(&epoch_file, written).unwrap();
        let term = election.campaign(Duration::ZERO).unwrap().unwrap();
        assert_eq!(term.epoch().get(), 42, "{written:?}");
        assert_eq!(fs::read_to_string(&epoch_file).unwrap(), "42\n");
    }
}

/// §7.3: an epoch file that exists but holds no epoch fails closed, naming
/// the file and what to do, and is left as it was; the claim is released.
#[test]
fn s7_3_a_corrupt_epoch_file_fails_closed() {
    let cases: &[(&str, EpochProblem)] = &[
        (
            "garbage",
            EpochProblem::NotANumber {
                preview: "garbage".to_owned(),
            },
        ),
        ("", EpochProblem::Empty),
        ("\n", EpochProblem::Empty),
        ("0", EpochProblem::Zero),
        ("0\n", EpochProblem::Zero),
        (
            "-1",
            EpochProblem::NotANumber {
                preview: "-1".to_owned(),
            },
        ),
        (
            "1.5",
            EpochProblem::NotANumber {
                preview: "1.5".to_owned(),
            },
        ),
        (
            "2147483648",
            EpochProblem::TooLarge {
                preview: "2147483648".to_owned(),
            },
        ),
        (
            "99999999999999999999",
            EpochProblem::TooLarge {
                preview: "99999999999999999999".to_owned(),
            },
        ),
    ];
    let scratch = Scratch::new("corrupt-epoch");
    let (directory, election) = prepared(&scratch);
    let epoch_file = directory.join(EPOCH_FILE);
    for (content, expected) in cases {
        fs::write(&epoch_file, content).unwrap();
        for _attempt in 0..2 {
            // The second attempt fails the same way rather than finding the
            // claim still held: the failed term released it.
            let error = election
                .campaign(Duration::ZERO)
                .expect_err("a corrupt epoch file must fail closed");
            match &error {
                LocalError::EpochCorrupt { path, problem } => {
                    assert_eq!(path, &epoch_file);
                    assert_eq!(problem, expected, "{content:?}");
                }
                other => panic!("{content:?}: {other:?}"),
            }
            let message = error.to_string();
            assert!(
                message.contains(&epoch_file.display().to_string()),
                "{message}"
            );
            assert!(message.contains("backup"), "{message}");
            assert!(message.contains("larger than every epoch"), "{message}");
        }
        assert_eq!(fs::read_to_string(&epoch_file).unwrap(), *content);
    }

    // Another process sees the same.
    fs::write(&epoch_file, "garbage").unwrap();
    let outcome = Children::new().campaign_once(&directory, Duration::ZERO);
    assert!(outcome.starts_with("error "), "{outcome}");
    assert!(
        outcome.contains(&epoch_file.display().to_string()),
        "{outcome}"
    );
}

/// §7.3, §6: after the largest epoch no term can start.
#[test]
fn s7_3_the_largest_epoch_ends_the_elections() {
    let scratch = Scratch::new("epoch-max");
    let (directory, election) = prepared(&scratch);
    let epoch_file = directory.join(EPOCH_FILE);
    fs::write(&epoch_file, "2147483646\n").unwrap();
    let term = election.campaign(Duration::ZERO).unwrap().unwrap();
    assert_eq!(term.epoch(), single_flight::Epoch::MAX);
    term.resign().unwrap();
    let error = election
        .campaign(Duration::ZERO)
        .expect_err("past the largest epoch");
    assert!(
        matches!(&error, LocalError::EpochExhausted { path } if *path == epoch_file),
        "{error:?}"
    );
    assert!(error.to_string().contains("2147483647"), "{error}");
}

/// §7.3: an epoch file that cannot be read fails closed too.
#[test]
fn s7_3_an_unreadable_epoch_file_fails_closed() {
    let scratch = Scratch::new("unreadable-epoch");
    let (directory, election) = prepared(&scratch);
    let epoch_file = directory.join(EPOCH_FILE);
    // Tests run as root here, so permissions cannot make it unreadable; a
    // directory in its place can.
    fs::create_dir(&epoch_file).unwrap();
    let error = election.campaign(Duration::ZERO).expect_err("unreadable");
    assert!(
        matches!(&error, LocalError::EpochUnreadable { path, .. } if *path == epoch_file),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&epoch_file.display().to_string())
    );
}

/// §7.1, §7.3: temporary files left by holders that died mid-write are
/// removed by the next holder; other files are left alone.
#[test]
fn s7_3_stale_temp_files_are_removed_by_the_next_holder() {
    let scratch = Scratch::new("stale-temp");
    let (directory, election) = prepared(&scratch);
    let stale = [
        format!("{EPOCH_TEMP_PREFIX}12345.0"),
        format!("{EPOCH_TEMP_PREFIX}99999.7"),
    ];
    for name in &stale {
        fs::write(directory.join(name), "17\n").unwrap();
    }
    fs::write(directory.join("notes.txt"), "keep me").unwrap();
    assert_eq!(temp_files(&directory), stale.to_vec());
    let term = election.campaign(Duration::ZERO).unwrap().unwrap();
    assert_eq!(temp_files(&directory), Vec::<String>::new());
    assert!(directory.join("notes.txt").exists());
    // The stale files' contents are not epochs: the file is.
    assert_eq!(term.epoch().get(), 1);
}

// ---------------------------------------------------------------------------
// §7.4 Directory checks.

/// §7.4: a missing directory, and its missing parents, are created 0700.
#[test]
fn s7_4_a_missing_directory_is_created_owner_only() {
    let scratch = Scratch::new("create");
    let directory = scratch.base.join("a").join("b").join("flight");
    prepare_directory(&directory, &DirectoryOptions::default()).expect("created");
    let metadata = fs::symlink_metadata(&directory).unwrap();
    assert!(metadata.is_dir());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o700);
    // Preparing it again changes nothing.
    prepare_directory(&directory, &DirectoryOptions::default()).expect("accepted");
}

/// §7.4: any permission bit for group or others is refused.
#[test]
fn s7_4_a_directory_open_to_group_or_others_is_refused() {
    let scratch = Scratch::new("mode");
    let directory = scratch.flight();
    fs::create_dir(&directory).unwrap();
    for mode in [0o777, 0o750, 0o710, 0o701, 0o702] {
        fs::set_permissions(&directory, fs::Permissions::from_mode(mode)).unwrap();
        let error = prepare_directory(&directory, &DirectoryOptions::default())
            .expect_err("open to others");
        assert!(
            matches!(&error, DirectoryError::Permissions { mode: found, .. } if *found == mode),
            "{mode:o}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&directory.display().to_string()),
            "{message}"
        );
        assert!(message.contains("chmod 700"), "{message}");
    }
    let error = LeaderElection::new(&directory, ElectionOptions::default())
        .expect_err("the election checks too");
    assert!(matches!(
        error,
        LocalError::Directory(DirectoryError::Permissions { .. })
    ));
    fs::set_permissions(&directory, fs::Permissions::from_mode(0o700)).unwrap();
    prepare_directory(&directory, &DirectoryOptions::default()).expect("0700 is accepted");
}

/// §7.4: a symbolic link is refused, even to a good directory, and a dangling
/// one is not followed to create a directory elsewhere.
#[test]
fn s7_4_a_symlinked_directory_is_refused() {
    let scratch = Scratch::new("symlink");
    let real = scratch.base.join("real");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
    let link = scratch.flight();
    symlink(&real, &link).unwrap();
    let error = prepare_directory(&link, &DirectoryOptions::default()).expect_err("a link");
    assert!(
        matches!(&error, DirectoryError::Symlink { path } if *path == link),
        "{error:?}"
    );
    assert!(error.to_string().contains(&link.display().to_string()));

    let dangling = scratch.base.join("dangling");
    let target = scratch.base.join("elsewhere");
    symlink(&target, &dangling).unwrap();
    assert!(matches!(
        prepare_directory(&dangling, &DirectoryOptions::default()),
        Err(DirectoryError::Symlink { .. })
    ));
    assert!(!target.exists(), "followed a dangling link");
}

/// §7.4: a directory owned by another user is refused.
#[test]
fn s7_4_a_directory_owned_by_someone_else_is_refused() {
    if rustix::process::getuid().as_raw() != 0 {
        eprintln!("§7.4 ownership test skipped: giving a directory away needs root");
        return;
    }
    let scratch = Scratch::new("owner");
    let directory = scratch.flight();
    fs::create_dir(&directory).unwrap();
    fs::set_permissions(&directory, fs::Permissions::from_mode(0o700)).unwrap();
    chown(&directory, Some(65534), None).unwrap();
    let error = prepare_directory(&directory, &DirectoryOptions::default())
        .expect_err("another user's directory");
    assert!(
        matches!(
            &error,
            DirectoryError::NotOwned {
                owner: 65534,
                user: 0,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains(&directory.display().to_string()));
}

/// §7.4: a file where the directory should be is refused.
#[test]
fn s7_4_a_file_in_place_of_the_directory_is_refused() {
    let scratch = Scratch::new("not-a-directory");
    let directory = scratch.flight();
    fs::write(&directory, "").unwrap();
    assert!(matches!(
        prepare_directory(&directory, &DirectoryOptions::default()),
        Err(DirectoryError::NotADirectory { .. })
    ));
}
