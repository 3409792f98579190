//! [`ArrivalLog`]: a network observer that writes what arrives at a node's VNs to a file — when, from which VN
//! identity, and what kind of message (never the content) — so that a harness can run the timing-linkage
//! attack on real node processes afterwards (`testnet --mode procs --observe-timing`, issue 13). A research
//! option (`arrivals = "FILE"` in a node config): an honest node has no use for it.
//!
//! One line per arrival, tab-separated: microseconds since the node started, the receiving VN's index, the
//! sender's PeerId, `chunk R`, `walk R first`, `walk R relay` or `control`, and the wall clock (microseconds
//! since the Unix epoch) when the line was written. Times are the libp2p shell's clock when the swarm hands the
//! message over (after decryption and reassembly; on a busy machine that can be long after the last packet),
//! not raw packet captures; the wall clock lets a harness put the line beside a packet capture's timestamps
//! (`testnet --capture`). A peer's inbound connection is a line too, `inbound LOCAL REMOTE`: the VN's address
//! it reached and the address (source IP and port) it connects from.

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

    /// Parses one arrival line back: (time, VN index, sender, what). `None` for another line (a connection)
    /// or one this version did not write.
    pub fn parse(line: &str) -> Option<(Duration, usize, PeerId, Arrival)> {
        match Self::parse_record(line)? {
            Record {
                at,
                vn,
                peer,
                what: Logged::Arrival(a),
                ..
            } => Some((at, vn, peer, a)),
            _ => None,
        }
    }

    /// Parses any line back, with its wall clock (absent in lines of older versions).
    pub fn parse_record(line: &str) -> Option<Record> {
        let mut f = line.split('\t');
        let micros: u64 = f.next()?.parse().ok()?;
        let vn: usize = f.next()?.parse().ok()?;
        let peer: PeerId = f.next()?.parse().ok()?;
        let what: Vec<&str> = f.next()?.split(' ').collect();
        let wall_us = f.next().and_then(|w| w.parse().ok());
        let record = |what| {
            Some(Record {
                at: Duration::from_micros(micros),
                wall_us,
                vn,
                peer,
                what,
            })
        };
        if let ["inbound", local, remote] = what.as_slice() {
            return record(Logged::Inbound {
                local: (*local).to_string(),
                remote: (*remote).to_string(),
            });
        }
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
        record(Logged::Arrival(arrival))
    }

    fn write_line(&self, at: Duration, vn: usize, peer: &PeerId, what: &str) {
        // The wall clock, to line the log up with packet captures (a research log, not the engine's time).
        #[allow(clippy::disallowed_methods)]
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        if let Ok(mut out) = self.out.lock() {
            // A full disk loses observations, never the node.
            let _ = writeln!(out, "{}\t{vn}\t{peer}\t{what}\t{wall}", at.as_micros());
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Since the node started (the libp2p shell's clock).
    pub at: Duration,
    /// Microseconds since the Unix epoch when the line was written.
    pub wall_us: Option<u64>,
    pub vn: usize,
    pub peer: PeerId,
    pub what: Logged,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Logged {
    Arrival(Arrival),
    /// `peer` connected to the VN: `local` is the VN's address it reached, `remote` where it came from.
    Inbound {
        local: String,
        remote: String,
    },
}

impl Observer<PeerId> for ArrivalLog {
    fn wants_arrivals(&self) -> bool {
        true
    }

    fn arrival(&self, _node: usize, vn: usize, from: &PeerId, at: Duration, what: Arrival) {
        let kind = match what {
            Arrival::Chunk { round } => format!("chunk {}", round.get()),
            Arrival::Walk { round, first_hop } => {
                format!(
                    "walk {} {}",
                    round.get(),
                    if first_hop { "first" } else { "relay" }
                )
            }
            Arrival::Control => "control".into(),
        };
        self.write_line(at, vn, from, &kind);
    }

    fn inbound_connection(
        &self,
        _node: usize,
        vn: usize,
        from: &PeerId,
        at: Duration,
        local: &str,
        remote: &str,
    ) {
        // Multiaddrs hold no spaces or tabs.
        self.write_line(at, vn, from, &format!("inbound {local} {remote}"));
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
        let back: Vec<_> = text
            .lines()
            .map(|l| ArrivalLog::parse(l).unwrap())
            .collect();
        for (i, (at, vn, p, a)) in back.into_iter().enumerate() {
            assert_eq!(
                (at, vn, p, a),
                (Duration::from_micros(1000 + i as u64), i, peer, cases[i])
            );
        }
        assert!(ArrivalLog::parse("garbage").is_none());
        // Every line carries the wall clock, and connections read back as such (and not as arrivals).
        let log = ArrivalLog::create(&path).unwrap();
        let (local, remote) = ("/ip4/10.0.0.1/tcp/4", "/ip4/10.0.0.2/tcp/5");
        log.inbound_connection(0, 2, &peer, Duration::from_micros(7), local, remote);
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap();
        assert!(ArrivalLog::parse(last).is_none());
        let r = ArrivalLog::parse_record(last).unwrap();
        assert_eq!((r.at, r.vn, r.peer), (Duration::from_micros(7), 2, peer));
        assert_eq!(
            r.what,
            Logged::Inbound {
                local: local.into(),
                remote: remote.into()
            }
        );
        assert!(
            r.wall_us.is_some_and(|w| w > 1_600_000_000_000_000),
            "a wall clock after 2020"
        );
        assert!(
            text.lines()
                .all(|l| ArrivalLog::parse_record(l).is_some_and(|r| r.wall_us.is_some()))
        );
        // A line of the earlier format (no wall clock) still reads.
        let old = format!("12\t0\t{peer}\tchunk 3");
        assert_eq!(ArrivalLog::parse_record(&old).unwrap().wall_us, None);
        assert!(ArrivalLog::parse(&old).is_some());
    }
}
