//! Virtual-node keys. Each VN is its own libp2p identity with its own Ed25519 keypair, stored as
//! `vn-<s>.key` (libp2p's protobuf key encoding) in the node's key directory. Keys are generated randomly,
//! not derived from one node secret: derivation would tie the VNs of one node together for anyone who
//! learns that secret, and siblings must share nothing.

use std::path::{Path, PathBuf};

use libp2p::identity::Keypair;

use crate::{NodeError, Result};

/// Path of VN `s`'s key in `dir`.
pub fn key_path(dir: &Path, s: usize) -> PathBuf {
    dir.join(format!("vn-{s}.key"))
}

/// Generates `vns` fresh keys into `dir` (created if missing). Refuses to overwrite an existing key: a lost
/// key is a lost identity on every peer list that names it.
pub fn generate(dir: &Path, vns: usize) -> Result<Vec<Keypair>> {
    if vns == 0 {
        return Err(NodeError::Config("--vns must be at least 1".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
    if let Some(existing) = (0..vns).map(|s| key_path(dir, s)).find(|p| p.exists()) {
        return Err(NodeError::file(
            &existing,
            "key",
            "already exists; refusing to overwrite a node identity (use another --dir or remove it)",
        ));
    }
    (0..vns)
        .map(|s| {
            let key = Keypair::generate_ed25519();
            write_key(&key_path(dir, s), &key)?;
            Ok(key)
        })
        .collect()
}

/// The key at `path`, made first when nothing is there (its directory too), and whether it was made: a
/// deployment written again keeps its identities (`node kit`). An existing file is read, never replaced.
pub fn ensure_file(path: &Path) -> Result<(Keypair, bool)> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok((load_file(path)?, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
            }
            let key = Keypair::generate_ed25519();
            write_key(path, &key)?;
            Ok((key, true))
        }
        Err(e) => Err(NodeError::io(path, e)),
    }
}

fn write_key(path: &Path, key: &Keypair) -> Result<()> {
    let bytes = key
        .to_protobuf_encoding()
        .map_err(|e| NodeError::file(path, "key", e))?;
    // 0600 from creation, published whole, never over an existing file (`private_file.rs`).
    crate::private_file::create_new(path, &bytes).map_err(|e| NodeError::io(path, e))
}

/// Loads the keys of VNs `0..vns` from `dir`.
pub fn load(dir: &Path, vns: usize) -> Result<Vec<Keypair>> {
    (0..vns).map(|s| load_file(&key_path(dir, s))).collect()
}

/// Loads one key file (a VN's, or a link identity's: `node keygen --vns 1` makes one as `vn-0.key`).
pub fn load_file(path: &Path) -> Result<Keypair> {
    let bytes = std::fs::read(path).map_err(|e| NodeError::io(path, e))?;
    Keypair::from_protobuf_encoding(&bytes).map_err(|e| {
        NodeError::file(
            path,
            "key",
            format!("not a libp2p protobuf-encoded keypair: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_then_load_gives_the_same_identities() {
        let dir = tempfile::tempdir().unwrap();
        let made = generate(dir.path(), 3).unwrap();
        let loaded = load(dir.path(), 3).unwrap();
        let ids = |k: &[Keypair]| {
            k.iter()
                .map(|k| k.public().to_peer_id())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&made), ids(&loaded));
        // Distinct identities: siblings share nothing.
        let mut unique = ids(&made);
        unique.dedup();
        assert_eq!(unique.len(), 3);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(key_path(dir.path(), 0))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "a key is its owner's only");
        }
    }

    #[test]
    fn ensure_file_makes_a_key_once_then_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a").join("vn-0.key");
        let (made, fresh) = ensure_file(&p).unwrap();
        assert!(fresh);
        let (again, fresh) = ensure_file(&p).unwrap();
        assert!(!fresh, "kept, not made anew");
        assert_eq!(made.public(), again.public());
        std::fs::write(&p, b"garbage").unwrap();
        let err = ensure_file(&p).unwrap_err().to_string();
        assert!(err.contains("vn-0.key"), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), b"garbage", "never replaced");
    }

    #[test]
    fn never_overwrites_and_names_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        generate(dir.path(), 1).unwrap();
        let err = generate(dir.path(), 2).unwrap_err().to_string();
        assert!(
            err.contains("vn-0.key") && err.contains("refusing"),
            "{err}"
        );
        std::fs::write(key_path(dir.path(), 1), b"garbage").unwrap();
        let err = load(dir.path(), 2).unwrap_err().to_string();
        assert!(err.contains("vn-1.key"), "{err}");
        std::fs::remove_file(key_path(dir.path(), 1)).unwrap();
        let err = load(dir.path(), 2).unwrap_err().to_string();
        assert!(
            err.contains("vn-1.key") && err.contains("No such file"),
            "{err}"
        );
    }
}
