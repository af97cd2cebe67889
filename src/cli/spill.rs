//! Outputs too large for one message (SPEC.md §13.2): the leader writes them
//! to a **spill file** in the flight directory, and the flight's value only
//! says how long it is. The last process interested in the key removes it.
//!
//! "Interested" is a shared `flock` on the key's **interest file**, taken by
//! every `run` before its call starts and kept until it has written its
//! output. A joiner therefore holds it from before it could join until it
//! has read the file. A process that ends releases its own lock, then tries
//! the exclusive lock of every interest file in the directory without
//! waiting: whoever gets one is alone with that key, and removes the key's
//! spill files and then the interest file, still holding the lock. A process
//! that opened an interest file just before its removal notices (the path no
//! longer names the file it locked) and opens the new one. The kernel drops
//! the locks of a killed process, so a spill file left by a leader killed in
//! the middle is removed by the next process that ends.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};
use single_flight::FencingToken;

/// The prefix of every file of the command in the flight directory; the
/// project reserves `flight.` names (SPEC.md §7.1), and §13.6 lists these.
const PREFIX: &str = "flight.output.";

/// The suffix of interest files.
const INTEREST_SUFFIX: &str = ".lock";

/// How often a process waiting for an interest file retries; the exclusive
/// lock it waits for is held only while a few files are removed.
const RETRY_INTERVAL: Duration = Duration::from_millis(10);

/// The name of a key in file names: 16 hex digits of its FNV-1a hash. Keys
/// are up to 4096 bytes and file names up to 255. Two keys with one tag only
/// share their interest file, which delays a removal; spill files are named
/// by token too, which no two flights share.
pub fn key_tag(key: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// `<dir>/flight.output.<tag>.<token>`: the spill file of one flight.
pub fn spill_path(directory: &Path, tag: &str, token: FencingToken) -> PathBuf {
    directory.join(format!("{PREFIX}{tag}.{token}"))
}

fn interest_path(directory: &Path, tag: &str) -> PathBuf {
    directory.join(format!("{PREFIX}{tag}{INTEREST_SUFFIX}"))
}

/// Creates a spill file: new (never an existing file or link), mode 0600.
pub fn create_spill(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Opens a spill file to read it, refusing a symbolic link.
pub fn open_spill(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// A shared lock on a key's interest file, held while this process may
/// still write or read a spill file of the key.
#[derive(Debug)]
pub struct Interest {
    _file: File,
}

/// Takes a shared lock on the interest file of `tag`, creating it if need
/// be. Waits while a process that ends holds it exclusively (a moment).
pub async fn declare_interest(directory: &Path, tag: &str) -> io::Result<Interest> {
    let path = interest_path(directory, tag);
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)?;
        match flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) if names(&path, &file) => return Ok(Interest { _file: file }),
            // Removed between the open and the lock: open the new one.
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => tokio::time::sleep(RETRY_INTERVAL).await,
            Err(error) => return Err(error.into()),
        }
    }
}

/// Whether `path` still names the open `file`.
fn names(path: &Path, file: &File) -> bool {
    match (fs::symlink_metadata(path), file.metadata()) {
        (Ok(at_path), Ok(open)) => at_path.dev() == open.dev() && at_path.ino() == open.ino(),
        _ => false,
    }
}

/// Removes the spill and interest files of every key that no process is
/// interested in any more. Call it after dropping this process's
/// [`Interest`]. Best effort: a file it cannot remove now is removed by a
/// later sweep.
pub fn sweep(directory: &Path) {
    for tag in tags(directory, |rest| rest.strip_suffix(INTEREST_SUFFIX)) {
        let path = interest_path(directory, &tag);
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
        else {
            continue;
        };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() || !names(&path, &file) {
            continue;
        }
        // Alone with the key: no spill file of it is being written or read.
        let prefix = format!("{tag}.");
        for name in tags(directory, |rest| {
            rest.strip_prefix(&prefix)
                .filter(|token| token.parse::<FencingToken>().is_ok())
                .map(|_| rest)
        }) {
            let _ = fs::remove_file(directory.join(format!("{PREFIX}{name}")));
        }
        let _ = fs::remove_file(&path);
    }
}

/// What `select` makes of the names `flight.output.<rest>` in the
/// directory.
fn tags(directory: &Path, select: impl Fn(&str) -> Option<&str>) -> Vec<String> {
    let Ok(entries) = fs::read_dir(directory) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let rest = name.to_str()?.strip_prefix(PREFIX)?;
            select(rest).map(str::to_owned)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path = std::env::temp_dir().join(format!("sf-cli-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn token(sequence: u32) -> FencingToken {
        FencingToken::new(single_flight::Epoch::FIRST, sequence).unwrap()
    }

    #[test]
    fn tags_are_stable_file_name_parts() {
        // FNV-1a's published value for the empty input.
        assert_eq!(key_tag(""), "cbf29ce484222325");
        assert_eq!(key_tag("a"), "af63dc4c8601ec8c");
        assert_eq!(key_tag(&"k".repeat(4096)).len(), 16);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_last_interested_process_removes_the_spill_files() {
        let scratch = Scratch::new("sweep");
        let dir = &scratch.0;
        let tag = key_tag("big");
        let leader = declare_interest(dir, &tag).await.unwrap();
        let joiner = declare_interest(dir, &tag).await.unwrap();
        let spill = spill_path(dir, &tag, token(1));
        create_spill(&spill).unwrap();
        assert!(create_spill(&spill).is_err(), "never over an existing file");

        drop(leader);
        sweep(dir);
        assert!(spill.exists(), "the joiner still needs it");

        drop(joiner);
        sweep(dir);
        assert!(!spill.exists());
        assert!(!interest_path(dir, &tag).exists());
        assert_eq!(fs::read_dir(dir).unwrap().count(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_keys_and_other_files_are_left_alone() {
        let scratch = Scratch::new("sweep-others");
        let dir = &scratch.0;
        let busy = key_tag("busy");
        let _interest = declare_interest(dir, &busy).await.unwrap();
        let busy_spill = spill_path(dir, &busy, token(2));
        create_spill(&busy_spill).unwrap();
        // Left by a killed leader: its interest file is unlocked.
        let orphan = key_tag("orphan");
        drop(declare_interest(dir, &orphan).await.unwrap());
        let orphan_spill = spill_path(dir, &orphan, token(3));
        create_spill(&orphan_spill).unwrap();
        let unrelated = dir.join("flight.output.notes");
        fs::write(&unrelated, "").unwrap();

        sweep(dir);
        assert!(busy_spill.exists());
        assert!(!orphan_spill.exists());
        assert!(unrelated.exists());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_interest_file_removed_under_a_process_is_replaced() {
        let scratch = Scratch::new("sweep-race");
        let dir = &scratch.0;
        let tag = key_tag("k");
        let first = declare_interest(dir, &tag).await.unwrap();
        // A sweep removed the path after this process opened it: the lock
        // it holds is on a file nobody else can find.
        fs::remove_file(interest_path(dir, &tag)).unwrap();
        assert!(!names(&interest_path(dir, &tag), &first._file));
        let second = declare_interest(dir, &tag).await.unwrap();
        assert!(names(&interest_path(dir, &tag), &second._file));
    }
}
