//! The certificates of a test cluster, made by `make-certs.sh` (beside this
//! file, which lists what it makes) with the openssl command line.

#![allow(dead_code)] // each user of it takes a part

use std::path::Path;
use std::process::Command;

/// The script, read at build time beside this file, so that the crates that
/// include this module by path (the benchmark and chaos harnesses) run it
/// too, wherever their own manifests are.
const SCRIPT: &str = include_str!("make-certs.sh");

/// Makes the certificates in `directory`; `extra_san` adds names to the
/// process certificate's subjectAltName (e.g. `IP:10.0.0.1,IP:10.0.0.2`).
pub fn make(directory: &Path, extra_san: &str) -> Result<(), String> {
    let status = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("make-certs.sh")
        .arg(directory)
        .env("EXTRA_SAN", extra_san)
        .status()
        .map_err(|error| format!("sh does not run: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "making the test certificates failed ({status}); is openssl installed?"
        ))
    }
}

/// Adds the flags of a cluster member to a `single-flight` command: the
/// etcd `endpoints`, the `cluster`'s name, the address to `listen` on, the
/// process certificate made in `certs` by [`make`], and the default lease
/// (`--ttl 5`, SPEC.md §14.2), for tests that want no failover of their own.
pub fn member_flags(
    command: &mut Command,
    endpoints: &[String],
    cluster: &str,
    listen: &str,
    certs: &Path,
) {
    member_flags_as(
        command,
        endpoints,
        cluster,
        listen,
        &certs.join("ca.pem"),
        &certs.join("server"),
    );
}

/// [`member_flags`] with the CA file `ca` and the pair `pair`.pem,
/// `pair`.key. Each command is a host of its own: it gets a host directory
/// of its own (SPEC.md §18.6) beside `ca`, so that the tests' processes
/// stay apart at the cluster as processes of different hosts, however many
/// share this machine's file system.
pub fn member_flags_as(
    command: &mut Command,
    endpoints: &[String],
    cluster: &str,
    listen: &str,
    ca: &Path,
    pair: &Path,
) {
    member_flags_in(
        command,
        endpoints,
        cluster,
        listen,
        ca,
        pair,
        &own_host_directory(ca),
    );
}

/// [`member_flags_as`] with the flight directory `dir`, which holds the
/// host directory that the host's processes share (SPEC.md §18.6).
pub fn member_flags_in(
    command: &mut Command,
    endpoints: &[String],
    cluster: &str,
    listen: &str,
    ca: &Path,
    pair: &Path,
    dir: &Path,
) {
    command
        .arg("--etcd")
        .arg(endpoints.join(","))
        .args(["--cluster", cluster, "--listen", listen])
        .arg("--tls-ca")
        .arg(ca)
        .arg("--tls-cert")
        .arg(pair.with_extension("pem"))
        .arg("--tls-key")
        .arg(pair.with_extension("key"))
        .args(["--ttl", "5"])
        .arg("--dir")
        .arg(dir);
}

/// A directory no other process of this test run has been given, in the
/// `hosts` directory beside `beside`.
pub fn own_host_directory(beside: &Path) -> std::path::PathBuf {
    static HOSTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let host = HOSTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    beside
        .with_file_name("hosts")
        .join(format!("{}-{host}", std::process::id()))
}
