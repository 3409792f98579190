//! Files only their owner may read — checkpoints (the node's private model), VN keys, the network's
//! pre-shared key — written so that no instant exists when another user can read them or a reader sees half
//! of one.
//!
//! Each is created mode 0600 (`O_CREAT|O_EXCL`, so an existing file or a planted symlink is never opened and
//! no `chmod` comes after the content) under a temporary name in the target's own directory, written,
//! fsynced, then renamed into place and the directory fsynced: a crash leaves the old file or the new one.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes` (creating it if missing), through `path` + `.tmp`. One writer per file is
/// assumed (a node owns its checkpoint directory); a temporary left by an interrupted write is removed first.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_path(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = create_private(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written {
        // A full disk: leave no half-written temporary taking the space that is short.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

/// Creates `path` with `bytes`, refusing (`AlreadyExists`) when anything — a file, a directory, a dangling
/// symlink — is there already, also when it appeared after a check: the content is published by a link that
/// fails on an existing name. The temporary has a random name, so two writers never share one.
pub fn create_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent(path);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // tempfile creates with O_EXCL and mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(path).map_err(|e| e.error)?;
    sync_dir(path)
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

/// `path` + `.tmp`: the temporary [`replace`] writes through.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes the renames in `path`'s directory durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    // Opening a directory read-only and fsyncing it is how POSIX persists a rename; Windows cannot open
    // directories this way and persists renames itself.
    if cfg!(windows) {
        return Ok(());
    }
    File::open(parent(path))?.sync_all()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn replaced_files_are_private_and_a_stale_temporary_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("checkpoint.json");
        // A temporary of an interrupted write, world-readable: its mode must not carry over.
        std::fs::write(tmp_path(&p), b"old").unwrap();
        std::fs::set_permissions(tmp_path(&p), std::fs::Permissions::from_mode(0o644)).unwrap();
        replace(&p, b"one").unwrap();
        replace(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(mode(&p), 0o600);
        assert!(!tmp_path(&p).exists());
    }

    #[test]
    fn create_new_refuses_anything_in_place_and_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("swarm.key");
        create_new(&p, b"k").unwrap();
        assert_eq!(mode(&p), 0o600);
        let again = create_new(&p, b"other").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"k");
        // A dangling symlink planted where the key goes: following it would create its target.
        let link = dir.path().join("planted.key");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link, b"k").is_err());
        assert!(!target.exists(), "the symlink was not followed");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "no temporaries left: {left:?}");
    }
}
