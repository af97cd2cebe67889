//! The certificates of a test cluster, made by the tests' own
//! `tests/support/make-certs.sh` (which lists what it makes) with the
//! openssl command line. This is tests/support/certs.rs with the script found
//! from this crate's folder: that file finds it from the manifest folder of
//! the crate that includes it, which is not the repository's root here.

use std::path::Path;
use std::process::Command;

/// Makes the certificates in `directory`; `extra_san` adds names to the
/// process certificate's subjectAltName (e.g. `IP:10.0.0.1,IP:10.0.0.2`).
pub fn make(directory: &Path, extra_san: &str) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/make-certs.sh");
    let status = Command::new("sh")
        .arg(script)
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
