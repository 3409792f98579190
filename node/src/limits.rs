//! Process limits a node depends on. Every VN keeps one socket per peer it gossips, negotiates or exchanges
//! chunks with (connections stay open for the idle timeout), so a node with many VNs in a large network, or a
//! local testnet with all VNs in one process, needs more open files than the usual soft limit of 1,024.

/// Connections one VN may hold at once, for estimates. Measured: 320 VNs in one process ran out of a
/// 20,000-descriptor limit, i.e. over 30 connections per VN (each in-process connection costs two
/// descriptors); 64 leaves margin for larger views and busier rounds.
pub const CONNECTIONS_PER_VN: u64 = 64;

/// Raises the soft limit on open files to the hard limit (as Go does at start-up). Returns the new soft limit,
/// or `None` where the platform has no such limit or it cannot be read.
pub fn raise_open_files_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open-files limit");
            None
        }
    }
}

/// File descriptors `vns` virtual nodes need when `peers_in_process` of their peers run in the same process
/// (both ends of such a connection are ours): listeners plus connections.
pub fn open_files_needed(vns: u64, network_vns: u64, peers_in_process: bool) -> u64 {
    let per_vn = CONNECTIONS_PER_VN.min(network_vns.saturating_sub(1));
    let ends = if peers_in_process { 2 } else { 1 };
    // In-process, each connection joins two of our VNs: count each pair once, with both of its ends.
    let connections = if peers_in_process {
        vns * per_vn / 2
    } else {
        vns * per_vn
    };
    vns + ends * connections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates() {
        // The default testnet: 32 VNs all in one process, each connected to at most 31 others.
        assert_eq!(open_files_needed(32, 32, true), 32 + 2 * (32 * 31 / 2));
        // A node of 8 VNs in a network of 800.
        assert_eq!(open_files_needed(8, 800, false), 8 + 8 * CONNECTIONS_PER_VN);
        assert!(raise_open_files_limit().is_none_or(|l| l >= 64));
    }
}
