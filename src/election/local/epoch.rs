//! The durable epoch in `flight.epoch` (SPEC.md §7.3): read by each new
//! term's holder, raised by one, and written back durably before the term
//! begins.
//!
//! Only the holder of the claim (SPEC.md §7.2) calls into this module, so
//! nothing here needs a lock of its own, and any temporary file found in the
//! directory was left behind by a holder that died.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::Epoch;

use super::LocalError;

/// The name of the file, in the flight directory, that holds the epoch of the
/// latest term (SPEC.md §7.1).
pub const EPOCH_FILE: &str = "flight.epoch";

/// The prefix of the temporary files a holder writes the epoch into before
/// renaming it over [`EPOCH_FILE`]: `flight.epoch.tmp.<pid>.<n>`
/// (SPEC.md §7.1). A holder that dies between creating and renaming one
/// leaves it behind; the next holder removes every file with this prefix.
pub const EPOCH_TEMP_PREFIX: &str = "flight.epoch.tmp.";

/// The mode of the epoch file: nobody but the owner has any business reading
/// or replacing it (SPEC.md §7.4).
const EPOCH_FILE_MODE: u32 = 0o600;

/// At most this many bytes of a corrupt epoch file are quoted in the error:
/// enough to recognise what overwrote it, not enough to flood a log.
const PREVIEW_BYTES: usize = 40;

/// Numbers the temporary files of this process, so that two writes in one
/// process never pick the same name even if a removal failed.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What is wrong with an epoch file that exists but holds no epoch
/// (SPEC.md §7.3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EpochProblem {
    /// The file is empty or holds only white space.
    Empty,
    /// The file holds something other than a decimal number.
    NotANumber { preview: String },
    /// The file holds 0, which no term ever has.
    Zero,
    /// The file holds a number above [`Epoch::MAX`], which no term ever has.
    TooLarge { preview: String },
}

impl fmt::Display for EpochProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpochProblem::Empty => write!(f, "it is empty"),
            EpochProblem::NotANumber { preview } => {
                write!(f, "it holds \"{preview}\", which is not a decimal number")
            }
            EpochProblem::Zero => write!(f, "it holds 0, and epochs start at 1"),
            EpochProblem::TooLarge { preview } => write!(
                f,
                "it holds {preview}, above the largest epoch {}",
                Epoch::MAX
            ),
        }
    }
}

/// The epoch of the next term: one more than the file's, or
/// [`Epoch::FIRST`] if there is no file (SPEC.md §7.3).
pub(super) fn next_epoch(path: &Path) -> Result<Epoch, LocalError> {
    match read_epoch(path)? {
        None => Ok(Epoch::FIRST),
        Some(latest) => latest.next().ok_or_else(|| LocalError::EpochExhausted {
            path: path.to_owned(),
        }),
    }
}

/// The epoch in the file, `None` if there is no file. Anything else that is
/// not an epoch fails closed: guessing a number could reuse fencing tokens.
fn read_epoch(path: &Path) -> Result<Option<Epoch>, LocalError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(LocalError::EpochUnreadable {
                path: path.to_owned(),
                error,
            });
        }
    };
    parse_epoch(&bytes)
        .map(Some)
        .map_err(|problem| LocalError::EpochCorrupt {
            path: path.to_owned(),
            problem,
        })
}

/// The file holds the decimal number and a newline; white space around the
/// number is accepted, so that `echo 42 > flight.epoch` works as a repair.
fn parse_epoch(bytes: &[u8]) -> Result<Epoch, EpochProblem> {
    let text = bytes.trim_ascii();
    if text.is_empty() {
        return Err(EpochProblem::Empty);
    }
    let preview = || {
        let shown = String::from_utf8_lossy(&text[..text.len().min(PREVIEW_BYTES)]);
        let ellipsis = if text.len() > PREVIEW_BYTES {
            "…"
        } else {
            ""
        };
        format!("{}{ellipsis}", shown.escape_debug())
    };
    if !text.iter().all(u8::is_ascii_digit) {
        return Err(EpochProblem::NotANumber { preview: preview() });
    }
    // Only digits: a parse failure can only be an overflow.
    let value: u64 = std::str::from_utf8(text)
        .ok()
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| EpochProblem::TooLarge { preview: preview() })?;
    if value == 0 {
        return Err(EpochProblem::Zero);
    }
    Epoch::new(value).ok_or_else(|| EpochProblem::TooLarge { preview: preview() })
}

/// Removes the temporary files that holders which died mid-write left behind
/// (SPEC.md §7.1). They are harmless, so a failure is reported in the log and
/// does not stop the term.
pub(super) fn remove_stale_temp_files(directory: &Path) {
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(directory = %directory.display(), %error, "cannot list the flight directory to remove stale epoch temporary files");
            return;
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(EPOCH_TEMP_PREFIX) {
            continue;
        }
        let path = entry.path();
        match fs::remove_file(&path) {
            Ok(()) => {
                tracing::debug!(path = %path.display(), "removed a stale epoch temporary file")
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot remove a stale epoch temporary file")
            }
        }
    }
}

/// Writes `epoch` to `path` so that after a crash at any point the file holds
/// either the old epoch or the new one, never a torn or empty file, and the
/// new one survives a power loss once this returns (SPEC.md §7.3): a new file
/// (`O_EXCL`, mode 0600) in the same directory, write, fsync, rename over,
/// fsync the directory. Any error ends the attempt, and an fsync error is
/// never retried: after a failed fsync the kernel may have dropped the dirty
/// pages and a second fsync can report success for data that is gone
/// (PostgreSQL's "fsyncgate").
pub(super) fn write_epoch(directory: &Path, path: &Path, epoch: Epoch) -> Result<(), LocalError> {
    let temp = directory.join(format!(
        "{EPOCH_TEMP_PREFIX}{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let failed = |step: DurableStep, error: io::Error| LocalError::EpochWrite {
        path: path.to_owned(),
        step,
        error,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(EPOCH_FILE_MODE)
        .open(&temp)
        .map_err(|error| failed(DurableStep::Create, error))?;
    let written = file
        .write_all(format!("{epoch}\n").as_bytes())
        .map_err(|error| failed(DurableStep::Write, error))
        .and_then(|()| {
            file.sync_all()
                .map_err(|error| failed(DurableStep::SyncFile, error))
        })
        .and_then(|()| fs::rename(&temp, path).map_err(|error| failed(DurableStep::Rename, error)));
    if let Err(error) = written {
        drop(file);
        // Best effort: the next holder removes it otherwise.
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| failed(DurableStep::SyncDirectory, error))
}

/// The step of a durable write that failed (SPEC.md §7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurableStep {
    Create,
    Write,
    SyncFile,
    Rename,
    SyncDirectory,
}

impl fmt::Display for DurableStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DurableStep::Create => "creating the temporary file",
            DurableStep::Write => "writing the temporary file",
            DurableStep::SyncFile => "fsync of the temporary file",
            DurableStep::Rename => "renaming the temporary file over the epoch file",
            DurableStep::SyncDirectory => "fsync of the directory",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch(value: u64) -> Epoch {
        Epoch::new(value).unwrap()
    }

    /// §7.3: the number, with white space around it.
    #[test]
    fn parses_an_epoch() {
        assert_eq!(parse_epoch(b"41\n"), Ok(epoch(41)));
        assert_eq!(parse_epoch(b"41"), Ok(epoch(41)));
        assert_eq!(parse_epoch(b"  7 \r\n"), Ok(epoch(7)));
        assert_eq!(parse_epoch(b"2147483647"), Ok(Epoch::MAX));
    }

    /// §7.3: anything else fails closed, saying what it found.
    #[test]
    fn rejects_what_is_not_an_epoch() {
        assert_eq!(parse_epoch(b""), Err(EpochProblem::Empty));
        assert_eq!(parse_epoch(b" \n"), Err(EpochProblem::Empty));
        assert_eq!(parse_epoch(b"0\n"), Err(EpochProblem::Zero));
        assert_eq!(parse_epoch(b"000"), Err(EpochProblem::Zero));
        for (text, preview) in [
            (&b"garbage"[..], "garbage"),
            (b"-1", "-1"),
            (b"1.5", "1.5"),
            (b"12abc", "12abc"),
            (b"4 2", "4 2"),
            (b"\xff\xfe", "\u{fffd}\u{fffd}"),
        ] {
            assert_eq!(
                parse_epoch(text),
                Err(EpochProblem::NotANumber {
                    preview: preview.to_owned()
                }),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_epoch(b"2147483648"),
            Err(EpochProblem::TooLarge {
                preview: "2147483648".to_owned()
            })
        );
        assert_eq!(
            parse_epoch(b"99999999999999999999999"),
            Err(EpochProblem::TooLarge {
                preview: "99999999999999999999999".to_owned()
            })
        );
    }

    #[test]
    fn quotes_at_most_a_preview() {
        let long = vec![b'x'; 1000];
        let Err(EpochProblem::NotANumber { preview }) = parse_epoch(&long) else {
            panic!("not refused");
        };
        assert_eq!(preview, format!("{}…", "x".repeat(PREVIEW_BYTES)));
        let Err(EpochProblem::NotANumber { preview }) = parse_epoch(b"a\"b\n\x07c") else {
            panic!("not refused");
        };
        assert_eq!(preview, "a\\\"b\\n\\u{7}c");
    }
}
