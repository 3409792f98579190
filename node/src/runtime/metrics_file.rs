//! The metrics file: one JSON line per completed round (`{"node": i, "round": t, …}`), that survives a crash
//! and a restart (issue 15).
//!
//! - It is opened for appending and never truncated: a restarted node adds to what its earlier life wrote.
//! - Each line goes out in one `write` of the whole line and its newline, on a file opened with `O_APPEND`,
//!   so a killed process leaves whole lines (and nodes sharing a file never interleave within a line). A
//!   torn last line — possible only if the machine, not the process, stops mid-write — is cut when the file
//!   is opened again, so readers always see whole JSON lines.
//! - What a resumed run writes (`node run --resume`): every round completed gets exactly one line. The round
//!   of the checkpoint it resumes from was written before the crash, or is written at restart from the copy
//!   the checkpoint keeps (the crash came between the checkpoint and the line). Rounds the node did not run
//!   — the ones between the checkpoint and the network's round when it came back, and those it skipped to
//!   catch up — have no line; the first line after them says `"resumed": true` and/or
//!   `"skipped_rounds": n`. Lines are in round order per node.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use protocol::Round;
use serde::{Deserialize, Serialize};

use crate::engine::RoundMetrics;
use crate::{NodeError, Result};

/// An open metrics file.
pub(crate) struct MetricsFile {
    path: PathBuf,
    file: std::fs::File,
}

impl MetricsFile {
    /// Opens `path` for appending (created if missing), after cutting a torn last line.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let io = |e| NodeError::io(path, e);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(io)?;
        cut_torn_tail(path, &file)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Appends node `node`'s line for `m` in one write.
    pub(crate) fn append(&mut self, node: usize, m: &RoundMetrics) -> Result<()> {
        let mut line = line(node, m);
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| NodeError::io(&self.path, e))
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

/// Cuts what follows the last newline: a partial line of a write that the machine's crash interrupted.
fn cut_torn_tail(path: &Path, file: &std::fs::File) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |e| NodeError::io(path, e);
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Ok(());
    }
    // Look back a bounded stretch for the last newline: a line is a few hundred bytes.
    let back = len.min(1 << 16);
    let mut tail = vec![0u8; back as usize];
    let mut r = file;
    r.seek(SeekFrom::Start(len - back)).map_err(io)?;
    r.read_exact(&mut tail).map_err(io)?;
    if tail.last() == Some(&b'\n') {
        return Ok(());
    }
    let keep = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        None if back == len => 0,
        // No newline in the last 64 KiB: not a torn line of ours; leave the file alone.
        None => return Ok(()),
    };
    tracing::warn!(path = %path.display(), cut = len - keep, "metrics file ended in a torn line; cutting it");
    file.set_len(keep).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_never_truncated_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let m = |r| RoundMetrics {
            round: Round(r),
            ..RoundMetrics::default()
        };
        let mut f = MetricsFile::open(&p).unwrap();
        assert_eq!(f.last_round(3).unwrap(), None);
        f.append(3, &m(0)).unwrap();
        f.append(4, &m(7)).unwrap();
        f.append(3, &m(1)).unwrap();
        drop(f);
        // A crash mid-line, then a restart.
        let mut raw = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        raw.write_all(b"{\"node\":3,\"rou").unwrap();
        drop(raw);
        let mut f = MetricsFile::open(&p).unwrap();
        assert_eq!(f.last_round(3).unwrap(), Some(Round(1)));
        assert_eq!(f.last_round(4).unwrap(), Some(Round(7)));
        f.append(3, &m(2)).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let rounds: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["round"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            rounds,
            vec![0, 7, 1, 2],
            "every whole line kept, the torn one gone"
        );
    }
}
