//! Reference sampler: asymptotically uniform random r-regular simple graphs by the Steger–Wormald pairing
//! algorithm (A. Steger, N. Wormald, "Generating random regular graphs quickly", Combinatorics, Probability
//! and Computing 8(4), 1999). Plain configuration-model rejection is hopeless for r = 8 (acceptance
//! ≈ exp(−(r² − 1)/4) ≈ 1.4e-7); Steger–Wormald pairs points one at a time, choosing uniformly among pairs
//! that keep the graph simple, and restarts only when it gets stuck (rare). Its output distribution is
//! asymptotically uniform for fixed r, which is what the λ₂ comparison needs.

use rand::Rng;

/// Random picks before checking exhaustively whether any suitable pair is left.
const TRIES_BEFORE_SCAN: usize = 64;

/// A random r-regular simple graph on n vertices (sorted adjacency lists). Panics if n·r is odd or r ≥ n.
pub fn random_regular(n: usize, r: usize, rng: &mut impl Rng) -> Vec<Vec<u32>> {
    assert!(
        (n * r).is_multiple_of(2) && r < n,
        "no simple {r}-regular graph on {n} vertices"
    );
    'restart: loop {
        let mut adj: Vec<Vec<u32>> = vec![Vec::with_capacity(r); n];
        let mut points: Vec<u32> = (0..n as u32)
            .flat_map(|v| std::iter::repeat_n(v, r))
            .collect();
        while !points.is_empty() {
            let len = points.len();
            let mut chosen = None;
            for _ in 0..TRIES_BEFORE_SCAN {
                let i = rng.random_range(0..len);
                let j = rng.random_range(0..len);
                let (u, v) = (points[i], points[j]);
                if u != v && !adj[u as usize].contains(&v) {
                    chosen = Some((i, j));
                    break;
                }
            }
            if chosen.is_none() {
                // Few points left: list the suitable pairs and pick one uniformly, or restart if none.
                let mut ok = Vec::new();
                for i in 0..len {
                    for j in i + 1..len {
                        let (u, v) = (points[i], points[j]);
                        if u != v && !adj[u as usize].contains(&v) {
                            ok.push((i, j));
                        }
                    }
                }
                if ok.is_empty() {
                    continue 'restart;
                }
                chosen = Some(ok[rng.random_range(0..ok.len())]);
            }
            let (i, j) = chosen.expect("set above");
            let (u, v) = (points[i], points[j]);
            adj[u as usize].push(v);
            adj[v as usize].push(u);
            let (hi, lo) = if i > j { (i, j) } else { (j, i) };
            points.swap_remove(hi);
            points.swap_remove(lo);
        }
        for l in &mut adj {
            l.sort_unstable();
        }
        return adj;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_and_simple() {
        let mut rng = crate::derive_rng(1, 0);
        for (n, r) in [(10, 3), (64, 8), (200, 6)] {
            let g = random_regular(n, r, &mut rng);
            for (i, l) in g.iter().enumerate() {
                assert_eq!(l.len(), r);
                assert!(!l.contains(&(i as u32)));
                assert!(l.windows(2).all(|w| w[0] < w[1]));
                for &j in l {
                    assert!(g[j as usize].contains(&(i as u32)));
                }
            }
        }
    }
}
