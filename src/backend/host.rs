//! A host's id at the cluster (SPEC.md §18.1, §18.6): the one its processes
//! name, or else the one kept in its host directory's `flight.host`, made
//! once by the first process that opens the directory.
//!
//! The id must differ between the hosts of a cluster, and stay the same for
//! a host across its host coordinators' deaths, so that the next one takes
//! the flights of the relay window back (§18.2). A host name alone is not
//! enough: two users of one machine have two host directories, and
//! containers and network namespaces often share a host name. So the kept id
//! is the host name (for people reading `status` and logs) and 64 random
//! bits, and lives exactly as long as the host directory does.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::{HostId, HostIdError, MAX_HOST_BYTES};

/// The file of the host directory that keeps the host id (SPEC.md §18.6).
pub(crate) const HOST_FILE: &str = "flight.host";

/// The prefix of the files a process writes a new id into before linking
/// one to [`HOST_FILE`]: `flight.host.tmp.<pid>.<n>`. Each is removed at
/// once; a process killed in between leaves one of a few bytes behind.
const HOST_TEMP_PREFIX: &str = "flight.host.tmp.";

/// The mode of the file: the host directory is its user's alone (§7.4).
const HOST_FILE_MODE: u32 = 0o600;

/// Numbers this process's temporary files, so that two openings in one
/// process never pick the same name.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How a host's id is chosen.
#[derive(Clone, Debug, Default)]
pub(crate) enum HostChoice {
    /// Kept in the host directory (the default).
    #[default]
    Kept,
    /// Named by the process ([`Cluster::host_id`](crate::Cluster::host_id),
    /// `--host-id`).
    Named(String),
}

/// Why a host's id could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostError {
    #[error(
        "the host id {id:?} is not usable: {error}; name another (--host-id, Cluster::host_id)"
    )]
    Named { id: String, error: HostIdError },
    #[error("cannot read the host id in {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error(
        "{} holds no host id ({error}); remove it, and the host's next process makes another (SPEC.md §18.6)",
        path.display()
    )]
    Corrupt { path: PathBuf, error: HostIdError },
    #[error("cannot keep a new host id in {}: {error}", path.display())]
    Write { path: PathBuf, error: io::Error },
    #[error("cannot draw a random host id: {0}")]
    Random(getrandom::Error),
}

impl HostChoice {
    /// The host id: the named one, or the one `directory` keeps, made now
    /// if it keeps none. The directory has been prepared (§7.4).
    pub(crate) fn host_id(&self, directory: &Path) -> Result<HostId, HostError> {
        match self {
            HostChoice::Named(id) => HostId::new(id.as_str()).map_err(|error| HostError::Named {
                id: id.clone(),
                error,
            }),
            HostChoice::Kept => kept(directory),
        }
    }
}

/// The id in `directory`'s [`HOST_FILE`], made first if it has none. Any
/// number of processes may do this at once: each writes an id of its own to
/// a file of its own and links it to the one name, which only the first
/// link takes; every process then reads the one that won.
fn kept(directory: &Path) -> Result<HostId, HostError> {
    let path = directory.join(HOST_FILE);
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    let temp = directory.join(format!(
        "{HOST_TEMP_PREFIX}{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_new(&temp, &new_id()?).and_then(|()| match fs::hard_link(&temp, &path) {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        linked => linked,
    });
    // Linked or not, the temporary name has served.
    let _ = fs::remove_file(&temp);
    written.map_err(|error| HostError::Write {
        path: path.clone(),
        error,
    })?;
    match read(&path)? {
        Some(id) => Ok(id),
        None => Err(HostError::Read {
            path,
            error: io::Error::new(io::ErrorKind::NotFound, "it was removed while it was made"),
        }),
    }
}

/// The id in `path`, `None` when there is no such file.
fn read(path: &Path) -> Result<Option<HostId>, HostError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(HostError::Read {
                path: path.to_owned(),
                error,
            });
        }
    };
    let text = text.strip_suffix('\n').unwrap_or(&text);
    HostId::new(text)
        .map(Some)
        .map_err(|error| HostError::Corrupt {
            path: path.to_owned(),
            error,
        })
}

/// Writes `id` to a new file at `temp`, and to the disk before it is
/// linked: a power loss must not leave the one name linked to an empty
/// file. The directory is not synced: a link lost with the power only
/// makes the host's next process draw another id, when no process of the
/// host lives any more to take its flights back.
fn write_new(temp: &Path, id: &HostId) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(HOST_FILE_MODE)
        .open(temp)?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.sync_all()
}

/// A new id: this machine's name, if it has a usable one, and 64 random
/// bits in hexadecimal, `build-7-3f2a9c0d11b4e587`.
fn new_id() -> Result<HostId, HostError> {
    let mut random = [0u8; 8];
    getrandom::getrandom(&mut random).map_err(HostError::Random)?;
    let random = u64::from_be_bytes(random);
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    // Leave room for the dash and the 16 digits.
    let usable = !name.is_empty()
        && name.len() + 17 <= MAX_HOST_BYTES
        && !name.chars().any(char::is_control);
    let text = if usable {
        format!("{name}-{random:016x}")
    } else {
        format!("{random:016x}")
    };
    HostId::new(text).map_err(|error| HostError::Corrupt {
        path: PathBuf::from(HOST_FILE),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sf-host-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        path
    }

    /// §18.6: the first opening makes the id, every later one reads it, and
    /// another directory gets another.
    #[test]
    fn a_host_directory_keeps_one_id_and_another_has_another() {
        let first = scratch("keeps");
        let second = scratch("another");
        let id = HostChoice::Kept.host_id(&first).unwrap();
        assert_eq!(HostChoice::Kept.host_id(&first).unwrap(), id);
        assert_ne!(HostChoice::Kept.host_id(&second).unwrap(), id);
        let leftovers: Vec<_> = fs::read_dir(&first)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, [HOST_FILE], "no temporary file is left");
        fs::remove_dir_all(first).unwrap();
        fs::remove_dir_all(second).unwrap();
    }

    /// §18.6: processes that open a new host directory at once agree.
    #[test]
    fn processes_that_make_the_id_at_once_agree_on_one() {
        let directory = scratch("race");
        let ids: Vec<HostId> = std::thread::scope(|scope| {
            let openings: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| HostChoice::Kept.host_id(&directory).unwrap()))
                .collect();
            openings.into_iter().map(|o| o.join().unwrap()).collect()
        });
        assert!(ids.windows(2).all(|pair| pair[0] == pair[1]), "{ids:?}");
        fs::remove_dir_all(directory).unwrap();
    }

    /// §18.6: a named id is checked as the hello's (§18.1); a file that
    /// holds none is refused naming it and what to do.
    #[test]
    fn a_named_id_is_checked_and_a_corrupt_file_is_named() {
        let directory = scratch("corrupt");
        let named = HostChoice::Named("build-7".into()).host_id(&directory);
        assert_eq!(named.unwrap().to_string(), "build-7");
        let error = HostChoice::Named(String::new())
            .host_id(&directory)
            .unwrap_err();
        assert!(error.to_string().contains("--host-id"), "{error}");
        fs::write(directory.join(HOST_FILE), "\n").unwrap();
        let error = HostChoice::Kept
            .host_id(&directory)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(HOST_FILE) && error.contains("remove it"),
            "{error}"
        );
        fs::remove_dir_all(directory).unwrap();
    }
}
