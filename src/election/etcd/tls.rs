//! etcd's TLS files (SPEC.md §14.5, §14.9): the CA that signed etcd's
//! members' certificates, and this process's certificate and key for etcd
//! if it presents one. They are read whole and checked before tonic gets
//! them, so that a file that does not parse, or a key that is not the
//! certificate's, is an error naming the file, both when the client is made
//! and when the files are read again ([`super::client`]).

use std::fmt;
use std::path::{Path, PathBuf};

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::sign::CertifiedKey;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::EtcdTls;
use crate::reload::{FileRead, PemError};

/// Which of etcd's files a problem is in; says which option names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdTlsFile {
    /// The CA of etcd's members (`--etcd-ca`, by default `--tls-ca`).
    Ca,
    /// This process's certificate for etcd (`--etcd-cert`, by default
    /// `--tls-cert`).
    Certificate,
    /// Its private key (`--etcd-key`, by default `--tls-key`).
    Key,
}

impl EtcdTlsFile {
    /// What the file must hold, as advice.
    fn advice(self) -> &'static str {
        match self {
            EtcdTlsFile::Ca => {
                "give --etcd-ca (without it, --tls-ca) a PEM file with the CA certificate that signed etcd's members' certificates"
            }
            EtcdTlsFile::Certificate => {
                "give --etcd-cert (without it, --tls-cert) a PEM file with this process's client certificate for etcd"
            }
            EtcdTlsFile::Key => {
                "give --etcd-key (without it, --tls-key) the PEM file with the private key of that certificate"
            }
        }
    }
}

impl fmt::Display for EtcdTlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EtcdTlsFile::Ca => "CA file",
            EtcdTlsFile::Certificate => "certificate file",
            EtcdTlsFile::Key => "key file",
        })
    }
}

/// Why etcd's TLS files cannot be used: names the file, says what is wrong
/// with it and what to give instead.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the etcd {file} {} cannot be used: {problem}; {}", path.display(), file.advice())]
pub struct EtcdTlsError {
    pub file: EtcdTlsFile,
    pub path: PathBuf,
    pub problem: String,
}

/// What one reading of etcd's files found: plain data, compared with the
/// last reading to tell whether the files changed (SPEC.md §14.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Contents {
    ca: FileRead,
    identity: Option<(FileRead, FileRead)>,
}

impl Contents {
    /// Reads every file of `files` through its path.
    pub(super) fn read(files: &EtcdTls) -> Contents {
        Contents {
            ca: FileRead::read(&files.ca),
            identity: files
                .identity
                .as_ref()
                .map(|(certificate, key)| (FileRead::read(certificate), FileRead::read(key))),
        }
    }
}

/// The configuration of tonic's TLS that `read`, read from `files` (named
/// in errors), makes: the CA holds certificates that are trust anchors,
/// the certificate file holds certificates, the key file a key, and the key
/// is the first certificate's.
pub(super) fn load(files: &EtcdTls, read: &Contents) -> Result<ClientTlsConfig, EtcdTlsError> {
    let ca_file = in_file(EtcdTlsFile::Ca, &files.ca);
    read.ca.roots().map_err(&ca_file)?;
    let ca = read.ca.bytes().map_err(ca_file)?;
    let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    let (Some((certificate_path, key_path)), Some((certificate_read, key_read))) =
        (&files.identity, &read.identity)
    else {
        return Ok(config);
    };
    let certificate_file = in_file(EtcdTlsFile::Certificate, certificate_path);
    let chain = certificate_read.certificates().map_err(&certificate_file)?;
    let certificate = certificate_read.bytes().map_err(certificate_file)?;
    let key_file = in_file(EtcdTlsFile::Key, key_path);
    let private_key = key_read.key().map_err(&key_file)?;
    let key = key_read.bytes().map_err(key_file)?;
    // What tonic does with them when it connects, done now, so that a key
    // of the previous certificate (a renewal caught between its two files)
    // is refused here, naming the file, rather than at every handshake.
    CertifiedKey::from_der(chain, private_key, &ring::default_provider()).map_err(|error| {
        EtcdTlsError {
            file: EtcdTlsFile::Key,
            path: key_path.clone(),
            problem: format!(
                "it is not a usable private key of the certificate in {} ({error}); ECDSA P-256/P-384, Ed25519 or RSA",
                certificate_path.display()
            ),
        }
    })?;
    Ok(config.identity(Identity::from_pem(certificate, key)))
}

/// A problem of the reading of `file` at `path` in this error's words.
fn in_file(file: EtcdTlsFile, path: &Path) -> impl Fn(PemError) -> EtcdTlsError {
    move |problem| EtcdTlsError {
        file,
        path: path.to_owned(),
        problem: problem.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA, a certificate it signed (CN "t", P-256) with its key, and
    /// another key: test material only, made with openssl as
    /// tests/support/make-certs.sh does.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBoDCCAUWgAwIBAgIUJD4Tr3eMBPPHChtQ4j4PDrx33wMwCgYIKoZIzj0EAwIw
HDEaMBgGA1UEAwwRZXRjZCB1bml0IHRlc3QgQ0EwIBcNMjYxMjA0MTcwNzQ5WhgP
MjEyNjExMTAxNzA3NDlaMBwxGjAYBgNVBAMMEWV0Y2QgdW5pdCB0ZXN0IENBMFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEGz83H/VQDGbPvQJBFpjx9rFB0l5AW6Bb
fhigZ6lSjypJ0JknPidIpbR6YCRhJW7+2EJEAaaUrOhcUqbCxdzumKNjMGEwHQYD
VR0OBBYEFCPUCzfqOQQWv3XFScDAKcGISkn+MB8GA1UdIwQYMBaAFCPUCzfqOQQW
v3XFScDAKcGISkn+MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG
CCqGSM49BAMCA0kAMEYCIQDJJ8+qZidZRKVuvotAfq+Na9hY8eZfZhCTirXBgGwr
sQIhAOUSfj/Dj4yMtrJ0qKt8Dz61CmYgc1pmjfwcSZjpYz6e
-----END CERTIFICATE-----
";
    const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIBjjCCATWgAwIBAgICEjQwCgYIKoZIzj0EAwIwHDEaMBgGA1UEAwwRZXRjZCB1
bml0IHRlc3QgQ0EwIBcNMjYxMjA0MTcxMTE1WhgPMjEyNjExMTAxNzExMTVaMAwx
CjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAT6syjIFOKRSzQX
B6ku4+C+Qn15qAi0PWyN3vpFHRcfjMdyE8ownWloeFNyTARorgMfMEuNioVEbn5X
vc2ZeiGzo3UwczAMBgNVHRMBAf8EAjAAMA4GA1UdDwEB/wQEAwIHgDATBgNVHSUE
DDAKBggrBgEFBQcDAjAdBgNVHQ4EFgQUF+8prnPLvNJUUmQ99ownJl65y0EwHwYD
VR0jBBgwFoAUI9QLN+o5BBa/dcVJwMApwYhKSf4wCgYIKoZIzj0EAwIDRwAwRAIg
ZtrvHABJfu3NIctc1lqIb9owl9fgQ7CEkQZ4KTUGotwCIBemSFgmv+F+gxj0SZe0
JfQ9QfILNzmznZ7uXyl4ZT2b
-----END CERTIFICATE-----
";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgaNsFAST0BNG8UDvV
8UfNupTFzVoV3uC0JMv+wj+PndqhRANCAAT6syjIFOKRSzQXB6ku4+C+Qn15qAi0
PWyN3vpFHRcfjMdyE8ownWloeFNyTARorgMfMEuNioVEbn5Xvc2ZeiGz
-----END PRIVATE KEY-----
";
    const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtS50KsKOHAfYkA4Q
8Ha6BqxbG10EjI3mEQtNdhsEQ/yhRANCAATmxyfFBKYFzQcOFfSZJyEio6inDXCF
G1DSM5l7tjoY524CUEbfdf9cDDyqSVXMq3jblV854cSWY6mBAYPPcBSl
-----END PRIVATE KEY-----
";

    fn files() -> EtcdTls {
        EtcdTls {
            ca: PathBuf::from("/etc/etcd/ca.pem"),
            identity: Some((
                PathBuf::from("/etc/etcd/client.pem"),
                PathBuf::from("/etc/etcd/client.key"),
            )),
        }
    }

    fn read(text: &str) -> FileRead {
        FileRead::Bytes(text.as_bytes().to_vec())
    }

    fn contents(ca: FileRead, certificate: &str, key: &str) -> Contents {
        Contents {
            ca,
            identity: Some((read(certificate), read(key))),
        }
    }

    /// §14.5: a whole set loads, with or without an identity.
    #[test]
    fn a_ca_a_certificate_and_its_key_load() {
        load(&files(), &contents(read(CA), CERTIFICATE, KEY)).unwrap();
        let ca_only = EtcdTls {
            ca: PathBuf::from("/etc/etcd/ca.pem"),
            identity: None,
        };
        let read_ca_only = Contents {
            ca: read(CA),
            identity: None,
        };
        load(&ca_only, &read_ca_only).unwrap();
    }

    /// §14.5: each file that cannot be used is named, with what is wrong
    /// with it and the option that gives it; a key of another certificate
    /// (a renewal caught between its two files) is refused naming both.
    #[test]
    fn a_file_that_does_not_load_is_named_with_its_option() {
        let missing = FileRead::Failed {
            kind: std::io::ErrorKind::NotFound,
            error: "No such file or directory (os error 2)".to_owned(),
        };
        let error = load(&files(), &contents(missing, CERTIFICATE, KEY)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the etcd CA file /etc/etcd/ca.pem cannot be used: it cannot be read: No such file or directory (os error 2); give --etcd-ca (without it, --tls-ca) a PEM file with the CA certificate that signed etcd's members' certificates"
        );
        let error = load(&files(), &contents(FileRead::TooLarge, CERTIFICATE, KEY)).unwrap_err();
        assert_eq!(error.file, EtcdTlsFile::Ca);
        assert!(
            error.problem.starts_with("it is larger than 1048576 bytes"),
            "{error}"
        );
        let error = load(&files(), &contents(read("no PEM"), CERTIFICATE, KEY)).unwrap_err();
        assert_eq!(
            (error.file, error.problem.as_str()),
            (
                EtcdTlsFile::Ca,
                "it holds no certificate (a PEM block \"BEGIN CERTIFICATE\")"
            )
        );

        let error = load(&files(), &contents(read(CA), KEY, KEY)).unwrap_err();
        assert_eq!(
            (error.file, error.path.as_path()),
            (EtcdTlsFile::Certificate, Path::new("/etc/etcd/client.pem"))
        );
        assert!(
            error
                .to_string()
                .contains("--etcd-cert (without it, --tls-cert)"),
            "{error}"
        );

        let error = load(&files(), &contents(read(CA), CERTIFICATE, CERTIFICATE)).unwrap_err();
        assert_eq!(
            (error.file, error.problem.as_str()),
            (
                EtcdTlsFile::Key,
                "it holds no private key (PKCS#8, PKCS#1 or SEC1 PEM; an encrypted key must be decrypted first, e.g. with `openssl pkey`)"
            )
        );

        let error = load(&files(), &contents(read(CA), CERTIFICATE, OTHER_KEY)).unwrap_err();
        assert_eq!(error.file, EtcdTlsFile::Key);
        assert!(
            error.problem.starts_with(
                "it is not a usable private key of the certificate in /etc/etcd/client.pem"
            ),
            "{error}"
        );
    }
}
