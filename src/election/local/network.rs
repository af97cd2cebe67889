//! Telling a local file system from a network one (SPEC.md §7.4, §7.5): by
//! the `statfs` magic number, and for FUSE, which has one number for all its
//! file systems, by the type `/proc/self/mountinfo` gives the mount.

// Only Linux has the check (SPEC.md §7.5); elsewhere the tables and the
// parser are compiled, and unit-tested, but not called.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::fs::Metadata;
use std::path::Path;
#[cfg(target_os = "linux")]
use std::{fs, io, os::unix::fs::MetadataExt};

use super::directory::{DirectoryError, DirectoryOptions, NetworkDirectoryError};

/// Kernel file systems whose files live on another machine, or on a disk
/// that other machines share, by their `statfs` magic number (from
/// `linux/magic.h` and coreutils' `stat`). Plan 9 (`9p`) is here too: it is
/// how virtual machines and WSL reach the host's files.
const NETWORK_FILE_SYSTEMS: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFE53_4D42, "SMB2"),
    (0xFF53_4D42, "CIFS"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "kAFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x7375_7245, "Coda"),
    (0x564C, "NCP (NetWare)"),
    (0x1983_0326, "BeeGFS"),
    (0x0116_1970, "GFS2"),
    (0x7461_636F, "OCFS2"),
    (0xAAD7_AAEA, "PanFS"),
    (0x0131_11A8, "IBRIX"),
    (0xBEEF_DEAD, "StorNext"),
    (0x6163_6673, "ACFS"),
    (0x786F_4256, "VirtualBox shared folder (vboxsf)"),
    (0xBACB_ACBC, "VMware shared folder (vmhgfs)"),
    (0x7C7C_6673, "Parallels shared folder (prl_fs)"),
];

/// `FUSE_SUPER_MAGIC`: every FUSE file system reports this one number, local
/// (ntfs-3g, mergerfs) or remote (sshfs), so its type is looked up in
/// `/proc/self/mountinfo` instead.
const FUSE_SUPER_MAGIC: u32 = 0x6573_5546;

/// FUSE subtypes (the part after `fuse.` in `/proc/self/mountinfo`) whose
/// files live on another machine. Other FUSE types are taken to be local
/// (SPEC.md §7.4); a user can vouch for one of these with
/// [`DirectoryOptions::trusted_fuse_types`].
pub const NETWORK_FUSE_TYPES: &[&str] = &[
    "sshfs",
    "s3fs",
    "rclone",
    "gcsfuse",
    "goofys",
    "geesefs",
    "mountpoint-s3",
    "blobfuse",
    "blobfuse2",
    "juicefs",
    "glusterfs",
    "ceph",
    "ceph-fuse",
    "mfs",
    "objectivefs",
    "s3ql",
    "xtreemfs",
    "curlftpfs",
    "httpdirfs",
    "smbnetfs",
    "gvfsd-fuse",
    "onedriver",
];

/// The kernel file system name for a `statfs` magic number, if it is a
/// network one.
fn network_file_system(magic: u32) -> Option<&'static str> {
    NETWORK_FILE_SYSTEMS
        .iter()
        .find(|(known, _)| *known == magic)
        .map(|(_, name)| *name)
}

/// Refuses a directory on a network file system (SPEC.md §7.4).
#[cfg(target_os = "linux")]
pub(super) fn check_local(
    path: &Path,
    metadata: &Metadata,
    options: &DirectoryOptions,
) -> Result<(), DirectoryError> {
    let statfs = rustix::fs::statfs(path).map_err(|errno| DirectoryError::Inspect {
        path: path.to_owned(),
        error: io::Error::from(errno),
    })?;
    // `f_type` is a signed or unsigned word of 32 or 64 bits depending on the
    // architecture; every magic number fits in 32 bits, and the truncation
    // keeps those that a 32-bit signed word stores as negative numbers.
    let magic = statfs.f_type as u32;
    if let Some(name) = network_file_system(magic) {
        return Err(NetworkDirectoryError {
            path: path.to_owned(),
            file_system: name.to_owned(),
            fuse: false,
        }
        .into());
    }
    if magic != FUSE_SUPER_MAGIC {
        return Ok(());
    }
    let unidentified = |reason: String| DirectoryError::UnidentifiedFuse {
        path: path.to_owned(),
        reason,
    };
    let mountinfo = fs::read_to_string(MOUNTINFO)
        .map_err(|error| unidentified(format!("{MOUNTINFO} cannot be read ({error})")))?;
    let device = metadata.dev();
    let (major, minor) = (rustix::fs::major(device), rustix::fs::minor(device));
    let fs_type = mount_type(&mountinfo, major, minor).ok_or_else(|| {
        unidentified(format!(
            "{MOUNTINFO} lists no mount for its device {major}:{minor}"
        ))
    })?;
    judge_fuse_type(path, &fs_type, options)
}

/// Other platforms: the ownership and mode checks of `prepare_directory`
/// apply, but there is no portable way to tell a network file system from a
/// local one, so none is refused (SPEC.md §7.5).
#[cfg(not(target_os = "linux"))]
pub(super) fn check_local(
    _path: &Path,
    _metadata: &Metadata,
    _options: &DirectoryOptions,
) -> Result<(), DirectoryError> {
    Ok(())
}

/// Where Linux lists this process's mounts, with each one's file system type.
#[cfg(target_os = "linux")]
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// Refuses a FUSE file system on the network list unless the user vouched for
/// it (SPEC.md §7.4).
fn judge_fuse_type(
    path: &Path,
    fs_type: &str,
    options: &DirectoryOptions,
) -> Result<(), DirectoryError> {
    let subtype = fuse_subtype(fs_type);
    let trusted = options
        .trusted_fuse_types
        .iter()
        .any(|trusted| trusted == fs_type || trusted == subtype);
    if trusted || !NETWORK_FUSE_TYPES.contains(&subtype) {
        return Ok(());
    }
    Err(NetworkDirectoryError {
        path: path.to_owned(),
        file_system: fs_type.to_owned(),
        fuse: true,
    }
    .into())
}

/// `sshfs` for `fuse.sshfs` (and `fuseblk.sshfs`); any other type unchanged.
fn fuse_subtype(fs_type: &str) -> &str {
    fs_type
        .strip_prefix("fuse.")
        .or_else(|| fs_type.strip_prefix("fuseblk."))
        .unwrap_or(fs_type)
}

/// The file system type of the mount whose device is `major:minor`, from the
/// text of `/proc/<pid>/mountinfo` (`proc(5)`). The device identifies the
/// mount better than its path would: no path has to be resolved or compared.
/// When a device is mounted more than once the last line wins, as the latest
/// mount is the one that shadows the others (all show the same type anyway).
fn mount_type(mountinfo: &str, major: u32, minor: u32) -> Option<String> {
    mountinfo
        .lines()
        .rev()
        .filter_map(parse_mountinfo_line)
        .find(|entry| entry.major == major && entry.minor == minor)
        .map(|entry| entry.fs_type)
}

/// The fields of one mountinfo line that the check needs.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    major: u32,
    minor: u32,
    fs_type: String,
}

/// Parses `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`:
/// mount id, parent id, `major:minor`, root, mount point, options, zero or
/// more optional fields ended by `-`, then the file system type, the source
/// and the super block options. `None` for a line of another shape.
fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let mut fields = line.split(' ');
    let (major, minor) = fields.nth(2)?.split_once(':')?;
    let (major, minor) = (major.parse().ok()?, minor.parse().ok()?);
    // Root, mount point and options, then the optional fields up to `-`.
    fields.nth(2)?;
    fields.find(|field| *field == "-")?;
    let fs_type = unescape_mountinfo(fields.next()?);
    Some(MountEntry {
        major,
        minor,
        fs_type,
    })
}

/// Undoes the kernel's escaping of space, tab, newline and backslash in
/// mountinfo fields (`\040`, `\011`, `\012`, `\134`), and any other
/// three-digit octal escape.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escape = bytes.get(index + 1..index + 4).filter(|digits| {
            bytes[index] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match escape {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                // Three octal digits reach 511; the kernel only writes bytes.
                out.push(u8::try_from(value).unwrap_or(b'?'));
                index += 4;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const MOUNTINFO_SAMPLE: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
61 27 0:52 / /home/ann/remote rw,nosuid,nodev,relatime shared:33 - fuse.sshfs ann@host:/srv rw,user_id=1000,group_id=1000
62 27 0:53 / /mnt/my\\040disk rw,relatime shared:34 master:2 - fuseblk /dev/sdb1 rw,user_id=0
63 27 0:54 / /run/user/1000/gvfs rw,nosuid,nodev,relatime - fuse.gvfsd-fuse gvfsd-fuse rw
64 27 0:55 / /mnt/union rw,relatime - fuse.mergerfs a:b rw
65 27 0:56 / /mnt/shared rw,relatime - virtiofs shared rw
66 61 0:52 /sub /home/ann/again rw,relatime - fuse.sshfs ann@host:/srv rw
67 27 0:57 / /mnt/odd rw - fuse.my\\040fs src rw
";

    /// §7.4: the fields are found past any number of optional fields.
    #[test]
    fn parses_mountinfo_lines() {
        assert_eq!(
            parse_mountinfo_line(
                "61 27 0:52 / /home/ann/remote rw,nosuid shared:33 - fuse.sshfs ann@host:/srv rw"
            ),
            Some(MountEntry {
                major: 0,
                minor: 52,
                fs_type: "fuse.sshfs".to_owned()
            })
        );
        assert_eq!(
            parse_mountinfo_line("62 27 8:17 / /mnt rw shared:34 master:2 - fuseblk /dev/sdb1 rw"),
            Some(MountEntry {
                major: 8,
                minor: 17,
                fs_type: "fuseblk".to_owned()
            })
        );
        assert_eq!(
            parse_mountinfo_line("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw")
                .map(|entry| entry.fs_type),
            Some("ext4".to_owned())
        );
    }

    /// §7.4: a malformed line is skipped, not a panic.
    #[test]
    fn ignores_malformed_mountinfo_lines() {
        for line in [
            "",
            "garbage",
            "1 2 3 / / rw - ext4",
            "1 2 x:y / / rw - ext4 src rw",
            "1 2 0:5 / / rw no separator here",
            "1 2 0:5 / / rw -",
            "1 2 0:5",
        ] {
            assert_eq!(parse_mountinfo_line(line), None, "{line:?}");
        }
    }

    /// §7.4: the mount is found by device; the last of several wins.
    #[test]
    fn finds_the_mount_type_by_device() {
        assert_eq!(
            mount_type(MOUNTINFO_SAMPLE, 0, 52).as_deref(),
            Some("fuse.sshfs")
        );
        assert_eq!(
            mount_type(MOUNTINFO_SAMPLE, 0, 53).as_deref(),
            Some("fuseblk")
        );
        assert_eq!(
            mount_type(MOUNTINFO_SAMPLE, 0, 57).as_deref(),
            Some("fuse.my fs")
        );
        assert_eq!(mount_type(MOUNTINFO_SAMPLE, 0, 99), None);
        let shadowed = "1 0 0:9 / /a rw - fuse.first x rw\n2 0 0:9 / /a rw - fuse.second x rw\n";
        assert_eq!(mount_type(shadowed, 0, 9).as_deref(), Some("fuse.second"));
    }

    #[test]
    fn unescapes_octal_sequences() {
        assert_eq!(unescape_mountinfo(r"/mnt/my\040disk"), "/mnt/my disk");
        assert_eq!(unescape_mountinfo(r"a\011b\012c\134d"), "a\tb\nc\\d");
        assert_eq!(unescape_mountinfo(r"trailing\04"), r"trailing\04");
        assert_eq!(unescape_mountinfo(r"not\999octal"), r"not\999octal");
        assert_eq!(unescape_mountinfo(r"\"), r"\");
    }

    fn judge(fs_type: &str, trusted: &[&str]) -> Result<(), DirectoryError> {
        let options = DirectoryOptions {
            trusted_fuse_types: trusted.iter().map(|t| (*t).to_owned()).collect(),
        };
        judge_fuse_type(Path::new("/some/dir"), fs_type, &options)
    }

    /// §7.4: network FUSE types are refused, others accepted.
    #[test]
    fn refuses_network_fuse_types() {
        for fs_type in ["fuse.sshfs", "fuse.s3fs", "fuse.rclone", "fuse.gvfsd-fuse"] {
            match judge(fs_type, &[]) {
                Err(DirectoryError::Network(error)) => {
                    assert_eq!(error.file_system, fs_type);
                    assert!(error.fuse);
                    let message = error.to_string();
                    assert!(message.contains("/some/dir"), "{message}");
                    assert!(message.contains("trusted FUSE types"), "{message}");
                }
                other => panic!("{fs_type}: {other:?}"),
            }
        }
        for fs_type in [
            "fuseblk",
            "fuse",
            "fuse.mergerfs",
            "virtiofs",
            "fuse.ntfs-3g",
        ] {
            assert!(judge(fs_type, &[]).is_ok(), "{fs_type}");
        }
    }

    /// §7.4: the user can vouch for a FUSE type, by full name or subtype.
    #[test]
    fn trusted_fuse_types_override_the_list() {
        assert!(judge("fuse.sshfs", &["fuse.sshfs"]).is_ok());
        assert!(judge("fuse.sshfs", &["sshfs"]).is_ok());
        assert!(judge("fuse.sshfs", &["fuse.s3fs"]).is_err());
    }

    #[test]
    fn knows_the_kernel_network_file_systems() {
        assert_eq!(network_file_system(0x6969), Some("NFS"));
        assert_eq!(network_file_system(0xFE53_4D42), Some("SMB2"));
        assert_eq!(network_file_system(0x0102_1997), Some("9p"));
        // ext4 and tmpfs are local.
        assert_eq!(network_file_system(0xEF53), None);
        assert_eq!(network_file_system(0x0102_1994), None);
        assert_eq!(network_file_system(FUSE_SUPER_MAGIC), None);
    }

    #[test]
    fn kernel_network_error_has_no_fuse_hint() {
        let error = NetworkDirectoryError {
            path: PathBuf::from("/mnt/nfs/flight"),
            file_system: "NFS".to_owned(),
            fuse: false,
        };
        let message = error.to_string();
        assert!(message.contains("/mnt/nfs/flight is on NFS"), "{message}");
        assert!(!message.contains("FUSE"), "{message}");
    }
}
