//! [`ArrivalLog`]: a network observer that writes what arrives at a node's VNs to a file — when, from which VN
//! identity, and what kind of message (never the content) — so that a harness can run the timing-linkage
//! attack on real node processes afterwards (`testnet --mode procs --observe-timing`, issue 13). A research
//! option (`arrivals = "FILE"` in a node config): an honest node has no use for it.
//!
//! One line per arrival, tab-separated: microseconds since the node started, the receiving VN's index, the
//! sender's PeerId, and `chunk R`, `walk R first`, `walk R relay` or `control`. Times are the libp2p shell's
//! clock when the swarm hands the message over (after decryption and reassembly: within a fraction of a
//! millisecond of the last packet on loopback), not raw packet captures.

use std::io::{LineWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use libp2p::PeerId;
use protocol::Round;

use crate::observe::{Arrival, Observer};
use crate::{NodeError, Result};

pub struct ArrivalLog {
    out: Mutex<LineWriter<std::fs::File>>,
}

impl ArrivalLog {
    /// Creates (or appends to) the log at `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| NodeError::io(path, e))?;
        Ok(Self {
            out: Mutex::new(LineWriter::new(f)),
        })
    }

    /// Parses one line back: (time, VN index, sender, what). `None` for a line this version did not write.
    pub fn parse(line: &str) -> Option<(Duration, usize, PeerId, Arrival)> {
        let mut f = line.split('\t');
        let micros: u64 = f.next()?.parse().ok()?;
        let vn: usize = f.next()?.parse().ok()?;
        let peer: PeerId = f.next()?.parse().ok()?;
        let what: Vec<&str> = f.next()?.split(' ').collect();
        let arrival = match what.as_slice() {
            ["chunk", r] => Arrival::Chunk {
                round: Round(r.parse().ok()?),
            },
            ["walk", r, hop] => Arrival::Walk {
                round: Round(r.parse().ok()?),
                first_hop: *hop == "first",
            },
            ["control"] => Arrival::Control,
            _ => return None,
        };
        Some((Duration::from_micros(micros), vn, peer, arrival))
    }
}

impl Observer<PeerId> for ArrivalLog {
    fn wants_arrivals(&self) -> bool {
        true
    }

    fn arrival(&self, _node: usize, vn: usize, from: &PeerId, at: Duration, what: Arrival) {
        let kind = match what {
            Arrival::Chunk { round } => format!("chunk {}", round.get()),
            Arrival::Walk { round, first_hop } => {
                format!("walk {} {}", round.get(), if first_hop { "first" } else { "relay" })
            }
            Arrival::Control => "control".into(),
        };
        if let Ok(mut out) = self.out.lock() {
            // A full disk loses observations, never the node.
            let _ = writeln!(out, "{}\t{vn}\t{from}\t{kind}", at.as_micros());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("arrivals.log");
        let log = ArrivalLog::create(&path).unwrap();
        let peer = PeerId::random();
        let cases = [
            Arrival::Chunk { round: Round(3) },
            Arrival::Walk {
                round: Round(4),
                first_hop: true,
            },
            Arrival::Walk {
                round: Round(4),
                first_hop: false,
            },
            Arrival::Control,
        ];
        for (i, a) in cases.iter().enumerate() {
            log.arrival(0, i, &peer, Duration::from_micros(1000 + i as u64), *a);
        }
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<_> = text.lines().map(|l| ArrivalLog::parse(l).unwrap()).collect();
        for (i, (at, vn, p, a)) in back.into_iter().enumerate() {
            assert_eq!(
                (at, vn, p, a),
                (Duration::from_micros(1000 + i as u64), i, peer, cases[i])
            );
        }
        assert!(ArrivalLog::parse("garbage").is_none());
    }
}
