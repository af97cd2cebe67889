//! Mutual TLS 1.3 for the TCP transport: loading the cluster's CA, this
//! process's certificate and key from PEM files, the rustls configurations
//! of both sides, and the words for a refused peer.
//!
//! Every process of a cluster is a client, and a coordinator when it wins a
//! term, with one certificate for both roles. The coordinator requires a
//! client certificate signed by the cluster's CA; a client requires the
//! coordinator's certificate to be signed by the same CA and valid for the
//! host it advertised. The coordinator checks no names in a client's
//! certificate: whatever the CA signed is a member of the cluster, so the CA
//! must be the cluster's own, never one shared with other services. A
//! process's certificate therefore needs both extended key usages,
//! `serverAuth` and `clientAuth` (tests/support/make-certs.sh is the recipe).
//! The cryptography is rustls' ring provider, passed to
//! each configuration: nothing installs a process-wide default, so an
//! embedder's own rustls setup is neither needed nor disturbed.
//!
//! The files are read again while the process runs (SPEC.md §14.5): a
//! [`Reloader`] holds the set in use, reads every file through its path
//! each [`TLS_RELOAD_INTERVAL`] (so that a file replaced by a rename, or a
//! symbolic link to a directory that is swapped, is seen as a reader of the
//! path sees it), and replaces the set only by a whole set that loads. What
//! to do with what it read is decided by [`Reload`], and when to warn of
//! this process's certificate's expiry by [`ExpiryWarning`]: plain values,
//! with the files' bytes and the time passed in.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::validity::{not_after, rfc3339};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use tokio_rustls::rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use tokio_rustls::rustls::{self, AlertDescription, CertificateError, ClientConfig, ServerConfig};
use tracing::{error, info, warn};

use crate::reload::{Decision, FileRead, PemError, Reload, Schedule};
pub use crate::reload::{MAX_PEM_FILE_BYTES, TLS_RELOAD_INTERVAL};

/// How long before this process's certificate expires it warns (SPEC.md
/// §14.5): a day is long enough for someone to notice a renewal agent that
/// stopped and fix it before the cluster's handshakes fail, and short
/// enough not to warn of certificates that are merely short-lived (renewal
/// agents renew at two thirds of a lifetime, so a certificate of three days
/// or more is renewed before this).
pub const EXPIRY_WARNING: Duration = Duration::from_secs(24 * 60 * 60);

/// The only protocol version offered or accepted. Both ends are this
/// program, so there is no older peer to serve, and TLS 1.3 has no weak
/// cipher suites or renegotiation to configure away.
static PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// Which of the three files a problem is in; says which option names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFile {
    /// The cluster's CA certificate (`--tls-ca`).
    Ca,
    /// This process's certificate chain (`--tls-cert`).
    Certificate,
    /// The private key of that certificate (`--tls-key`).
    Key,
    /// A file of certificate revocation lists (`--tls-crl`).
    Crl,
}

impl TlsFile {
    /// What the file must hold, as advice.
    fn advice(self) -> &'static str {
        match self {
            TlsFile::Ca => "give --tls-ca a PEM file with the cluster's CA certificate",
            TlsFile::Certificate => {
                "give --tls-cert a PEM file with this process's certificate, signed by the cluster's CA"
            }
            TlsFile::Key => "give --tls-key the PEM file with the private key of --tls-cert",
            TlsFile::Crl => {
                "give --tls-crl a PEM file with certificate revocation lists (\"BEGIN X509 CRL\") of the cluster's CA"
            }
        }
    }
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFile::Ca => "CA file",
            TlsFile::Certificate => "certificate file",
            TlsFile::Key => "key file",
            TlsFile::Crl => "CRL file",
        })
    }
}

/// Why the TLS files cannot be used. Each names its file and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    #[error("cannot read the {file} {}: {error}; {}", path.display(), file.advice())]
    Read {
        file: TlsFile,
        path: PathBuf,
        error: io::Error,
    },
    #[error(
        "the {file} {} is larger than {MAX_PEM_FILE_BYTES} bytes, more than any PEM file of certificates or keys; {}",
        path.display(),
        file.advice()
    )]
    TooLarge { file: TlsFile, path: PathBuf },
    #[error("the {file} {} is not valid PEM: {error}; {}", path.display(), file.advice())]
    Pem {
        file: TlsFile,
        path: PathBuf,
        error: pem::Error,
    },
    #[error(
        "the {file} {} holds no certificate (a PEM block \"BEGIN CERTIFICATE\"); {}",
        path.display(),
        file.advice()
    )]
    NoCertificate { file: TlsFile, path: PathBuf },
    #[error(
        "the key file {} holds no private key (PKCS#8, PKCS#1 or SEC1 PEM; an encrypted key must be decrypted first, e.g. with `openssl pkey`); {}",
        path.display(),
        TlsFile::Key.advice()
    )]
    NoKey { path: PathBuf },
    #[error(
        "the CA file {} holds a certificate that cannot be a trust anchor: {reason}; {}",
        path.display(),
        TlsFile::Ca.advice()
    )]
    Ca { path: PathBuf, reason: String },
    #[error(
        "the CRL file {} holds no certificate revocation list (a PEM block \"BEGIN X509 CRL\"); {}",
        path.display(),
        TlsFile::Crl.advice()
    )]
    NoCrl { path: PathBuf },
    #[error(
        "the CRL file {} holds a revocation list that cannot be read: {reason}; {}",
        path.display(),
        TlsFile::Crl.advice()
    )]
    Crl { path: PathBuf, reason: String },
    #[error(
        "the certificate file {} holds a certificate whose validity cannot be read; {}",
        path.display(),
        TlsFile::Certificate.advice()
    )]
    Validity { path: PathBuf },
    /// The key is of a kind rustls cannot use, or is not the certificate's.
    #[error(
        "the key file {} cannot be used with the certificate file {}: {error}; give --tls-key the private key that belongs to --tls-cert (ECDSA P-256/P-384, Ed25519 or RSA)",
        key.display(),
        certificate.display()
    )]
    Key {
        certificate: PathBuf,
        key: PathBuf,
        error: rustls::Error,
    },
}

/// Where the TLS files are: the cluster's CA, this process's certificate
/// and key, and any files of revocation lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub crls: Vec<PathBuf>,
}

/// The loaded files, ready for either side of a connection.
#[derive(Clone, Debug)]
pub struct TlsConfigs {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    /// When this process's certificate (the first of `--tls-cert`) expires.
    pub not_after: UnixTime,
    /// That certificate, which tells one loaded certificate from another.
    leaf: CertificateDer<'static>,
}

impl TlsConfigs {
    /// Reads and loads the CA, the certificate and the key, without
    /// revocation lists (for the benchmarks).
    #[cfg_attr(not(feature = "_internal"), allow(dead_code))]
    pub fn load(ca: &Path, certificate: &Path, key: &Path) -> Result<TlsConfigs, TlsConfigError> {
        let files = TlsFiles {
            ca: ca.to_owned(),
            certificate: certificate.to_owned(),
            key: key.to_owned(),
            crls: Vec::new(),
        };
        TlsConfigs::parse(&files, &Contents::read(&files))
    }

    /// The configurations of what `contents` holds, read from `files`
    /// (named in errors).
    fn parse(files: &TlsFiles, contents: &Contents) -> Result<TlsConfigs, TlsConfigError> {
        let roots = Arc::new(
            contents
                .ca
                .roots()
                .map_err(in_file(TlsFile::Ca, &files.ca))?,
        );
        let chain = contents
            .certificate
            .certificates()
            .map_err(in_file(TlsFile::Certificate, &files.certificate))?;
        let private_key = contents
            .key
            .key()
            .map_err(in_file(TlsFile::Key, &files.key))?;
        let not_after = not_after(&chain[0]).ok_or_else(|| TlsConfigError::Validity {
            path: files.certificate.clone(),
        })?;
        let provider = Arc::new(ring::default_provider());
        let mut crls = Vec::new();
        for (path, read) in files.crls.iter().zip(&contents.crls) {
            let listed = parse_crls(path, read)?;
            // The verifier reads the lists when it is built; building one
            // for each file alone tells which file holds a list it cannot
            // read.
            WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                .with_crls(listed.iter().cloned())
                .build()
                .map_err(|error| TlsConfigError::Crl {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            crls.extend(listed);
        }
        let key_error = |error| TlsConfigError::Key {
            certificate: files.certificate.clone(),
            key: files.key.clone(),
            error,
        };
        let ca_error = |error: rustls::server::VerifierBuilderError| TlsConfigError::Ca {
            path: files.ca.clone(),
            reason: error.to_string(),
        };

        // Only the certificates of hosts are checked for revocation, not the
        // CAs above them: the lists are the cluster's CA's (§14.5), and a
        // chain with an intermediate CA would otherwise need the root's list
        // too. A host's certificate that no list is authoritative for is
        // refused (rustls' default): a list of another CA revokes nothing,
        // and refusing says so at once instead of letting every host in.
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .with_crls(crls.iter().cloned())
                .only_check_end_entity_revocation()
                .build()
                .map_err(ca_error)?;
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .with_crls(crls)
            .only_check_end_entity_revocation()
            .build()
            .map_err(ca_error)?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(PROTOCOL_VERSIONS)
            .expect("the ring provider supports TLS 1.3")
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), private_key.clone_key())
            .map_err(key_error)?;
        // No resumption: a connection lives as long as its process, so
        // resuming saves nothing, and without it every connection verifies
        // both certificates in full.
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;

        let leaf = chain[0].clone();
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(PROTOCOL_VERSIONS)
            .expect("the ring provider supports TLS 1.3")
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(chain, private_key)
            .map_err(key_error)?;
        client.resumption = rustls::client::Resumption::disabled();

        Ok(TlsConfigs {
            server: Arc::new(server),
            client: Arc::new(client),
            not_after,
            leaf,
        })
    }
}

/// When the certificates in the file at `path` stop being usable: the
/// earliest expiry among them (a chain is as good as its first link to
/// expire, and a bundle of CAs needs renewing when its first CA expires).
pub fn certificate_expiry(path: &Path) -> Result<UnixTime, TlsConfigError> {
    let certificates = FileRead::read(path)
        .certificates()
        .map_err(in_file(TlsFile::Certificate, path))?;
    certificates
        .iter()
        .map(|certificate| not_after(certificate))
        .collect::<Option<Vec<UnixTime>>>()
        .and_then(|expiries| expiries.into_iter().min_by_key(UnixTime::as_secs))
        .ok_or_else(|| TlsConfigError::Validity {
            path: path.to_owned(),
        })
}

/// A problem of the reading of `file` at `path` in this error's words.
fn in_file(file: TlsFile, path: &Path) -> impl FnOnce(PemError) -> TlsConfigError {
    move |problem| {
        let path = path.to_owned();
        match problem {
            PemError::Read { kind, error } => TlsConfigError::Read {
                file,
                path,
                error: io::Error::new(kind, error),
            },
            PemError::TooLarge => TlsConfigError::TooLarge { file, path },
            PemError::Pem(error) => TlsConfigError::Pem { file, path, error },
            PemError::NoCertificate => TlsConfigError::NoCertificate { file, path },
            PemError::NoKey => TlsConfigError::NoKey { path },
            PemError::NotTrustAnchor(reason) => TlsConfigError::Ca { path, reason },
        }
    }
}

/// What one reading of every file of a [`TlsFiles`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Contents {
    ca: FileRead,
    certificate: FileRead,
    key: FileRead,
    crls: Vec<FileRead>,
}

impl Contents {
    fn read(files: &TlsFiles) -> Contents {
        Contents {
            ca: FileRead::read(&files.ca),
            certificate: FileRead::read(&files.certificate),
            key: FileRead::read(&files.key),
            crls: files.crls.iter().map(|path| FileRead::read(path)).collect(),
        }
    }
}

/// Every revocation list of a file: at least one.
fn parse_crls(
    path: &Path,
    read: &FileRead,
) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsConfigError> {
    let bytes = read.bytes().map_err(in_file(TlsFile::Crl, path))?;
    let crls = CertificateRevocationListDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsConfigError::Pem {
            file: TlsFile::Crl,
            path: path.to_owned(),
            error,
        })?;
    if crls.is_empty() {
        return Err(TlsConfigError::NoCrl {
            path: path.to_owned(),
        });
    }
    Ok(crls)
}

/// When to warn that this process's certificate expires soon: once for each
/// certificate loaded, at the first look within [`EXPIRY_WARNING`] of its
/// end (SPEC.md §14.5).
#[derive(Debug)]
pub(super) struct ExpiryWarning<C> {
    /// The certificate warned of last.
    warned: Option<C>,
}

impl<C: PartialEq + Clone> ExpiryWarning<C> {
    pub(super) fn new() -> ExpiryWarning<C> {
        ExpiryWarning { warned: None }
    }

    /// Whether to warn now of `certificate`, which expires at `not_after`
    /// (seconds since the epoch), at `now`.
    pub(super) fn due(&mut self, certificate: &C, not_after: u64, now: u64) -> bool {
        if now.saturating_add(EXPIRY_WARNING.as_secs()) < not_after
            || self.warned.as_ref() == Some(certificate)
        {
            return false;
        }
        self.warned = Some(certificate.clone());
        true
    }
}

/// The TLS files as the process uses them: the set in use, read again
/// each [`TLS_RELOAD_INTERVAL`] (SPEC.md §14.5).
#[derive(Debug)]
pub struct Reloader {
    files: TlsFiles,
    state: Mutex<ReloadState>,
}

#[derive(Debug)]
struct ReloadState {
    configs: Arc<TlsConfigs>,
    reload: Reload<Contents>,
    expiry: ExpiryWarning<CertificateDer<'static>>,
    /// When the files are read again.
    schedule: Schedule,
}

impl Reloader {
    /// Loads the files; an error names the file that cannot be used. A
    /// handshake that finds them unread for an interval reads them first;
    /// [`Reloader::read_each_interval`] reads them between handshakes too.
    pub fn new(files: TlsFiles) -> Result<Arc<Reloader>, TlsConfigError> {
        let contents = Contents::read(&files);
        let configs = TlsConfigs::parse(&files, &contents)?;
        let mut expiry = ExpiryWarning::new();
        warn_of_expiry(&mut expiry, &files, &configs, SystemTime::now());
        Ok(Arc::new(Reloader {
            state: Mutex::new(ReloadState {
                configs: Arc::new(configs),
                reload: Reload::new(contents),
                expiry,
                schedule: Schedule::new(Instant::now()),
            }),
            files,
        }))
    }

    /// When called within a tokio runtime, a task of that runtime reads the
    /// files each interval while the reloader lives, so that a change and
    /// a coming expiry are logged while no handshake starts.
    pub(super) fn read_each_interval(self: &Arc<Reloader>) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reload_while_used(Arc::downgrade(self)));
        }
    }

    /// The set for a new handshake.
    pub fn current(&self) -> Arc<TlsConfigs> {
        let mut state = self.lock();
        self.read_if_due(&mut state, Instant::now(), SystemTime::now());
        state.configs.clone()
    }

    /// This process's certificate file and when the certificate in use
    /// expires: for a report of a running process (the `status` of a
    /// process reads its files itself, [`certificate_expiry`]).
    #[cfg_attr(not(feature = "_internal"), allow(dead_code))]
    pub fn certificate_expiry(&self) -> (PathBuf, UnixTime) {
        (
            self.files.certificate.clone(),
            self.lock().configs.not_after,
        )
    }

    /// This process's certificate file (`--tls-cert`).
    pub fn certificate_file(&self) -> &Path {
        &self.files.certificate
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReloadState> {
        // A panic while the lock was held cannot leave the state half
        // changed: each field is replaced whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the files again when the last reading is an interval old, and
    /// replaces the set in use, reports a file that cannot be used, or warns
    /// of an expiry, as decided.
    fn read_if_due(&self, state: &mut ReloadState, now: Instant, wall: SystemTime) {
        if !state.schedule.due(now) {
            return;
        }
        self.read(state, wall);
    }

    /// Reads the files now, whenever they were read last: for the tests,
    /// which would otherwise wait for the interval.
    #[cfg(feature = "_internal")]
    pub fn read_now(&self) {
        let mut state = self.lock();
        state.schedule = Schedule::new(Instant::now());
        self.read(&mut state, SystemTime::now());
    }

    fn read(&self, state: &mut ReloadState, wall: SystemTime) {
        let files = &self.files;
        match state
            .reload
            .decide(Contents::read(files), |read| TlsConfigs::parse(files, read))
        {
            Decision::Replace(configs) => {
                info!(
                    certificate = %files.certificate.display(),
                    "the TLS files changed; new connections use them (SPEC.md §14.5)"
                );
                state.configs = Arc::new(configs);
            }
            Decision::Report(error) => {
                error!(
                    "{error}. The TLS files in use before stay in use until the files load (SPEC.md §14.5)"
                );
            }
            Decision::Unchanged | Decision::Reported => {}
        }
        warn_of_expiry(&mut state.expiry, files, &state.configs, wall);
    }
}

/// Logs a warning when the certificate in use expires within
/// [`EXPIRY_WARNING`] and none was logged for it.
fn warn_of_expiry(
    expiry: &mut ExpiryWarning<CertificateDer<'static>>,
    files: &TlsFiles,
    configs: &TlsConfigs,
    now: SystemTime,
) {
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let not_after = configs.not_after.as_secs();
    if expiry.due(&configs.leaf, not_after, now) {
        let when = if not_after < now {
            "expired"
        } else {
            "expires"
        };
        warn!(
            "this process's certificate {} (--tls-cert) {when} at {}; renew it: the file is read again within {TLS_RELOAD_INTERVAL:?} of a change (SPEC.md §14.5)",
            files.certificate.display(),
            rfc3339(not_after)
        );
    }
}

/// Reads the files each interval for as long as the reloader lives. Holding
/// it weakly lets the task end within an interval of the transport's end;
/// it ends with its runtime too, and [`Reloader::current`] then reads the
/// files itself.
async fn reload_while_used(reloader: Weak<Reloader>) {
    let mut ticks = tokio::time::interval(TLS_RELOAD_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(reloader) = reloader.upgrade() else {
            return;
        };
        let mut state = reloader.lock();
        reloader.read_if_due(&mut state, Instant::now(), SystemTime::now());
    }
}

/// The rustls error inside an I/O error from tokio-rustls, if there is one:
/// tokio-rustls wraps every TLS failure in an [`io::Error`].
pub(super) fn rustls_error(error: &io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What a client's certificate was, in words, when the coordinator refused
/// it during the handshake; `None` when the handshake failed for another
/// reason.
pub(super) fn client_certificate_problem(error: &rustls::Error) -> Option<String> {
    match error {
        rustls::Error::NoCertificatesPresented => Some(
            "no certificate; give every process of the cluster --tls-cert and --tls-key with a certificate signed by the cluster's CA".to_owned(),
        ),
        rustls::Error::InvalidCertificate(problem) => Some(match common_problem(problem) {
            Some(problem) => problem,
            None => format!(
                "a certificate that does not verify against the cluster's CA: {}",
                certificate_problem(problem)
            ),
        }),
        rustls::Error::InvalidCertRevocationList(problem) => Some(unusable_crl(problem)),
        _ => None,
    }
}

/// What the coordinator's certificate was, in words, when this client
/// refused it; `None` when the handshake failed for another reason.
pub(super) fn coordinator_certificate_problem(error: &rustls::Error, host: &str) -> Option<String> {
    match error {
        rustls::Error::NoCertificatesPresented => Some("no certificate".to_owned()),
        rustls::Error::InvalidCertificate(problem) => Some(match common_problem(problem) {
            Some(problem) => problem,
            None => format!(
                "a certificate that does not verify for host {host} against the cluster's CA: {}",
                certificate_problem(problem)
            ),
        }),
        rustls::Error::InvalidCertRevocationList(problem) => Some(unusable_crl(problem)),
        _ => None,
    }
}

/// A revoked or expired certificate, in words that say so first, whichever
/// side refused it (SPEC.md §14.5).
fn common_problem(problem: &CertificateError) -> Option<String> {
    Some(match problem {
        CertificateError::Revoked => {
            "a revoked certificate: the cluster's CRL (--tls-crl) lists it".to_owned()
        }
        CertificateError::ExpiredContext { time, not_after } => format!(
            "an expired certificate: it expired at {} (it is now {}); its host must renew it",
            rfc3339(not_after.as_secs()),
            rfc3339(time.as_secs())
        ),
        CertificateError::Expired => {
            "an expired certificate; its host must renew it".to_owned()
        }
        CertificateError::UnknownRevocationStatus => "a certificate whose revocation cannot be checked: no CRL in --tls-crl is of the CA that signed it; give --tls-crl a CRL of each CA in --tls-ca".to_owned(),
        _ => return None,
    })
}

/// A revocation list that could not be used during a handshake.
fn unusable_crl(problem: &rustls::CertRevocationListError) -> String {
    format!(
        "a certificate whose revocation cannot be checked: a CRL in --tls-crl cannot be used ({problem:?}); give --tls-crl CRLs signed by the cluster's CA"
    )
}

/// What the coordinator said of this process's certificate with `alert`
/// (received on the first read, SPEC.md §11.4), in words that name the
/// file: `certificate` is this process's `--tls-cert`.
pub(super) fn refused_certificate(
    peer: &str,
    alert: AlertDescription,
    certificate: &Path,
) -> String {
    let file = certificate.display();
    match alert {
        AlertDescription::CertificateRevoked => format!(
            "{peer} refused this process's certificate: this process's certificate (--tls-cert {file}) was revoked by the cluster's CRL (TLS alert {alert:?}); give --tls-cert and --tls-key a new certificate of the cluster's CA"
        ),
        AlertDescription::CertificateExpired => format!(
            "{peer} refused this process's certificate: this process's certificate (--tls-cert {file}) has expired or is not valid yet (TLS alert {alert:?}); give --tls-cert and --tls-key a renewed certificate, or check this host's clock"
        ),
        alert => format!(
            "{peer} refused this process's certificate (--tls-cert {file}, TLS alert {alert:?}); give --tls-cert and --tls-key a certificate signed by the cluster's CA, the one the coordinator has in --tls-ca"
        ),
    }
}

/// What a handshake that failed for a reason other than a certificate
/// means, in words.
pub(super) fn handshake_problem(error: &rustls::Error) -> String {
    match error {
        // The first bytes were not a TLS record: the peer speaks plain TCP.
        rustls::Error::InvalidMessage(_) => format!(
            "the TLS handshake failed: {error}; the peer does not speak TLS (does it run without --tls-ca, --tls-cert and --tls-key?)"
        ),
        error => format!("the TLS handshake failed: {error}"),
    }
}

fn certificate_problem(problem: &CertificateError) -> String {
    match problem {
        CertificateError::UnknownIssuer => {
            "UnknownIssuer (it is not signed by the CA in this process's --tls-ca)".to_owned()
        }
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "not valid before {} (it is now {}); is a clock wrong?",
            rfc3339(not_before.as_secs()),
            rfc3339(time.as_secs())
        ),
        problem => problem.to_string(),
    }
}

/// Whether a TLS alert says that the peer refused this process's
/// certificate. In TLS 1.3 a client learns it only after its side of the
/// handshake is over, on its first read.
pub(super) fn refuses_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::AccessDenied
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §14.5: a warning once for each certificate, from 24 h before its
    /// end, expired or not; none before.
    #[test]
    fn an_expiry_is_warned_of_once_per_certificate_within_a_day() {
        let day = EXPIRY_WARNING.as_secs();
        let mut warning = ExpiryWarning::new();
        assert!(!warning.due(&"a", 10 * day, 8 * day));
        assert!(!warning.due(&"a", 10 * day, 9 * day - 1));
        assert!(warning.due(&"a", 10 * day, 9 * day));
        assert!(!warning.due(&"a", 10 * day, 9 * day + 1));
        assert!(!warning.due(&"a", 10 * day, 11 * day), "expired: warned");
        assert!(!warning.due(&"b", 20 * day, 11 * day), "renewed in time");
        assert!(warning.due(&"b", 20 * day, 19 * day));
        assert!(warning.due(&"c", 5 * day, 19 * day), "loaded expired");
    }

    /// §14.5: the refusals say what was wrong with the certificate and
    /// when, and name the file of this process's certificate.
    #[test]
    fn refusals_say_revoked_or_expired_and_when() {
        let revoked = rustls::Error::InvalidCertificate(CertificateError::Revoked);
        assert_eq!(
            client_certificate_problem(&revoked).unwrap(),
            "a revoked certificate: the cluster's CRL (--tls-crl) lists it"
        );
        assert_eq!(
            coordinator_certificate_problem(&revoked, "10.0.0.1").unwrap(),
            "a revoked certificate: the cluster's CRL (--tls-crl) lists it"
        );
        let time = |seconds| UnixTime::since_unix_epoch(Duration::from_secs(seconds));
        let expired = rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
            time: time(2_087_901_300),
            not_after: time(2_087_901_296),
        });
        assert_eq!(
            coordinator_certificate_problem(&expired, "10.0.0.1").unwrap(),
            "an expired certificate: it expired at 2036-02-29T12:34:56Z (it is now 2036-02-29T12:35:00Z); its host must renew it"
        );
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(
            coordinator_certificate_problem(&unknown, "10.0.0.1")
                .unwrap()
                .starts_with("a certificate that does not verify for host 10.0.0.1")
        );
        let file = Path::new("/etc/sf/host.pem");
        assert_eq!(
            refused_certificate(
                "the coordinator at 10.0.0.1:7000",
                AlertDescription::CertificateRevoked,
                file
            ),
            "the coordinator at 10.0.0.1:7000 refused this process's certificate: this process's certificate (--tls-cert /etc/sf/host.pem) was revoked by the cluster's CRL (TLS alert CertificateRevoked); give --tls-cert and --tls-key a new certificate of the cluster's CA"
        );
        assert!(
            refused_certificate(
                "the coordinator at h:1",
                AlertDescription::CertificateExpired,
                file
            )
            .contains("(--tls-cert /etc/sf/host.pem) has expired")
        );
    }
}
