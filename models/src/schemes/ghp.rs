//! Graph-homomorphic perturbations (GHP): Vlaski & Sayed (ICASSP 2021), as used by Rizk, Vlaski & Sayed,
//! "Privatized Graph Federated Learning" (GFL paper), §III-C.
//!
//! Each round every node p holds an intermediate model ψ_p (after local training) and draws one Laplace
//! vector `g_p ~ Lap(0, σ/√2)` per coordinate (variance σ², eq. 47; fresh every round). It sends the **same**
//! `ψ_p + g_p` to every neighbour, and perturbs its own term by
//! `g_pp = −(Σ_{m≠p} a_mp / a_pp)·g_p` (eq. 47 prints `−((1 − a_pp)/a_pp)·g_p`, equal when column p sums to 1).
//! The combination (eq. 8) is `w_p = Σ_m a_pm·(ψ_m + g_pm)`. Summed over the network, the noise is
//! `Σ_m g_m·(Σ_{p≠m} a_pm − Σ_{p≠m} a_pm) = 0` (eq. 46): the network average of the combined models equals
//! the noiseless average exactly (up to rounding), so the centroid recursion carries no noise, while every
//! single message is masked by Laplace noise of variance σ² — the Definition 1 / Theorem 2 guarantee, see
//! [`super::accountant`]. On an r-regular graph with uniform weights, `a_pp = 1/(r+1)` and the
//! self-correction is `−r·g_p`.
//!
//! [`Perturbation::Random`] is the paper's "random perturbations" baseline (§V): the same broadcast
//! `ψ_p + g_p` without the self-correction, so neighbours see identically distributed messages (same DP
//! guarantee) but the noise reaches the centroid with per-coordinate variance `σ²/P²·Σ_m (1 − a_mm)²`
//! (`σ²(r/(r+1))²/P` on an r-regular graph with uniform weights). [`Perturbation::None`] is non-private
//! GFL / diffusion (σ = 0).
//!
//! API for one node and one round (what the engine calls): [`perturb`] gives the broadcast message and the
//! node's own corrected term; [`combine`] forms `w_p` from the own term and the received messages with the
//! weights of [`super::graph::CombinationMatrix`] (or any weights the sender knows — the correction uses the
//! sender's *column*, i.e. the weights its receivers apply to it). [`network_round`] runs one round for a
//! whole simulated network.

use rand::Rng;
use rand_distr::{Distribution, Exp1};

use super::graph::CombinationMatrix;
use super::scalar::Scalar;
use crate::{ModelsError, Result};

/// Which noise a node adds to the models it shares (`--algo ghp:SIGMA`, `random:SIGMA`; σ = 0 or
/// [`Perturbation::None`] is non-private).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Perturbation {
    /// No noise (non-private diffusion / GFL, eqs. 3–5).
    None,
    /// Graph-homomorphic perturbations with Laplace noise of standard deviation `sigma` (variance σ²).
    Ghp { sigma: f64 },
    /// Independent Laplace noise of standard deviation `sigma` on the broadcast, no self-correction.
    Random { sigma: f64 },
}

impl Perturbation {
    /// Parses `none`, `ghp:SIGMA` or `random:SIGMA`, where SIGMA is the noise **standard deviation** σ (the
    /// paper's sweeps name the variance σ²: `ghp:0.316` is σ² = 0.1). σ must be finite and ≥ 0.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            ModelsError::Config(format!(
                "perturbation '{s}': expected none, ghp:SIGMA or random:SIGMA with SIGMA ≥ 0"
            ))
        };
        if s == "none" {
            return Ok(Self::None);
        }
        let (kind, sigma) = s.split_once(':').ok_or_else(bad)?;
        let sigma: f64 = sigma.parse().map_err(|_| bad())?;
        if !(sigma.is_finite() && sigma >= 0.0) {
            return Err(bad());
        }
        match kind {
            "ghp" => Ok(Self::Ghp { sigma }),
            "random" => Ok(Self::Random { sigma }),
            _ => Err(bad()),
        }
    }

    /// The noise standard deviation σ (0 for [`Perturbation::None`]).
    pub fn sigma(&self) -> f64 {
        match *self {
            Self::None => 0.0,
            Self::Ghp { sigma } | Self::Random { sigma } => sigma,
        }
    }
}

/// What a sender must know about the weights applied to its own message: its column of A.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SenderWeights {
    /// `a_pp`, the weight the node gives its own term (> 0).
    pub own: f64,
    /// `Σ_{m≠p} a_mp`, the total weight its receivers give its message (`1 − a_pp` when the column sums to 1).
    pub out_sum: f64,
}

impl SenderWeights {
    /// Uniform weights on an r-regular graph: `a_pp = 1/(r+1)`, `out_sum = r/(r+1)`.
    pub fn uniform_regular(r: usize) -> Self {
        let w = 1.0 / (r as f64 + 1.0);
        Self {
            own: w,
            out_sum: r as f64 * w,
        }
    }

    /// Node p's column of `a`.
    pub fn of(a: &CombinationMatrix, p: usize) -> Self {
        Self {
            own: a.own_weight(p),
            out_sum: a.out_weight_sum(p),
        }
    }

    /// The factor on `g_p` in the own term: `g_pp = −(out_sum/own)·g_p` (eq. 47).
    pub fn self_correction(&self) -> f64 {
        -self.out_sum / self.own
    }
}

/// One node's output for one round.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeMessages<T> {
    /// `ψ_p + g_p`: sent, identical, to every neighbour.
    pub broadcast: Vec<T>,
    /// `ψ_p + g_pp`: the node's own term, weighted by `a_pp` in [`combine`]. Never sent.
    pub own: Vec<T>,
}

/// `dim` i.i.d. Laplace draws of variance σ² (scale `b = σ/√2`), as a difference of two unit exponentials
/// times b (no edge case at the ends of the uniform's range).
pub fn laplace_noise<R: Rng + ?Sized>(dim: usize, sigma: f64, rng: &mut R) -> Vec<f64> {
    let b = sigma / std::f64::consts::SQRT_2;
    (0..dim)
        .map(|_| {
            let e1: f64 = Exp1.sample(rng);
            let e2: f64 = Exp1.sample(rng);
            b * (e1 - e2)
        })
        .collect()
}

/// One node's messages for one round: draws `g_p` (nothing for [`Perturbation::None`] or σ = 0, so the RNG
/// stream is untouched) and returns the broadcast `ψ_p + g_p` and the own term `ψ_p + g_pp`
/// (GHP: `g_pp = −(Σ_{m≠p} a_mp/a_pp)·g_p`; random: `g_pp = 0`).
pub fn perturb<T: Scalar, R: Rng + ?Sized>(
    psi: &[T],
    mode: Perturbation,
    weights: SenderWeights,
    rng: &mut R,
) -> Result<NodeMessages<T>> {
    let sigma = mode.sigma();
    if !(sigma.is_finite() && sigma >= 0.0) {
        return Err(ModelsError::Config(format!(
            "noise σ = {sigma} must be finite and ≥ 0"
        )));
    }
    if mode == Perturbation::None || sigma == 0.0 {
        return Ok(NodeMessages {
            broadcast: psi.to_vec(),
            own: psi.to_vec(),
        });
    }
    let g = laplace_noise(psi.len(), sigma, rng);
    let broadcast = psi
        .iter()
        .zip(&g)
        .map(|(&x, &n)| T::from_f64(x.to_f64() + n))
        .collect();
    let own = match mode {
        Perturbation::Ghp { .. } => {
            if !(weights.own > 0.0 && weights.own.is_finite() && weights.out_sum.is_finite()) {
                return Err(ModelsError::Config(format!(
                    "GHP needs a positive self-weight (got a_pp = {}, Σ a_mp = {})",
                    weights.own, weights.out_sum
                )));
            }
            let c = weights.self_correction();
            psi.iter()
                .zip(&g)
                .map(|(&x, &n)| T::from_f64(x.to_f64() + c * n))
                .collect()
        }
        _ => psi.to_vec(),
    };
    Ok(NodeMessages { broadcast, own })
}

/// The combination step (eq. 8): `w_p = a_pp·own + Σ_m a_pm·received_m`. Every received vector must have
/// the own term's length and be finite.
pub fn combine<'a, T: Scalar>(
    own_weight: f64,
    own: &[T],
    received: impl IntoIterator<Item = (f64, &'a [T])>,
) -> Result<Vec<T>> {
    let mut acc: Vec<f64> = own.iter().map(|&x| own_weight * x.to_f64()).collect();
    for (k, (w, msg)) in received.into_iter().enumerate() {
        if msg.len() != own.len() {
            return Err(ModelsError::Config(format!(
                "received message {k} has {} values, expected {}",
                msg.len(),
                own.len()
            )));
        }
        if let Some(pos) = msg.iter().position(|x| !x.is_finite_value()) {
            return Err(ModelsError::Config(format!(
                "received message {k} holds a non-finite value at position {pos}"
            )));
        }
        for (a, &x) in acc.iter_mut().zip(msg) {
            *a += w * x.to_f64();
        }
    }
    Ok(acc.into_iter().map(T::from_f64).collect())
}

/// One round for a whole simulated network: every node perturbs its ψ (nodes in order, one RNG), sends
/// along the edges of `a` (every nonzero off-diagonal `a_pm`), and combines. Returns the new models.
pub fn network_round<T: Scalar, R: Rng + ?Sized>(
    psis: &[Vec<T>],
    a: &CombinationMatrix,
    mode: Perturbation,
    rng: &mut R,
) -> Result<Vec<Vec<T>>> {
    let n = a.n();
    if psis.len() != n {
        return Err(ModelsError::Config(format!(
            "{} models for a {n}-node combination matrix",
            psis.len()
        )));
    }
    let msgs: Vec<NodeMessages<T>> = psis
        .iter()
        .enumerate()
        .map(|(p, psi)| perturb(psi, mode, SenderWeights::of(a, p), rng))
        .collect::<Result<_>>()?;
    (0..n)
        .map(|p| {
            let received = (0..n)
                .filter(|&m| m != p && a.weight(p, m) != 0.0)
                .map(|m| (a.weight(p, m), msgs[m].broadcast.as_slice()));
            combine(a.own_weight(p), &msgs[p].own, received)
        })
        .collect()
}

/// Network average of a set of models (the centroid `w_c = (1/P) Σ_p w_p`, eq. 15), in `f64`.
pub fn centroid<T: Scalar>(models: &[Vec<T>]) -> Vec<f64> {
    let dim = models.first().map_or(0, Vec::len);
    let mut c = vec![0.0; dim];
    for m in models {
        for (a, &x) in c.iter_mut().zip(m) {
            *a += x.to_f64();
        }
    }
    let p = models.len().max(1) as f64;
    c.iter_mut().for_each(|x| *x /= p);
    c
}

#[cfg(test)]
mod tests;
