//! The TCP transport (SPEC.md §11) over loopback: mutual TLS between
//! processes of one cluster CA, the refusals of either side, insecure mode
//! on loopback only, the listen/close cycle of terms, and the errors for
//! unusable TLS files. Certificates are made by tests/support/make-certs.sh,
//! the recipe README.md documents.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use single_flight::_internal::transport::tcp::{
    Security, TcpConfigError, TcpOptions, TcpReader, TcpSocketListener, TcpTransport, TcpWriter,
    TlsConfigError, TlsFile,
};
use single_flight::_internal::transport::{
    ConnectError, Connection, Listener, PeerRefused, Transport,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::support::certs;

/// A directory of certificates made for one test, removed when it ends.
struct Certificates {
    directory: PathBuf,
}

impl Certificates {
    fn new(test: &str) -> Certificates {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let directory = std::env::temp_dir().join(format!(
            "sf-tcp-{test}-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        certs::make(&directory, "").expect("the test certificates");
        Certificates { directory }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.directory.join(file)
    }

    /// TLS with the cluster's CA and the pair `name`.pem, `name`.key.
    fn tls(&self, ca: &str, name: &str) -> Security {
        Security::Tls {
            ca: self.path(&format!("{ca}.pem")),
            certificate: self.path(&format!("{name}.pem")),
            key: self.path(&format!("{name}.key")),
            crls: Vec::new(),
        }
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

fn transport(listen: &str, security: Security) -> TcpTransport {
    TcpTransport::new(TcpOptions {
        listen: listen.parse().unwrap(),
        security,
    })
    .unwrap()
}

/// The advertised address of a coordinator that listens on `transport`.
fn advertised(transport: &TcpTransport) -> String {
    transport.local_address().to_string()
}

async fn connect(
    client: &TcpTransport,
    address: &str,
) -> Result<Connection<TcpReader, TcpWriter>, ConnectError> {
    client.connect(&address.to_owned()).await
}

/// Accepts one connection and checks its peer, as the coordinator's
/// connection task does.
async fn accept_one(
    listener: &mut TcpSocketListener,
) -> Result<Connection<TcpReader, TcpWriter>, PeerRefused> {
    let incoming = listener.accept().await.unwrap();
    TcpSocketListener::establish(incoming).await
}

/// `client` connects to the coordinator at `address` while `listener`
/// accepts: what each side ends with.
async fn meet(
    client: &TcpTransport,
    address: &str,
    listener: &mut TcpSocketListener,
) -> (
    Result<Connection<TcpReader, TcpWriter>, ConnectError>,
    Result<Connection<TcpReader, TcpWriter>, PeerRefused>,
) {
    tokio::join!(connect(client, address), accept_one(listener))
}

/// [`meet`] where both sides must succeed, then [`exchange_lines`]: the
/// client's side and the coordinator's.
async fn connected(
    client: &TcpTransport,
    address: &str,
    listener: &mut TcpSocketListener,
) -> (
    Connection<TcpReader, TcpWriter>,
    Connection<TcpReader, TcpWriter>,
) {
    let (connected, accepted) = meet(client, address, listener).await;
    exchange_lines(
        connected.unwrap_or_else(|error| panic!("{error}")),
        accepted.unwrap_or_else(|error| panic!("{error}")),
    )
    .await
}

/// One line each way: the client's hello, then the coordinator's answer.
async fn exchange_lines(
    client: Connection<TcpReader, TcpWriter>,
    server: Connection<TcpReader, TcpWriter>,
) -> (
    Connection<TcpReader, TcpWriter>,
    Connection<TcpReader, TcpWriter>,
) {
    let Connection {
        reader: client_reader,
        writer: mut client_writer,
    } = client;
    let Connection {
        reader: server_reader,
        writer: mut server_writer,
    } = server;
    client_writer.write_all(b"{\"hello\":1}\n").await.unwrap();
    let mut server_lines = BufReader::new(server_reader);
    let mut line = String::new();
    server_lines.read_line(&mut line).await.unwrap();
    assert_eq!(line, "{\"hello\":1}\n");
    server_writer.write_all(b"{\"answer\":2}\n").await.unwrap();
    let mut client_lines = BufReader::new(client_reader);
    line.clear();
    client_lines.read_line(&mut line).await.unwrap();
    assert_eq!(line, "{\"answer\":2}\n");
    (
        Connection {
            reader: client_lines.into_inner(),
            writer: client_writer,
        },
        Connection {
            reader: server_lines.into_inner(),
            writer: server_writer,
        },
    )
}

fn refused(result: Result<Connection<TcpReader, TcpWriter>, PeerRefused>) -> PeerRefused {
    match result {
        Ok(_) => panic!("the connection was accepted"),
        Err(error) => error,
    }
}

fn connect_error(result: Result<Connection<TcpReader, TcpWriter>, ConnectError>) -> ConnectError {
    match result {
        Ok(_) => panic!("the client connected"),
        Err(error) => error,
    }
}

/// What a client reads after writing its hello to a coordinator that
/// refused its certificate.
async fn first_read_error(connection: Connection<TcpReader, TcpWriter>) -> io::Error {
    let Connection {
        mut reader,
        mut writer,
    } = connection;
    // The hello may or may not reach a coordinator that has closed already.
    let _ = writer.write_all(b"{\"hello\":1}\n").await;
    let mut buffer = [0; 64];
    match reader.read(&mut buffer).await {
        Ok(read) => panic!("read {read} bytes from a coordinator that refused this client"),
        Err(error) => error,
    }
}

/// §11.2: two processes of one CA connect, each checking the other, and a
/// line goes each way; a peer that goes away without TLS's close_notify
/// ends the stream like a plain one.
#[tokio::test]
async fn mutual_tls_carries_lines_both_ways() {
    let certificates = Certificates::new("mutual");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    let (client_side, server_side) = connected(&client, &address, &mut listener).await;
    drop(client_side);
    let mut reader = server_side.reader;
    let mut buffer = [0; 16];
    assert_eq!(reader.read(&mut buffer).await.unwrap(), 0);
    listener.close();
}

/// §11.2: the coordinator's certificate is checked for the advertised
/// host; a DNS name in its subjectAltName works as well as an IP address.
#[tokio::test]
async fn a_dns_name_of_the_certificate_is_accepted() {
    let certificates = Certificates::new("dns");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    let mut listener = coordinator.listen().unwrap();
    let address = format!("localhost:{}", coordinator.local_address().port());
    connected(&client, &address, &mut listener).await;
}

/// §11.2: a client whose certificate comes from another CA is refused, and
/// both sides say why: the coordinator names the client and the issuer
/// problem, the client learns on its first read that its certificate was
/// refused.
#[tokio::test]
async fn a_client_of_another_ca_is_refused_and_both_sides_say_why() {
    let certificates = Certificates::new("other-client");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "other-client"));
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    let (connected, accepted) = meet(&client, &address, &mut listener).await;

    let refusal = refused(accepted);
    let message = refusal.to_string();
    assert!(
        matches!(&refusal, PeerRefused::Certificate { peer, .. } if peer.starts_with("the client at 127.0.0.1:")),
        "{message}"
    );
    assert!(
        message.contains("does not verify against the cluster's CA"),
        "{message}"
    );
    assert!(message.contains("UnknownIssuer"), "{message}");

    // TLS 1.3: the client's handshake ended before the coordinator checked
    // its certificate.
    let connection = connected.unwrap_or_else(|error| panic!("{error}"));
    let error = first_read_error(connection).await;
    assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "the coordinator at {address} refused this process's certificate"
        )),
        "{message}"
    );
    assert!(message.contains("UnknownCA"), "{message}");
    assert!(message.contains("--tls-cert"), "{message}");
}

/// §11.2: a TLS client without a certificate is refused (here a bare
/// rustls client: every `TcpTransport` under TLS has one).
#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    use tokio_rustls::rustls::{self, pki_types::pem::PemObject};

    let certificates = Certificates::new("anonymous");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let mut listener = coordinator.listen().unwrap();
    let address = coordinator.local_address();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(certificates.path("ca.pem")).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let anonymous = async {
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut stream = connector.connect(name, tcp).await.unwrap();
        let _ = stream.write_all(b"{\"hello\":1}\n").await;
        let mut buffer = [0; 16];
        stream.read(&mut buffer).await
    };
    let (read, accepted) = tokio::join!(anonymous, accept_one(&mut listener));

    let message = refused(accepted).to_string();
    assert!(message.starts_with("the client at 127.0.0.1:"), "{message}");
    assert!(message.contains("presented no certificate"), "{message}");
    let error = read.expect_err("the coordinator closed the connection");
    assert!(error.to_string().contains("CertificateRequired"), "{error}");
}

/// §11.2: a client refuses a coordinator whose certificate is not valid for
/// the advertised host (127.0.0.2 is loopback too, but not in the
/// certificate's subjectAltName).
#[tokio::test]
async fn a_coordinator_whose_certificate_does_not_name_its_host_is_refused() {
    let certificates = Certificates::new("wrong-host");
    let coordinator = transport("127.0.0.2:0", certificates.tls("ca", "server"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    assert!(address.starts_with("127.0.0.2:"), "{address}");
    let (connected, accepted) = meet(&client, &address, &mut listener).await;

    let error = connect_error(connected);
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            ConnectError::Refused(PeerRefused::Certificate { .. })
        ),
        "{message}"
    );
    assert!(
        message.starts_with(&format!(
            "the coordinator at {address} presented a certificate that does not verify for host 127.0.0.2"
        )),
        "{message}"
    );
    assert!(message.contains("127.0.0.1"), "{message}");
    // The coordinator sees the client give up in the handshake.
    let message = refused(accepted).to_string();
    assert!(
        message.starts_with("cannot set up the connection with the client at 127.0.0.1:"),
        "{message}"
    );
}

/// §11.2: a client refuses a coordinator whose certificate comes from
/// another CA, though it is valid for the host.
#[tokio::test]
async fn a_coordinator_of_another_ca_is_refused() {
    let certificates = Certificates::new("other-server");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "other-server"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    let (connected, _accepted) = meet(&client, &address, &mut listener).await;

    let error = connect_error(connected);
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            ConnectError::Refused(PeerRefused::Certificate { .. })
        ),
        "{message}"
    );
    assert!(message.contains("UnknownIssuer"), "{message}");
}

/// A client that opens TCP and never speaks TLS is refused after
/// `TLS_HANDSHAKE_TIMEOUT`, freeing its slot (§11.3).
#[tokio::test]
async fn a_client_that_never_speaks_tls_is_refused() {
    let certificates = Certificates::new("silent");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let mut listener = coordinator.listen().unwrap();
    let _silent = tokio::net::TcpStream::connect(coordinator.local_address())
        .await
        .unwrap();
    let message = refused(accept_one(&mut listener).await).to_string();
    assert!(
        message.contains("did not complete the TLS handshake within"),
        "{message}"
    );
}

/// A plain TCP client at a TLS coordinator is refused by the handshake.
#[tokio::test]
async fn a_plain_client_at_a_tls_coordinator_is_refused() {
    let certificates = Certificates::new("plain-client");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "server"));
    let client = transport("127.0.0.1:0", Security::Insecure);
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    let speak = async {
        let connection = connect(&client, &address)
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        let Connection { mut writer, .. } = connection;
        writer.write_all(b"{\"hello\":1}\n").await.unwrap();
        writer
    };
    let (_writer, accepted) = tokio::join!(speak, accept_one(&mut listener));
    let message = refused(accepted).to_string();
    assert!(message.contains("the peer does not speak TLS"), "{message}");
}

/// Without TLS nothing authenticates either end, so insecure mode listens
/// on and connects to loopback only; on loopback it carries lines (IPv4
/// and IPv6).
#[tokio::test]
async fn insecure_mode_is_for_loopback_only() {
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let error = TcpTransport::new(TcpOptions {
            listen: listen.parse().unwrap(),
            security: Security::Insecure,
        })
        .unwrap_err();
        assert!(
            matches!(error, TcpConfigError::InsecureNotLoopback { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("--tls-ca"), "{error}");
    }

    let client = transport("127.0.0.1:0", Security::Insecure);
    // Refused before any packet is sent.
    for address in [
        "192.0.2.1:7000",
        "coordinator.invalid:7000",
        "[2001:db8::1]:7000",
    ] {
        let error = connect_error(connect(&client, address).await);
        let message = error.to_string();
        assert!(matches!(error, ConnectError::Address { .. }), "{message}");
        assert!(message.contains("not a loopback address"), "{message}");
        assert!(message.contains("--tls-ca"), "{message}");
    }

    for listen in ["127.0.0.1:0", "[::1]:0"] {
        let coordinator = transport(listen, Security::Insecure);
        let mut listener = coordinator.listen().unwrap();
        let address = advertised(&coordinator);
        connected(&client, &address, &mut listener).await;
    }
}

/// An address that is not `host:port` is refused with a reason.
#[tokio::test]
async fn malformed_addresses_are_refused() {
    let certificates = Certificates::new("addresses");
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    for (address, reason) in [
        ("127.0.0.1", "no port"),
        ("::1:7000", "in brackets"),
        (":7000", "no host"),
        ("127.0.0.1:0", "not a number from 1 to 65535"),
        ("127.0.0.1:http", "not a number from 1 to 65535"),
        ("[localhost]:7000", "not an IPv6 address"),
        ("bad_name!:7000", "neither an IP address nor a DNS name"),
    ] {
        let error = connect_error(connect(&client, address).await);
        let message = error.to_string();
        assert!(matches!(error, ConnectError::Address { .. }), "{message}");
        assert!(message.contains(reason), "{address}: {message}");
    }
}

/// §11.1 for TCP: port 0 is given a real port at construction; a term
/// listens on it, `close` stops it (nothing answers), and a later term
/// listens on the same port again although the earlier term's connection
/// lingers in TIME_WAIT.
#[tokio::test]
async fn each_term_listens_on_the_same_port_again() {
    let coordinator = transport("127.0.0.1:0", Security::Insecure);
    let client = transport("127.0.0.1:0", Security::Insecure);
    let port = coordinator.local_address().port();
    assert_ne!(port, 0);
    let address = advertised(&coordinator);

    for _term in 0..2 {
        let mut listener = coordinator.listen().unwrap();
        let (client_side, server_side) = connected(&client, &address, &mut listener).await;
        // The coordinator closes first, so its side of the connection
        // enters TIME_WAIT on the listening port.
        drop(server_side);
        let mut reader = client_side.reader;
        let mut buffer = [0; 16];
        assert_eq!(reader.read(&mut buffer).await.unwrap(), 0);
        listener.close();
        assert!(matches!(
            connect_error(connect(&client, &address).await),
            ConnectError::Unreachable(_)
        ));
        assert_eq!(coordinator.local_address().port(), port);
    }
}

/// A fixed port that a coordinator of this host listens on now is no
/// reason to refuse a second process: it binds the port when it wins a
/// term.
#[tokio::test]
async fn a_fixed_port_in_use_is_accepted_at_construction() {
    let first = transport("127.0.0.1:0", Security::Insecure);
    let listener = first.listen().unwrap();
    let second = transport(&first.local_address().to_string(), Security::Insecure);
    assert_eq!(second.local_address(), first.local_address());
    assert!(second.listen().is_err());
    listener.close();
    second.listen().unwrap().close();
}

fn tls_error(security: Security) -> TlsConfigError {
    match TcpTransport::new(TcpOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        security,
    }) {
        Err(TcpConfigError::Tls(error)) => error,
        Err(error) => panic!("not a TLS file error: {error}"),
        Ok(_) => panic!("the files were accepted"),
    }
}

/// Unusable TLS files are refused with errors that name the file and the
/// option to fix.
#[test]
fn unusable_tls_files_name_the_file() {
    let certificates = Certificates::new("files");
    let path = |name: &str| certificates.path(name);
    let garbage = path("garbage.txt");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let broken = path("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let huge = path("huge.pem");
    std::fs::write(
        &huge,
        vec![b'a'; single_flight::_internal::transport::tcp::MAX_PEM_FILE_BYTES as usize + 1],
    )
    .unwrap();
    let security = |ca: &Path, certificate: &Path, key: &Path| Security::Tls {
        ca: ca.to_owned(),
        certificate: certificate.to_owned(),
        key: key.to_owned(),
        crls: Vec::new(),
    };
    let (ca, certificate, key) = (path("ca.pem"), path("server.pem"), path("server.key"));
    let missing = path("missing.pem");

    let error = tls_error(security(&missing, &certificate, &key));
    assert!(
        matches!(
            error,
            TlsConfigError::Read {
                file: TlsFile::Ca,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("cannot read the CA file {}: ", missing.display())),
        "{message}"
    );
    assert!(
        message.ends_with("give --tls-ca a PEM file with the cluster's CA certificate"),
        "{message}"
    );

    let error = tls_error(security(&ca, &garbage, &key));
    assert!(
        matches!(&error, TlsConfigError::NoCertificate { file: TlsFile::Certificate, path } if path == &garbage),
        "{error}"
    );
    assert!(error.to_string().contains("--tls-cert"), "{error}");

    let error = tls_error(security(&garbage, &certificate, &key));
    assert!(
        matches!(&error, TlsConfigError::NoCertificate { file: TlsFile::Ca, path } if path == &garbage),
        "{error}"
    );

    let error = tls_error(security(&ca, &certificate, &certificate));
    assert!(
        matches!(&error, TlsConfigError::NoKey { path } if path == &certificate),
        "{error}"
    );
    assert!(
        error.to_string().starts_with(&format!(
            "the key file {} holds no private key (PKCS#8, PKCS#1 or SEC1 PEM",
            certificate.display()
        )),
        "{error}"
    );

    let error = tls_error(security(&broken, &certificate, &key));
    assert!(
        matches!(&error, TlsConfigError::Pem { file: TlsFile::Ca, path, .. } if path == &broken),
        "{error}"
    );

    let error = tls_error(security(&ca, &huge, &key));
    assert!(
        matches!(&error, TlsConfigError::TooLarge { file: TlsFile::Certificate, path } if path == &huge),
        "{error}"
    );

    let error = tls_error(security(&ca, &certificate, &path("client.key")));
    assert!(matches!(error, TlsConfigError::Key { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains(&certificate.display().to_string()),
        "{error}"
    );
}

/// §14.5: the TLS files are read again while the transport lives. A
/// renewal caught between its certificate and its key keeps the set in
/// use; the whole renewal replaces it for new handshakes (here with a
/// certificate for another name, which the client refuses, so that only
/// the new set can give the refusal); a connection made before goes on.
#[tokio::test]
async fn a_renewed_pair_is_used_for_new_handshakes_once_it_is_whole() {
    let certificates = Certificates::new("renewal");
    let copy = |from: &str, to: &str| {
        let written = certificates.path(&format!("{to}.new"));
        std::fs::copy(certificates.path(from), &written).unwrap();
        std::fs::rename(&written, certificates.path(to)).unwrap();
    };
    copy("server.pem", "renewing.pem");
    copy("server.key", "renewing.key");
    let coordinator = transport("127.0.0.1:0", certificates.tls("ca", "renewing"));
    let client = transport("127.0.0.1:0", certificates.tls("ca", "client"));
    let mut listener = coordinator.listen().unwrap();
    let address = advertised(&coordinator);
    let (before, served_before) = connected(&client, &address, &mut listener).await;

    copy("elsewhere-server.pem", "renewing.pem");
    coordinator.read_tls_files_now();
    connected(&client, &address, &mut listener).await;

    copy("elsewhere-server.key", "renewing.key");
    coordinator.read_tls_files_now();
    let (connected_after, _) = meet(&client, &address, &mut listener).await;
    match connect_error(connected_after) {
        ConnectError::Refused(PeerRefused::Certificate { problem, .. }) => {
            assert!(problem.contains("elsewhere.invalid"), "{problem}");
        }
        other => panic!("not a refused certificate: {other}"),
    }

    exchange_lines(before, served_before).await;
    listener.close();
}

/// §14.5: a CRL file that holds no revocation list, or cannot be read, is
/// refused naming the file and `--tls-crl`; a file of the CA's lists loads.
#[test]
fn unusable_crl_files_name_the_file() {
    let certificates = Certificates::new("crl-files");
    let with_crl = |crl: &Path| Security::Tls {
        ca: certificates.path("ca.pem"),
        certificate: certificates.path("server.pem"),
        key: certificates.path("server.key"),
        crls: vec![certificates.path("crl.pem"), crl.to_owned()],
    };
    let garbage = certificates.path("garbage.pem");
    std::fs::write(&garbage, "not a list\n").unwrap();
    let error = tls_error(with_crl(&garbage));
    assert!(
        matches!(&error, TlsConfigError::NoCrl { path } if path == &garbage),
        "{error}"
    );
    assert!(error.to_string().contains("--tls-crl"), "{error}");

    let missing = certificates.path("missing.pem");
    let error = tls_error(with_crl(&missing));
    assert!(
        matches!(&error, TlsConfigError::Read { file: TlsFile::Crl, path, .. } if path == &missing),
        "{error}"
    );

    TcpTransport::new(TcpOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        security: with_crl(&certificates.path("crl.pem")),
    })
    .expect("the CA's own list loads");
}
