//! The default flight directory (SPEC.md §13.1): one per user, so that every
//! program of a user finds the same flights without being told where. The
//! command's default, and the one under which a cluster's host directories
//! are by default (§18.6).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The name of the flight directory inside `$XDG_RUNTIME_DIR`.
const RUNTIME_NAME: &str = "single-flight";

/// The user's default flight directory (SPEC.md §13.1):
/// `$XDG_RUNTIME_DIR/single-flight` when `XDG_RUNTIME_DIR` names a usable
/// runtime directory, otherwise `<temp dir>/single-flight-<uid>`. Opening
/// it creates it with mode 0700 and checks it (§7.4): in a shared temporary
/// directory another user may have made that name first, and is refused
/// then.
pub fn default_directory() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    match runtime {
        Some(runtime) if usable_runtime_directory(&runtime, uid) => runtime.join(RUNTIME_NAME),
        _ => std::env::temp_dir().join(format!("single-flight-{uid}")),
    }
}

/// What the XDG Base Directory specification promises of
/// `$XDG_RUNTIME_DIR`: an absolute path to a directory owned by the user,
/// that nobody else may use. A value that breaks the promise (a stale
/// variable after `su`, a typo) is ignored rather than trusted.
fn usable_runtime_directory(path: &Path, uid: u32) -> bool {
    path.is_absolute()
        && fs::metadata(path).is_ok_and(|metadata| {
            metadata.is_dir() && metadata.uid() == uid && metadata.mode() & 0o077 == 0
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_directory_must_be_absolute_private_and_owned() {
        let uid = rustix::process::getuid().as_raw();
        assert!(!usable_runtime_directory(Path::new("relative"), uid));
        assert!(!usable_runtime_directory(
            Path::new("/nonexistent/single-flight-test"),
            uid
        ));
        let root = std::env::temp_dir().join(format!("sf-cli-runtime-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir(&root).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!usable_runtime_directory(&root, uid), "group may read it");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(usable_runtime_directory(&root, uid));
        assert!(
            !usable_runtime_directory(&root, uid.wrapping_add(1)),
            "not the user's"
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
