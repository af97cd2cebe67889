//! The cluster form's hostile clients reach the coordinator over TCP with
//! mutual TLS (SPEC.md §11.4), at the address its coordinator key holds,
//! from the harness's own namespace (through the bridge, which no
//! partition of a worker host from etcd or its peers cuts). Besides a
//! client with a certificate of the cluster's CA, which speaks the wire
//! protocol badly as the local form's clients do, there are clients the
//! coordinator must refuse at the handshake (§11.4, §14.5): without a
//! certificate, with one another CA signed, with the cluster's
//! certificate but another key (its handshake signature does not verify),
//! with one the cluster's CRL revokes, and with one that expired.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::ResolvesClientCert;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, SignatureScheme};

/// The bound on one TCP connect or TLS handshake of a hostile client: the
/// library's own (`CONNECT_TIMEOUT`, `TLS_HANDSHAKE_TIMEOUT`, 2 s each); a
/// coordinator that takes longer is stopped, cut off or gone.
const SETUP_BOUND: Duration = Duration::from_secs(2);

/// Who a TLS client claims to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `client.pem`, signed by the cluster's CA: a valid client.
    Cluster,
    /// No certificate at all.
    Anonymous,
    /// `other-client.pem`, signed by another cluster's CA.
    OtherCa,
    /// The cluster's `client.pem`, but the handshake signed with another
    /// key (`other-client.key`): a stolen certificate without its key.
    WrongKey,
    /// `revoked-client.pem`, signed by the cluster's CA and listed in its
    /// CRL (`crl.pem`), which the workers are given.
    Revoked,
    /// `expired-server.pem`, signed by the cluster's CA, valid only on a
    /// day long past.
    Expired,
}

/// The clients' TLS configurations, and where the coordinator is.
pub struct TlsClients {
    cluster: Arc<ClientConfig>,
    anonymous: Arc<ClientConfig>,
    other_ca: Arc<ClientConfig>,
    wrong_key: Arc<ClientConfig>,
    revoked: Arc<ClientConfig>,
    expired: Arc<ClientConfig>,
    /// The coordinator key's address as the harness last read it, and the
    /// worker it names.
    coordinator: Arc<Mutex<Option<(String, u32)>>>,
    stderr: PathBuf,
}

/// A certificate of the cluster presented with a key that is not its own.
#[derive(Debug)]
struct MismatchedKey(Arc<CertifiedKey>);

impl ResolvesClientCert for MismatchedKey {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl TlsClients {
    /// The configurations from the certificates that make-certs.sh made in
    /// `certs`; `coordinator` is kept up to date by the harness's poller.
    pub fn new(
        certs: &Path,
        coordinator: Arc<Mutex<Option<(String, u32)>>>,
        stderr: &Path,
    ) -> Result<TlsClients, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for certificate in certificates(&certs.join("ca.pem"))? {
            roots.add(certificate).map_err(|e| e.to_string())?;
        }
        let builder = || {
            ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map(|b| b.with_root_certificates(roots.clone()))
                .map_err(|e| e.to_string())
        };
        let with_pair = |name: &str| -> Result<Arc<ClientConfig>, String> {
            builder()?
                .with_client_auth_cert(
                    certificates(&certs.join(format!("{name}.pem")))?,
                    key(&certs.join(format!("{name}.key")))?,
                )
                .map(Arc::new)
                .map_err(|e| format!("{name}: {e}"))
        };
        let stolen = CertifiedKey::new(
            certificates(&certs.join("client.pem"))?,
            rustls::crypto::ring::sign::any_supported_type(&key(&certs.join("other-client.key"))?)
                .map_err(|e| e.to_string())?,
        );
        Ok(TlsClients {
            cluster: with_pair("client")?,
            anonymous: Arc::new(builder()?.with_no_client_auth()),
            other_ca: with_pair("other-client")?,
            wrong_key: Arc::new(
                builder()?.with_client_cert_resolver(Arc::new(MismatchedKey(Arc::new(stolen)))),
            ),
            revoked: with_pair("revoked-client")?,
            expired: with_pair("expired-server")?,
            coordinator,
            stderr: stderr.to_owned(),
        })
    }

    /// The coordinator's advertised address and worker, if a term runs.
    pub fn coordinator(&self) -> Option<(String, u32)> {
        self.coordinator.lock().expect("coordinator lock").clone()
    }

    /// The stderr file of worker `worker`, where its library logs.
    pub fn log_of(&self, worker: u32) -> PathBuf {
        self.stderr.join(format!("worker-{worker}.txt"))
    }

    /// A TCP connection to `address` within `bound`.
    pub async fn tcp_to(&self, address: &str, bound: Duration) -> Result<TcpStream, String> {
        tokio::time::timeout(bound, TcpStream::connect(address))
            .await
            .map_err(|_| format!("connect to {address} did not finish"))?
            .map_err(|e| format!("connect to {address}: {e}"))
    }

    /// A TLS connection to the coordinator at `address` as `identity`, and
    /// our end's address (as the coordinator names us in its log).
    pub async fn connect_to(
        &self,
        address: &str,
        identity: Identity,
    ) -> Result<(TlsStream<TcpStream>, Option<SocketAddr>), SetupError> {
        let unreached = |why: String| SetupError {
            reached: false,
            local: None,
            why,
        };
        let tcp = tokio::time::timeout(SETUP_BOUND, TcpStream::connect(address))
            .await
            .map_err(|_| unreached(format!("connect to {address} did not finish")))?
            .map_err(|e| unreached(format!("connect to {address}: {e}")))?;
        let local = tcp.local_addr().ok();
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .to_owned();
        let name = ServerName::try_from(host).map_err(|e| unreached(e.to_string()))?;
        let config = match identity {
            Identity::Cluster => &self.cluster,
            Identity::Anonymous => &self.anonymous,
            Identity::OtherCa => &self.other_ca,
            Identity::WrongKey => &self.wrong_key,
            Identity::Revoked => &self.revoked,
            Identity::Expired => &self.expired,
        };
        let connector = TlsConnector::from(config.clone());
        match tokio::time::timeout(SETUP_BOUND, connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => Ok((stream, local)),
            Ok(Err(error)) => Err(SetupError {
                reached: true,
                local,
                why: format!("the TLS handshake failed: {error}"),
            }),
            Err(_) => Err(SetupError {
                reached: false,
                local,
                why: "the TLS handshake did not finish".into(),
            }),
        }
    }
}

/// A TLS connection that could not be set up.
pub struct SetupError {
    /// TCP connected and the handshake itself failed (a refusal), rather
    /// than no coordinator reached in time.
    pub reached: bool,
    /// Our end's address, once TCP connected.
    pub local: Option<SocketAddr>,
    pub why: String,
}
