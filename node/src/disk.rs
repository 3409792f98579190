//! The file layer of the node's durable writes — checkpoints and metrics lines — as a trait, so that a test
//! can make them fail the way a full or broken filesystem does (`ENOSPC`, `EIO`), without root.
//!
//! The node survives every failure of these writes: it logs a warning, sends
//! [`NodeEvent::WriteFailed`](crate::NodeEvent::WriteFailed), counts it in the round's metrics and tries again
//! on later rounds (see `runtime/rn_task.rs`).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the node's durable writes need from the filesystem.
pub trait Disk: Send + Sync + std::fmt::Debug + 'static {
    /// Replaces `path` with `bytes`, readable by the owner only, atomically and durably
    /// (`private_file::replace`).
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// One `write(2)` of `bytes` at the end of `file` (opened with `O_APPEND`); how many bytes it took.
    fn append(&self, file: &File, bytes: &[u8]) -> io::Result<usize>;
    /// Makes what was written to `file` durable (`fdatasync`).
    fn sync(&self, file: &File) -> io::Result<()>;
}

/// The operating system's filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsDisk;

impl Disk for OsDisk {
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        crate::private_file::replace(path, bytes)
    }

    fn append(&self, mut file: &File, bytes: &[u8]) -> io::Result<usize> {
        loop {
            match file.write(bytes) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
}

/// A test double: the OS filesystem, except that while it is full every write and sync fails with
/// `StorageFull` (what `ENOSPC` reads as) and writes nothing — or, with `short_writes`, an append takes
/// only the first half of its bytes, as a filesystem running out mid-write does.
#[derive(Debug, Default)]
pub struct FullDisk {
    full: AtomicBool,
    short_writes: AtomicBool,
    refused: AtomicU64,
}

impl FullDisk {
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    pub fn set_short_writes(&self, short: bool) {
        self.short_writes.store(short, Ordering::SeqCst);
    }

    /// Writes and syncs refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    fn check(&self) -> io::Result<()> {
        if self.full.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "No space left on device (test double)",
            ));
        }
        Ok(())
    }
}

impl Disk for FullDisk {
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.check()?;
        OsDisk.replace(path, bytes)
    }

    fn append(&self, file: &File, bytes: &[u8]) -> io::Result<usize> {
        if self.short_writes.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return OsDisk.append(file, &bytes[..bytes.len() / 2]);
        }
        self.check()?;
        OsDisk.append(file, bytes)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        self.check()?;
        OsDisk.sync(file)
    }
}
