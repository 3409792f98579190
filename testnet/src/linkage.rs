//! The network observer's sibling-linkage attack (issue 13, DESIGN §7), run with `--audit` (sim and inproc).
//!
//! Every real node is a passive attacker that records, at each of its VNs, when each message arrived and
//! from which VN identity — overlay walks (a walk that names its origin shows its first hop: the sender is
//! the origin; one that hides it, `--hide-walk-origin`, shows none, and the attacker can only take every
//! walk a sender passes on as a sign of that sender's schedule), other control messages, chunks — nothing
//! else. For every pair of sender VNs it heard from, it
//! scores "siblings?" by timing: siblings are told to start a round's negotiation and get their chunks at the
//! same instant from their RN, so their first-hop walks and their chunks arrive close together. The score of
//! a pair is minus the median, over the rounds in which both were heard, of the gap between their arrivals.
//! Against the harness's ground truth (which VN belongs to which node) this gives, per feature:
//! - the pairwise sibling-linkage ROC-AUC (0.5: timing tells nothing; 1: siblings always closer than
//!   strangers), for each attacker alone (mean over attackers) and for all attackers pooled;
//! - the largest share of one victim's chunks an attacker can put together in one round by linking chunks
//!   that arrived within τ of each other, counting only groups that hold one victim's chunks alone (the
//!   attacker cannot tell a mixed group apart), for τ = 5, 20 and 50 ms.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use node::observe::{Arrival, Observer};
use protocol::{ChunkFrame, Round};
use serde::Serialize;

/// Linking windows for the "assembled share" figure.
pub const LINK_WINDOWS_MS: [u64; 3] = [5, 20, 50];

/// Per attacker, per round, per sender (numbered by the recorder): the first arrival of a feature at any of
/// the attacker's VNs. Only what the attack reads is kept: memory grows with the senders each attacker hears
/// per round, not with the messages.
type FirstArrivals = BTreeMap<usize, BTreeMap<Round, BTreeMap<u32, Duration>>>;

/// Maps a VN identity to its real node: ground truth only the harness has.
type Owner<I> = Box<dyn Fn(&I) -> Option<usize> + Send + Sync>;

/// Records arrivals.
pub struct LinkageRecorder<I> {
    k: usize,
    owner: Owner<I>,
    /// Every sender identity numbered on first sight, with its owner.
    ids: Mutex<(BTreeMap<I, u32>, Vec<usize>)>,
    /// First arrivals of chunks, of first-hop walks and of walks at any hop.
    chunks: Mutex<FirstArrivals>,
    walks: Mutex<FirstArrivals>,
    walks_any_hop: Mutex<FirstArrivals>,
}

/// The attack's figures for one feature.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FeatureLinkage {
    /// ROC-AUC over every pair one attacker heard in a common round, attackers pooled.
    pub auc_pooled: Option<f64>,
    /// Mean over attackers of each attacker's own AUC (attackers with both classes of pairs).
    pub auc_mean: Option<f64>,
    /// Pairs scored (pooled), sibling pairs among them.
    pub pairs: usize,
    pub sibling_pairs: usize,
    /// The median, over sibling pairs and over stranger pairs, of each pair's score (its median gap), in ms:
    /// what the AUC compares, on a scale that says how much delay a defence has to cover.
    pub sibling_gap_ms_median: Option<f64>,
    pub stranger_gap_ms_median: Option<f64>,
}

/// The largest share of a victim's k chunks one attacker assembled in one round, linking within a window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Assembled {
    pub window_ms: u64,
    /// Over every (attacker, round, victim).
    pub max_share: f64,
    /// Mean over rounds of that round's largest share.
    pub mean_round_max_share: f64,
}

/// How a pair's gaps over the rounds become its score (the smaller, the likelier siblings).
#[derive(Debug, Clone, Copy)]
enum PairScore {
    MedianGap,
    MeanGap,
    /// The mean over the rounds both were heard in of the product of their lateness (arrival minus the
    /// round's median arrival at that observer), negated: a node that leaves late in some rounds makes its
    /// siblings late together there, whatever the size of the delay and whether the other rounds are
    /// calm. The score the straddles of a slot grid feed most directly.
    CoLateness,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LinkageReport {
    /// Arrival times of chunks, each pair scored by its median gap over the rounds.
    pub chunks: FeatureLinkage,
    /// The same, each pair scored by its mean gap: rare rounds in which two VNs' chunks leave far apart (two
    /// nodes on either side of a shared slot boundary, `node::net::chunk_slots`) move a mean, not a median.
    pub chunks_mean_gap: FeatureLinkage,
    /// The same, each pair scored by how late the two were together ([`PairScore::CoLateness`]).
    pub chunks_co_late: FeatureLinkage,
    /// Arrival times of first-hop overlay walks (none when walks hide their origin).
    pub walks: FeatureLinkage,
    /// Arrival times of overlay walks at any hop: the first walk each sender passed on in a round, whether it
    /// started it or relayed it.
    pub walks_any_hop: FeatureLinkage,
    pub assembled: Vec<Assembled>,
}

impl<I: Ord + Clone> LinkageRecorder<I> {
    pub fn new(
        vns_per_node: usize,
        owner: impl Fn(&I) -> Option<usize> + Send + Sync + 'static,
    ) -> Self {
        Self {
            k: vns_per_node,
            owner: Box::new(owner),
            ids: Mutex::new((BTreeMap::new(), Vec::new())),
            chunks: Mutex::default(),
            walks: Mutex::default(),
            walks_any_hop: Mutex::default(),
        }
    }

    fn owner(&self, vn: u32) -> usize {
        self.ids.lock().expect("no panics while recording").1[vn as usize]
    }

    /// Runs the attack on everything recorded.
    pub fn finish(&self) -> LinkageReport {
        let chunk_times = self.chunks.lock().expect("no panics while recording");
        let walk_times = self.walks.lock().expect("no panics while recording");
        let any_hop_times = self.walks_any_hop.lock().expect("no panics while recording");
        LinkageReport {
            chunks: self.pairs(&chunk_times, PairScore::MedianGap),
            chunks_mean_gap: self.pairs(&chunk_times, PairScore::MeanGap),
            chunks_co_late: self.pairs(&chunk_times, PairScore::CoLateness),
            walks: self.pairs(&walk_times, PairScore::MedianGap),
            walks_any_hop: self.pairs(&any_hop_times, PairScore::MedianGap),
            assembled: LINK_WINDOWS_MS
                .iter()
                .map(|&w| self.assemble(&chunk_times, Duration::from_millis(w)))
                .collect(),
        }
    }

    fn pairs(&self, times: &FirstArrivals, score: PairScore) -> FeatureLinkage {
        let mut pooled: Vec<(f64, bool)> = Vec::new();
        let mut aucs = Vec::new();
        for rounds in times.values() {
            // Gaps per pair over the rounds both were heard in.
            let mut gaps: BTreeMap<(u32, u32), Vec<f64>> = BTreeMap::new();
            for senders in rounds.values() {
                let v: Vec<(&u32, &Duration)> = senders.iter().collect();
                let mut sorted: Vec<Duration> = v.iter().map(|(_, t)| **t).collect();
                sorted.sort_unstable();
                let median = sorted[sorted.len() / 2].as_secs_f64();
                for (i, (a, ta)) in v.iter().enumerate() {
                    for (b, tb) in &v[i + 1..] {
                        let gap = match score {
                            PairScore::CoLateness => {
                                // Stored negated, so that the smaller is the likelier pair of siblings.
                                -(ta.as_secs_f64() - median) * (tb.as_secs_f64() - median)
                            }
                            _ => ta.abs_diff(**tb).as_secs_f64(),
                        };
                        gaps.entry((**a, **b)).or_default().push(gap);
                    }
                }
            }
            let scored: Vec<(f64, bool)> = gaps
                .into_iter()
                .map(|((a, b), mut g)| {
                    let gap = match score {
                        PairScore::MedianGap => {
                            g.sort_by(f64::total_cmp);
                            g[g.len() / 2]
                        }
                        PairScore::MeanGap | PairScore::CoLateness => {
                            g.iter().sum::<f64>() / g.len() as f64
                        }
                    };
                    (-gap, self.owner(a) == self.owner(b))
                })
                .collect();
            if let Some(auc) = auc(&scored) {
                aucs.push(auc);
            }
            pooled.extend(scored);
        }
        let gap_ms = |siblings: bool| {
            let mut g: Vec<f64> = pooled
                .iter()
                .filter(|p| p.1 == siblings)
                .map(|p| -p.0 * 1e3)
                .collect();
            g.sort_by(f64::total_cmp);
            g.get(g.len() / 2).copied()
        };
        FeatureLinkage {
            sibling_gap_ms_median: gap_ms(true),
            stranger_gap_ms_median: gap_ms(false),
            auc_pooled: auc(&pooled),
            auc_mean: (!aucs.is_empty()).then(|| aucs.iter().sum::<f64>() / aucs.len() as f64),
            pairs: pooled.len(),
            sibling_pairs: pooled.iter().filter(|p| p.1).count(),
        }
    }

    fn assemble(
        &self,
        times: &FirstArrivals,
        window: Duration,
    ) -> Assembled {
        let mut max_share = 0.0f64;
        let mut per_round: BTreeMap<Round, f64> = BTreeMap::new();
        for rounds in times.values() {
            for (&round, senders) in rounds {
                // Chunks in arrival order; a new group starts after a gap longer than the window.
                let mut v: Vec<(Duration, u32)> = senders.iter().map(|(&f, &t)| (t, f)).collect();
                v.sort();
                let mut groups: Vec<Vec<u32>> = Vec::new();
                let mut last: Option<Duration> = None;
                for (t, f) in v {
                    if last.is_none_or(|l| t - l > window) {
                        groups.push(Vec::new());
                    }
                    groups.last_mut().expect("pushed").push(f);
                    last = Some(t);
                }
                for g in groups {
                    let owner = self.owner(g[0]);
                    if g.iter().all(|&f| self.owner(f) == owner) {
                        let share = g.len() as f64 / self.k as f64;
                        max_share = max_share.max(share);
                        let r = per_round.entry(round).or_default();
                        *r = r.max(share);
                    }
                }
            }
        }
        Assembled {
            window_ms: window.as_millis() as u64,
            max_share,
            mean_round_max_share: if per_round.is_empty() {
                0.0
            } else {
                per_round.values().sum::<f64>() / per_round.len() as f64
            },
        }
    }
}

impl<I: Ord + Clone + Send + Sync> Observer<I> for LinkageRecorder<I> {
    fn wants_arrivals(&self) -> bool {
        true
    }

    fn arrival(&self, node: usize, _vn: usize, from: &I, at: Duration, what: Arrival) {
        let (times, also, round) = match what {
            Arrival::Chunk { round } => (&self.chunks, None, round),
            Arrival::Walk { round, first_hop } => (
                &self.walks_any_hop,
                first_hop.then_some(&self.walks),
                round,
            ),
            _ => return,
        };
        // Not a VN of this run, or one of the attacker's own: not attacked.
        let Some(owner) = (self.owner)(from).filter(|&o| o != node) else {
            return;
        };
        let from = {
            let mut ids = self.ids.lock().expect("no panics while recording");
            let next = ids.0.len() as u32;
            let id = *ids.0.entry(from.clone()).or_insert(next);
            if id == next {
                ids.1.push(owner);
            }
            id
        };
        for times in std::iter::once(times).chain(also) {
            let mut t = times.lock().expect("no panics while recording");
            let first = t
                .entry(node)
                .or_default()
                .entry(round)
                .or_default()
                .entry(from)
                .or_insert(at);
            *first = (*first).min(at);
        }
    }

    fn chunk_received(&self, _node: usize, _vn: usize, _from: &I, _frame: &ChunkFrame) {}
}

/// The address-grouping attack (issue 13): a peer groups VNs by the IP they announce (every Cyclon entry
/// carries it) and calls two VNs siblings when they share one. `ips[i][s]` is node i's VN s's IP. The
/// pairwise ROC-AUC of that guess against the truth: 1 when each node's VNs share an IP no other node
/// uses, 0.5 when sharing an IP says nothing (VN hosts dealing VNs at random, or one IP for everyone).
pub fn address_grouping_auc(ips: &[Vec<String>]) -> Option<f64> {
    let vns: Vec<(usize, &String)> = ips
        .iter()
        .enumerate()
        .flat_map(|(i, v)| v.iter().map(move |ip| (i, ip)))
        .collect();
    let mut scored = Vec::with_capacity(vns.len() * vns.len() / 2);
    for (a, (na, ia)) in vns.iter().enumerate() {
        for (nb, ib) in &vns[a + 1..] {
            scored.push((f64::from(u8::from(ia == ib)), na == nb));
        }
    }
    auc(&scored)
}

/// ROC-AUC of `scores` (higher = more likely positive) against their labels: the probability that a random
/// positive outscores a random negative, ties counting half. `None` without both classes.
pub fn auc(scored: &[(f64, bool)]) -> Option<f64> {
    let mut v: Vec<(f64, bool)> = scored.to_vec();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (pos, neg) = (
        v.iter().filter(|x| x.1).count() as f64,
        v.iter().filter(|x| !x.1).count() as f64,
    );
    if pos == 0.0 || neg == 0.0 {
        return None;
    }
    // Mann–Whitney U from average ranks (ties share their rank).
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j < v.len() && v[j].0 == v[i].0 {
            j += 1;
        }
        let avg_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += avg_rank * v[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    Some((rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_grouping_links_siblings_only_when_an_ip_is_a_node() {
        let ip = |s: &str| s.to_string();
        // Each node on its own IP: every sibling pair shares one, no stranger pair does.
        let own = vec![vec![ip("a"), ip("a")], vec![ip("b"), ip("b")], vec![ip("c"), ip("c")]];
        assert_eq!(address_grouping_auc(&own), Some(1.0));
        // One IP for everyone: sharing tells nothing.
        let one = vec![vec![ip("x"); 2]; 3];
        assert_eq!(address_grouping_auc(&one), Some(0.5));
        // Hosts dealt so that siblings never share: below chance, as a host never holds two siblings here.
        let apart = vec![vec![ip("h0"), ip("h1")], vec![ip("h1"), ip("h0")], vec![ip("h0"), ip("h1")]];
        assert!(address_grouping_auc(&apart).unwrap() < 0.5);
    }

    #[test]
    fn auc_of_perfect_reversed_and_tied_scores() {
        let perfect = [(3.0, true), (2.0, true), (1.0, false), (0.0, false)];
        assert_eq!(auc(&perfect), Some(1.0));
        let reversed: Vec<(f64, bool)> = perfect.iter().map(|&(s, l)| (-s, l)).collect();
        assert_eq!(auc(&reversed), Some(0.0));
        assert_eq!(auc(&[(1.0, true), (1.0, false)]), Some(0.5));
        assert_eq!(auc(&[(1.0, true)]), None);
    }

    #[test]
    fn siblings_arriving_together_are_linked_and_strangers_are_not() {
        // Two nodes of two VNs each (0, 1 | 2, 3) observed by node 2's... by attacker 5 (owns none of them).
        let r = LinkageRecorder::new(2, |g: &u32| Some(*g as usize / 2));
        let ms = Duration::from_millis;
        for round in 0..4u64 {
            let base = ms(1000 * round);
            for (from, offset) in [(0u32, 0), (1, 2), (2, 400), (3, 403)] {
                r.arrival(
                    5,
                    0,
                    &from,
                    base + ms(offset),
                    Arrival::Chunk {
                        round: Round(round),
                    },
                );
            }
        }
        let rep = r.finish();
        assert_eq!(rep.chunks.auc_pooled, Some(1.0));
        assert_eq!((rep.chunks.pairs, rep.chunks.sibling_pairs), (6, 2));
        // Sibling gaps 2 and 3 ms, stranger gaps 398-403 ms: the upper medians.
        let near = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-6);
        assert!(near(rep.chunks.sibling_gap_ms_median, 3.0), "{rep:?}");
        assert!(near(rep.chunks.stranger_gap_ms_median, 401.0), "{rep:?}");
        assert_eq!(rep.walks.auc_pooled, None, "no walks recorded");
        // Within 5 ms each node's two chunks form a pure group: the whole model (k = 2) of a victim.
        assert_eq!(rep.assembled[0].max_share, 1.0);
        assert_eq!(rep.assembled[0].window_ms, 5);
    }

    /// Chunks on a shared slot grid: every VN leaves in its round's slot at an offset of its own, except that
    /// node 1 (VNs 2, 3) leaves a slot late every fourth round (a straddle). A pair's median gap cannot tell
    /// siblings from strangers; its mean gap can, and is reported beside it.
    #[test]
    fn a_pairs_mean_gap_sees_the_rare_rounds_a_node_leaves_a_slot_late() {
        let r = LinkageRecorder::new(2, |g: &u32| Some(*g as usize / 2));
        let us = Duration::from_micros;
        for round in 0..16u64 {
            let slot = us(100_000 * round);
            let late = if round % 4 == 3 { us(100_000) } else { us(0) };
            // Offsets that do not depend on the node: the same set each round, rotated.
            for (from, offset) in [(0u32, 1_000), (1, 5_000), (2, 3_000), (3, 7_000)] {
                let offset = us((offset + 2_000 * round) % 8_000);
                let node_late = if from >= 2 { late } else { us(0) };
                r.arrival(
                    5,
                    0,
                    &from,
                    slot + offset + node_late,
                    Arrival::Chunk {
                        round: Round(round),
                    },
                );
            }
        }
        let rep = r.finish();
        let median = rep.chunks.auc_pooled.unwrap();
        let mean = rep.chunks_mean_gap.auc_pooled.unwrap();
        assert!(median <= 0.75, "median {median}");
        assert_eq!(mean, 1.0, "{rep:?}");
        // Half the senders late: the round's median is a late one, and the early pair is "late together"
        // too; still above the median gap's.
        let co_late = rep.chunks_co_late.auc_pooled.unwrap();
        assert!(co_late > median, "co-late {co_late}");
    }

    #[test]
    fn walks_at_any_hop_are_scored_apart_from_first_hops() {
        let r = LinkageRecorder::new(2, |g: &u32| Some(*g as usize / 2));
        let ms = Duration::from_millis;
        for round in 0..4u64 {
            let base = ms(1000 * round);
            // Relayed walks (a walk that hides its origin never shows a first hop) with sibling timing.
            for (from, offset) in [(0u32, 0), (1, 2), (2, 400), (3, 403)] {
                let walk = Arrival::Walk {
                    round: Round(round),
                    first_hop: false,
                };
                r.arrival(5, 0, &from, base + ms(offset), walk);
            }
        }
        let rep = r.finish();
        assert_eq!(rep.walks.auc_pooled, None, "no first hop seen");
        assert_eq!(rep.walks_any_hop.auc_pooled, Some(1.0));
        assert_eq!(rep.chunks.pairs, 0);
    }
}
