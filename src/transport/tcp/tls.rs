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

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use tokio_rustls::rustls::{
    self, AlertDescription, CertificateError, ClientConfig, RootCertStore, ServerConfig,
};

/// The largest PEM file read. A CA bundle of a few hundred certificates is
/// well under this; the bound keeps a wrong path (a log, `/dev/zero`) from
/// filling memory.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

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
        }
    }
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFile::Ca => "CA file",
            TlsFile::Certificate => "certificate file",
            TlsFile::Key => "key file",
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

/// The loaded files, ready for either side of a connection.
#[derive(Clone, Debug)]
pub struct TlsConfigs {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl TlsConfigs {
    pub fn load(ca: &Path, certificate: &Path, key: &Path) -> Result<TlsConfigs, TlsConfigError> {
        let roots = Arc::new(load_roots(ca)?);
        let chain = load_certificates(TlsFile::Certificate, certificate)?;
        let private_key = load_key(key)?;
        let provider = Arc::new(ring::default_provider());
        let key_error = |error| TlsConfigError::Key {
            certificate: certificate.to_owned(),
            key: key.to_owned(),
            error,
        };

        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|error| TlsConfigError::Ca {
                path: ca.to_owned(),
                reason: error.to_string(),
            })?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(PROTOCOL_VERSIONS)
            .expect("the ring provider supports TLS 1.3")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), private_key.clone_key())
            .map_err(key_error)?;
        // No resumption: a connection lives as long as its process, so
        // resuming saves nothing, and without it every connection verifies
        // both certificates in full.
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;

        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(PROTOCOL_VERSIONS)
            .expect("the ring provider supports TLS 1.3")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, private_key)
            .map_err(key_error)?;
        client.resumption = rustls::client::Resumption::disabled();

        Ok(TlsConfigs {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

/// The file's bytes, at most [`MAX_PEM_FILE_BYTES`].
fn read_pem_file(file: TlsFile, path: &Path) -> Result<Vec<u8>, TlsConfigError> {
    let read_error = |error| TlsConfigError::Read {
        file,
        path: path.to_owned(),
        error,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|opened| opened.take(MAX_PEM_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(TlsConfigError::TooLarge {
            file,
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

fn load_certificates(
    file: TlsFile,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let bytes = read_pem_file(file, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsConfigError::Pem {
            file,
            path: path.to_owned(),
            error,
        })?;
    if certificates.is_empty() {
        return Err(TlsConfigError::NoCertificate {
            file,
            path: path.to_owned(),
        });
    }
    Ok(certificates)
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for certificate in load_certificates(TlsFile::Ca, path)? {
        roots.add(certificate).map_err(|error| TlsConfigError::Ca {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    }
    Ok(roots)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let bytes = read_pem_file(TlsFile::Key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| match error {
        pem::Error::NoItemsFound => TlsConfigError::NoKey {
            path: path.to_owned(),
        },
        error => TlsConfigError::Pem {
            file: TlsFile::Key,
            path: path.to_owned(),
            error,
        },
    })
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
        rustls::Error::InvalidCertificate(problem) => Some(format!(
            "a certificate that does not verify against the cluster's CA: {}",
            certificate_problem(problem)
        )),
        _ => None,
    }
}

/// What the coordinator's certificate was, in words, when this client
/// refused it; `None` when the handshake failed for another reason.
pub(super) fn coordinator_certificate_problem(error: &rustls::Error, host: &str) -> Option<String> {
    match error {
        rustls::Error::NoCertificatesPresented => Some("no certificate".to_owned()),
        rustls::Error::InvalidCertificate(problem) => Some(format!(
            "a certificate that does not verify for host {host} against the cluster's CA: {}",
            certificate_problem(problem)
        )),
        _ => None,
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
