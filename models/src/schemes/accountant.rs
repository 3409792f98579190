//! The differential-privacy accountant of GHP and per-sample gradient clipping.
//!
//! GFL paper, Theorem 2 (proof in App. F, eq. 86): with graph-homomorphic perturbations of standard deviation
//! σ (Laplace, variance σ²) the scheme is ε(i)-DP at iteration i (Definition 1, one agent's data replaced)
//! for
//!
//! ```text
//! ε(i) = √2 · μ · B · i(i+1) / σ
//! ```
//!
//! where μ is the step size and B bounds every per-sample gradient along the trajectory (Lemma 4); the
//! sensitivity at iteration j is 2μBj (eq. 52) and the Laplace density turns their sum into ε. ε does not
//! depend on the graph, and grows quadratically in i at fixed σ. The paper *assumes* the bound B; we enforce
//! it with per-sample clipping ([`clip_per_sample`]) so the accounting holds for any loss (our inference,
//! notes-gfl.md §5.6).

use super::scalar::Scalar;
use crate::{ModelsError, Result};

/// The parameters Theorem 2 accounts with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DpParams {
    /// Step size μ.
    pub mu: f64,
    /// Per-sample gradient bound B (the clipping norm).
    pub clip: f64,
}

impl DpParams {
    fn check(&self) -> Result<()> {
        if !(self.mu > 0.0 && self.mu.is_finite() && self.clip > 0.0 && self.clip.is_finite()) {
            return Err(ModelsError::Config(format!(
                "DP accountant needs μ > 0 and B > 0 (got μ = {}, B = {})",
                self.mu, self.clip
            )));
        }
        Ok(())
    }

    /// ε(i) = √2·μ·B·i(i+1)/σ (Theorem 2). σ = 0 gives ∞ (no privacy), i = 0 gives 0.
    pub fn epsilon(&self, sigma: f64, i: u64) -> Result<f64> {
        self.check()?;
        if sigma.is_nan() || sigma < 0.0 {
            return Err(ModelsError::Config(format!("σ = {sigma} must be ≥ 0")));
        }
        let ii = i as f64 * (i as f64 + 1.0);
        if ii == 0.0 {
            return Ok(0.0);
        }
        Ok(std::f64::consts::SQRT_2 * self.mu * self.clip * ii / sigma)
    }

    /// The inverse in σ: the noise standard deviation that makes iteration i ε-DP,
    /// σ = √2·μ·B·i(i+1)/ε (the form Theorem 2 is stated in).
    pub fn sigma_for(&self, epsilon: f64, i: u64) -> Result<f64> {
        self.check()?;
        if !(epsilon > 0.0 && epsilon.is_finite()) {
            return Err(ModelsError::Config(format!(
                "ε = {epsilon} must be finite and > 0"
            )));
        }
        Ok(std::f64::consts::SQRT_2 * self.mu * self.clip * i as f64 * (i as f64 + 1.0) / epsilon)
    }

    /// The inverse in i: the last iteration at which the run is still ε-DP with noise σ (the largest i with
    /// ε(i) ≤ ε; 0 if even one iteration exceeds the budget).
    pub fn max_iterations(&self, sigma: f64, epsilon: f64) -> Result<u64> {
        self.check()?;
        if !(sigma > 0.0 && epsilon >= 0.0) {
            return Err(ModelsError::Config(format!(
                "need σ > 0 and ε ≥ 0 (got σ = {sigma}, ε = {epsilon})"
            )));
        }
        // i(i+1) ≤ c  ⇔  i ≤ (√(1+4c) − 1)/2; then fix floating-point edges exactly.
        let c = epsilon * sigma / (std::f64::consts::SQRT_2 * self.mu * self.clip);
        let mut i = (((1.0 + 4.0 * c).sqrt() - 1.0) / 2.0).floor().max(0.0) as u64;
        while i > 0 && self.epsilon(sigma, i)? > epsilon {
            i -= 1;
        }
        while self.epsilon(sigma, i + 1)? <= epsilon {
            i += 1;
        }
        Ok(i)
    }
}

/// Scales `g` in place to norm at most `bound` (direction kept); returns whether it was clipped. Computed in
/// `f64`; after rounding to `f32` the norm can exceed `bound` by a relative ~1e-7.
pub fn clip_norm<T: Scalar>(g: &mut [T], bound: f64) -> bool {
    let norm = g
        .iter()
        .map(|x| x.to_f64() * x.to_f64())
        .sum::<f64>()
        .sqrt();
    if norm <= bound {
        return false;
    }
    let scale = bound / norm;
    for x in g.iter_mut() {
        *x = T::from_f64(x.to_f64() * scale);
    }
    true
}

/// Per-sample gradient clipping on a batch stored row-major (`batch.len() = samples · dim`): every row is
/// scaled to norm ≤ `bound`. Returns how many rows were clipped. A non-finite gradient is an error (it has
/// no direction to keep) and leaves the batch partly clipped.
pub fn clip_per_sample<T: Scalar>(batch: &mut [T], dim: usize, bound: f64) -> Result<usize> {
    if dim == 0 || !batch.len().is_multiple_of(dim) {
        return Err(ModelsError::Config(format!(
            "batch of {} values is not a whole number of {dim}-dimensional gradients",
            batch.len()
        )));
    }
    if !(bound > 0.0 && bound.is_finite()) {
        return Err(ModelsError::Config(format!(
            "clipping bound {bound} must be finite and > 0"
        )));
    }
    let mut clipped = 0;
    for (k, row) in batch.chunks_exact_mut(dim).enumerate() {
        if row.iter().any(|x| !x.is_finite_value()) {
            return Err(ModelsError::Config(format!(
                "per-sample gradient {k} is not finite"
            )));
        }
        clipped += usize::from(clip_norm(row, bound));
    }
    Ok(clipped)
}

/// Clips every per-sample gradient of the batch to `bound` and returns their mean (the gradient a clipped
/// SGD step uses; each sample moves it by at most `bound / samples`).
pub fn clipped_mean<T: Scalar>(batch: &mut [T], dim: usize, bound: f64) -> Result<Vec<T>> {
    clip_per_sample(batch, dim, bound)?;
    let samples = (batch.len() / dim).max(1) as f64;
    let mut mean = vec![0.0; dim];
    for row in batch.chunks_exact(dim) {
        for (m, &x) in mean.iter_mut().zip(row) {
            *m += x.to_f64();
        }
    }
    Ok(mean.into_iter().map(|m| T::from_f64(m / samples)).collect())
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha12Rng;

    use super::*;

    /// V8 of notes-gfl.md: μ = 0.7, B = 1, σ = √0.1 → ε(10) ≈ 344.35, ε(100) ≈ 31 618.
    #[test]
    fn accountant_matches_the_papers_formula() {
        let p = DpParams { mu: 0.7, clip: 1.0 };
        let s = 0.1f64.sqrt();
        let e10 = p.epsilon(s, 10).unwrap();
        let e100 = p.epsilon(s, 100).unwrap();
        assert!((e10 - 344.35).abs() < 0.01, "ε(10) = {e10}");
        assert!((e100 - 31_618.0).abs() < 1.0, "ε(100) = {e100}");
        assert_eq!(p.epsilon(s, 0).unwrap(), 0.0);
        assert!(p.epsilon(0.0, 1).unwrap().is_infinite());
        // Quadratic in i, inverse in σ.
        assert!(
            (p.epsilon(s, 100).unwrap() / p.epsilon(s, 10).unwrap() - 10_100.0 / 110.0).abs()
                < 1e-9
        );
        assert!((p.epsilon(2.0 * s, 10).unwrap() - e10 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn inverses_round_trip() {
        let p = DpParams { mu: 0.7, clip: 1.0 };
        for &(sigma, i) in &[(0.1f64.sqrt(), 10u64), (3.0, 1), (0.01, 500), (50.0, 7)] {
            let eps = p.epsilon(sigma, i).unwrap();
            let back = p.sigma_for(eps, i).unwrap();
            assert!(
                (back / sigma - 1.0).abs() < 1e-12,
                "σ {sigma} → ε {eps} → σ {back}"
            );
            let imax = p.max_iterations(sigma, eps).unwrap();
            assert_eq!(imax, i, "σ {sigma}, ε(i={i}) = {eps}");
            assert!(p.epsilon(sigma, imax + 1).unwrap() > eps);
        }
        assert_eq!(
            p.max_iterations(1.0, 0.5).unwrap(),
            0,
            "one iteration costs ε(1) ≈ 1.98"
        );
        assert!(p.sigma_for(0.0, 3).is_err());
        assert!(DpParams { mu: 0.0, clip: 1.0 }.epsilon(1.0, 1).is_err());
    }

    #[test]
    fn clipping_bounds_norms_and_keeps_directions() {
        let mut rng = ChaCha12Rng::seed_from_u64(21);
        let (n, dim, bound) = (64, 10, 1.8);
        let orig: Vec<f64> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut batch = orig.clone();
        let clipped = clip_per_sample(&mut batch, dim, bound).unwrap();
        let mut expect_clipped = 0;
        for (o, c) in orig.chunks(dim).zip(batch.chunks(dim)) {
            let no = o.iter().map(|x| x * x).sum::<f64>().sqrt();
            let nc = c.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!(nc <= bound * (1.0 + 1e-12), "norm {nc} after clipping");
            // Same direction: c = (nc/no)·o.
            for (x, y) in o.iter().zip(c) {
                assert!((y - x * nc / no).abs() < 1e-12);
            }
            if no > bound {
                expect_clipped += 1;
                assert!(
                    (nc - bound).abs() < 1e-12,
                    "clipped row should sit on the bound"
                );
            } else {
                assert_eq!(o, c, "a row within the bound changed");
            }
        }
        assert_eq!(clipped, expect_clipped);
        assert!(
            clipped > 0 && clipped < n,
            "test data should mix both cases ({clipped})"
        );

        // f32: the bound holds to float rounding.
        let mut b32: Vec<f32> = orig.iter().map(|&x| x as f32 * 10.0).collect();
        clip_per_sample(&mut b32, dim, 0.5).unwrap();
        for row in b32.chunks(dim) {
            let nc = row
                .iter()
                .map(|&x| f64::from(x).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(nc <= 0.5 * (1.0 + 1e-6), "{nc}");
        }

        let mean = clipped_mean(&mut [3.0f64, 4.0, 0.0, 0.5], 2, 1.0).unwrap();
        assert!(
            (mean[0] - 0.3).abs() < 1e-15 && (mean[1] - 0.65).abs() < 1e-15,
            "{mean:?}"
        );
        assert!(clip_per_sample(&mut [1.0f64, 2.0, 3.0], 2, 1.0).is_err());
        assert!(clip_per_sample(&mut [f64::NAN, 2.0], 2, 1.0).is_err());
    }
}
