//! Small dense linear algebra in `f64` for the closed-form steps: the centralised least-squares solution, the
//! exact PDMM w-step of a quadratic local loss, and the GFL regression optimum (GFL paper eq. 55). Matrices are
//! row-major `Vec<f64>` of size `n × n`; sizes here are the model dimension (2 to a few dozen), so a plain
//! Cholesky factorisation is the right tool.

use crate::{ModelsError, Result};

/// Cholesky factor `L` (lower triangular, row-major) of a symmetric positive definite `n × n` matrix.
#[derive(Clone, Debug)]
pub struct Cholesky {
    n: usize,
    l: Vec<f64>,
}

impl Cholesky {
    /// Factorises `a` (`n × n`, row-major, symmetric positive definite; only the lower triangle is read).
    pub fn new(a: &[f64], n: usize) -> Result<Self> {
        if a.len() != n * n {
            return Err(ModelsError::Config(format!(
                "matrix has {} entries, expected {n}×{n}",
                a.len()
            )));
        }
        let mut l = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let mut s = a[i * n + j];
                for k in 0..j {
                    s -= l[i * n + k] * l[j * n + k];
                }
                if i == j {
                    if s <= 0.0 || !s.is_finite() {
                        return Err(ModelsError::Config(format!(
                            "matrix is not positive definite (pivot {i} is {s})"
                        )));
                    }
                    l[i * n + i] = s.sqrt();
                } else {
                    l[i * n + j] = s / l[j * n + j];
                }
            }
        }
        Ok(Self { n, l })
    }

    /// Dimension of the factorised matrix.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Solves `A x = b` (forward then back substitution; index loops follow the textbook form).
    #[allow(clippy::needless_range_loop)]
    pub fn solve(&self, b: &[f64]) -> Vec<f64> {
        let n = self.n;
        assert_eq!(b.len(), n, "right-hand side has the wrong length");
        let mut y = b.to_vec();
        for i in 0..n {
            let mut s = y[i];
            for k in 0..i {
                s -= self.l[i * n + k] * y[k];
            }
            y[i] = s / self.l[i * n + i];
        }
        for i in (0..n).rev() {
            let mut s = y[i];
            for k in i + 1..n {
                s -= self.l[k * n + i] * y[k];
            }
            y[i] = s / self.l[i * n + i];
        }
        y
    }
}

/// `AᵀA` (`cols × cols`) of a row-major `rows × cols` matrix.
pub fn gram(a: &[f64], cols: usize) -> Vec<f64> {
    let mut g = vec![0.0; cols * cols];
    for row in a.chunks_exact(cols) {
        for i in 0..cols {
            for j in 0..cols {
                g[i * cols + j] += row[i] * row[j];
            }
        }
    }
    g
}

/// `Aᵀb` of a row-major `rows × cols` matrix.
pub fn at_b(a: &[f64], cols: usize, b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; cols];
    for (row, &bi) in a.chunks_exact(cols).zip(b) {
        for (o, &x) in out.iter_mut().zip(row) {
            *o += x * bi;
        }
    }
    out
}

/// `A x` of a row-major `rows × cols` matrix.
pub fn mat_vec(a: &[f64], cols: usize, x: &[f64]) -> Vec<f64> {
    a.chunks_exact(cols).map(|row| dot(row, x)).collect()
}

/// Inner product.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Euclidean norm.
pub fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Euclidean distance.
pub fn dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_known_system() {
        // A = [[4, 2], [2, 3]], x = [1, -2] → b = [0, -4].
        let c = Cholesky::new(&[4.0, 2.0, 2.0, 3.0], 2).unwrap();
        let x = c.solve(&[0.0, -4.0]);
        assert!(
            (x[0] - 1.0).abs() < 1e-14 && (x[1] + 2.0).abs() < 1e-14,
            "{x:?}"
        );
        assert!(
            Cholesky::new(&[1.0, 2.0, 2.0, 1.0], 2).is_err(),
            "indefinite accepted"
        );
    }
}
