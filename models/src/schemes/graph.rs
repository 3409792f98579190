//! Static graphs for the schemes and their combination weights.
//!
//! - [`Graph`]: an undirected simple graph as sorted neighbour lists. Builders: [`Graph::random_regular`]
//!   (uniform-ish random r-regular graph, the shape of Shatter's per-round overlay; GFL paper, "pure P2P
//!   mapping" in our notes) and [`Graph::random_geometric`] (n points uniform in the unit cube `[0,1]^dim`,
//!   an edge when two are within `radius`; the PDMM paper §VI-B uses n = 60 in the unit cube with
//!   r = √(2 ln n / n), [`rgg_connectivity_radius`], "to ensure connectivity with high probability").
//! - [`CombinationMatrix`]: the P×P matrix A of the GFL paper, `a_pm` = weight node p gives to the message of
//!   node m (eq. 8: `w_p = Σ_m a_pm (ψ_m + g_pm)`). Builders: uniform `1/(r+1)` on an r-regular graph, and
//!   Metropolis–Hastings `1/(1 + max(d_p, d_m))` on any graph. Both are symmetric and doubly stochastic
//!   (Assumption 1), so their columns sum to 1, which is what graph-homomorphic cancellation needs (eq. 46).

use std::collections::VecDeque;

use rand::Rng;

use crate::{ModelsError, Result};

/// Restarts of the random-regular pairing before giving up (each restart is cheap; for r ≪ n a restart is
/// rarely needed at all).
const MAX_REGULAR_RESTARTS: usize = 1_000;
/// Consecutive rejected stub pairs after which the pairing checks whether any valid pair is left.
const STUCK_CHECK_AFTER: usize = 64;

/// An undirected simple graph on nodes `0..n`, neighbour lists sorted ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    adj: Vec<Vec<usize>>,
}

impl Graph {
    /// Builds a graph from undirected edges. Refuses self-loops, duplicate edges and out-of-range nodes.
    pub fn from_edges(n: usize, edges: &[(usize, usize)]) -> Result<Self> {
        let mut adj = vec![Vec::new(); n];
        for &(a, b) in edges {
            if a >= n || b >= n {
                return Err(ModelsError::Config(format!(
                    "edge ({a}, {b}) names a node outside 0..{n}"
                )));
            }
            if a == b {
                return Err(ModelsError::Config(format!("self-loop at node {a}")));
            }
            if adj[a].contains(&b) {
                return Err(ModelsError::Config(format!("duplicate edge ({a}, {b})")));
            }
            adj[a].push(b);
            adj[b].push(a);
        }
        for list in &mut adj {
            list.sort_unstable();
        }
        Ok(Self { adj })
    }

    /// A random r-regular simple graph on n nodes (Steger–Wormald pairing: join two random free stubs of
    /// distinct, non-adjacent nodes; restart when no valid pair is left). Needs `r < n` and `n·r` even.
    pub fn random_regular<R: Rng + ?Sized>(n: usize, r: usize, rng: &mut R) -> Result<Self> {
        if r >= n.max(1) || !(n * r).is_multiple_of(2) {
            return Err(ModelsError::Config(format!(
                "no {r}-regular graph on {n} nodes (need r < n and n·r even)"
            )));
        }
        'restart: for _ in 0..MAX_REGULAR_RESTARTS {
            let mut adj = vec![Vec::with_capacity(r); n];
            let mut stubs: Vec<usize> = (0..n).flat_map(|v| std::iter::repeat_n(v, r)).collect();
            let mut rejected = 0;
            while !stubs.is_empty() {
                let i = rng.random_range(0..stubs.len());
                let j = rng.random_range(0..stubs.len());
                let (a, b) = (stubs[i], stubs[j]);
                if i != j && a != b && !adj[a].contains(&b) {
                    adj[a].push(b);
                    adj[b].push(a);
                    let (hi, lo) = (i.max(j), i.min(j));
                    stubs.swap_remove(hi);
                    stubs.swap_remove(lo);
                    rejected = 0;
                    continue;
                }
                rejected += 1;
                if rejected >= STUCK_CHECK_AFTER {
                    rejected = 0;
                    let mut open: Vec<usize> = stubs.clone();
                    open.sort_unstable();
                    open.dedup();
                    let any_valid = open
                        .iter()
                        .enumerate()
                        .any(|(k, &a)| open[k + 1..].iter().any(|&b| !adj[a].contains(&b)));
                    if !any_valid {
                        continue 'restart;
                    }
                }
            }
            for list in &mut adj {
                list.sort_unstable();
            }
            return Ok(Self { adj });
        }
        Err(ModelsError::Config(format!(
            "no {r}-regular graph on {n} nodes after {MAX_REGULAR_RESTARTS} restarts"
        )))
    }

    /// A random geometric graph: `n` points uniform in `[0,1]^dim`, an edge between every pair closer than
    /// `radius` (Euclidean). Returns the graph and the points. It may be disconnected; see
    /// [`Graph::random_geometric_connected`].
    pub fn random_geometric<R: Rng + ?Sized>(
        n: usize,
        dim: usize,
        radius: f64,
        rng: &mut R,
    ) -> (Self, Vec<Vec<f64>>) {
        let points: Vec<Vec<f64>> = (0..n)
            .map(|_| (0..dim).map(|_| rng.random::<f64>()).collect())
            .collect();
        let mut adj = vec![Vec::new(); n];
        for a in 0..n {
            for b in a + 1..n {
                let d2: f64 = points[a]
                    .iter()
                    .zip(&points[b])
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum();
                if d2 < radius * radius {
                    adj[a].push(b);
                    adj[b].push(a);
                }
            }
        }
        (Self { adj }, points)
    }

    /// [`Graph::random_geometric`], redrawn until connected (at most `max_tries` draws). The PDMM paper's
    /// radius makes a connected draw likely, not certain; a disconnected graph has no consensus.
    pub fn random_geometric_connected<R: Rng + ?Sized>(
        n: usize,
        dim: usize,
        radius: f64,
        max_tries: usize,
        rng: &mut R,
    ) -> Result<(Self, Vec<Vec<f64>>)> {
        for _ in 0..max_tries {
            let (g, p) = Self::random_geometric(n, dim, radius, rng);
            if g.is_connected() {
                return Ok((g, p));
            }
        }
        Err(ModelsError::Config(format!(
            "no connected geometric graph (n {n}, dim {dim}, radius {radius}) in {max_tries} draws"
        )))
    }

    /// Number of nodes.
    pub fn n(&self) -> usize {
        self.adj.len()
    }

    /// Neighbours of `v`, ascending.
    pub fn neighbours(&self, v: usize) -> &[usize] {
        &self.adj[v]
    }

    /// Degree of `v`.
    pub fn degree(&self, v: usize) -> usize {
        self.adj[v].len()
    }

    /// Whether `a` and `b` are adjacent.
    pub fn has_edge(&self, a: usize, b: usize) -> bool {
        self.adj[a].binary_search(&b).is_ok()
    }

    /// Number of undirected edges.
    pub fn num_edges(&self) -> usize {
        self.adj.iter().map(Vec::len).sum::<usize>() / 2
    }

    /// Undirected edges `(a, b)` with `a < b`, in ascending order.
    pub fn edges(&self) -> Vec<(usize, usize)> {
        self.adj
            .iter()
            .enumerate()
            .flat_map(|(a, list)| list.iter().filter(move |&&b| b > a).map(move |&b| (a, b)))
            .collect()
    }

    /// Whether every node has degree `r`.
    pub fn is_regular(&self, r: usize) -> bool {
        self.adj.iter().all(|l| l.len() == r)
    }

    /// Whether the graph is connected (an empty graph counts as connected).
    pub fn is_connected(&self) -> bool {
        let n = self.n();
        if n == 0 {
            return true;
        }
        let mut seen = vec![false; n];
        let mut queue = VecDeque::from([0]);
        seen[0] = true;
        let mut count = 1;
        while let Some(v) = queue.pop_front() {
            for &u in &self.adj[v] {
                if !seen[u] {
                    seen[u] = true;
                    count += 1;
                    queue.push_back(u);
                }
            }
        }
        count == n
    }
}

/// The connectivity radius the PDMM paper uses for its random geometric graphs (§VI-B, after Dall &
/// Christensen): `r = √(2 ln n / n)`.
pub fn rgg_connectivity_radius(n: usize) -> f64 {
    let n = n as f64;
    (2.0 * n.ln() / n).sqrt()
}

/// The combination matrix A (GFL paper eq. 5/8): `a_pm` is the weight node p applies to node m's message.
/// Dense P×P (P is the number of nodes of one scheme's graph, tens to a few thousand).
#[derive(Clone, Debug, PartialEq)]
pub struct CombinationMatrix {
    n: usize,
    a: Vec<f64>,
}

impl CombinationMatrix {
    /// Uniform weights on an r-regular graph: `a_pm = 1/(r+1)` for m = p and every neighbour m. This is
    /// Shatter's / EL's equal-weight averaging; a node's self-weight is `1/(r+1)`, so the GHP self-correction is
    /// `−r·g` (eq. 47 with `a_pp = 1/(r+1)`).
    pub fn uniform_regular(g: &Graph) -> Result<Self> {
        let r = g.degree(0);
        if g.n() == 0 || !g.is_regular(r) {
            return Err(ModelsError::Config(
                "uniform weights need a regular graph; use Metropolis weights".into(),
            ));
        }
        let w = 1.0 / (r as f64 + 1.0);
        let n = g.n();
        let mut a = vec![0.0; n * n];
        for p in 0..n {
            a[p * n + p] = w;
            for &m in g.neighbours(p) {
                a[p * n + m] = w;
            }
        }
        Ok(Self { n, a })
    }

    /// Metropolis–Hastings weights: `a_pm = 1/(1 + max(d_p, d_m))` on edges, `a_pp = 1 − Σ_{m≠p} a_pm`.
    /// Symmetric and doubly stochastic on any graph, with `a_pp > 0`, so GHP applies (eq. 47 needs `a_pp > 0`).
    pub fn metropolis(g: &Graph) -> Self {
        let n = g.n();
        let mut a = vec![0.0; n * n];
        for p in 0..n {
            let mut off = 0.0;
            for &m in g.neighbours(p) {
                let w = 1.0 / (1.0 + g.degree(p).max(g.degree(m)) as f64);
                a[p * n + m] = w;
                off += w;
            }
            a[p * n + p] = 1.0 - off;
        }
        Self { n, a }
    }

    /// Builds from a dense row-major matrix; checks that it is square, non-negative and column-stochastic
    /// with a positive diagonal (what GHP needs).
    pub fn from_dense(n: usize, a: Vec<f64>) -> Result<Self> {
        if a.len() != n * n || a.iter().any(|&x| !(x >= 0.0 && x.is_finite())) {
            return Err(ModelsError::Config(
                "combination matrix must be n×n, finite and non-negative".into(),
            ));
        }
        let m = Self { n, a };
        m.check_column_stochastic(1e-12)?;
        Ok(m)
    }

    /// Number of nodes.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `a_pm`: the weight p gives to m's message.
    pub fn weight(&self, p: usize, m: usize) -> f64 {
        self.a[p * self.n + m]
    }

    /// `a_pp`: the weight p gives to its own term.
    pub fn own_weight(&self, p: usize) -> f64 {
        self.weight(p, p)
    }

    /// `Σ_{p≠m} a_pm`: the total weight m's receivers give to m's message (the off-diagonal of column m).
    /// GHP's self-correction is `−(this / a_mm)·g_m`.
    pub fn out_weight_sum(&self, m: usize) -> f64 {
        (0..self.n)
            .filter(|&p| p != m)
            .map(|p| self.weight(p, m))
            .sum()
    }

    /// Checks that every column sums to 1 (within `tol`) and every diagonal entry is positive.
    pub fn check_column_stochastic(&self, tol: f64) -> Result<()> {
        for m in 0..self.n {
            let s: f64 = (0..self.n).map(|p| self.weight(p, m)).sum();
            if (s - 1.0).abs() > tol {
                return Err(ModelsError::Config(format!(
                    "column {m} sums to {s}, not 1"
                )));
            }
            if self.own_weight(m) <= 0.0 {
                return Err(ModelsError::Config(format!(
                    "a_{m}{m} = {} must be positive for graph-homomorphic perturbations",
                    self.own_weight(m)
                )));
            }
        }
        Ok(())
    }

    /// Whether every row also sums to 1 (within `tol`): then each combined model is a convex combination.
    pub fn is_row_stochastic(&self, tol: f64) -> bool {
        (0..self.n)
            .all(|p| ((0..self.n).map(|m| self.weight(p, m)).sum::<f64>() - 1.0).abs() <= tol)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha12Rng;

    use super::*;

    #[test]
    fn random_regular_is_simple_regular_and_seeded() {
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        for (n, r) in [(10, 4), (60, 6), (61, 8), (8, 3), (200, 8)] {
            let g = Graph::random_regular(n, r, &mut rng).unwrap();
            assert!(g.is_regular(r), "n {n} r {r}");
            assert_eq!(g.num_edges(), n * r / 2);
            for v in 0..n {
                assert!(!g.neighbours(v).contains(&v));
                assert!(
                    g.neighbours(v).windows(2).all(|w| w[0] < w[1]),
                    "duplicate edge"
                );
            }
        }
        let a = Graph::random_regular(30, 4, &mut ChaCha12Rng::seed_from_u64(9)).unwrap();
        let b = Graph::random_regular(30, 4, &mut ChaCha12Rng::seed_from_u64(9)).unwrap();
        assert_eq!(a, b, "same seed, different graph");
        assert!(
            Graph::random_regular(5, 3, &mut rng).is_err(),
            "odd n·r accepted"
        );
        assert!(
            Graph::random_regular(4, 4, &mut rng).is_err(),
            "r = n accepted"
        );
    }

    #[test]
    fn geometric_graph_matches_its_points_and_the_papers_radius_connects_it() {
        let mut rng = ChaCha12Rng::seed_from_u64(2);
        let radius = rgg_connectivity_radius(60);
        assert!((radius - 0.369_5).abs() < 1e-3, "{radius}");
        let (g, pts) = Graph::random_geometric_connected(60, 3, radius, 100, &mut rng).unwrap();
        assert!(g.is_connected());
        for a in 0..60 {
            for b in a + 1..60 {
                let d: f64 = pts[a]
                    .iter()
                    .zip(&pts[b])
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f64>()
                    .sqrt();
                assert_eq!(g.has_edge(a, b), d < radius);
            }
        }
        // |E| ≥ n: the PDMM subspace argument needs a non-trivial orthogonal complement.
        assert!(g.num_edges() >= 60, "{} edges", g.num_edges());
    }

    #[test]
    fn weights_are_doubly_stochastic() {
        let mut rng = ChaCha12Rng::seed_from_u64(3);
        let g = Graph::random_regular(12, 3, &mut rng).unwrap();
        let u = CombinationMatrix::uniform_regular(&g).unwrap();
        u.check_column_stochastic(1e-12).unwrap();
        assert!(u.is_row_stochastic(1e-12));
        assert!((u.own_weight(0) - 0.25).abs() < 1e-15);
        assert!((u.out_weight_sum(0) - 0.75).abs() < 1e-15);

        let (rgg, _) = Graph::random_geometric_connected(30, 2, 0.4, 100, &mut rng).unwrap();
        assert!(CombinationMatrix::uniform_regular(&rgg).is_err());
        let m = CombinationMatrix::metropolis(&rgg);
        m.check_column_stochastic(1e-12).unwrap();
        assert!(m.is_row_stochastic(1e-12));
        for p in 0..30 {
            for q in 0..30 {
                assert_eq!(m.weight(p, q), m.weight(q, p));
            }
        }
        // A row-stochastic but not column-stochastic matrix is refused.
        assert!(CombinationMatrix::from_dense(2, vec![0.5, 0.5, 0.1, 0.9]).is_err());
    }
}
