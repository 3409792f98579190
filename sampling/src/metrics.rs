//! Graph and privacy metrics for overlay rounds.
//!
//! Privacy quantities (Shatter §4/§6): VNs are assigned to (RN, chunk) pairs by a secret uniformly random
//! bijection; N = n·k. For RNs i ≠ j, the fraction of j's parameters that reach i is the fraction of j's
//! k chunks whose VN is adjacent to at least one of i's k VNs (chunks have equal size d/k ± 1).
//! In a uniform random r-regular graph the per-chunk probability is exactly
//! p = 1 − C(N−1−k, r)/C(N−1, r) (the chunk VN's r neighbours are a uniform r-subset of the other N−1 VNs,
//! none of which may be one of i's k VNs); the paper writes it as 1 − (1 − r/(nk − 1))^k. The probability
//! that all k chunks of j reach i is ≈ p^k (not exact: the k events are weakly dependent).

use rand::Rng;
use rand::seq::SliceRandom;

/// Degree statistics of one graph.
#[derive(Debug, Clone, PartialEq)]
pub struct DegreeStats {
    /// histogram[d] = number of VNs with degree d.
    pub histogram: Vec<usize>,
    pub deficient_fraction: f64,
    pub min_degree: usize,
    pub mean_degree: f64,
}

pub fn degree_stats(adj: &[Vec<u32>], r: usize) -> DegreeStats {
    let mut histogram = vec![0; r + 1];
    for l in adj {
        let d = l.len();
        if histogram.len() <= d {
            histogram.resize(d + 1, 0);
        }
        histogram[d] += 1;
    }
    let n = adj.len().max(1) as f64;
    DegreeStats {
        deficient_fraction: adj.iter().filter(|l| l.len() < r).count() as f64 / n,
        min_degree: adj.iter().map(Vec::len).min().unwrap_or(0),
        mean_degree: adj.iter().map(Vec::len).sum::<usize>() as f64 / n,
        histogram,
    }
}

/// C(m − k, d)/C(m, d): probability that a uniform d-subset of m items avoids k given items.
pub fn avoid_prob(m: usize, k: usize, d: usize) -> f64 {
    if d > m {
        return 0.0;
    }
    (0..d)
        .map(|i| {
            if m < k + i + 1 {
                0.0
            } else {
                (m - k - i) as f64 / (m - i) as f64
            }
        })
        .product()
}

/// Exact per-chunk reach probability p = 1 − C(N−1−k, r)/C(N−1, r) for a uniform r-regular graph.
pub fn frac_received_exact(n: usize, k: usize, r: usize) -> f64 {
    1.0 - avoid_prob(n * k - 1, k, r)
}

/// The paper's form 1 − (1 − r/(nk − 1))^k.
pub fn frac_received_paper(n: usize, k: usize, r: usize) -> f64 {
    1.0 - (1.0 - r as f64 / (n * k - 1) as f64).powi(k as i32)
}

/// Privacy quantities of one graph under one random secret assignment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrivacySample {
    /// Mean over ordered RN pairs (i ≠ j) of the fraction of j's chunks reaching i.
    pub frac_received: f64,
    /// Fraction of ordered pairs for which all k chunks reach i.
    pub all_chunks: f64,
    /// Expected `frac_received` for this graph's degree sequence if neighbours were uniform
    /// (mean over VNs of 1 − C(N−1−k, deg)/C(N−1, deg)): "exact, after accounting for missing edges".
    pub frac_expected_for_degrees: f64,
}

/// Evaluate the privacy quantities of `adj` (N = n·k VNs) for a fresh random VN → (RN, chunk) assignment.
pub fn privacy_sample(adj: &[Vec<u32>], n: usize, k: usize, rng: &mut impl Rng) -> PrivacySample {
    let big_n = adj.len();
    assert_eq!(big_n, n * k, "adjacency must cover all n·k VNs");
    let mut slot: Vec<usize> = (0..big_n).collect();
    slot.shuffle(rng);
    let rn = |v: usize| slot[v] / k;
    // reach[j * n + i] = number of j's chunks adjacent to some VN of i.
    let mut reach = vec![0u32; n * n];
    let mut seen: Vec<usize> = Vec::new();
    for (v, nb) in adj.iter().enumerate() {
        let j = rn(v);
        seen.clear();
        for &u in nb {
            let i = rn(u as usize);
            if i != j && !seen.contains(&i) {
                seen.push(i);
                reach[j * n + i] += 1;
            }
        }
    }
    let pairs = (n * (n - 1)) as f64;
    let mut frac = 0.0;
    let mut all = 0.0;
    for j in 0..n {
        for i in 0..n {
            if i != j {
                let c = reach[j * n + i];
                frac += c as f64 / k as f64;
                if c as usize == k {
                    all += 1.0;
                }
            }
        }
    }
    let expected = adj
        .iter()
        .map(|l| 1.0 - avoid_prob(big_n - 1, k, l.len()))
        .sum::<f64>()
        / big_n as f64;
    PrivacySample {
        frac_received: frac / pairs,
        all_chunks: all / pairs,
        frac_expected_for_degrees: expected,
    }
}

/// Running mean and standard error.
#[derive(Debug, Clone, Default)]
pub struct Mean {
    n: u64,
    sum: f64,
    sum2: f64,
}

impl Mean {
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum2 += x * x;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.sum / self.n as f64
        }
    }

    /// Standard error of the mean (sample standard deviation / √n).
    pub fn stderr(&self) -> f64 {
        if self.n < 2 {
            return f64::NAN;
        }
        let m = self.mean();
        let var = (self.sum2 - self.n as f64 * m * m) / (self.n - 1) as f64;
        (var.max(0.0) / self.n as f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_paper_forms_agree_roughly() {
        let p = frac_received_exact(64, 8, 6);
        let q = frac_received_paper(64, 8, 6);
        assert!((p - q).abs() < 0.01, "{p} {q}");
        // k = 1: exactly r/(N−1).
        assert!((frac_received_exact(100, 1, 8) - 8.0 / 99.0).abs() < 1e-12);
    }

    #[test]
    fn uniform_graph_matches_exact_p() {
        let mut rng = crate::derive_rng(9, 0);
        let (n, k, r) = (32, 4, 6);
        let mut m = Mean::default();
        for _ in 0..40 {
            let g = crate::uniform::random_regular(n * k, r, &mut rng);
            m.push(privacy_sample(&g, n, k, &mut rng).frac_received);
        }
        let p = frac_received_exact(n, k, r);
        assert!(
            (m.mean() - p).abs() < 4.0 * m.stderr() + 1e-3,
            "{} ± {} vs {p}",
            m.mean(),
            m.stderr()
        );
    }
}
