//! Wire traffic and refusal counters of one VN, reported per round as deltas.

use protocol::frame::LENGTH_PREFIX_BYTES;
use protocol::rnvn::{RefusalCounts, RoundSummary};

/// Running totals since the VN started, and the totals at the last report. Bytes count frame payloads plus
/// their length prefix (what our codec puts on a stream); libp2p's own framing (noise, yamux) is not
/// included.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    bytes_sent: u64,
    bytes_received: u64,
    messages_sent: u64,
    messages_received: u64,
    chunk_bytes_sent: u64,
    /// Everything refused since the VN started (the sum of every reason).
    pub refused: u64,
    /// Refusals by reason since the last report (a fixed set of counters; taken by [`Counters::fill`]).
    pub refused_by_reason: RefusalCounts,
    /// The running totals at the last report (a copy of the fields above).
    reported: Totals,
}

/// Running totals, by name.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    bytes_sent: u64,
    bytes_received: u64,
    messages_sent: u64,
    messages_received: u64,
    chunk_bytes_sent: u64,
    refused: u64,
}

impl Counters {
    pub fn sent(&mut self, payload: usize) {
        self.bytes_sent += (payload + LENGTH_PREFIX_BYTES) as u64;
        self.messages_sent += 1;
    }

    /// A chunk frame sent: counted as a message and separately as chunk traffic.
    pub fn sent_chunk(&mut self, payload: usize) {
        self.sent(payload);
        self.chunk_bytes_sent += (payload + LENGTH_PREFIX_BYTES) as u64;
    }

    /// One refusal, counted in the total and, by `reason` (which bumps one counter), under its reason.
    pub fn refused(&mut self, reason: impl FnOnce(&mut RefusalCounts)) {
        self.refused += 1;
        reason(&mut self.refused_by_reason);
    }

    pub fn received(&mut self, payload: usize) {
        self.bytes_received += (payload + LENGTH_PREFIX_BYTES) as u64;
        self.messages_received += 1;
    }

    /// Writes the traffic since the previous call into `summary`.
    pub fn fill(&mut self, summary: &mut RoundSummary) {
        let now = Totals {
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            messages_sent: self.messages_sent,
            messages_received: self.messages_received,
            chunk_bytes_sent: self.chunk_bytes_sent,
            refused: self.refused,
        };
        let last = self.reported;
        summary.bytes_sent = now.bytes_sent - last.bytes_sent;
        summary.bytes_received = now.bytes_received - last.bytes_received;
        summary.messages_sent = now.messages_sent - last.messages_sent;
        summary.messages_received = now.messages_received - last.messages_received;
        summary.refused = (now.refused - last.refused) as u32;
        summary.refused_by_reason = std::mem::take(&mut self.refused_by_reason);
        summary.chunk_bytes_sent = now.chunk_bytes_sent - last.chunk_bytes_sent;
        self.reported = now;
    }
}
