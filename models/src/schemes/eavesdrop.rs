//! The PDMM paper's adversary as code: an eavesdropper that records every Δz on every edge (eq. 21) and
//! derives what Proposition 1 says it can.
//!
//! - Models: `Δz_{j|i}(t+1) = (1−θ)Δz_{j|i}(t) + θ(Δz_{i|j}(t) + 2ρ B_{i|j}(w_i(t) − w_i(t−1)))` (eq. 35,
//!   generalised from θ = 1), so the messages give every model increment; with the final models (public:
//!   Remark 1) they give every `w_i(t)` ([`Eavesdropper::reconstruct_models`]).
//! - Masked gradients (eq. 33): summing the Δz an attacker knows `z_{i|j}(t) − z_{i|j}(0)`; the w-step's
//!   optimality condition then gives `∇f_i(w_i(t)) + Σ_j B_{i|j} z_{i|j}(0)`
//!   ([`Eavesdropper::masked_gradient_exact`]; [`Eavesdropper::masked_gradient_gd`] for the one-gradient-step
//!   w-step). With σ_Z² = 0 the mask is zero and every gradient is exposed, as in centralised FL.
//! - Gradient differences of the masked gradients at two times are unmasked (Proposition 1.2): for logistic
//!   regression with one sample per node they give the sample exactly (eq. 32).

use std::collections::BTreeMap;

use super::graph::Graph;
use super::pdmm::{Message, PdmmConfig};
use crate::{ModelsError, Result};

/// Everything an eavesdropper on all links saw, round by round.
#[derive(Clone, Debug)]
pub struct Eavesdropper {
    graph: Graph,
    cfg: PdmmConfig,
    dim: usize,
    /// `log[t][(i, j)]`: the Δz i sent to j in round t (= `Δz_{j|i}(t+1)`).
    log: Vec<BTreeMap<(usize, usize), Vec<f64>>>,
}

impl Eavesdropper {
    /// An eavesdropper that knows the (public) graph, ρ, θ and the model dimension.
    pub fn new(graph: Graph, cfg: PdmmConfig, dim: usize) -> Self {
        Self {
            graph,
            cfg,
            dim,
            log: Vec::new(),
        }
    }

    /// Records one round's messages (every directed edge exactly once).
    pub fn observe(&mut self, msgs: &[Message]) -> Result<()> {
        let t = self.log.len() as u64;
        let mut round = BTreeMap::new();
        for m in msgs {
            if m.round != t || m.dz.len() != self.dim || !self.graph.has_edge(m.from, m.to) {
                return Err(ModelsError::Config(format!(
                    "eavesdropper expected round {t} messages on graph edges, got {m:?}"
                )));
            }
            round.insert((m.from, m.to), m.dz.clone());
        }
        if round.len() != 2 * self.graph.num_edges() {
            return Err(ModelsError::Config(format!(
                "round {t}: {} messages for {} directed edges",
                round.len(),
                2 * self.graph.num_edges()
            )));
        }
        self.log.push(round);
        Ok(())
    }

    /// Rounds observed.
    pub fn rounds(&self) -> usize {
        self.log.len()
    }

    fn sign(i: usize, j: usize) -> f64 {
        if i < j { 1.0 } else { -1.0 }
    }

    /// Every node's model after every observed round's w-step, `[t][i]` for t in `0..rounds`, from the
    /// messages (eq. 35) and the models after the last round.
    // Index loops mirror the equations (node i, neighbour j, round t, coordinate k).
    #[allow(clippy::needless_range_loop)]
    pub fn reconstruct_models(&self, final_models: &[Vec<f64>]) -> Result<Vec<Vec<Vec<f64>>>> {
        let (n, rounds) = (self.graph.n(), self.log.len());
        if final_models.len() != n || rounds == 0 {
            return Err(ModelsError::Config(
                "need one final model per node and ≥ 1 round".into(),
            ));
        }
        let (rho, theta) = (self.cfg.rho, self.cfg.theta);
        let mut out = vec![final_models.to_vec(); rounds];
        for t in (1..rounds).rev() {
            for i in 0..n {
                let nb = self.graph.neighbours(i);
                let mut inc = vec![0.0; self.dim];
                for &j in nb {
                    let now = &self.log[t][&(i, j)];
                    let before = &self.log[t - 1][&(i, j)];
                    let from_j = &self.log[t - 1][&(j, i)];
                    for k in 0..self.dim {
                        inc[k] += Self::sign(i, j)
                            * (now[k] - (1.0 - theta) * before[k] - theta * from_j[k])
                            / (2.0 * rho * theta);
                    }
                }
                let d = nb.len().max(1) as f64;
                let next = out[t][i].clone();
                out[t - 1][i] = next.iter().zip(&inc).map(|(w, x)| w - x / d).collect();
            }
        }
        Ok(out)
    }

    /// `z_{i|j}(t) − z_{i|j}(0)`: the sum of the Δz j sent to i in rounds `0..t`.
    pub fn dual_increment(&self, i: usize, j: usize, t: usize) -> Vec<f64> {
        let mut z = vec![0.0; self.dim];
        for round in &self.log[..t] {
            if let Some(dz) = round.get(&(j, i)) {
                z.iter_mut().zip(dz).for_each(|(a, b)| *a += b);
            }
        }
        z
    }

    fn masked_linear(&self, i: usize, t: usize) -> Vec<f64> {
        let mut l = vec![0.0; self.dim];
        for &j in self.graph.neighbours(i) {
            let z = self.dual_increment(i, j, t);
            l.iter_mut()
                .zip(&z)
                .for_each(|(a, b)| *a += Self::sign(i, j) * b);
        }
        l
    }

    /// Exact w-step (eq. 33): `−Σ_j B_{i|j}(z_{i|j}(t) − z_{i|j}(0)) − ρ d_i w_i(t)`
    /// `= ∇f_i(w_i(t)) + Σ_j B_{i|j} z_{i|j}(0)`: the gradient at round t, masked by the initial duals.
    pub fn masked_gradient_exact(&self, i: usize, t: usize, w_it: &[f64]) -> Vec<f64> {
        let q = self.cfg.rho * self.graph.degree(i) as f64;
        self.masked_linear(i, t)
            .iter()
            .zip(w_it)
            .map(|(l, w)| -l - q * w)
            .collect()
    }

    /// One-gradient-step w-step `w(t) = w(t−1) − μ(∇f_i(w(t−1)) + Σ_j B z(t) + ρ d_i w(t−1))`:
    /// `(w(t−1) − w(t))/μ − Σ_j B_{i|j}(z_{i|j}(t) − z_{i|j}(0)) − ρ d_i w(t−1)`
    /// `= ∇f_i(w_i(t−1)) + Σ_j B_{i|j} z_{i|j}(0)`.
    pub fn masked_gradient_gd(
        &self,
        i: usize,
        t: usize,
        w_prev: &[f64],
        w_t: &[f64],
        mu: f64,
    ) -> Vec<f64> {
        let q = self.cfg.rho * self.graph.degree(i) as f64;
        self.masked_linear(i, t)
            .iter()
            .zip(w_prev.iter().zip(w_t))
            .map(|(l, (wp, wt))| (wp - wt) / mu - l - q * wp)
            .collect()
    }
}
