//! Reading a set of files again while the process runs (SPEC.md §14.5):
//! the cluster's TLS files (`transport::tcp`) and etcd's
//! (`election::etcd`) are each a set that is read whole through its paths
//! every [`TLS_RELOAD_INTERVAL`], and replaced only by a whole set that
//! loads. The decisions are plain values with the time and the bytes
//! passed in: when to read ([`Schedule`]) and what a reading means for the
//! set in use ([`Reload`]); the shells that read, load and log are beside
//! the files they load. What a reading holds (certificates, a CA's trust
//! anchors, a private key) is parsed here for both (`FileRead::certificates`,
//! `roots`, `key`); each adds to a `PemError` which of its files it is and
//! which option gives it.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio_rustls::rustls::RootCertStore;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The largest PEM file read. A CA bundle of a few hundred certificates is
/// well under this; the bound keeps a wrong path (a log, `/dev/zero`) from
/// filling memory.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

/// How often the TLS files, the cluster's and etcd's, are read again
/// (SPEC.md §14.5). Renewal agents
/// replace a certificate hours or days before the old one expires, so a
/// few seconds of delay cost nothing, and reading four small files every
/// few seconds costs nothing either; 5 s keeps a rotation in effect well
/// within the 10 s that operators are promised.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// What one reading of a file found. Plain data, compared with the last
/// reading to tell whether the file changed: a failure is kept in words, so
/// that the same failure twice is one change, reported once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FileRead {
    Bytes(Vec<u8>),
    Failed { kind: io::ErrorKind, error: String },
    TooLarge,
}

impl FileRead {
    /// The file's bytes, at most [`MAX_PEM_FILE_BYTES`], read through its
    /// path (a symbolic link is followed at each reading).
    pub(crate) fn read(path: &Path) -> FileRead {
        let mut bytes = Vec::new();
        match File::open(path)
            .and_then(|opened| opened.take(MAX_PEM_FILE_BYTES + 1).read_to_end(&mut bytes))
        {
            Err(error) => FileRead::Failed {
                kind: error.kind(),
                error: error.to_string(),
            },
            Ok(_) if bytes.len() as u64 > MAX_PEM_FILE_BYTES => FileRead::TooLarge,
            Ok(_) => FileRead::Bytes(bytes),
        }
    }

    /// The bytes read, or why there are none.
    pub(crate) fn bytes(&self) -> Result<&[u8], PemError> {
        match self {
            FileRead::Bytes(bytes) => Ok(bytes),
            FileRead::Failed { kind, error } => Err(PemError::Read {
                kind: *kind,
                error: error.clone(),
            }),
            FileRead::TooLarge => Err(PemError::TooLarge),
        }
    }

    /// Every certificate of the PEM file read: at least one.
    pub(crate) fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, PemError> {
        let certificates = CertificateDer::pem_slice_iter(self.bytes()?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(PemError::Pem)?;
        if certificates.is_empty() {
            return Err(PemError::NoCertificate);
        }
        Ok(certificates)
    }

    /// The certificates of a CA's PEM file read, as trust anchors.
    pub(crate) fn roots(&self) -> Result<RootCertStore, PemError> {
        let mut roots = RootCertStore::empty();
        for certificate in self.certificates()? {
            roots
                .add(certificate)
                .map_err(|error| PemError::NotTrustAnchor(error.to_string()))?;
        }
        Ok(roots)
    }

    /// The private key of the PEM file read.
    pub(crate) fn key(&self) -> Result<PrivateKeyDer<'static>, PemError> {
        PrivateKeyDer::from_pem_slice(self.bytes()?).map_err(|error| match error {
            pem::Error::NoItemsFound => PemError::NoKey,
            error => PemError::Pem(error),
        })
    }
}

/// Why a reading of a PEM file cannot be used, in words that follow the
/// file's name: the error of each set of files says which file it is and
/// what to give instead.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PemError {
    #[error("it cannot be read: {error}")]
    Read { kind: io::ErrorKind, error: String },
    #[error(
        "it is larger than {MAX_PEM_FILE_BYTES} bytes, more than any PEM file of certificates or keys"
    )]
    TooLarge,
    #[error("it is not valid PEM: {0}")]
    Pem(pem::Error),
    #[error("it holds no certificate (a PEM block \"BEGIN CERTIFICATE\")")]
    NoCertificate,
    #[error(
        "it holds no private key (PKCS#8, PKCS#1 or SEC1 PEM; an encrypted key must be decrypted first, e.g. with `openssl pkey`)"
    )]
    NoKey,
    #[error("it holds a certificate that cannot be a trust anchor: {0}")]
    NotTrustAnchor(String),
}

/// When a set of files is read again: an interval after its last reading.
/// The time is passed in, so that the decision is exact and testable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    /// When the files were read last.
    read_at: Instant,
}

impl Schedule {
    /// A schedule of files read at `read_at`.
    pub(crate) fn new(read_at: Instant) -> Schedule {
        Schedule { read_at }
    }

    /// Whether the files are to be read at `now`: when the last reading is
    /// at least [`TLS_RELOAD_INTERVAL`] old. When they are, the reading is
    /// counted as made at `now`, so that the next one is an interval later
    /// whatever it finds. A `now` before the last reading (an instant taken
    /// before another thread's reading) is not due.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.read_at) < TLS_RELOAD_INTERVAL {
            return false;
        }
        self.read_at = now;
        true
    }
}

/// What a reading of the files means for the set in use (SPEC.md §14.5).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision<T, E> {
    /// The files hold what is in use.
    Unchanged,
    /// The files changed and load: use this set from now on.
    Replace(T),
    /// The files changed and do not load: keep the set in use, and report
    /// this error, which is new.
    Report(E),
    /// The files hold what was reported already: keep the set in use,
    /// quietly.
    Reported,
}

/// Which readings of the files were used and which refused: the memory
/// that makes a rotation take effect once and a broken file be reported
/// once per change, not once per reading.
#[derive(Debug)]
pub(crate) struct Reload<C> {
    /// What the set in use was loaded from.
    in_use: C,
    /// What was read last and did not load, if anything has not loaded
    /// since the set in use was read again.
    refused: Option<C>,
}

impl<C: PartialEq> Reload<C> {
    pub(crate) fn new(in_use: C) -> Reload<C> {
        Reload {
            in_use,
            refused: None,
        }
    }

    /// Decides what `read` means; `load` makes a set of it, called only
    /// when `read` is new. A pair read mid-renewal (a new certificate with
    /// the old key) does not load and is reported; the reading after the
    /// key is replaced too differs, and loads.
    pub(crate) fn decide<T, E>(
        &mut self,
        read: C,
        load: impl FnOnce(&C) -> Result<T, E>,
    ) -> Decision<T, E> {
        if read == self.in_use {
            // Back to the files in use: a later return of the refused ones
            // is a change again, reported again.
            self.refused = None;
            return Decision::Unchanged;
        }
        if self.refused.as_ref() == Some(&read) {
            return Decision::Reported;
        }
        match load(&read) {
            Ok(set) => {
                self.in_use = read;
                self.refused = None;
                Decision::Replace(set)
            }
            Err(error) => {
                self.refused = Some(read);
                Decision::Report(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(read: &&str) -> Result<String, String> {
        match read.strip_prefix("good ") {
            Some(set) => Ok(set.to_owned()),
            None => Err(format!("cannot load {read}")),
        }
    }

    /// §14.5: a change that loads replaces the set once; one that does not
    /// is reported once, however often it is read, and the set in use
    /// stays; a pair read half renewed is reported and the next reading,
    /// whole, loads; a return to the files in use is no change, and a
    /// later return of the broken ones is reported again.
    #[test]
    fn a_reading_of_the_files_replaces_reports_or_keeps() {
        let mut reload = Reload::new("good a");
        assert_eq!(reload.decide("good a", loads), Decision::Unchanged);
        assert_eq!(
            reload.decide("good b", loads),
            Decision::Replace("b".to_owned())
        );
        assert_eq!(reload.decide("good b", loads), Decision::Unchanged);

        let half_renewed = "new certificate, old key";
        assert_eq!(
            reload.decide(half_renewed, loads),
            Decision::Report(format!("cannot load {half_renewed}"))
        );
        assert_eq!(reload.decide(half_renewed, loads), Decision::Reported);
        assert_eq!(reload.decide(half_renewed, loads), Decision::Reported);
        assert_eq!(
            reload.decide("good c", loads),
            Decision::Replace("c".to_owned())
        );

        assert_eq!(
            reload.decide("broken", loads),
            Decision::Report("cannot load broken".to_owned())
        );
        assert_eq!(
            reload.decide("also broken", loads),
            Decision::Report("cannot load also broken".to_owned()),
            "another broken reading is another change"
        );
        assert_eq!(reload.decide("good c", loads), Decision::Unchanged);
        assert_eq!(
            reload.decide("also broken", loads),
            Decision::Report("cannot load also broken".to_owned()),
            "broken again after the files in use came back"
        );
    }

    /// The reading is only loaded when it is new.
    #[test]
    fn an_unchanged_reading_is_not_loaded_again() {
        let mut reload = Reload::new(1);
        let refuse = |_: &i32| -> Result<(), ()> { Err(()) };
        assert_eq!(reload.decide(2, refuse), Decision::Report(()));
        let unreachable = |_: &i32| -> Result<(), ()> { panic!("loaded again") };
        assert_eq!(reload.decide(2, unreachable), Decision::Reported);
        assert_eq!(reload.decide(1, unreachable), Decision::Unchanged);
    }

    /// §14.5: the files are read an interval after the last reading, not a
    /// moment before; a reading moves the next one an interval on; an
    /// instant from before the last reading is not due.
    #[test]
    fn the_files_are_read_again_an_interval_after_the_last_reading() {
        let start = Instant::now();
        let mut schedule = Schedule::new(start);
        let just_before = start + TLS_RELOAD_INTERVAL - Duration::from_nanos(1);
        assert!(!schedule.due(start));
        assert!(!schedule.due(just_before));
        assert!(schedule.due(start + TLS_RELOAD_INTERVAL));
        assert!(!schedule.due(start + TLS_RELOAD_INTERVAL), "read just now");
        assert!(!schedule.due(start), "an instant from before the reading");
        assert!(!schedule.due(just_before + TLS_RELOAD_INTERVAL));
        assert!(schedule.due(start + TLS_RELOAD_INTERVAL * 2));
        let late = start + TLS_RELOAD_INTERVAL * 7;
        assert!(schedule.due(late), "a late look reads at once");
        assert!(!schedule.due(late + TLS_RELOAD_INTERVAL - Duration::from_nanos(1)));
        assert!(schedule.due(late + TLS_RELOAD_INTERVAL));
    }

    /// A file is read whole through its path, and a file larger than the
    /// bound or one that cannot be opened is a reading of its own, equal
    /// to itself so that it is reported once.
    #[test]
    fn a_file_is_read_whole_or_as_its_failure() {
        let directory = std::env::temp_dir().join(format!("sf-reload-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let small = directory.join("small.pem");
        std::fs::write(&small, b"pem").unwrap();
        assert_eq!(FileRead::read(&small), FileRead::Bytes(b"pem".to_vec()));
        let large = directory.join("large.pem");
        std::fs::write(&large, vec![b'a'; MAX_PEM_FILE_BYTES as usize + 1]).unwrap();
        assert_eq!(FileRead::read(&large), FileRead::TooLarge);
        let missing = directory.join("missing.pem");
        let failed = FileRead::read(&missing);
        assert!(
            matches!(
                &failed,
                FileRead::Failed {
                    kind: io::ErrorKind::NotFound,
                    ..
                }
            ),
            "{failed:?}"
        );
        assert_eq!(failed, FileRead::read(&missing));
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
