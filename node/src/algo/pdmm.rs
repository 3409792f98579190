//! A/PDMM with subspace perturbation on the round engine (`pdmm:SIGMA_Z[:THETA[:RHO[:MU]]]`,
//! `admm:SIGMA_Z`): Yu, Li, Lopuhaä-Zwakenberg, Christensen & Heusdens, "Privacy-preserving decentralized FL
//! via PDMM/ADMM" (../shared/papers/pdmm-privacy-decentralized-fl.txt, Algorithm 1; notes-pdmm.md). The
//! numerical core with the paper's f64 checks is [`models::schemes::pdmm`]; this is the same iteration as one
//! real node runs it, over a static graph, with per-neighbour frames.
//!
//! # The iteration (paper eqs. 6–7), without identities
//! The paper's edge constraint `B_{i|j} w_i + B_{j|i} w_j = 0` signs each dual by the order of the two ids
//! (`B_{i|j} = ±I`). The RN knows no ids, only edge slots, so we run the same iteration on the **signed
//! duals** `y_{i|j} = B_{i|j} z_{i|j}` (`B_{j|i} = −B_{i|j}`), in which the sign drops out:
//!
//! ```text
//! (6)  w_i(t)      = argmin_w f_i(w) + ⟨Σ_j y_{i|j}(t), w⟩ + (ρ d_i / 2)‖w‖²
//! (7)  y_{j|i}(t+1) = (1−θ) y_{j|i}(t) − θ (y_{i|j}(t) + 2ρ w_i(t))          for every neighbour j
//! ```
//!
//! ((7) is eq. 7 multiplied by `B_{j|i}`.) θ = 1 is PDMM, θ = ½ ADMM. `y(0) = B z(0)` has the distribution of
//! `z(0)` (zero-mean Gaussian, std σ_Z per coordinate), so the privacy argument (Proposition 1, Theorem 1) is
//! unchanged: the complement-subspace part of `y(0)` never decays and masks every node's gradient.
//!
//! # What goes on the wire
//! - **Setup (round 0).** Node i draws its `y_{i|j}(0)` for every edge slot and sends it to that neighbour,
//!   which keeps it as its mirror (Algorithm 1, line 1: the initial duals travel over a secure channel; here
//!   the libp2p link, Noise-encrypted end to end). Round 0 is otherwise local training only: no dual step yet.
//! - **Round t ≥ 1.** Per edge slot one frame `Δy_{j|i}(t+1) = y_{j|i}(t+1) − y_{j|i}(t)` (Algorithm 1,
//!   line 3: the increment, **never** the dual itself: by the w-step's optimality condition (eq. 14)
//!   `∇f_i(w_i) = −Σ_j y_{i|j} − ρ d_i w_i`, so whoever knows the duals knows the gradient). The receiver adds
//!   it to its own `y_{j|i}`; the sender adds it to its mirror — the f32 value that travelled, so both ends
//!   hold bit-identical duals.
//!
//! # The w-step for a trained model
//! The engine's driver trains; the algorithm sees the trained parameters `w̃_i(t)` (local SGD from
//! `w_i(t−1)`). We read the training's displacement as a gradient step of size μ,
//! `w̃_i(t) = w_i(t−1) − μ ĝ_i`, and take the quadratic-approximation w-step (notes-pdmm.md §2, the paper's
//! DNN step "[68, 12]": f_i linearised at `w_i(t−1)` with curvature 1/μ, then (6) minimised exactly):
//!
//! ```text
//! w_i(t) = (w_i(t−1)/μ − ĝ_i − Σ_j y_{i|j}(t)) / (1/μ + ρ d_i) = (w̃_i(t) − μ Σ_j y_{i|j}(t)) / (1 + μ ρ d_i)
//! ```
//!
//! i.e. local training, then the PDMM proximal step with the dual correction. For a quadratic f_i with
//! Hessian ≼ 1/μ and one exact gradient step as the "training" this is exactly
//! [`models::schemes::PdmmNode::w_step_quadratic`]. At a fixed point with consensus `w`, summing (6)'s
//! optimality over the nodes gives `Σ_i ĝ_i(w) = 0`: the training's mean displacement vanishes, whatever μ.
//! μ (default 1) sets how strongly the duals pull per round against the local training; ρ (default 0.4, the
//! paper's) the consensus penalty.
//!
//! # Warm start (our addition, on by default)
//! With `y(0)` zero-mean, the first w-step is `w̃/(1 + μρd)`: the trained model shrunk towards 0 (by 2.6× with
//! μ = 1, ρ = 0.4, d = 4), which the duals undo only over several rounds. The paper runs hundreds of
//! iterations; a neural run of tens of rounds does not recover (measured: `results/pdmm-mnist/`). So each node
//! starts its own duals at `y_{i|j}(0) = −ρ w_i(0) + n_{i|j}`, with `w_i(0)` its model after the setup round
//! and `n` the σ_Z noise: on a consensus the dual part then cancels the shrink (`Σ_j y_{i|j} = −ρ d w`), and
//! the first w-step is a convex combination of the trained and the previous model. The limit is unchanged (it
//! does not depend on `y(0)`), and the noise, the privacy mechanism, is the paper's. The setup frame tells
//! the neighbour `w_i(0)` up to that noise — the neighbour learns every later model exactly anyway
//! (`testnet/src/pdmm_view.rs`), and an eavesdropper does not see setup frames (secure channel).
//! `warm_start: false` is the paper's zero-mean start.
//!
//! # Missing frames
//! The paper's rounds are synchronous; a Δ that does not arrive would desynchronise a dual from its mirror.
//! Each direction of an edge is therefore updated at both ends or at neither: the receiver applies what it
//! accepted, the sender applies its Δ to its mirror only if the VN reports the neighbour accepted it
//! ([`PerEdge::delivered_on_edges`]). A direction that misses a round keeps its dual (like an edge not
//! activated in asynchronous PDMM). An edge whose setup failed in either direction is left out of the
//! w-step for the run (its slot still gets a frame of zeros, so every slot has one).
//!
//! # An acceptance that comes back after the deadline
//! The receiving end is consistent: its VN accepts a frame only while its round is open and hands it to the
//! RN before that round's `Done`, so an accepted Δ is always applied. The sending end learns of acceptances
//! from its VN's `DeliveredOnEdges`, sent once when the exchange ends (all answers in, or the deadline); an
//! answer that outlasts the deadline while the frame itself arrived in time would leave neighbour j with
//! `Δy_{j|i}(t)` applied and our mirror without it — for good, since each new Δ is computed against the
//! mirror. So the VN reports such an answer afterwards (`FromVirtualNode::LateDeliveredOnEdge`, from
//! `on_chunk_reply` on a finished round), the RN hands it to [`PerEdge::late_delivered_on_edge`], and
//! PDMM, which keeps each edge's unacknowledged increments of the last [`UNACKED_KEPT`] rounds, adds that
//! one to its mirror: a mirror is the sum of the accepted increments, whatever their order, so agreement is
//! restored exactly (`a_late_acceptance_keeps_the_mirror_in_step`: bit for bit the run where the answer came
//! in time). What is not recovered: a late acceptance of the setup frame (the edge stays out of our w-step
//! while the neighbour keeps it), and an answer more than [`UNACKED_KEPT`] rounds late.

use models::schemes::PdmmConfig;
use protocol::{ChunkFrame, ChunkIndex, Round};
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{AlgoError, Algorithm, Graph, Payload, PerEdge};

/// PDMM's parameters as a run names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PdmmParams {
    /// Standard deviation σ_Z of every coordinate of the initial duals (0: no subspace perturbation).
    pub sigma_z: f64,
    /// θ ∈ (0, 1]: 1 PDMM, ½ ADMM.
    pub theta: f64,
    /// Penalty ρ > 0.
    pub rho: f64,
    /// Step μ > 0 the training's displacement is read as (see the module doc).
    pub mu: f64,
    /// Start every own dual at `−ρ w_i(0) + noise` instead of `noise` (see "Warm start" in the module doc).
    pub warm_start: bool,
}

impl PdmmParams {
    /// The paper's ρ.
    pub const DEFAULT_RHO: f64 = 0.4;
    /// Our μ: the trained displacement counts as one unit step.
    pub const DEFAULT_MU: f64 = 1.0;

    /// PDMM (θ = 1) with σ_Z, the default ρ, μ and the warm start.
    pub fn pdmm(sigma_z: f64) -> Self {
        Self {
            sigma_z,
            theta: 1.0,
            rho: Self::DEFAULT_RHO,
            mu: Self::DEFAULT_MU,
            warm_start: true,
        }
    }

    /// ADMM (θ = ½) with σ_Z and the default ρ, μ.
    pub fn admm(sigma_z: f64) -> Self {
        Self {
            theta: 0.5,
            ..Self::pdmm(sigma_z)
        }
    }

    /// Checks σ_Z ≥ 0, μ > 0, and ρ, θ as [`PdmmConfig::validate`] does.
    pub fn validate(&self) -> Result<(), AlgoError> {
        PdmmConfig {
            rho: self.rho,
            theta: self.theta,
        }
        .validate()?;
        if !(self.sigma_z.is_finite()
            && self.sigma_z >= 0.0
            && self.mu.is_finite()
            && self.mu > 0.0)
        {
            return Err(AlgoError::Other(format!(
                "PDMM needs σ_Z ≥ 0 and μ > 0 (got σ_Z = {}, μ = {})",
                self.sigma_z, self.mu
            )));
        }
        Ok(())
    }
}

/// One edge slot's duals.
#[derive(Debug, Clone)]
struct Edge {
    /// `y_{i|j}`: this node's dual on the edge (in its w-step).
    own: Vec<f64>,
    /// `y_{j|i}`: the neighbour's dual, mirrored (this node computes its updates); `None` until the
    /// neighbour's initial dual arrived.
    mirror: Option<Vec<f64>>,
    /// Setup succeeded both ways: the edge takes part in the w-step and the dual updates.
    live: bool,
    /// This round: the Δ the neighbour sent us, the Δ we sent it, and whether it accepted ours.
    received: Option<Vec<f32>>,
    sent: Option<Vec<f32>>,
    accepted: bool,
    /// Increments sent in earlier rounds whose acceptance has not been reported (yet), by round.
    unacked: Vec<(Round, Vec<f32>)>,
}

/// A/PDMM for one real node with one VN over a static graph.
pub struct Pdmm {
    name: &'static str,
    params: PdmmParams,
    /// Model length d (the one chunk every frame carries).
    d: usize,
    rng: ChaCha12Rng,
    /// Edge slots, from round 0's slot count on.
    edges: Option<Vec<Edge>>,
    /// Setup frames that arrived before this node knew its slot count (a neighbour that trained faster):
    /// at most one per slot, and slots are at most `MAX_EDGE_SLOTS`.
    early: Vec<(u32, Vec<f32>)>,
    /// This round's model after the w-step (round 0: the trained one).
    w: Vec<f64>,
    round: Round,
    /// The last round combined: a late acceptance for it or an earlier one goes to the mirror directly.
    combined: Option<Round>,
}

/// Unacknowledged increments kept per edge for a late acceptance: a late answer comes within the VN's kept
/// rounds, and more than a few rounds late it would be a lost one anyway.
const UNACKED_KEPT: usize = 4;

impl Pdmm {
    /// PDMM (`name` "pdmm" or "admm") for a model of `d` parameters; `rng` is the node's own stream (the
    /// initial duals).
    pub fn new(
        name: &'static str,
        d: usize,
        params: PdmmParams,
        rng: ChaCha12Rng,
    ) -> Result<Self, AlgoError> {
        params.validate()?;
        Ok(Self {
            name,
            params,
            d,
            rng,
            edges: None,
            early: Vec::new(),
            w: Vec::new(),
            round: Round::ZERO,
            combined: None,
        })
    }

    fn is_setup(&self) -> bool {
        self.round == Round::ZERO
    }

    fn edge(&mut self, slot: u32) -> Result<&mut Edge, AlgoError> {
        self.edges
            .as_mut()
            .and_then(|e| e.get_mut(slot as usize))
            .ok_or_else(|| AlgoError::Other(format!("PDMM: no edge slot {slot}")))
    }

    fn frame(&self, round: Round, values: Vec<f32>) -> ChunkFrame {
        ChunkFrame {
            round,
            chunk: ChunkIndex(0),
            values,
        }
    }

    /// The live edges' duals, for tests: `(y_{i|j}, y_{j|i})` per slot.
    #[doc(hidden)]
    pub fn duals(&self) -> Vec<Option<(Vec<f64>, Vec<f64>)>> {
        self.edges
            .iter()
            .flatten()
            .map(|e| {
                e.live
                    .then(|| (e.own.clone(), e.mirror.clone().unwrap_or_default()))
            })
            .collect()
    }
}

impl Algorithm for Pdmm {
    fn name(&self) -> &str {
        self.name
    }

    fn virtual_nodes(&self) -> usize {
        1
    }

    fn chunk_lens(&self) -> Vec<usize> {
        vec![self.d]
    }

    fn graph(&self) -> Graph {
        Graph::Static
    }

    fn per_edge(&mut self) -> Option<&mut dyn PerEdge> {
        Some(self)
    }

    fn begin_round(&mut self, round: Round) {
        self.round = round;
        for e in self.edges.iter_mut().flatten() {
            e.received = None;
            e.sent = None;
            e.accepted = false;
        }
    }

    /// The w-step (round ≥ 1; round 0 keeps the trained model), then per-neighbour frames.
    fn outgoing(
        &mut self,
        _round: Round,
        _step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        if params.len() != self.d {
            return Err(AlgoError::Other(format!(
                "PDMM: a model of {} parameters, not {}",
                params.len(),
                self.d
            )));
        }
        let trained = params.iter().map(|&v| v as f64);
        if self.is_setup() {
            self.w = trained.collect();
        } else {
            let PdmmParams { rho, mu, .. } = self.params;
            let live: Vec<&Edge> = self.edges.iter().flatten().filter(|e| e.live).collect();
            let denom = 1.0 + mu * rho * live.len() as f64;
            self.w = trained
                .enumerate()
                .map(|(k, wt)| (wt - mu * live.iter().map(|e| e.own[k]).sum::<f64>()) / denom)
                .collect();
        }
        Ok(vec![(0, Payload::PerNeighbour)])
    }

    fn receive(&mut self, _step: u32, _vn: usize, _frame: &ChunkFrame) -> Result<(), AlgoError> {
        Err(AlgoError::Other(
            "PDMM needs the edge slot of every copy (its VN reports slots)".into(),
        ))
    }

    /// Setup: keep the neighbours' initial duals as mirrors, and the trained model. Later: apply the
    /// increments that went through in each direction, and return w(t).
    fn combine(&mut self, round: Round, _step: u32, _local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        let setup = self.is_setup();
        for e in self.edges.iter_mut().flatten() {
            if setup {
                e.mirror = e
                    .received
                    .take()
                    .map(|v| v.into_iter().map(f64::from).collect());
                e.live = e.mirror.is_some() && e.accepted;
                continue;
            }
            if !e.live {
                continue;
            }
            if let Some(dz) = e.received.take() {
                e.own.iter_mut().zip(&dz).for_each(|(y, &d)| *y += d as f64);
            }
            match (e.sent.take(), e.accepted, e.mirror.as_mut()) {
                (Some(dz), true, Some(mirror)) => mirror
                    .iter_mut()
                    .zip(&dz)
                    .for_each(|(y, &d)| *y += d as f64),
                // Not accepted by the deadline: kept in case the acceptance comes late.
                (Some(dz), false, Some(_)) => {
                    if e.unacked.len() == UNACKED_KEPT {
                        e.unacked.remove(0);
                    }
                    e.unacked.push((round, dz));
                }
                _ => {}
            }
        }
        self.combined = Some(round);
        Ok(self.w.iter().map(|&v| v as f32).collect())
    }
}

impl PerEdge for Pdmm {
    /// Round 0: the initial duals `y_{i|j}(0)`, one per slot. Later: `Δy_{j|i}(t+1)` per slot (eq. 7).
    fn frames(
        &mut self,
        round: Round,
        _step: u32,
        vn: usize,
        edges: usize,
    ) -> Result<Vec<ChunkFrame>, AlgoError> {
        if vn != 0 {
            return Err(AlgoError::Other(format!("PDMM runs one VN, not VN {vn}")));
        }
        let d = self.d;
        if self.is_setup() {
            if self.edges.is_some() {
                return Err(AlgoError::Other("PDMM: setup ran twice".into()));
            }
            let sd = self.params.sigma_z;
            let mut new_edges = Vec::with_capacity(edges);
            let mut frames = Vec::with_capacity(edges);
            let warm = self.params.warm_start.then_some(self.params.rho);
            for _ in 0..edges {
                // Drawn in f64, kept as the f32 that travels: both ends hold the same value.
                let y0: Vec<f32> = self
                    .w
                    .iter()
                    .map(|&w| {
                        let x: f64 = StandardNormal.sample(&mut self.rng);
                        (warm.map_or(0.0, |rho| -rho * w) + sd * x) as f32
                    })
                    .collect();
                new_edges.push(Edge {
                    own: y0.iter().map(|&v| v as f64).collect(),
                    mirror: None,
                    live: false,
                    received: None,
                    sent: None,
                    accepted: false,
                    unacked: Vec::new(),
                });
                frames.push(self.frame(round, y0));
            }
            self.edges = Some(new_edges);
            for (slot, values) in std::mem::take(&mut self.early) {
                self.edge(slot)?.received = Some(values);
            }
            return Ok(frames);
        }
        let PdmmParams { rho, theta, .. } = self.params;
        let w = std::mem::take(&mut self.w);
        let known = self.edges.as_ref().map_or(0, Vec::len);
        if known != edges {
            self.w = w;
            return Err(AlgoError::Other(format!(
                "PDMM runs over a static graph of {known} edge slots, the VN reports {edges}"
            )));
        }
        let mut frames = Vec::with_capacity(edges);
        for e in self.edges.iter_mut().flatten() {
            let dz: Vec<f32> = match (&e.mirror, e.live) {
                (Some(mirror), true) => mirror
                    .iter()
                    .zip(&e.own)
                    .zip(&w)
                    .map(|((&m, &own), &wk)| {
                        let next = (1.0 - theta) * m - theta * (own + 2.0 * rho * wk);
                        (next - m) as f32
                    })
                    .collect(),
                _ => vec![0.0; d],
            };
            e.sent = e.live.then(|| dz.clone());
            frames.push(ChunkFrame {
                round,
                chunk: ChunkIndex(0),
                values: dz,
            });
        }
        self.w = w;
        Ok(frames)
    }

    fn receive_on_edge(
        &mut self,
        _step: u32,
        _vn: usize,
        slot: u32,
        frame: &ChunkFrame,
    ) -> Result<(), AlgoError> {
        let d = self.d;
        if self.edges.is_none() && self.is_setup() {
            let seen = self.early.iter().any(|(s, _)| *s == slot);
            if seen || slot as usize >= protocol::rnvn::MAX_EDGE_SLOTS || frame.values.len() != d {
                return Err(AlgoError::Other(format!(
                    "PDMM: a repeated or wrong setup frame on slot {slot}"
                )));
            }
            self.early.push((slot, frame.values.clone()));
            return Ok(());
        }
        let e = self.edge(slot)?;
        if frame.values.len() != d || e.received.is_some() {
            return Err(AlgoError::Other(format!(
                "PDMM: a repeated or wrong-length frame on slot {slot}"
            )));
        }
        e.received = Some(frame.values.clone());
        Ok(())
    }

    fn delivered_on_edges(&mut self, _step: u32, _vn: usize, accepted: &[bool]) {
        for (e, &a) in self.edges.iter_mut().flatten().zip(accepted) {
            e.accepted = a;
        }
    }

    /// The neighbour applied our Δ of `exchange` after all: before this round's combine it counts as in time;
    /// after it, the kept increment goes to the mirror now (a mirror is the sum of the accepted increments,
    /// whatever their order, so agreement is restored exactly). A late acceptance of the setup frame is not
    /// recovered: the edge stays out of our w-step while the neighbour keeps it (module doc).
    fn late_delivered_on_edge(&mut self, exchange: Round, _vn: usize, slot: u32) {
        let (combined, current) = (self.combined, self.round);
        let Some(e) = self.edges.as_mut().and_then(|es| es.get_mut(slot as usize)) else {
            return;
        };
        if combined.is_none_or(|c| c < exchange) {
            if exchange == current {
                e.accepted = true;
            }
            return;
        }
        let Some(i) = e.unacked.iter().position(|(r, _)| *r == exchange) else {
            return;
        };
        let (_, dz) = e.unacked.remove(i);
        if let (true, Some(mirror)) = (e.live, e.mirror.as_mut()) {
            mirror
                .iter_mut()
                .zip(&dz)
                .for_each(|(y, &d)| *y += d as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use models::schemes::{Graph as SchemeGraph, PdmmNetwork};
    use rand::SeedableRng;

    /// Nodes on a ring of 6, driven by hand as the engine would (every frame delivered), with
    /// f_i(w) = ½‖w − c_i‖² and the "training" one exact gradient step of size μ: the models match the
    /// reference core's (`models::schemes::PdmmNetwork`, f64, quadratic-approximation w-step) round by
    /// round after the setup round, and reach the centralised solution mean(c_i).
    fn run_ring(params: PdmmParams, rounds: u64) -> (Vec<Vec<f32>>, Vec<Vec<f64>>) {
        run_ring_late(params, rounds, None)
    }

    /// [`run_ring`], with node `late.1`'s frame on slot `late.2` in round `late.0` reported undelivered at the
    /// deadline and (with `late.3`) acknowledged late, right after that round's combine.
    fn run_ring_late(
        params: PdmmParams,
        rounds: u64,
        late: Option<(u64, usize, usize, bool)>,
    ) -> (Vec<Vec<f32>>, Vec<Vec<f64>>) {
        let n = 6;
        let d = 3;
        let centres: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..d).map(|k| ((i * 7 + k * 3) % 5) as f64 - 2.0).collect())
            .collect();
        let mut algos: Vec<Pdmm> = (0..n)
            .map(|i| Pdmm::new("pdmm", d, params, ChaCha12Rng::seed_from_u64(i as u64)).unwrap())
            .collect();
        // Ring: node i's slots are its sorted neighbours.
        let slots: Vec<Vec<usize>> = (0..n)
            .map(|i| {
                let mut s = vec![(i + 1) % n, (i + n - 1) % n];
                s.sort();
                s
            })
            .collect();
        let mut models = vec![vec![0.0f32; d]; n];
        let mut history = Vec::new();
        for t in 0..rounds {
            let round = Round(t);
            let mut frames = Vec::new();
            for (i, a) in algos.iter_mut().enumerate() {
                a.begin_round(round);
                // One gradient step of size μ on ½‖w − c_i‖² as the local training.
                let trained: Vec<f32> = models[i]
                    .iter()
                    .zip(&centres[i])
                    .map(|(&w, &c)| (w as f64 - params.mu * (w as f64 - c)) as f32)
                    .collect();
                a.outgoing(round, 0, &trained).unwrap();
                frames.push(a.frames(round, 0, 0, 2).unwrap());
            }
            for (i, a) in algos.iter_mut().enumerate() {
                for (slot, &j) in slots[i].iter().enumerate() {
                    let back = slots[j].iter().position(|&p| p == i).unwrap();
                    a.receive_on_edge(0, 0, slot as u32, &frames[j][back])
                        .unwrap();
                }
                let mut accepted = [true, true];
                let missed = late.filter(|&(lt, li, _, _)| lt == t && li == i);
                if let Some((_, _, slot, _)) = missed {
                    accepted[slot] = false;
                }
                a.delivered_on_edges(0, 0, &accepted);
                models[i] = a.combine(round, 0, &[]).unwrap();
                if let Some((_, _, slot, true)) = missed {
                    a.late_delivered_on_edge(round, 0, slot as u32);
                }
            }
            history.push(models.iter().flatten().map(|&v| v as f64).collect());
        }
        (models, history)
    }

    /// A neighbour that accepted our Δ after the deadline (the acceptance reported late): without the late
    /// report our mirror of its dual is off for good and the run ends elsewhere; with it, the run is bit for
    /// bit the one where the answer came in time.
    #[test]
    fn a_late_acceptance_keeps_the_mirror_in_step() {
        let params = PdmmParams {
            mu: 1.0,
            ..PdmmParams::pdmm(0.5)
        };
        let (in_time, _) = run_ring_late(params, 30, None);
        let (recovered, _) = run_ring_late(params, 30, Some((5, 2, 1, true)));
        let (lost, _) = run_ring_late(params, 30, Some((5, 2, 1, false)));
        assert_eq!(recovered, in_time);
        assert_ne!(lost, in_time);
    }

    #[test]
    fn on_a_ring_the_nodes_reach_the_centralised_solution_whatever_the_initial_duals() {
        let n = 6;
        let d = 3;
        let centre: Vec<f64> = (0..d)
            .map(|k| {
                (0..n)
                    .map(|i| ((i * 7 + k * 3) % 5) as f64 - 2.0)
                    .sum::<f64>()
                    / n as f64
            })
            .collect();
        for sigma_z in [0.0, 1.0] {
            let (models, _) = run_ring(
                PdmmParams {
                    mu: 1.0,
                    ..PdmmParams::pdmm(sigma_z)
                },
                200,
            );
            let err = models
                .iter()
                .flat_map(|m| m.iter().zip(&centre).map(|(&a, &b)| (a as f64 - b).abs()))
                .fold(0.0, f64::max);
            assert!(err < 1e-4, "σ_Z = {sigma_z}: max error {err}");
        }
    }

    /// With σ_Z = 0 the engine-side iteration is the reference core's, shifted by the setup round: the
    /// core's node i after round t equals ours after round t + 1.
    #[test]
    fn the_signed_dual_iteration_matches_the_reference_core() {
        let n = 6;
        let d = 3;
        // The core starts its duals at zero: the paper's start, not our warm one.
        let params = PdmmParams {
            mu: 1.0,
            warm_start: false,
            ..PdmmParams::pdmm(0.0)
        };
        let (_, ours) = run_ring(params, 12);
        let edges: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
        let graph = SchemeGraph::from_edges(n, &edges).unwrap();
        let centres: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..d).map(|k| ((i * 7 + k * 3) % 5) as f64 - 2.0).collect())
            .collect();
        let cfg = PdmmConfig::pdmm(params.rho);
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        // The core starts from w(0) = the setup round's model: one gradient step from 0.
        let w0: Vec<Vec<f64>> = centres
            .iter()
            .map(|c| c.iter().map(|&c| params.mu * c).collect())
            .collect();
        let mut net = PdmmNetwork::new(&graph, &vec![0.0; d], cfg, 0.0, &mut rng).unwrap();
        let mut prev = w0;
        for (t, row) in ours.iter().enumerate().skip(1) {
            let p = prev.clone();
            net.round(|i, node| {
                let c = &centres[i];
                let wp = &p[i];
                // The w-step of our module doc with exact gradient from w(t−1) (not the core's own w).
                node.w_step_exact(|lin, quad| {
                    Ok(wp
                        .iter()
                        .zip(c)
                        .zip(lin)
                        .map(|((&w, &c), &l)| {
                            let trained = w - params.mu * (w - c);
                            (trained - params.mu * l) / (1.0 + params.mu * quad)
                        })
                        .collect())
                })
            })
            .unwrap();
            prev = net.models();
            let theirs: Vec<f64> = prev.iter().flatten().copied().collect();
            let gap = row
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(gap < 1e-5, "round {t}: {gap}");
        }
    }
}
