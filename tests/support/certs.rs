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
