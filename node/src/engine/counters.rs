//! Wire traffic counters of one VN, reported per round as deltas.

use protocol::frame::LENGTH_PREFIX_BYTES;
use protocol::rnvn::RoundSummary;

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
    pub refused: u64,
    reported: (u64, u64, u64, u64, u64, u64),
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

    pub fn received(&mut self, payload: usize) {
        self.bytes_received += (payload + LENGTH_PREFIX_BYTES) as u64;
        self.messages_received += 1;
    }

    /// Writes the traffic since the previous call into `summary`.
    pub fn fill(&mut self, summary: &mut RoundSummary) {
        let now = (
            self.bytes_sent,
            self.bytes_received,
            self.messages_sent,
            self.messages_received,
            self.refused,
            self.chunk_bytes_sent,
        );
        let last = self.reported;
        summary.bytes_sent = now.0 - last.0;
        summary.bytes_received = now.1 - last.1;
        summary.messages_sent = now.2 - last.2;
        summary.messages_received = now.3 - last.3;
        summary.refused = (now.4 - last.4) as u32;
        summary.chunk_bytes_sent = now.5 - last.5;
        self.reported = now;
    }
}
