//! The network observer's timing attack on packet arrival times (issue 13, `testnet --mode procs --netns
//! --observe-timing --capture`): the same sibling-linkage scoring as `linkage.rs`, fed with the times at
//! which the observer's host saw the packets (a `tcpdump` capture on the observer's interface inside its
//! namespace, microsecond timestamps) instead of the times its libp2p shell handed messages over.
//!
//! The observer is a curious recipient: it decrypts what it receives, so it knows which message is a chunk and
//! from which VN identity (its arrival log says so, with the wall clock). What it adds here is the packet
//! timer. Packets are tied to VN identities by their TCP endpoints: every process logs each inbound connection
//! with the address the peer connects from (`inbound LOCAL REMOTE` lines of the arrival log), and a VN's
//! listen address is the deployment's, so each (source, destination) pair of a connection names its two VNs.
//! A message's packet time is the last data packet from its sender to the receiving VN at or before the log
//! line ("last packet"), and the first packet of the burst that packet ends (packets less than
//! [`BURST_GAP_US`] apart; "burst start": when the sender's bytes began to arrive).
//!
//! Beside the messages, every data packet a remote VN identity sent the observer (whatever it carried) feeds
//! the all-packet features of `crate::coincidence`: same-millisecond coincidence and cross-correlation at
//! lags 0-50 ms. [`PacketLinkage::features`] lists every feature's AUC, and [`PacketLinkage::best`] the one
//! that links siblings best.
//!
//! Captures: with `--netns` each observer's own, on its interface; on loopback one capture of the run's ports
//! on `lo` that every observer shares, each taking the packets sent to its own VNs (by their endpoints).

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use libp2p::PeerId;
use node::arrival_log::{ArrivalLog, Logged};
use node::observe::{Arrival, Observer};
use serde::Serialize;

use crate::coincidence::{self, FeatureAuc};
use crate::linkage::{FeatureLinkage, LinkageRecorder, LinkageReport};

/// Packets closer than this belong to one burst.
pub const BURST_GAP_US: u64 = 1_000;
/// A log line more than this after the last packet of its connection is not matched (the packet was not
/// captured, or the mapping is wrong).
pub const MAX_LAG_US: u64 = 1_000_000;
/// At most this many packets are read from one capture.
pub const MAX_PACKETS: usize = 20_000_000;

/// One captured TCP/IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// Capture timestamp, microseconds since the Unix epoch.
    pub t_us: u64,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    /// TCP payload bytes.
    pub payload: u32,
}

/// Reads the TCP/IPv4 packets of a classic pcap file (micro- or nanosecond timestamps, either byte order;
/// Ethernet or Linux cooked captures). Other packets are skipped.
pub fn read_pcap(bytes: &[u8]) -> anyhow::Result<Vec<Packet>> {
    if bytes.len() < 24 {
        bail!("not a pcap file: {} bytes", bytes.len());
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        m => bail!("not a pcap file (magic {m:#x})"),
    };
    let u32_at = |b: &[u8], at: usize| -> u32 {
        let w: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let link = u32_at(bytes, 20);
    let l2 = match link {
        1 => 14,   // Ethernet
        113 => 16, // Linux cooked (SLL)
        276 => 20, // Linux cooked v2
        _ => bail!("pcap link type {link} not handled"),
    };
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() && out.len() < MAX_PACKETS {
        let (sec, frac, incl) = (
            u64::from(u32_at(bytes, at)),
            u64::from(u32_at(bytes, at + 4)),
            u32_at(bytes, at + 8) as usize,
        );
        let data = at + 16;
        let Some(pkt) = bytes.get(data..data + incl) else {
            break; // a truncated last record (the capture was stopped mid-write)
        };
        at = data + incl;
        let t_us = sec * 1_000_000 + if nanos { frac / 1000 } else { frac };
        let ethertype = match link {
            1 => pkt.get(12..14),
            113 => pkt.get(14..16),
            _ => pkt.get(0..2),
        };
        if ethertype != Some(&[0x08, 0x00]) {
            continue;
        }
        let Some(ip) = pkt.get(l2..) else { continue };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0xf) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let Some(tcp) = ip.get(ihl..ihl + 20) else {
            continue;
        };
        let doff = usize::from(tcp[12] >> 4) * 4;
        let addr = |o: usize| Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
        let port = |o: usize| u16::from_be_bytes([tcp[o], tcp[o + 1]]);
        out.push(Packet {
            t_us,
            src: SocketAddrV4::new(addr(12), port(0)),
            dst: SocketAddrV4::new(addr(16), port(2)),
            payload: total.saturating_sub(ihl + doff) as u32,
        });
    }
    Ok(out)
}

/// `/ip4/A/tcp/P` (anything after is ignored) as a socket address.
pub fn socket_of(multiaddr: &str) -> Option<SocketAddrV4> {
    let mut f = multiaddr.split('/').skip(1);
    match (f.next(), f.next(), f.next(), f.next()) {
        (Some("ip4"), Some(ip), Some("tcp"), Some(port)) => {
            Some(SocketAddrV4::new(ip.parse().ok()?, port.parse().ok()?))
        }
        _ => None,
    }
}

/// One observing process: its address, the VN identities it runs (in the arrival log's VN order), its arrival
/// log and its capture.
pub struct ObserverFiles<'a> {
    pub index: usize,
    /// The address its own capture sees packets to; `None` when the capture is the run's shared loopback
    /// capture (the observer's packets are then those sent to its VNs' endpoints).
    pub ip: Option<Ipv4Addr>,
    pub vns: Vec<PeerId>,
    pub arrivals: &'a Path,
    pub capture: Option<&'a Path>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PacketLinkage {
    /// The attack on the last packet of each message.
    pub last_packet: LinkageReport,
    /// The attack on the first packet of the burst that carried each message.
    pub burst_start: LinkageReport,
    /// The same attack on the arrival logs' wall clock (what the libp2p shell saw), for comparison.
    pub log_wall: LinkageReport,
    /// Chunk and first-hop walk arrivals matched to packets, and those that were not.
    pub matched: usize,
    pub unmatched: usize,
    /// Arrivals from a VN of the observer's own process: they cross the namespace's loopback, not its
    /// interface, so no capture sees them (the attack skips the observer's own VNs anyway).
    pub local: usize,
    /// Data packets captured towards the observers, and those whose endpoints no logged connection names.
    pub data_packets: usize,
    pub unmapped_packets: usize,
    /// Packets the observers' captures lost (tcpdump: "dropped by kernel"), summed; `None` if not reported.
    pub dropped_by_kernel: Option<u64>,
    /// Log line time minus its message's last packet: median and 99th percentile, microseconds.
    pub log_lag_us_median: Option<u64>,
    pub log_lag_us_p99: Option<u64>,
    /// Every feature's AUC: the all-packet features (`crate::coincidence`), then the message features on packet
    /// times (`chunk_last_packet`, `chunk_burst_start`, each also scored by a pair's mean gap instead of its
    /// median, `…_mean_gap`, and by how late both were together, `chunk_last_packet_co_late`, whose medians are
    /// products of lateness in ms·s; `walk_first_hop`, `walk_any_hop`; the others' medians are
    /// gaps in ms, smaller for the more likely siblings).
    pub features: Vec<FeatureAuc>,
    /// The feature with the highest pooled AUC.
    pub best: Option<FeatureAuc>,
    /// What the best feature reads under random groupings of the VNs.
    pub chance: ChanceFloor,
}

/// A message feature of the linkage report as a row of the feature table.
fn feature_row(name: &str, f: &FeatureLinkage) -> FeatureAuc {
    FeatureAuc {
        name: name.to_string(),
        auc_pooled: f.auc_pooled,
        auc_mean: f.auc_mean,
        pairs: f.pairs,
        sibling_pairs: f.sibling_pairs,
        sibling_median: f.sibling_gap_ms_median,
        stranger_median: f.stranger_gap_ms_median,
    }
}

/// Runs the attack. `listen` maps each VN's listen address to its identity, `owner` each VN to its node.
/// Beside the real labels, the same features are scored under [`CHANCE_PERMUTATIONS`] random groupings of the
/// VNs ([`ChanceFloor`]): what the best of so many features reads when there is nothing to find.
pub fn attack(
    observers: &[ObserverFiles<'_>],
    listen: &HashMap<SocketAddrV4, PeerId>,
    owner: &HashMap<PeerId, usize>,
    k: usize,
) -> anyhow::Result<PacketLinkage> {
    let evidence = Evidence::load(observers, listen, owner)?;
    let mut report = evidence.score(owner, k);
    report.chance = ChanceFloor::measure(&evidence, owner, k, CHANCE_PERMUTATIONS, &report);
    Ok(report)
}

/// Random groupings scored for the chance floor.
pub const CHANCE_PERMUTATIONS: usize = 40;

/// What the best feature reads by chance: the features scored with the VNs dealt into random groups of k
/// (labels no observer carries, so no VN is dropped as the observer's own), `permutations` times. The best of
/// many noisy features sits above 0.5 with no leak at all; the real best is a finding only where it stands
/// clear of this floor. Grouping all of the run's VNs at once leaves some groups short at each observer (the
/// members that are its own VNs are not scored), so the null has slightly fewer sibling pairs than the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChanceFloor {
    pub permutations: usize,
    /// The best feature's pooled AUC under random groups: mean, 95th percentile, largest.
    pub best_auc_mean: Option<f64>,
    pub best_auc_p95: Option<f64>,
    pub best_auc_max: Option<f64>,
    /// Share of random groupings whose best feature reads at least the real best (a permutation p-value;
    /// small means the real best is more than chance).
    pub best_p_value: Option<f64>,
    /// Per feature (in [`PacketLinkage::features`]' order): its pooled AUC's 95th percentile under random
    /// groups.
    pub feature_p95: Vec<(String, Option<f64>)>,
}

impl ChanceFloor {
    fn measure(
        evidence: &Evidence,
        owner: &HashMap<PeerId, usize>,
        k: usize,
        permutations: usize,
        real: &PacketLinkage,
    ) -> ChanceFloor {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        if permutations == 0 {
            return ChanceFloor::default();
        }
        let mut vns: Vec<PeerId> = owner.keys().copied().collect();
        vns.sort();
        // Group labels beyond every process index, so that no observer takes a group for its own node.
        let first_label = owner.values().max().map_or(0, |m| m + 1) + evidence.observers.len() + 1;
        let mut best = Vec::with_capacity(permutations);
        let mut per_feature: Vec<Vec<f64>> = vec![Vec::new(); real.features.len()];
        for i in 0..permutations {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed_0000 + i as u64);
            vns.shuffle(&mut rng);
            let random_owner: HashMap<PeerId, usize> = vns
                .iter()
                .enumerate()
                .map(|(j, vn)| (*vn, first_label + j / k.max(1)))
                .collect();
            let scored = evidence.score(&random_owner, k);
            best.push(scored.best.and_then(|b| b.auc_pooled).unwrap_or(0.5));
            for (f, into) in scored.features.iter().zip(&mut per_feature) {
                into.extend(f.auc_pooled);
            }
        }
        let quantile = |v: &mut Vec<f64>, q: f64| {
            v.sort_by(f64::total_cmp);
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        let real_best = real.best.as_ref().and_then(|b| b.auc_pooled);
        ChanceFloor {
            permutations,
            best_auc_mean: Some(best.iter().sum::<f64>() / best.len() as f64),
            best_p_value: real_best.map(|r| {
                // The real grouping counts as one of the groupings (the usual +1), so p is never 0.
                (1 + best.iter().filter(|&&b| b >= r).count()) as f64 / (1 + best.len()) as f64
            }),
            best_auc_p95: quantile(&mut best, 0.95),
            best_auc_max: best.last().copied(),
            feature_p95: real
                .features
                .iter()
                .zip(&mut per_feature)
                .map(|(f, v)| (f.name.clone(), quantile(v, 0.95)))
                .collect(),
        }
    }
}

/// One observer's evidence: its VNs, its arrival log, and the data packets into its VNs per (sender,
/// receiver), in time order.
struct ObserverEvidence {
    index: usize,
    vns: Vec<PeerId>,
    log: Vec<node::arrival_log::Record>,
    flows: HashMap<(PeerId, PeerId), Vec<u64>>,
}

/// The observers' files, read and matched to connections once, to be scored under any grouping of the VNs.
struct Evidence {
    observers: Vec<ObserverEvidence>,
    /// The all-packet features' pair scores per observer (the grouping only labels them).
    pair_scores: Vec<Vec<(PeerId, PeerId, [f64; coincidence::FEATURES.len()])>>,
    data_packets: usize,
    unmapped: usize,
    dropped_by_kernel: Option<u64>,
}

impl Evidence {
    fn load(
        observers: &[ObserverFiles<'_>],
        listen: &HashMap<SocketAddrV4, PeerId>,
        owner: &HashMap<PeerId, usize>,
    ) -> anyhow::Result<Evidence> {
        // Every process's log, parsed once.
        let mut logs = Vec::with_capacity(observers.len());
        for o in observers {
            let text = std::fs::read_to_string(o.arrivals)
                .with_context(|| format!("reading {}", o.arrivals.display()))?;
            logs.push(
                text.lines()
                    .filter_map(ArrivalLog::parse_record)
                    .collect::<Vec<_>>(),
            );
        }
        // Connections: (from, to) endpoints → (sender VN, receiving VN), both directions.
        let mut endpoints: HashMap<(SocketAddrV4, SocketAddrV4), (PeerId, PeerId)> = HashMap::new();
        for r in logs.iter().flatten() {
            if let Logged::Inbound { local, remote } = &r.what
                && let (Some(l), Some(rm)) = (socket_of(local), socket_of(remote))
                && let Some(listener) = listen.get(&l)
            {
                endpoints.insert((rm, l), (r.peer, *listener));
                endpoints.insert((l, rm), (*listener, r.peer));
            }
        }
        let (mut data_packets, mut unmapped) = (0, 0);
        // Captures read once each (the loopback capture is every observer's).
        let mut captures: HashMap<&Path, Vec<Packet>> = HashMap::new();
        let mut evidence = Vec::with_capacity(observers.len());
        let mut pair_scores = Vec::with_capacity(observers.len());
        for (o, log) in observers.iter().zip(logs) {
            // An observer without a capture has no packet times: it is not attacked here.
            let Some(cap) = o.capture else {
                continue;
            };
            if !captures.contains_key(cap) {
                let bytes =
                    std::fs::read(cap).with_context(|| format!("reading {}", cap.display()))?;
                let mut packets: Vec<Packet> = read_pcap(&bytes)
                    .with_context(|| format!("reading {}", cap.display()))?
                    .into_iter()
                    .filter(|p| p.payload > 0)
                    .collect();
                packets.sort_by_key(|p| p.t_us);
                if o.ip.is_none() {
                    // A shared capture: its packets that no logged connection names are counted once.
                    data_packets += packets.len();
                    unmapped += packets
                        .iter()
                        .filter(|p| !endpoints.contains_key(&(p.src, p.dst)))
                        .count();
                }
                captures.insert(cap, packets);
            }
            // Data packets into this observer, per (sender, receiver) in time order.
            let mut flows: HashMap<(PeerId, PeerId), Vec<u64>> = HashMap::new();
            for p in &captures[cap] {
                if let Some(ip) = o.ip {
                    if *p.dst.ip() != ip {
                        continue;
                    }
                    data_packets += 1;
                }
                match endpoints.get(&(p.src, p.dst)) {
                    Some(&(from, to)) if o.vns.contains(&to) => {
                        flows.entry((from, to)).or_default().push(p.t_us)
                    }
                    Some(_) => {}
                    None if o.ip.is_some() => unmapped += 1,
                    None => {}
                }
            }
            for times in flows.values_mut() {
                times.sort_unstable();
            }
            // Every packet each remote identity sent this observer's VNs, for the all-packet features (its own
            // VNs and identities the run does not list are not attacked).
            let mut senders: BTreeMap<PeerId, Vec<u64>> = BTreeMap::new();
            for ((from, _), times) in &flows {
                if !o.vns.contains(from) && owner.contains_key(from) {
                    senders.entry(*from).or_default().extend(times);
                }
            }
            pair_scores.push(coincidence::observer_pair_scores(&senders));
            evidence.push(ObserverEvidence {
                index: o.index,
                vns: o.vns.clone(),
                log,
                flows,
            });
        }
        Ok(Evidence {
            observers: evidence,
            pair_scores,
            data_packets,
            unmapped,
            dropped_by_kernel: observers
                .iter()
                .filter_map(|o| o.capture)
                .map(crate::run::capture::dropped)
                .sum(),
        })
    }

    /// Every feature, with `owner` naming each VN's node (the run's, or a random grouping).
    fn score(&self, owner: &HashMap<PeerId, usize>, k: usize) -> PacketLinkage {
        let recorder = |owner: &HashMap<PeerId, usize>| {
            let owner = owner.clone();
            LinkageRecorder::new(k, move |p: &PeerId| owner.get(p).copied())
        };
        let (last, burst, wall) = (recorder(owner), recorder(owner), recorder(owner));
        let (mut matched, mut unmatched, mut local) = (0, 0, 0);
        let mut lags = Vec::new();
        for o in &self.observers {
            for r in &o.log {
                let Logged::Arrival(what) = r.what else {
                    continue;
                };
                // Chunks and walks (first hops and any hop: `linkage` scores both).
                if !matches!(what, Arrival::Chunk { .. } | Arrival::Walk { .. }) {
                    continue;
                }
                if o.vns.contains(&r.peer) {
                    local += 1;
                    continue;
                }
                let (Some(wall_us), Some(me)) = (r.wall_us, o.vns.get(r.vn)) else {
                    unmatched += 1;
                    continue;
                };
                wall.arrival(o.index, r.vn, &r.peer, Duration::from_micros(wall_us), what);
                let times = o.flows.get(&(r.peer, *me)).map_or(&[][..], Vec::as_slice);
                let i = times.partition_point(|&t| t <= wall_us);
                if i == 0 || wall_us - times[i - 1] > MAX_LAG_US {
                    unmatched += 1;
                    continue;
                }
                matched += 1;
                let end = times[i - 1];
                lags.push(wall_us - end);
                let mut j = i - 1;
                while j > 0 && times[j] - times[j - 1] <= BURST_GAP_US {
                    j -= 1;
                }
                last.arrival(o.index, r.vn, &r.peer, Duration::from_micros(end), what);
                burst.arrival(
                    o.index,
                    r.vn,
                    &r.peer,
                    Duration::from_micros(times[j]),
                    what,
                );
            }
        }
        lags.sort_unstable();
        let pct = |q: f64| {
            lags.get(((lags.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        let all_packet_pairs: Vec<Vec<([f64; coincidence::FEATURES.len()], bool)>> = self
            .pair_scores
            .iter()
            .map(|pairs| {
                pairs
                    .iter()
                    .map(|(a, b, s)| (*s, owner.get(a) == owner.get(b)))
                    .collect()
            })
            .collect();
        let (last_packet, burst_start) = (last.finish(), burst.finish());
        let mut features = coincidence::feature_aucs(&all_packet_pairs);
        features.extend([
            feature_row("chunk_last_packet", &last_packet.chunks),
            feature_row("chunk_burst_start", &burst_start.chunks),
            feature_row("chunk_last_packet_mean_gap", &last_packet.chunks_mean_gap),
            feature_row("chunk_burst_start_mean_gap", &burst_start.chunks_mean_gap),
            feature_row("chunk_last_packet_co_late", &last_packet.chunks_co_late),
            feature_row("walk_first_hop", &last_packet.walks),
            feature_row("walk_any_hop", &last_packet.walks_any_hop),
        ]);
        let best = coincidence::best(&features).cloned();
        PacketLinkage {
            last_packet,
            burst_start,
            log_wall: wall.finish(),
            features,
            best,
            chance: ChanceFloor::default(),
            matched,
            unmatched,
            local,
            data_packets: self.data_packets,
            unmapped_packets: self.unmapped,
            dropped_by_kernel: self.dropped_by_kernel,
            log_lag_us_median: pct(0.5),
            log_lag_us_p99: pct(0.99),
        }
    }
}

/// The address-grouping attack on the source addresses peers really connect from: every process's arrival
/// log names, for each inbound connection, the peer and its remote address; a VN's source IP is the one it
/// connected from most often. Returns `ips[i]`: the source IPs of node i's VNs that connected anywhere (for
/// `linkage::address_grouping_auc`), and the number of VNs seen.
pub fn observed_sources(
    logs: &[&Path],
    owner: &HashMap<PeerId, usize>,
    nodes: usize,
) -> anyhow::Result<(Vec<Vec<String>>, usize)> {
    let mut seen: BTreeMap<PeerId, BTreeMap<String, usize>> = BTreeMap::new();
    for path in logs {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for r in text.lines().filter_map(ArrivalLog::parse_record) {
            if let Logged::Inbound { remote, .. } = r.what
                && let Some(sock) = socket_of(&remote)
                && owner.contains_key(&r.peer)
            {
                *seen
                    .entry(r.peer)
                    .or_default()
                    .entry(sock.ip().to_string())
                    .or_default() += 1;
            }
        }
    }
    let mut ips = vec![Vec::new(); nodes];
    for (peer, by_ip) in &seen {
        let (ip, _) = by_ip
            .iter()
            .max_by_key(|(ip, c)| (**c, std::cmp::Reverse(*ip)))
            .expect("non-empty");
        if let Some(&i) = owner.get(peer).filter(|&&i| i < nodes) {
            ips[i].push(ip.clone());
        }
    }
    Ok((ips, seen.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap (µs, little-endian, Ethernet) of the given packets.
    fn pcap(packets: &[Packet]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0xa1b2_c3d4u32.to_le_bytes());
        b.extend(2u16.to_le_bytes());
        b.extend(4u16.to_le_bytes());
        b.extend([0u8; 8]);
        b.extend(65535u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        for p in packets {
            let mut frame = vec![0u8; 12];
            frame.extend([0x08, 0x00]);
            let total = 20 + 20 + p.payload as u16;
            let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0];
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip.extend(p.src.ip().octets());
            ip.extend(p.dst.ip().octets());
            let mut tcp = vec![0u8; 20];
            tcp[0..2].copy_from_slice(&p.src.port().to_be_bytes());
            tcp[2..4].copy_from_slice(&p.dst.port().to_be_bytes());
            tcp[12] = 5 << 4;
            frame.extend(ip);
            frame.extend(tcp);
            // Captured headers only (snap length), as the run's capture does.
            b.extend(((p.t_us / 1_000_000) as u32).to_le_bytes());
            b.extend(((p.t_us % 1_000_000) as u32).to_le_bytes());
            b.extend((frame.len() as u32).to_le_bytes());
            b.extend((frame.len() as u32 + p.payload).to_le_bytes());
            b.extend(frame);
        }
        b
    }

    fn sock(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn pcap_packets_read_back() {
        let ps = vec![
            Packet {
                t_us: 1_700_000_000_123_456,
                src: sock("10.77.0.1:4000"),
                dst: sock("10.77.0.2:5000"),
                payload: 1448,
            },
            Packet {
                t_us: 1_700_000_000_123_999,
                src: sock("10.77.0.2:5000"),
                dst: sock("10.77.0.1:4000"),
                payload: 0,
            },
        ];
        let mut bytes = pcap(&ps);
        assert_eq!(read_pcap(&bytes).unwrap(), ps);
        // A record cut short by a stopped capture is dropped, the rest kept.
        bytes.truncate(bytes.len() - 3);
        assert_eq!(read_pcap(&bytes).unwrap(), ps[..1]);
        assert!(read_pcap(b"not a capture at all, no").is_err());
        assert_eq!(
            socket_of("/ip4/10.77.0.3/tcp/41000/p2p/x"),
            Some(sock("10.77.0.3:41000"))
        );
        assert_eq!(socket_of("/ip6/::1/tcp/1"), None);
    }

    /// Six nodes of two VNs send one observer VN chunks over 8 rounds. With `together`, each node's two VNs
    /// send within the same millisecond at a time of the node's own; without, every VN at a time of its own.
    /// Returns the attack's report.
    fn six_nodes(together: bool) -> PacketLinkage {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let vns: Vec<PeerId> = (0..12).map(|_| PeerId::random()).collect();
        let o = PeerId::random();
        let mut owner: HashMap<PeerId, usize> =
            vns.iter().enumerate().map(|(i, p)| (*p, i / 2)).collect();
        owner.insert(o, 6);
        let o_listen = sock("10.77.0.100:9000");
        let listen: HashMap<SocketAddrV4, PeerId> = [(o_listen, o)].into();
        let src = |i: usize| SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1 + i as u8), 40000);
        let base = 1_700_000_000_000_000u64;
        let mut log = String::new();
        for (i, p) in vns.iter().enumerate() {
            log += &format!(
                "1\t0\t{p}\tinbound /ip4/10.77.0.100/tcp/9000 /ip4/{}/tcp/40000\t{base}\n",
                src(i).ip()
            );
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut packets = Vec::new();
        for round in 0..8u64 {
            let t0 = base + 1_000_000 * (round + 1);
            let node_at: Vec<u64> = (0..6).map(|_| rng.random_range(0..500_000)).collect();
            for (i, p) in vns.iter().enumerate() {
                let sent = t0
                    + if together {
                        node_at[i / 2] + i as u64 % 2 * 100
                    } else {
                        rng.random_range(0..500_000)
                    };
                packets.push(Packet {
                    t_us: sent,
                    src: src(i),
                    dst: o_listen,
                    payload: 1448,
                });
                log += &format!("2\t0\t{p}\tchunk {round}\t{}\n", sent + 200);
            }
        }
        packets.sort_by_key(|p| p.t_us);
        let (cap, arr) = (dir.path().join("cap.pcap"), dir.path().join("arrivals.log"));
        std::fs::write(&cap, pcap(&packets)).unwrap();
        std::fs::write(&arr, log).unwrap();
        let obs = [ObserverFiles {
            index: 6,
            ip: Some(Ipv4Addr::new(10, 77, 0, 100)),
            vns: vec![o],
            arrivals: &arr,
            capture: Some(&cap),
        }];
        attack(&obs, &listen, &owner, 2).unwrap()
    }

    /// The chance floor: with nothing to find, the best of the features still reads above 0.5, and the random
    /// groupings read as much; with siblings sending together, the real best stands above every random
    /// grouping's.
    #[test]
    fn the_chance_floor_separates_a_leak_from_the_best_of_many_features() {
        let leak = six_nodes(true);
        let best = |r: &PacketLinkage| r.best.as_ref().and_then(|b| b.auc_pooled).unwrap();
        assert_eq!(best(&leak), 1.0);
        let c = &leak.chance;
        assert_eq!(c.permutations, CHANCE_PERMUTATIONS);
        assert_eq!(c.best_p_value, Some(1.0 / (1 + CHANCE_PERMUTATIONS) as f64));
        assert!(c.best_auc_p95.unwrap() < 0.9, "{c:?}");
        assert_eq!(c.feature_p95.len(), leak.features.len());
        let none = six_nodes(false);
        let c = &none.chance;
        assert!(
            best(&none) > 0.55,
            "the best of {} noisy features is above 0.5: {}",
            none.features.len(),
            best(&none)
        );
        assert!(c.best_auc_mean.unwrap() > 0.55, "{c:?}");
        assert!(c.best_p_value.unwrap() > 0.1, "no leak to find: {c:?}");
    }

    /// Two nodes of two VNs (a0, a1 | b0, b1) send chunks to an observer VN o; the logs see them all at the
    /// same instant each round (the observer's event loop was busy), the packets tell siblings apart: a0
    /// and a1's packets come together, b0 and b1's 300 ms later. Packet times link siblings; log times
    /// cannot.
    #[test]
    fn packet_times_link_what_log_times_blur() {
        let dir = tempfile::tempdir().unwrap();
        let [a0, a1, b0, b1, o] = std::array::from_fn(|_| PeerId::random());
        let owner: HashMap<PeerId, usize> = [(a0, 0), (a1, 0), (b0, 1), (b1, 1), (o, 2)].into();
        let obs_ip = Ipv4Addr::new(10, 77, 0, 3);
        let o_listen = sock("10.77.0.3:9000");
        let listen: HashMap<SocketAddrV4, PeerId> = [(o_listen, o)].into();
        let src =
            |i: u16| SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1 + (i / 2) as u8), 40000 + i);
        let senders = [a0, a1, b0, b1];
        let mut log = String::new();
        let base = 1_700_000_000_000_000u64;
        for (i, p) in senders.iter().enumerate() {
            log += &format!(
                "1\t0\t{p}\tinbound /ip4/10.77.0.3/tcp/9000 /ip4/{}/tcp/{}\t{base}\n",
                src(i as u16).ip(),
                src(i as u16).port()
            );
        }
        let mut packets = Vec::new();
        for round in 0..5u64 {
            let t0 = base + 1_000_000 * (round + 1);
            for (i, p) in senders.iter().enumerate() {
                let sent = t0 + if i < 2 { 0 } else { 300_000 } + i as u64 * 50;
                for j in 0..3 {
                    packets.push(Packet {
                        t_us: sent + j * 100,
                        src: src(i as u16),
                        dst: o_listen,
                        payload: 1448,
                    });
                }
                // The log: every chunk of the round handed over at once, 400 ms after the round began.
                log += &format!("2\t0\t{p}\tchunk {round}\t{}\n", t0 + 400_000);
            }
        }
        packets.sort_by_key(|p| p.t_us);
        let cap = dir.path().join("cap.pcap");
        let arr = dir.path().join("arrivals.log");
        std::fs::write(&cap, pcap(&packets)).unwrap();
        std::fs::write(&arr, log).unwrap();
        let obs = [ObserverFiles {
            index: 2,
            ip: Some(obs_ip),
            vns: vec![o],
            arrivals: &arr,
            capture: Some(&cap),
        }];
        let r = attack(&obs, &listen, &owner, 2).unwrap();
        assert_eq!((r.matched, r.unmatched, r.local), (20, 0, 0));
        assert_eq!((r.data_packets, r.unmapped_packets), (60, 0));
        assert_eq!(r.last_packet.chunks.auc_pooled, Some(1.0));
        assert_eq!(r.burst_start.chunks.auc_pooled, Some(1.0));
        assert_eq!(
            r.log_wall.chunks.auc_pooled,
            Some(0.5),
            "the log saw every chunk at once"
        );
        // Lags: a's chunks wait ~400 ms for the log, b's ~100 ms; the median (the 11th of 20) is one of a's.
        assert_eq!(r.log_lag_us_median, Some(399_750));
        // Every packet: a's two VNs send in the same milliseconds, b's too, 300 ms from a's.
        let f = |name: &str| r.features.iter().find(|f| f.name == name).unwrap().clone();
        assert_eq!(f("same_ms_cosine").auc_pooled, Some(1.0));
        assert_eq!(
            (f("same_ms_cosine").pairs, f("same_ms_cosine").sibling_pairs),
            (6, 2)
        );
        assert_eq!(f("chunk_last_packet").auc_pooled, Some(1.0));
        assert_eq!(r.best.as_ref().and_then(|b| b.auc_pooled), Some(1.0));
        // The observed sources: a's VNs from 10.77.0.1, b's from 10.77.0.2.
        let (ips, seen) = observed_sources(&[&arr], &owner, 2).unwrap();
        assert_eq!(seen, 4);
        assert_eq!(crate::linkage::address_grouping_auc(&ips), Some(1.0));
    }

    /// On loopback one capture holds every process's packets: each observer takes those sent to its own VNs,
    /// and packets between other processes are neither its data nor unmapped.
    #[test]
    fn a_shared_loopback_capture_gives_each_observer_its_own_packets() {
        let dir = tempfile::tempdir().unwrap();
        let [a0, a1, b0, b1, o, q] = std::array::from_fn(|_| PeerId::random());
        let owner: HashMap<PeerId, usize> =
            [(a0, 0), (a1, 0), (b0, 1), (b1, 1), (o, 2), (q, 3)].into();
        let lo = |port: u16| SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let listen: HashMap<SocketAddrV4, PeerId> = [(lo(9000), o), (lo(9100), q)].into();
        let senders = [a0, a1, b0, b1];
        let base = 1_700_000_000_000_000u64;
        let (mut log_o, mut log_q, mut packets) = (String::new(), String::new(), Vec::new());
        for (i, p) in senders.iter().enumerate() {
            for (log, port) in [(&mut log_o, 9000), (&mut log_q, 9100)] {
                *log += &format!(
                    "1\t0\t{p}\tinbound /ip4/127.0.0.1/tcp/{port} /ip4/127.0.0.1/tcp/{}\t{base}\n",
                    port + 1 + i as u16
                );
            }
        }
        for round in 0..5u64 {
            let t0 = base + 1_000_000 * (round + 1);
            for (i, p) in senders.iter().enumerate() {
                // To o: siblings together. To q: a's and b's VNs crossed (a0 with b0, a1 with b1).
                let to_o = t0 + if i < 2 { 0 } else { 300_000 } + i as u64 * 50;
                let to_q = t0 + if i % 2 == 0 { 0 } else { 300_000 } + i as u64 * 50;
                for (port, sent) in [(9000u16, to_o), (9100, to_q)] {
                    packets.push(Packet {
                        t_us: sent,
                        src: lo(port + 1 + i as u16),
                        dst: lo(port),
                        payload: 1448,
                    });
                }
                log_o += &format!("2\t0\t{p}\tchunk {round}\t{}\n", to_o + 1_000);
                log_q += &format!("2\t0\t{p}\tchunk {round}\t{}\n", to_q + 1_000);
            }
        }
        // A packet between two endpoints no log names.
        packets.push(Packet {
            t_us: base + 10,
            src: lo(1),
            dst: lo(2),
            payload: 10,
        });
        packets.sort_by_key(|p| p.t_us);
        let cap = dir.path().join("capture-lo.pcap");
        std::fs::write(&cap, pcap(&packets)).unwrap();
        let (arr_o, arr_q) = (dir.path().join("o.log"), dir.path().join("q.log"));
        std::fs::write(&arr_o, log_o).unwrap();
        std::fs::write(&arr_q, log_q).unwrap();
        let files = |index, vns, arrivals| ObserverFiles {
            index,
            ip: None,
            vns,
            arrivals,
            capture: Some(&cap),
        };
        let both = [files(2, vec![o], &arr_o), files(3, vec![q], &arr_q)];
        let r = attack(&both, &listen, &owner, 2).unwrap();
        assert_eq!((r.matched, r.unmatched), (40, 0));
        assert_eq!((r.data_packets, r.unmapped_packets), (41, 1));
        // o links a's and b's VNs (6 pairs, 2 siblings): AUC 1. q sees the crossed timing: its sibling pairs
        // never share a millisecond (score 0) while two of its four stranger pairs always do (AUC 0.25).
        let same_ms = |r: &PacketLinkage| {
            r.features
                .iter()
                .find(|f| f.name == "same_ms_cosine")
                .unwrap()
                .clone()
        };
        let f = same_ms(&r);
        assert_eq!((f.pairs, f.sibling_pairs), (12, 4));
        assert_eq!(f.auc_mean, Some(0.625), "1.0 at o, 0.25 at q");
        let only_o = attack(&both[..1], &listen, &owner, 2).unwrap();
        assert_eq!(same_ms(&only_o).auc_pooled, Some(1.0));
        // Without q's log, nothing names q's connections: its 20 packets are unmapped too.
        assert_eq!((only_o.data_packets, only_o.unmapped_packets), (41, 21));
    }
}
