//! A/PDMM decentralised learning with subspace perturbation: Yu, Li, Lopuhaä-Zwakenberg, Christensen &
//! Heusdens, "Privacy-preserving decentralized FL via PDMM/ADMM" (PDMM paper), §IV, Algorithm 1.
//!
//! The problem (eq. 5) is `min Σ_i f_i(w_i)` subject to `B_{i|j} w_i + B_{j|i} w_j = 0` on every edge, with
//! `B_{i|j} = +I` if i < j and `−I` otherwise (here: the sign ±1, ids totally ordered and agreed by both
//! ends). Node i keeps, per neighbour j, the dual `z_{i|j}` (used in its own w-step) and a mirror of
//! `z_{j|i}` (the neighbour's, which i computes). Per iteration t (eqs. 6–7):
//!
//! ```text
//! w_i(t)     = argmin_w f_i(w) + ⟨Σ_j B_{i|j} z_{i|j}(t), w⟩ + (ρ d_i / 2)‖w‖²
//! z_{j|i}(t+1) = (1−θ) z_{j|i}(t) + θ (z_{i|j}(t) + 2ρ B_{i|j} w_i(t))      for every neighbour j
//! ```
//!
//! θ = 1 is PDMM, θ = ½ is ADMM (averaged PDMM; the paper calls them Douglas-/Peaceman–Rachford the other way
//! round, we go by θ). Messages are `Δz_{j|i}(t+1) = z_{j|i}(t+1) − z_{j|i}(t)`, one per neighbour per
//! iteration, **never z itself**: by the w-step's optimality condition (eq. 14)
//! `∇f_i(w_i) = −Σ_j B_{i|j} z_{i|j} − ρ d_i w_i`, so whoever knows z knows the gradient. The privacy comes
//! from the initial duals: every `z_{i|j}(0)` is drawn with variance σ_Z² (Gaussian here; the paper fixes only
//! the variance) and handed to j over a secure channel once ([`PdmmNode::initial_duals`]). An eavesdropper on
//! all Δz then learns every gradient *plus* `Σ_j B_{i|j} z_{i|j}(0)`, a constant mask (Proposition 1.1), but
//! gradient *differences* over time are unmasked (Proposition 1.2): see [`super::eavesdrop`].
//!
//! The w-step is given by the caller: exact ([`PdmmNode::w_step_exact`], closed form for least squares via
//! [`super::objective::LeastSquares::prox`]), one gradient step ([`PdmmNode::w_step_gradient`], the paper's
//! logistic regression), the quadratic-approximation step ([`PdmmNode::w_step_quadratic`], our reading of the
//! paper's DNN step) or K local SGD steps on the augmented objective ([`PdmmNode::w_step_local_sgd`]).
//!
//! Rounds are synchronous (Algorithm 1): `w_step_*` → [`PdmmNode::messages`] → [`PdmmNode::receive`] from
//! every neighbour (tagged with the round; a message for another round is refused, the engine buffers) →
//! [`PdmmNode::finish_round`]. A missing Δz cannot be skipped: z would desynchronise. The graph is static;
//! PDMM's convergence and privacy argument assume that (notes-pdmm.md §5).
//! [`PdmmNetwork`] drives a whole network in memory.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::graph::Graph;
use crate::{ModelsError, Result};

/// ρ and θ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PdmmConfig {
    /// Penalty ρ > 0 (the paper's experiments use 0.4).
    pub rho: f64,
    /// Averaging θ ∈ (0, 1]: 1 = PDMM, ½ = ADMM.
    pub theta: f64,
}

impl PdmmConfig {
    /// PDMM (θ = 1).
    pub fn pdmm(rho: f64) -> Self {
        Self { rho, theta: 1.0 }
    }

    /// ADMM (θ = ½).
    pub fn admm(rho: f64) -> Self {
        Self { rho, theta: 0.5 }
    }

    /// Checks ρ > 0 and θ ∈ (0, 1].
    pub fn validate(&self) -> Result<()> {
        if !(self.rho > 0.0 && self.rho.is_finite() && self.theta > 0.0 && self.theta <= 1.0) {
            return Err(ModelsError::Config(format!(
                "PDMM needs ρ > 0 and θ in (0, 1] (got ρ = {}, θ = {})",
                self.rho, self.theta
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct EdgeState<Id> {
    peer: Id,
    /// `B_{i|j}`: +1 if own id < peer, else −1.
    sign: f64,
    /// `z_{i|j}`: this node's dual for the edge.
    z: Vec<f64>,
    /// `z_{j|i}`: mirror of the neighbour's dual (this node computes its updates).
    z_peer: Vec<f64>,
    /// Whether the neighbour's `z_{i|j}(0)`… i.e. our mirror's initial value arrived.
    peer_initialised: bool,
    /// `Δz_{i|j}` received for the current round, applied in [`PdmmNode::finish_round`].
    pending: Option<Vec<f64>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Initial duals not yet drawn / received.
    Setup,
    /// Ready for the w-step of the current round.
    WStep,
    /// w-step done; messages not yet produced.
    Send,
    /// Messages produced; waiting for every neighbour's Δz.
    Receive,
}

/// One node's PDMM state (static neighbourhood). `Id` is whatever names nodes (an index, a peer id); both
/// ends of an edge must order the two ids the same way.
#[derive(Clone, Debug)]
pub struct PdmmNode<Id> {
    id: Id,
    cfg: PdmmConfig,
    edges: Vec<EdgeState<Id>>,
    w: Vec<f64>,
    own_drawn: bool,
    phase: Phase,
    round: u64,
}

impl<Id: Ord + Clone + std::fmt::Debug> PdmmNode<Id> {
    /// A node with the given neighbours (distinct, not itself) and initial model `w0`.
    pub fn new(id: Id, mut neighbours: Vec<Id>, w0: Vec<f64>, cfg: PdmmConfig) -> Result<Self> {
        cfg.validate()?;
        neighbours.sort();
        if neighbours.windows(2).any(|w| w[0] == w[1]) || neighbours.contains(&id) {
            return Err(ModelsError::Config(format!(
                "PDMM node {id:?}: neighbours must be distinct and exclude the node itself"
            )));
        }
        let dim = w0.len();
        let edges = neighbours
            .into_iter()
            .map(|peer| EdgeState {
                sign: if id < peer { 1.0 } else { -1.0 },
                peer,
                z: vec![0.0; dim],
                z_peer: vec![0.0; dim],
                peer_initialised: false,
                pending: None,
            })
            .collect();
        Ok(Self {
            id,
            cfg,
            edges,
            w: w0,
            own_drawn: false,
            phase: Phase::Setup,
            round: 0,
        })
    }

    /// Setup, step 1: draws every `z_{i|j}(0)` i.i.d. N(0, σ_Z²) per coordinate and returns them, one per
    /// neighbour, to be sent **over a secure channel** (Algorithm 1, line 1). σ_Z² = 0 gives zeros.
    pub fn initial_duals<R: Rng + ?Sized>(
        &mut self,
        sigma_z2: f64,
        rng: &mut R,
    ) -> Result<Vec<(Id, Vec<f64>)>> {
        if !(sigma_z2 >= 0.0 && sigma_z2.is_finite()) || self.own_drawn {
            return Err(ModelsError::Config(format!(
                "PDMM node {:?}: initial duals drawn twice or σ_Z² = {sigma_z2} invalid",
                self.id
            )));
        }
        let sd = sigma_z2.sqrt();
        let mut out = Vec::with_capacity(self.edges.len());
        for e in &mut self.edges {
            for z in &mut e.z {
                let x: f64 = StandardNormal.sample(rng);
                *z = sd * x;
            }
            out.push((e.peer.clone(), e.z.clone()));
        }
        self.own_drawn = true;
        self.maybe_ready();
        Ok(out)
    }

    /// Setup, step 2: the neighbour `from` sent its `z_{from|self}(0)`; keep it as the mirror.
    pub fn set_peer_initial(&mut self, from: &Id, z0: &[f64]) -> Result<()> {
        let dim = self.w.len();
        let id = self.id.clone();
        let e = self.edge_mut(from)?;
        if e.peer_initialised || z0.len() != dim || z0.iter().any(|x| !x.is_finite()) {
            return Err(ModelsError::Config(format!(
                "PDMM node {id:?}: bad or repeated initial dual from {from:?}"
            )));
        }
        e.z_peer.copy_from_slice(z0);
        e.peer_initialised = true;
        self.maybe_ready();
        Ok(())
    }

    fn maybe_ready(&mut self) {
        if self.phase == Phase::Setup
            && self.own_drawn
            && self.edges.iter().all(|e| e.peer_initialised)
        {
            self.phase = Phase::WStep;
        }
    }

    fn edge_mut(&mut self, peer: &Id) -> Result<&mut EdgeState<Id>> {
        match self.edges.binary_search_by(|e| e.peer.cmp(peer)) {
            Ok(k) => Ok(&mut self.edges[k]),
            Err(_) => Err(ModelsError::Config(format!(
                "PDMM node {:?}: {peer:?} is not a neighbour",
                self.id
            ))),
        }
    }

    fn expect(&self, phase: Phase, what: &str) -> Result<()> {
        if self.phase != phase {
            return Err(ModelsError::Config(format!(
                "PDMM node {:?}, round {}: {what} in phase {:?}",
                self.id, self.round, self.phase
            )));
        }
        Ok(())
    }

    /// `Σ_j B_{i|j} z_{i|j}(t)`, the linear term of the w-step.
    pub fn linear_term(&self) -> Vec<f64> {
        let mut l = vec![0.0; self.w.len()];
        for e in &self.edges {
            for (a, z) in l.iter_mut().zip(&e.z) {
                *a += e.sign * z;
            }
        }
        l
    }

    /// `ρ d_i`, the quadratic coefficient of the w-step.
    pub fn quadratic_term(&self) -> f64 {
        self.cfg.rho * self.edges.len() as f64
    }

    fn set_w(&mut self, w: Vec<f64>) -> Result<()> {
        if w.len() != self.w.len() || w.iter().any(|x| !x.is_finite()) {
            return Err(ModelsError::Config(format!(
                "PDMM node {:?}: w-step returned {} values (expected {}) or a non-finite one",
                self.id,
                w.len(),
                self.w.len()
            )));
        }
        self.w = w;
        self.phase = Phase::Send;
        Ok(())
    }

    /// Exact w-step: `solve(lin, quad)` must return `argmin_w f_i(w) + ⟨lin, w⟩ + (quad/2)‖w‖²`.
    pub fn w_step_exact<F>(&mut self, solve: F) -> Result<()>
    where
        F: FnOnce(&[f64], f64) -> Result<Vec<f64>>,
    {
        self.expect(Phase::WStep, "w-step")?;
        let w = solve(&self.linear_term(), self.quadratic_term())?;
        self.set_w(w)
    }

    /// One gradient step on the augmented objective from the previous model (the paper's logistic regression,
    /// "single-step gradient descent"): `w ← w − μ(∇f_i(w) + lin + quad·w)`.
    pub fn w_step_gradient<F>(&mut self, mu: f64, mut grad: F) -> Result<()>
    where
        F: FnMut(&[f64]) -> Vec<f64>,
    {
        self.w_step_local_sgd(1, mu, |w, _| grad(w))
    }

    /// `steps` local (stochastic) gradient steps on the augmented objective, from the previous model:
    /// `w ← w − lr(g_k(w) + lin + quad·w)`, `g_k = grad(w, k)` the k-th (mini-batch) gradient of f_i.
    pub fn w_step_local_sgd<F>(&mut self, steps: usize, lr: f64, mut grad: F) -> Result<()>
    where
        F: FnMut(&[f64], usize) -> Vec<f64>,
    {
        self.expect(Phase::WStep, "w-step")?;
        let lin = self.linear_term();
        let quad = self.quadratic_term();
        let mut w = self.w.clone();
        for k in 0..steps {
            let g = grad(&w, k);
            if g.len() != w.len() {
                return Err(ModelsError::Config(format!(
                    "gradient has {} values, model {}",
                    g.len(),
                    w.len()
                )));
            }
            for ((wi, gi), li) in w.iter_mut().zip(&g).zip(&lin) {
                *wi -= lr * (gi + li + quad * *wi);
            }
        }
        self.set_w(w)
    }

    /// Quadratic-approximation step (f_i linearised at the previous model with curvature 1/μ, then the
    /// augmented objective minimised exactly): `w ← (w/μ − ∇f_i(w) − lin)/(1/μ + quad)`. Our reading of the
    /// DNN step the paper cites (notes-pdmm.md §2, [INF]).
    pub fn w_step_quadratic<F>(&mut self, mu: f64, grad: F) -> Result<()>
    where
        F: FnOnce(&[f64]) -> Vec<f64>,
    {
        self.expect(Phase::WStep, "w-step")?;
        let lin = self.linear_term();
        let quad = self.quadratic_term();
        let g = grad(&self.w);
        if g.len() != self.w.len() {
            return Err(ModelsError::Config("gradient has the wrong length".into()));
        }
        let w = self
            .w
            .iter()
            .zip(&g)
            .zip(&lin)
            .map(|((wi, gi), li)| (wi / mu - gi - li) / (1.0 / mu + quad))
            .collect();
        self.set_w(w)
    }

    /// After the w-step: computes `z_{j|i}(t+1)` for every neighbour, updates the mirrors and returns the
    /// messages `(j, Δz_{j|i}(t+1))` (eq. 7, Algorithm 1).
    pub fn messages(&mut self) -> Result<Vec<(Id, Vec<f64>)>> {
        self.expect(Phase::Send, "messages")?;
        let (rho, theta) = (self.cfg.rho, self.cfg.theta);
        let mut out = Vec::with_capacity(self.edges.len());
        for e in &mut self.edges {
            let dz: Vec<f64> = e
                .z_peer
                .iter_mut()
                .zip(&e.z)
                .zip(&self.w)
                .map(|((zp, z), w)| {
                    let next = (1.0 - theta) * *zp + theta * (z + 2.0 * rho * e.sign * w);
                    let d = next - *zp;
                    *zp = next;
                    d
                })
                .collect();
            out.push((e.peer.clone(), dz));
        }
        self.phase = Phase::Receive;
        Ok(out)
    }

    /// A neighbour's `Δz_{self|from}` for `round`. Refused (state unchanged) when `from` is not a neighbour,
    /// the round is not the current one, one already arrived from `from` this round, or the vector has the
    /// wrong length or a non-finite value. May arrive before this node's own w-step: it is applied in
    /// [`PdmmNode::finish_round`].
    pub fn receive(&mut self, round: u64, from: &Id, dz: &[f64]) -> Result<()> {
        let (id, cur, dim) = (self.id.clone(), self.round, self.w.len());
        if self.phase == Phase::Setup || round != cur {
            return Err(ModelsError::Config(format!(
                "PDMM node {id:?}: Δz for round {round} from {from:?} while in round {cur} ({:?})",
                self.phase
            )));
        }
        let e = self.edge_mut(from)?;
        if e.pending.is_some() || dz.len() != dim || dz.iter().any(|x| !x.is_finite()) {
            return Err(ModelsError::Config(format!(
                "PDMM node {id:?}: repeated, wrong-length or non-finite Δz from {from:?}"
            )));
        }
        e.pending = Some(dz.to_vec());
        Ok(())
    }

    /// Whether every neighbour's Δz for the current round arrived.
    pub fn all_received(&self) -> bool {
        self.edges.iter().all(|e| e.pending.is_some())
    }

    /// Applies the received Δz (`z_{i|j}(t+1) = z_{i|j}(t) + Δz`) and moves to the next round. Needs this
    /// node's messages sent and every neighbour's Δz received.
    pub fn finish_round(&mut self) -> Result<()> {
        self.expect(Phase::Receive, "finish_round")?;
        if !self.all_received() {
            return Err(ModelsError::Config(format!(
                "PDMM node {:?}: round {} finished before every neighbour's Δz arrived",
                self.id, self.round
            )));
        }
        for e in &mut self.edges {
            if let Some(dz) = e.pending.take() {
                e.z.iter_mut().zip(&dz).for_each(|(z, d)| *z += d);
            }
        }
        self.round += 1;
        self.phase = Phase::WStep;
        Ok(())
    }

    /// The node's id.
    pub fn id(&self) -> &Id {
        &self.id
    }

    /// The current local model `w_i` (after the latest w-step).
    pub fn w(&self) -> &[f64] {
        &self.w
    }

    /// The current round t.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Degree `d_i`.
    pub fn degree(&self) -> usize {
        self.edges.len()
    }

    /// Neighbour ids, ascending.
    pub fn neighbours(&self) -> impl Iterator<Item = &Id> {
        self.edges.iter().map(|e| &e.peer)
    }

    /// `z_{i|j}` for neighbour j (for tests and audits; never put on the wire).
    pub fn dual(&self, peer: &Id) -> Option<&[f64]> {
        self.edges
            .binary_search_by(|e| e.peer.cmp(peer))
            .ok()
            .map(|k| self.edges[k].z.as_slice())
    }

    /// `B_{i|j}` (±1) for neighbour j.
    pub fn sign(&self, peer: &Id) -> Option<f64> {
        self.edges
            .binary_search_by(|e| e.peer.cmp(peer))
            .ok()
            .map(|k| self.edges[k].sign)
    }
}

/// One Δz on the wire, as an eavesdropper sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// Iteration t whose w-step produced it (it carries `Δz(t+1)`).
    pub round: u64,
    /// Sender i.
    pub from: usize,
    /// Receiver j.
    pub to: usize,
    /// `Δz_{j|i}(t+1)`.
    pub dz: Vec<f64>,
}

/// A whole PDMM network in memory: nodes `0..n` on a static [`Graph`], synchronous rounds.
#[derive(Clone, Debug)]
pub struct PdmmNetwork {
    nodes: Vec<PdmmNode<usize>>,
}

impl PdmmNetwork {
    /// Builds the nodes (all starting from `w0`) and runs the setup: every node draws its initial duals with
    /// variance σ_Z² (nodes in order, from `rng`) and hands them to its neighbours.
    pub fn new<R: Rng + ?Sized>(
        graph: &Graph,
        w0: &[f64],
        cfg: PdmmConfig,
        sigma_z2: f64,
        rng: &mut R,
    ) -> Result<Self> {
        let mut nodes: Vec<PdmmNode<usize>> = (0..graph.n())
            .map(|i| PdmmNode::new(i, graph.neighbours(i).to_vec(), w0.to_vec(), cfg))
            .collect::<Result<_>>()?;
        let mut handed = Vec::new();
        for (i, node) in nodes.iter_mut().enumerate() {
            for (j, z0) in node.initial_duals(sigma_z2, rng)? {
                handed.push((i, j, z0));
            }
        }
        for (i, j, z0) in handed {
            nodes[j].set_peer_initial(&i, &z0)?;
        }
        Ok(Self { nodes })
    }

    /// One synchronous round: `w_step(i, node)` runs node i's w-step (call one of the `w_step_*` methods),
    /// then every node sends its Δz and finishes the round. Returns every message of the round.
    pub fn round<F>(&mut self, mut w_step: F) -> Result<Vec<Message>>
    where
        F: FnMut(usize, &mut PdmmNode<usize>) -> Result<()>,
    {
        let mut msgs = Vec::new();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let round = node.round();
            w_step(i, node)?;
            for (to, dz) in node.messages()? {
                msgs.push(Message {
                    round,
                    from: i,
                    to,
                    dz,
                });
            }
        }
        for m in &msgs {
            self.nodes[m.to].receive(m.round, &m.from, &m.dz)?;
        }
        for node in &mut self.nodes {
            node.finish_round()?;
        }
        Ok(msgs)
    }

    /// The nodes.
    pub fn nodes(&self) -> &[PdmmNode<usize>] {
        &self.nodes
    }

    /// Every node's current model.
    pub fn models(&self) -> Vec<Vec<f64>> {
        self.nodes.iter().map(|n| n.w().to_vec()).collect()
    }

    /// `max_i ‖w_i − target‖`.
    pub fn max_error(&self, target: &[f64]) -> f64 {
        self.nodes
            .iter()
            .map(|n| super::linalg::dist(n.w(), target))
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests;
