//! A whole rogue node in the overlay simulator (issue 44, "crowding a victim"): one listed node that holds
//! several identities (a node's k VNs) and uses all of them, together, to become a chosen victim node's
//! neighbour as often as it can. Its identities run the honest [`crate::Sampler`] underneath (they answer
//! shuffles, relay walks, take part in the overlay as anyone does); on top of it, each deviation of
//! [`Rogue`] can be switched on alone or with the others:
//!
//! * `direct`: every `every`, each identity sends each victim VN, for every open round, a proposal of its
//!   own with a fresh key and no hops left (ttl 0: if the victim does not take it, it goes nowhere) —
//!   naming itself as origin ([`DirectKind::Named`], a first hop that says so), naming a sibling as origin
//!   while posing as its relay ([`DirectKind::Sibling`]), or naming none ([`DirectKind::Hidden`]). An
//!   `Accept` for such a walk is confirmed at once, from the walk's origin.
//! * `greedy`: an identity takes every walk that reaches it, whatever its degree or role, in every open
//!   round, and acknowledges every `Confirm` for it.
//! * `forge`: an identity that relays a walk (which it still forwards) answers it as well, with an `Accept`
//!   naming a sibling (an answer from a peer that is not the acceptor); and on a walk that hides its origin,
//!   it rewrites the `Accept` coming back through it to name itself, takes the origin's `Confirm` (and with
//!   it the walk's key), and uses the key at the real acceptor, which then counts the rogue as the origin.
//! * `flood`: every `every`, each identity sends each victim VN a shuffle request with a fresh entry of
//!   itself and l − 1 more: its siblings, or with `junk` entries that fail when the victim tries them (ids
//!   past the network's, which the simulated network treats as down, as a real network treats a peer named at
//!   a bogus address): a whole node fills a view that the per-supplier cap limits per identity only.
//!
//! The rogue withholds its own chunks as well: nothing here sends any, and what the measurement counts is
//! what it receives (the edges a victim's VNs count with it).
//!
//! Edges the rogue makes outside its samplers are kept here ([`RogueState::edges`]); the driver counts them
//! as the rogue's side of the edge, so an edge is in a round's graph when the victim counts it too.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use protocol::Round;
use protocol::control::{ControlMsg, CyclonMsg, OverlayMsg, ViewEntry, walk_nonce};
use rand::Rng;
use rand_chacha::ChaCha12Rng;

use super::{OverlaySim, SimConfig};
use crate::Error;

/// How a rogue's direct proposals name their origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectKind {
    /// `origin: Some(sender)`: a first hop that names itself.
    Named,
    /// `origin: Some(a sibling)`: one identity proposes for another, posing as a relay of its walk.
    Sibling,
    /// `origin: None`: a walk that hides its origin, claiming to be relayed.
    Hidden,
}

/// A rogue node: its identities, its victims and the deviations it uses (module docs).
#[derive(Debug, Clone)]
pub struct Rogue {
    /// The VNs of the simulation it controls (a node's k identities).
    pub ids: Vec<u32>,
    /// The VNs it crowds (a victim node's k VNs).
    pub victims: Vec<u32>,
    /// Period of its pushes (direct proposals, floods).
    pub every: Duration,
    pub direct: Option<DirectKind>,
    pub greedy: bool,
    pub forge: bool,
    pub flood: bool,
    /// With `flood`: fill the shuffle with entries that fail when tried, instead of siblings.
    pub junk: bool,
}

impl Rogue {
    /// A rogue with every deviation off: its identities behave as honest ones.
    pub fn quiet(ids: Vec<u32>, victims: Vec<u32>, every: Duration) -> Self {
        Self {
            ids,
            victims,
            every,
            direct: None,
            greedy: false,
            forge: false,
            flood: false,
            junk: false,
        }
    }

    /// Every deviation at once (direct proposals of the given kind, greedy and forged answers, a junk flood).
    pub fn all(ids: Vec<u32>, victims: Vec<u32>, every: Duration, direct: DirectKind) -> Self {
        Self {
            direct: Some(direct),
            greedy: true,
            forge: true,
            flood: true,
            junk: true,
            ..Self::quiet(ids, victims, every)
        }
    }

    fn sibling(&self, id: u32) -> u32 {
        let i = self.ids.iter().position(|&x| x == id).unwrap_or(0);
        self.ids[(i + 1) % self.ids.len()]
    }
}

/// A message the rogue sends: (from, to, message).
pub(super) type Sent = (u32, u32, ControlMsg<u32>);

/// What the rogue remembers between messages, and the edges it counts.
#[derive(Debug, Default)]
pub struct RogueState {
    /// Walks its identities started: (round, nonce) → (key, origin).
    walks: BTreeMap<(Round, u64), (u64, u32)>,
    /// Walks one of its identities answered (greedily or forged): (round, nonce) → the identity it named.
    answered: BTreeMap<(Round, u64), u32>,
    /// Hidden walks an identity relayed: (round, nonce, identity) → the peer it had the walk from.
    relayed: BTreeMap<(Round, u64, u32), u32>,
    /// Answers rewritten to name the relay: (round, nonce) → (relay, the real acceptor).
    stolen: BTreeMap<(Round, u64), (u32, u32)>,
    /// Its own commitments (`Confirm`s it sent): (round, nonce, identity).
    committed: BTreeSet<(Round, u64, u32)>,
    /// Edges it counts outside its samplers: round → (identity, peer).
    pub edges: BTreeMap<Round, BTreeSet<(u32, u32)>>,
    /// Messages it sent on top of its samplers' own.
    pub sent: u64,
}

impl RogueState {
    fn edge(&mut self, round: Round, id: u32, peer: u32) {
        self.edges.entry(round).or_default().insert((id, peer));
    }

    fn unedge(&mut self, round: Round, id: u32, peer: u32) {
        if let Some(e) = self.edges.get_mut(&round) {
            e.remove(&(id, peer));
        }
    }

    /// The victim refused the edge at chunk time: the rogue stops counting it.
    pub(super) fn refused(&mut self, round: Round, id: u32, peer: u32) {
        self.unedge(round, id, peer);
    }

    /// The peers identity `id` counts in `round` outside its sampler.
    pub fn peers(&self, round: Round, id: u32) -> impl Iterator<Item = u32> + '_ {
        self.edges
            .get(&round)
            .into_iter()
            .flat_map(move |e| e.iter().filter(move |(i, _)| *i == id).map(|(_, p)| *p))
    }

    /// One push at the victims for the `open` rounds (`phantom` is the first id past the network's).
    pub(super) fn push(
        &mut self,
        r: &Rogue,
        open: &[Round],
        phantom: u32,
        rng: &mut ChaCha12Rng,
        out: &mut Vec<Sent>,
    ) {
        let before = out.len();
        if let Some(kind) = r.direct {
            for &round in open {
                for &v in &r.victims {
                    for &a in &r.ids {
                        let key = rng.random::<u64>();
                        let nonce = walk_nonce(key);
                        self.walks.insert((round, nonce), (key, a));
                        let (sender, origin) = match kind {
                            DirectKind::Named => (a, Some(a)),
                            DirectKind::Sibling => (r.sibling(a), Some(a)),
                            DirectKind::Hidden => (a, None),
                        };
                        let msg = OverlayMsg::Propose {
                            round,
                            origin,
                            nonce,
                            ttl: 0,
                        };
                        out.push((sender, v, ControlMsg::Overlay(msg)));
                    }
                }
            }
        }
        if r.flood {
            for &v in &r.victims {
                for (j, &a) in r.ids.iter().enumerate() {
                    let mut entries = vec![ViewEntry { id: a, age: 0 }];
                    for i in 1..8u32 {
                        let id = if r.junk {
                            phantom + j as u32 * 8 + i
                        } else {
                            r.ids[(j + i as usize) % r.ids.len()]
                        };
                        if id != a && entries.iter().all(|e| e.id != id) {
                            entries.push(ViewEntry { id, age: 0 });
                        }
                    }
                    let msg = CyclonMsg::ShuffleRequest { entries };
                    out.push((a, v, ControlMsg::Cyclon(msg)));
                }
            }
        }
        // Forget what concerns rounds no longer open (answers for them come no more).
        if let Some(&oldest) = open.iter().min() {
            let keep = |round: &Round| round.get() + 4 >= oldest.get();
            self.walks.retain(|(round, _), _| keep(round));
            self.answered.retain(|(round, _), _| keep(round));
            self.relayed.retain(|(round, _, _), _| keep(round));
            self.stolen.retain(|(round, _), _| keep(round));
            self.committed.retain(|(round, _, _)| keep(round));
        }
        self.sent += (out.len() - before) as u64;
    }

    /// A message for one of the rogue's identities (`to`): true if the rogue handled it itself (the
    /// identity's sampler does not see it), false to pass it on to the sampler.
    pub(super) fn intercept(
        &mut self,
        r: &Rogue,
        open: &[Round],
        from: u32,
        to: u32,
        msg: &ControlMsg<u32>,
        out: &mut Vec<Sent>,
    ) -> bool {
        let ControlMsg::Overlay(msg) = msg else {
            return false;
        };
        if r.ids.contains(&from) {
            return false;
        }
        let before = out.len();
        let handled = self.on_overlay(r, open, from, to, msg, out);
        self.sent += (out.len() - before) as u64;
        handled
    }

    fn on_overlay(
        &mut self,
        r: &Rogue,
        open: &[Round],
        from: u32,
        to: u32,
        msg: &OverlayMsg<u32>,
        out: &mut Vec<Sent>,
    ) -> bool {
        let ov = |m: OverlayMsg<u32>| ControlMsg::Overlay(m);
        match *msg {
            OverlayMsg::Propose {
                round,
                origin,
                nonce,
                ..
            } => {
                if origin.is_some_and(|o| r.ids.contains(&o))
                    || self.walks.contains_key(&(round, nonce))
                    || !open.contains(&round)
                {
                    return false;
                }
                let back = origin.unwrap_or(from);
                if r.greedy {
                    let accept = OverlayMsg::Accept {
                        round,
                        nonce,
                        acceptor: to,
                    };
                    out.push((to, back, ov(accept)));
                    self.answered.insert((round, nonce), to);
                    return true;
                }
                if r.forge {
                    if origin.is_none() {
                        self.relayed.entry((round, nonce, to)).or_insert(from);
                    }
                    let sibling = r.sibling(to);
                    let accept = OverlayMsg::Accept {
                        round,
                        nonce,
                        acceptor: sibling,
                    };
                    out.push((to, back, ov(accept)));
                    self.answered.insert((round, nonce), sibling);
                }
                false
            }
            OverlayMsg::Accept {
                round,
                nonce,
                acceptor,
            } => {
                if let Some((key, origin)) = self.walks.remove(&(round, nonce)) {
                    out.push((origin, acceptor, ov(OverlayMsg::Confirm { round, key })));
                    self.committed.insert((round, nonce, origin));
                    self.edge(round, origin, acceptor);
                    return true;
                }
                if r.forge
                    && !r.ids.contains(&acceptor)
                    && let Some(prev) = self.relayed.remove(&(round, nonce, to))
                {
                    let mine = OverlayMsg::Accept {
                        round,
                        nonce,
                        acceptor: to,
                    };
                    out.push((to, prev, ov(mine)));
                    self.stolen.insert((round, nonce), (to, acceptor));
                    return true;
                }
                false
            }
            OverlayMsg::Confirm { round, key } => {
                let nonce = walk_nonce(key);
                if let Some(&(relay, acceptor)) = self.stolen.get(&(round, nonce))
                    && relay == to
                {
                    self.stolen.remove(&(round, nonce));
                    out.push((to, from, ov(OverlayMsg::ConfirmAck { round, nonce })));
                    self.edge(round, to, from);
                    self.answered.insert((round, nonce), to);
                    out.push((to, acceptor, ov(OverlayMsg::Confirm { round, key })));
                    self.committed.insert((round, nonce, to));
                    self.edge(round, to, acceptor);
                    return true;
                }
                if self.answered.get(&(round, nonce)) == Some(&to) {
                    out.push((to, from, ov(OverlayMsg::ConfirmAck { round, nonce })));
                    self.edge(round, to, from);
                    return true;
                }
                false
            }
            OverlayMsg::ConfirmAck { round, nonce } => self.committed.contains(&(round, nonce, to)),
            OverlayMsg::Nack { round, nonce } => {
                if self.committed.remove(&(round, nonce, to))
                    || self.answered.get(&(round, nonce)) == Some(&to)
                {
                    self.unedge(round, to, from);
                    return true;
                }
                false
            }
            OverlayMsg::Drop { round } => {
                self.unedge(round, to, from);
                false
            }
            _ => false,
        }
    }
}

/// What a crowding run measured, per round (see [`crowding`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crowding {
    /// The rogue node's neighbourships with the victim VN it neighboured most, per round.
    pub rogue_max_vn: f64,
    /// Copies of the victim's chunks the rogue node received, per round (its edges with the victim's VNs,
    /// each of which sends its chunk to every neighbour).
    pub rogue_copies: f64,
    /// Distinct victim chunks (victim VNs) the rogue node held, per round.
    pub rogue_chunks: f64,
    /// The same for the mean honest node (every node but the victim and the rogue).
    pub honest_copies: f64,
    pub honest_chunks: f64,
    /// The most copies any one honest node received, per round.
    pub honest_max_copies: f64,
    /// An honest node's expected copies per round, k · k·r/(N − 1).
    pub expected_copies: f64,
    /// Fraction of the victim's VN-rounds short of r.
    pub victim_deficient: f64,
    /// Fraction of all VN-rounds short of r.
    pub deficient: f64,
    /// Messages the rogue sent on top of its samplers'.
    pub sent: u64,
}

/// Runs `rounds` rounds of `cfg` (N = n·k VNs, node j holding VNs j·k .. (j + 1)·k) with `rogue`, if any,
/// set up after the warm-up, and measures how often each node neighboured the victim node's VNs (node 0's)
/// and held their chunks. The rogue is the node that holds `rogue.ids` (the last node for a quiet
/// reference too: pass a [`Rogue::quiet`]).
pub fn crowding(cfg: SimConfig, k: u32, rogue: Rogue, rounds: usize) -> Result<Crowding, Error> {
    let n_vns = cfg.n_vns;
    let degree = cfg.overlay.degree;
    let nodes = n_vns / k as usize;
    let node_of = |v: u32| (v / k) as usize;
    let victims: Vec<u32> = (0..k).collect();
    let rogue_node = node_of(rogue.ids[0]);
    let mut sim = OverlaySim::new(cfg)?;
    sim.set_rogue(rogue);
    let mut edges = vec![vec![0usize; k as usize]; nodes];
    let mut chunks = vec![0usize; nodes];
    let (mut victim_short, mut short) = (0, 0);
    for _ in 0..rounds {
        let g = sim.run_round();
        short += g.adj.iter().filter(|nb| nb.len() < degree).count();
        for &v in &victims {
            let nb = &g.adj[v as usize];
            victim_short += usize::from(nb.len() < degree);
            let mut holders = vec![false; nodes];
            for &w in nb {
                edges[node_of(w)][v as usize] += 1;
                holders[node_of(w)] = true;
            }
            for (c, h) in chunks.iter_mut().zip(holders) {
                *c += usize::from(h);
            }
        }
    }
    let per_round = |x: usize| x as f64 / rounds as f64;
    let honest: Vec<usize> = (1..nodes).filter(|&j| j != rogue_node).collect();
    let copies = |node: usize| per_round(edges[node].iter().sum());
    let mean =
        |f: &dyn Fn(usize) -> f64| honest.iter().map(|&j| f(j)).sum::<f64>() / honest.len() as f64;
    let share = k as f64 * degree as f64 / (n_vns as f64 - 1.0);
    Ok(Crowding {
        rogue_max_vn: per_round(edges[rogue_node].iter().copied().max().unwrap_or(0)),
        rogue_copies: copies(rogue_node),
        rogue_chunks: per_round(chunks[rogue_node]),
        honest_copies: mean(&copies),
        honest_chunks: mean(&|j| per_round(chunks[j])),
        honest_max_copies: honest.iter().map(|&j| copies(j)).fold(0.0, f64::max),
        expected_copies: share * k as f64,
        victim_deficient: victim_short as f64 / (rounds as f64 * k as f64),
        deficient: short as f64 / (rounds as f64 * n_vns as f64),
        sent: sim.rogue().map_or(0, |s| s.sent),
    })
}
