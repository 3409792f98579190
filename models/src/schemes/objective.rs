//! Local losses with the pieces the schemes need: gradients for every w-step, and the exact proximal step of
//! a quadratic for PDMM's closed-form w-step.
//!
//! - [`LeastSquares`]: `f(w) = ½‖A w − b‖²`. The PDMM w-step (PDMM paper eq. 6)
//!   `argmin_w f(w) + ⟨l, w⟩ + (q/2)‖w‖²` is `(AᵀA + q I)⁻¹ (Aᵀb − l)`; the factor is cached per `q`.
//! - [`Logistic`]: the logistic loss of one or more labelled samples with a bias (PDMM paper eq. 29), the
//!   model being `[w (dim), b]`.
//! - [`centralised_least_squares`]: the minimiser of `Σ_i ½‖A_i w − b_i‖²`, the target of decentralised
//!   least squares.

use std::cell::RefCell;

use super::linalg::{Cholesky, at_b, dot, gram, mat_vec};
use crate::{ModelsError, Result};

/// `f(w) = ½‖A w − b‖²` with `A` row-major `rows × dim`.
#[derive(Clone, Debug)]
pub struct LeastSquares {
    a: Vec<f64>,
    b: Vec<f64>,
    dim: usize,
    gram: Vec<f64>,
    atb: Vec<f64>,
    /// Cholesky factor of `AᵀA + q I` for the last `q` asked for (q = ρ·d_i is fixed on a static graph).
    prox: RefCell<Option<(f64, Cholesky)>>,
}

impl LeastSquares {
    /// `a` is row-major with `dim` columns; `b` has one entry per row.
    pub fn new(a: Vec<f64>, b: Vec<f64>, dim: usize) -> Result<Self> {
        if dim == 0 || a.len() != b.len() * dim {
            return Err(ModelsError::Config(format!(
                "least squares: {} matrix entries for {} rows of {dim}",
                a.len(),
                b.len()
            )));
        }
        let gram = gram(&a, dim);
        let atb = at_b(&a, dim, &b);
        Ok(Self {
            a,
            b,
            dim,
            gram,
            atb,
            prox: RefCell::new(None),
        })
    }

    /// Model dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// `∇f(w) = Aᵀ(A w − b)`.
    pub fn gradient(&self, w: &[f64]) -> Vec<f64> {
        let r: Vec<f64> = mat_vec(&self.a, self.dim, w)
            .iter()
            .zip(&self.b)
            .map(|(x, y)| x - y)
            .collect();
        at_b(&self.a, self.dim, &r)
    }

    /// `argmin_w ½‖A w − b‖² + ⟨lin, w⟩ + (quad/2)‖w‖² = (AᵀA + quad·I)⁻¹(Aᵀb − lin)`.
    pub fn prox(&self, lin: &[f64], quad: f64) -> Result<Vec<f64>> {
        let mut cache = self.prox.borrow_mut();
        if cache.as_ref().is_none_or(|(q, _)| *q != quad) {
            let mut m = self.gram.clone();
            for i in 0..self.dim {
                m[i * self.dim + i] += quad;
            }
            *cache = Some((quad, Cholesky::new(&m, self.dim)?));
        }
        let rhs: Vec<f64> = self.atb.iter().zip(lin).map(|(a, l)| a - l).collect();
        Ok(cache
            .as_ref()
            .map(|(_, c)| c.solve(&rhs))
            .unwrap_or_default())
    }
}

/// The minimiser of `Σ_i ½‖A_i w − b_i‖²` (normal equations; needs `Σ AᵢᵀAᵢ` positive definite).
pub fn centralised_least_squares(parts: &[LeastSquares]) -> Result<Vec<f64>> {
    let dim = parts
        .first()
        .map(LeastSquares::dim)
        .ok_or_else(|| ModelsError::Config("no local problems".into()))?;
    let mut g = vec![0.0; dim * dim];
    let mut r = vec![0.0; dim];
    for p in parts {
        g.iter_mut().zip(&p.gram).for_each(|(a, b)| *a += b);
        r.iter_mut().zip(&p.atb).for_each(|(a, b)| *a += b);
    }
    Ok(Cholesky::new(&g, dim)?.solve(&r))
}

/// Logistic loss `Σ_k −[ℓ_k log σ(y_k) + (1−ℓ_k) log(1−σ(y_k))]`, `y_k = wᵀx_k + b`, over samples `x_k` of
/// dimension `dim`; the model is `[w; b]` (length dim + 1). With one sample the gradient is
/// `(σ(y) − ℓ)·[x; 1]`, which is why one gradient difference reveals `x` (PDMM paper eq. 30–32).
#[derive(Clone, Debug)]
pub struct Logistic {
    /// Samples, row-major `n × dim`.
    pub x: Vec<f64>,
    /// Labels in {0, 1}.
    pub labels: Vec<f64>,
    /// Feature dimension.
    pub dim: usize,
}

impl Logistic {
    /// `∇f([w; b])`.
    pub fn gradient(&self, model: &[f64]) -> Vec<f64> {
        let (w, b) = model.split_at(self.dim);
        let mut g = vec![0.0; self.dim + 1];
        for (x, &l) in self.x.chunks_exact(self.dim).zip(&self.labels) {
            let y = dot(w, x) + b[0];
            let e = 1.0 / (1.0 + (-y).exp()) - l;
            for (gi, xi) in g.iter_mut().zip(x) {
                *gi += e * xi;
            }
            g[self.dim] += e;
        }
        g
    }
}
