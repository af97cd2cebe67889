//! The programs a test needs from the machine (etcd, ip, man): whether they
//! are here, and what a test does when one is not.
#![allow(dead_code)] // each includer uses a part of it

/// Whether `program --version` runs here.
pub fn installed(program: &str) -> bool {
    runs(program, &["--version"])
}

/// Whether `program ARGS` runs here and succeeds: for a program that takes
/// no `--version` (etcdctl: `etcdctl version`).
pub fn runs(program: &str, args: &[&str]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// What a test that needs `what` does when it is `found` or not: without
/// it, the test says so and skips (returns false), unless the environment
/// variable `required` is set — CI sets it, so that a missing package fails
/// instead of passing silently. `remedy` says how to get it.
pub fn needed(found: bool, what: &str, required: &str, remedy: &str) -> bool {
    if !found {
        assert!(
            std::env::var_os(required).is_none(),
            "{what} is not available, and {required} is set: {remedy}"
        );
        eprintln!("skipping: {what} is not available ({remedy})");
    }
    found
}
