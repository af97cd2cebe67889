//! The certificates of a test cluster, made by `make-certs.sh` (which says
//! what each file is for).

#![allow(dead_code)] // each test file uses a part of it

use std::path::Path;
use std::process::Command;

/// Makes the files of `make-certs.sh` in `directory`; `extra_san` adds
/// names to the process certificate (e.g. `IP:10.0.0.1,IP:10.0.0.2`).
pub fn make(directory: &Path, extra_san: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/make-certs.sh");
    let status = Command::new("sh")
        .arg(script)
        .arg(directory)
        .env("EXTRA_SAN", extra_san)
        .status()
        .expect("sh runs");
    assert!(status.success(), "making the test certificates failed");
}
