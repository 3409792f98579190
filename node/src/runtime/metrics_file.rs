//! The metrics file: one JSON line per completed round (`{"node": i, "round": t, …}`), that survives a crash,
//! a restart, a full disk and a power loss, and that several nodes may share (issues 15 and 45).
//!
//! - It is opened for appending (`O_APPEND`) and never truncated: a restarted node adds to what its earlier
//!   life wrote.
//! - The line rule: every line in the file is whole, whoever else writes it. Each line goes out in one
//!   `write(2)` of the whole line and its newline, under an exclusive `flock` of the file that every writer
//!   takes for its writes. Under the lock a writer first cuts a torn tail — what a writer that died
//!   mid-write, or a machine that stopped, left after the last newline — and takes back a line the disk
//!   took only part of (a short write when it filled up), so no line ever follows a fragment. Any number
//!   of node processes may share one file (on a local filesystem: `flock` over NFS is emulated and slow).
//! - A full or failing disk never stops the node: a line the disk refuses is kept (up to
//!   [`MAX_PENDING_LINES`]) and written, late but in order, before the next one once the disk takes it; the
//!   failure is logged, sent as an event and counted in `metrics_write_failures`; lines dropped beyond the
//!   bound are counted in the next line's `metrics_lines_lost`.
//! - The durability rule: the file is fsynced (`fdatasync`) at each checkpoint, before the checkpoint is
//!   written. So after a power loss every round before the checkpoint a node resumes from has its line,
//!   unless the sync failed or lines were still waiting for the disk: then the checkpoint records how many
//!   (`metrics_lines_unsaved`) and the resumed node's first line counts them in `metrics_lines_lost`.
//!   Without checkpoints nothing is synced by the node: the kernel writes the lines back within seconds.
//! - What a resumed run writes (`node run --resume`): every round completed gets exactly one line. The round
//!   of the checkpoint it resumes from was written before the crash, or is written at restart from the copy
//!   the checkpoint keeps (the crash came between the checkpoint and the line). Rounds the node did not run
//!   — the ones between the checkpoint and the network's round when it came back, and those it skipped to
//!   catch up — have no line; the first line after them says `"resumed": true` and/or
//!   `"skipped_rounds": n`. Lines are in round order per node.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol::Round;
use serde::{Deserialize, Serialize};

use crate::disk::Disk;
use crate::engine::RoundMetrics;
use crate::{NodeError, Result};

/// Lines kept while the disk refuses them (a few hundred bytes each: about a megabyte at most).
pub(crate) const MAX_PENDING_LINES: usize = 4096;

/// An open metrics file.
pub(crate) struct MetricsFile {
    path: PathBuf,
    file: Arc<File>,
    disk: Arc<dyn Disk>,
    /// Lines the disk refused, oldest first (with their newlines): written before the next line.
    pending: VecDeque<Vec<u8>>,
    max_pending: usize,
    /// Lines written since the last successful sync.
    unsynced: u64,
    write_failures: u64,
    lines_lost: u64,
}

/// Holds the file's exclusive lock; released when dropped.
struct Locked<'a>(&'a File);

impl<'a> Locked<'a> {
    fn new(file: &'a File) -> io::Result<Self> {
        file.lock()?;
        Ok(Self(file))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl MetricsFile {
    /// Opens `path` for appending (created if missing), after cutting a torn last line; writes go
    /// through `disk`.
    pub(crate) fn open(path: &Path, disk: Arc<dyn Disk>) -> Result<Self> {
        let io = |e| NodeError::io(path, e);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(io)?;
        {
            let _lock = Locked::new(&file).map_err(io)?;
            cut_torn_tail(path, &file).map_err(io)?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            disk,
            pending: VecDeque::new(),
            max_pending: MAX_PENDING_LINES,
            unsynced: 0,
            write_failures: 0,
            lines_lost: 0,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends node `node`'s line for `m` — after the lines still waiting for the disk — with the file's
    /// fault counts set in `m`. On a failure the line is kept for the next call, and the error returned.
    pub(crate) fn append(&mut self, node: usize, m: &mut RoundMetrics) -> io::Result<()> {
        m.metrics_write_failures = self.write_failures;
        m.metrics_lines_lost = self.lines_lost;
        let mut l = line(node, m).into_bytes();
        l.push(b'\n');
        self.pending.push_back(l);
        let r = self.write_pending();
        if r.is_err() {
            self.write_failures += 1;
            while self.pending.len() > self.max_pending {
                self.pending.pop_front();
                self.lines_lost += 1;
            }
        }
        r
    }

    /// Counts `n` lines as possibly missing (a resumed run's checkpoint said so); the next line says it.
    pub(crate) fn count_lost(&mut self, n: u64) {
        self.lines_lost += n;
    }

    /// Lines not yet written.
    pub(crate) fn pending(&self) -> u64 {
        self.pending.len() as u64
    }

    fn write_pending(&mut self) -> io::Result<()> {
        let _lock = Locked::new(&self.file)?;
        cut_torn_tail(&self.path, &self.file)?;
        while let Some(l) = self.pending.front() {
            let before = self.file.metadata()?.len();
            let n = self.disk.append(&self.file, l)?;
            if n < l.len() {
                // Under the lock nobody wrote after us: take the fragment back. Should that fail too, the
                // next writer's tail cut removes it.
                self.file.set_len(before)?;
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("the disk took {n} of the line's {} bytes", l.len()),
                ));
            }
            self.pending.pop_front();
            self.unsynced += 1;
        }
        Ok(())
    }

    /// The sync to run at a checkpoint (off the event loop: it can take long on a slow disk); hand its
    /// result to [`MetricsFile::synced`].
    pub(crate) fn sync_job(&self) -> impl FnOnce() -> io::Result<()> + Send + 'static {
        let (file, disk) = (self.file.clone(), self.disk.clone());
        move || disk.sync(&file)
    }

    /// Records a sync's outcome; returns the lines of this node that are not durably in the file (those
    /// still waiting, and on a failed sync those written since the last good one).
    pub(crate) fn synced(&mut self, r: &io::Result<()>) -> u64 {
        if r.is_ok() {
            self.unsynced = 0;
        } else {
            self.write_failures += 1;
        }
        self.pending() + self.unsynced
    }

    /// The last round node `node` has a line for, if any.
    pub(crate) fn last_round(&self, node: usize) -> Result<Option<Round>> {
        #[derive(Deserialize)]
        struct Key {
            node: usize,
            round: Round,
        }
        let f = std::fs::File::open(&self.path).map_err(|e| NodeError::io(&self.path, e))?;
        let mut last = None;
        for l in std::io::BufReader::new(f).lines() {
            let l = l.map_err(|e| NodeError::io(&self.path, e))?;
            if let Ok(k) = serde_json::from_str::<Key>(&l)
                && k.node == node
            {
                last = Some(last.map_or(k.round, |r: Round| r.max(k.round)));
            }
        }
        Ok(last)
    }
}

/// One metrics line (without its newline).
pub(crate) fn line(node: usize, m: &RoundMetrics) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        node: usize,
        #[serde(flatten)]
        m: &'a RoundMetrics,
    }
    serde_json::to_string(&Line { node, m }).expect("metrics serialise")
}

/// Cuts what follows the last newline: a partial line of a writer that died mid-write, or of a write the
/// machine's crash interrupted. Called under the file's lock, so no live writer is mid-line.
fn cut_torn_tail(path: &Path, file: &File) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    // The common case, on every append: the file ends in a newline.
    let mut r = file;
    let mut last = [0u8];
    r.seek(SeekFrom::Start(len - 1))?;
    r.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // Look back a bounded stretch for the last newline: a line is a few hundred bytes.
    let back = len.min(1 << 16);
    let mut tail = vec![0u8; back as usize];
    r.seek(SeekFrom::Start(len - back))?;
    r.read_exact(&mut tail)?;
    let keep = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        None if back == len => 0,
        // No newline in the last 64 KiB: not a torn line of ours; leave the file alone.
        None => return Ok(()),
    };
    tracing::warn!(path = %path.display(), cut = len - keep, "metrics file ended in a torn line; cutting it");
    file.set_len(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{FullDisk, OsDisk};
    use std::io::Write;

    fn m(r: u64) -> RoundMetrics {
        RoundMetrics {
            round: Round(r),
            ..RoundMetrics::default()
        }
    }

    fn parsed(p: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }

    #[test]
    fn lines_are_appended_never_truncated_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let mut f = MetricsFile::open(&p, Arc::new(OsDisk)).unwrap();
        assert_eq!(f.last_round(3).unwrap(), None);
        f.append(3, &mut m(0)).unwrap();
        f.append(4, &mut m(7)).unwrap();
        f.append(3, &mut m(1)).unwrap();
        drop(f);
        // A crash mid-line, then a restart.
        let mut raw = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        raw.write_all(b"{\"node\":3,\"rou").unwrap();
        drop(raw);
        let mut f = MetricsFile::open(&p, Arc::new(OsDisk)).unwrap();
        assert_eq!(f.last_round(3).unwrap(), Some(Round(1)));
        assert_eq!(f.last_round(4).unwrap(), Some(Round(7)));
        f.append(3, &mut m(2)).unwrap();
        let rounds: Vec<u64> = parsed(&p)
            .iter()
            .map(|v| v["round"].as_u64().unwrap())
            .collect();
        assert_eq!(
            rounds,
            vec![0, 7, 1, 2],
            "every whole line kept, the torn one gone"
        );
    }

    /// Several node processes on one file (each writer its own descriptor, as separate processes have),
    /// while writers die mid-line (a fragment written under the lock, then nothing: what a killed writer
    /// leaves). Every line in the file parses and every node's lines are all there, in order. The first
    /// fragment comes after the writers opened the file and before they write, so each writer must cut it
    /// itself: appending after it, as the old code did, glues the next line to it.
    #[test]
    fn several_writers_sharing_one_file_never_cut_a_line() {
        const WRITERS: usize = 4;
        const LINES: u64 = 300;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("shared.jsonl");
        let files: Vec<MetricsFile> = (0..WRITERS)
            .map(|_| MetricsFile::open(&p, Arc::new(OsDisk)).unwrap())
            .collect();
        let dying = |text: &[u8]| {
            let raw = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            let _lock = Locked::new(&raw).unwrap();
            (&raw).write_all(text).unwrap();
        };
        dying(b"{\"node\":99,\"round\":1,\"test_met");
        std::thread::scope(|s| {
            for (node, mut f) in files.into_iter().enumerate() {
                s.spawn(move || {
                    for r in 0..LINES {
                        f.append(node, &mut m(r)).unwrap();
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20 {
                    dying(b"{\"node\":98,\"ro");
                    std::thread::yield_now();
                }
            });
        });
        // A restart cuts a fragment left last.
        drop(MetricsFile::open(&p, Arc::new(OsDisk)).unwrap());
        let lines = parsed(&p);
        assert_eq!(lines.len() as u64, WRITERS as u64 * LINES);
        for node in 0..WRITERS {
            let rounds: Vec<u64> = lines
                .iter()
                .filter(|v| v["node"] == node)
                .map(|v| v["round"].as_u64().unwrap())
                .collect();
            assert_eq!(rounds, (0..LINES).collect::<Vec<_>>(), "node {node}");
        }
    }

    /// A full disk: refused lines are kept and written in order once it takes them again, the failures are
    /// counted in the lines, and beyond the bound the oldest are dropped and counted; a write the disk took
    /// only part of is taken back, so the file never holds a fragment.
    #[test]
    fn a_full_disk_delays_lines_in_order_and_counts_what_it_cost() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let disk = Arc::new(FullDisk::default());
        let mut f = MetricsFile::open(&p, disk.clone()).unwrap();
        f.max_pending = 3;
        f.append(0, &mut m(0)).unwrap();
        disk.set_short_writes(true);
        assert!(f.append(0, &mut m(1)).is_err());
        assert_eq!(parsed(&p).len(), 1, "the half line was taken back");
        disk.set_short_writes(false);
        disk.set_full(true);
        for r in 2..5 {
            assert!(f.append(0, &mut m(r)).is_err());
        }
        // Four lines refused, room for three: round 1's line is dropped.
        assert!(f.sync_job()().is_err());
        assert_eq!(f.synced(&Err(io::ErrorKind::StorageFull.into())), 3 + 1);
        disk.set_full(false);
        let mut last = m(5);
        f.append(0, &mut last).unwrap();
        let r = f.sync_job()();
        assert_eq!(f.synced(&r), 0);
        let lines = parsed(&p);
        let rounds: Vec<u64> = lines.iter().map(|v| v["round"].as_u64().unwrap()).collect();
        assert_eq!(rounds, vec![0, 2, 3, 4, 5]);
        assert_eq!(last.metrics_write_failures, 5, "4 writes and a sync");
        assert_eq!(last.metrics_lines_lost, 1);
        assert_eq!(lines[4]["metrics_lines_lost"], 1);
        assert!(lines[0].get("metrics_write_failures").is_none());
    }
}
