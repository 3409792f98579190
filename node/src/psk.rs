//! The pre-shared key file of a private network (`swarm.key` format, `node psk --out FILE`): whoever reads
//! it can join the network, so it is created 0600 and never over an existing file (`private_file.rs`).

use std::path::Path;

use crate::{NodeError, Result};

/// Writes a new random key to `path`. Refuses when anything is at `path` already — also a file or a symlink
/// that appeared after any check — rather than replacing a network's key.
pub fn generate(path: &Path) -> Result<()> {
    // A key must be unpredictable: the OS-seeded generator, not a run's seeded stream.
    let key: [u8; 32] = rand::random();
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("/key/swarm/psk/1.0.0/\n/base16/\n{hex}\n");
    crate::private_file::create_new(path, text.as_bytes()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            NodeError::file(
                path,
                "psk",
                "already exists; refusing to overwrite a network key",
            )
        } else {
            NodeError::io(path, e)
        }
    })
}
