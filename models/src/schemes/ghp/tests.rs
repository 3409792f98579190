use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, StandardNormal};

use super::*;
use crate::schemes::graph::Graph;

fn random_models<T: Scalar>(p: usize, dim: usize, rng: &mut ChaCha12Rng) -> Vec<Vec<T>> {
    (0..p)
        .map(|_| {
            (0..dim)
                .map(|_| {
                    let x: f64 = StandardNormal.sample(rng);
                    T::from_f64(x)
                })
                .collect()
        })
        .collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// V1 of notes-gfl.md: one GHP combine with σ² = 10 keeps the network average exactly (eq. 46), on an
/// r-regular graph with uniform weights and on a geometric graph with Metropolis weights.
#[test]
fn ghp_cancels_exactly_in_f64() {
    let mut rng = ChaCha12Rng::seed_from_u64(11);
    let sigma = 10f64.sqrt();
    let regular = Graph::random_regular(8, 3, &mut rng).unwrap();
    let (rgg, _) = Graph::random_geometric_connected(40, 2, 0.3, 100, &mut rng).unwrap();
    let cases = [
        CombinationMatrix::uniform_regular(&regular).unwrap(),
        CombinationMatrix::metropolis(&rgg),
    ];
    for a in &cases {
        let mut worst: f64 = 0.0;
        for _ in 0..50 {
            let psis: Vec<Vec<f64>> = random_models(a.n(), 4, &mut rng);
            let ghp = network_round(&psis, a, Perturbation::Ghp { sigma }, &mut rng).unwrap();
            let plain = network_round(&psis, a, Perturbation::None, &mut rng).unwrap();
            worst = worst.max(max_abs_diff(&centroid(&ghp), &centroid(&psis)));
            // Doubly stochastic A: the noiseless combine keeps the average too.
            assert!(max_abs_diff(&centroid(&plain), &centroid(&psis)) < 1e-12);
            // ... and the noise did reach the individual models.
            assert!(
                max_abs_diff(&ghp[0], &plain[0]) > 1e-3,
                "no noise on node 0"
            );
        }
        assert!(worst <= 1e-12, "GHP moved the network average by {worst:e}");
    }
}

/// The same in f32 (what travels on the wire): the average moves only by rounding, far below the noise.
#[test]
fn ghp_cancels_to_float_tolerance_in_f32() {
    let mut rng = ChaCha12Rng::seed_from_u64(12);
    let g = Graph::random_regular(16, 4, &mut rng).unwrap();
    let a = CombinationMatrix::uniform_regular(&g).unwrap();
    let sigma = 10f64.sqrt();
    let (mut worst_ghp, mut worst_random): (f64, f64) = (0.0, 0.0);
    for _ in 0..50 {
        let psis: Vec<Vec<f32>> = random_models(16, 32, &mut rng);
        let ghp = network_round(&psis, &a, Perturbation::Ghp { sigma }, &mut rng).unwrap();
        let random = network_round(&psis, &a, Perturbation::Random { sigma }, &mut rng).unwrap();
        worst_ghp = worst_ghp.max(max_abs_diff(&centroid(&ghp), &centroid(&psis)));
        worst_random = worst_random.max(max_abs_diff(&centroid(&random), &centroid(&psis)));
    }
    // Noise magnitudes up to ~r·|g| ≈ 4·20 in f32 carry ~1e-5 rounding; the average of 16 of them less.
    assert!(
        worst_ghp < 1e-4,
        "f32 GHP moved the average by {worst_ghp:e}"
    );
    assert!(
        worst_random > 0.5,
        "the random baseline should move it ({worst_random})"
    );
}

/// V2 of notes-gfl.md: the random baseline puts noise of per-coordinate variance σ²(r/(r+1))²/P on the
/// centroid (r-regular, uniform weights); GHP puts none. Monte Carlo: 20 000 rounds × 4 coordinates.
#[test]
fn random_baseline_centroid_variance_matches_closed_form() {
    let (p, r, sigma2) = (8usize, 3usize, 10.0f64);
    let mut rng = ChaCha12Rng::seed_from_u64(13);
    let g = Graph::random_regular(p, r, &mut rng).unwrap();
    let a = CombinationMatrix::uniform_regular(&g).unwrap();
    let psis: Vec<Vec<f64>> = random_models(p, 4, &mut rng);
    let base = centroid(&psis);
    let (mut sum2, mut count, mut ghp_worst) = (0.0, 0usize, 0.0f64);
    for _ in 0..20_000 {
        let random = network_round(
            &psis,
            &a,
            Perturbation::Random {
                sigma: sigma2.sqrt(),
            },
            &mut rng,
        )
        .unwrap();
        for (c, b) in centroid(&random).iter().zip(&base) {
            sum2 += (c - b) * (c - b);
            count += 1;
        }
    }
    for _ in 0..200 {
        let ghp = network_round(
            &psis,
            &a,
            Perturbation::Ghp {
                sigma: sigma2.sqrt(),
            },
            &mut rng,
        )
        .unwrap();
        ghp_worst = ghp_worst.max(max_abs_diff(&centroid(&ghp), &base));
    }
    let measured = sum2 / count as f64;
    let rr = r as f64 / (r as f64 + 1.0);
    let expected = sigma2 * rr * rr / p as f64; // 0.703
    // 80 000 samples of a sum of 8 Laplace terms: relative standard error ≈ √(2.4/80 000) ≈ 0.55 %.
    assert!(
        (measured / expected - 1.0).abs() < 0.03,
        "centroid noise variance {measured:.4} vs closed form {expected:.4}"
    );
    assert!(ghp_worst < 1e-12, "GHP centroid moved by {ghp_worst:e}");
}

/// V4 of notes-gfl.md: the Laplace sampler has mean 0, variance σ², E|X| = σ/√2, excess kurtosis 3.
#[test]
fn laplace_moments() {
    let mut rng = ChaCha12Rng::seed_from_u64(14);
    let sigma = 2.0;
    let x = laplace_noise(200_000, sigma, &mut rng);
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let abs = x.iter().map(|v| v.abs()).sum::<f64>() / n;
    let kurt = x.iter().map(|v| (v - mean).powi(4)).sum::<f64>() / n / (var * var) - 3.0;
    assert!(mean.abs() < 0.02, "mean {mean}");
    assert!((var / (sigma * sigma) - 1.0).abs() < 0.02, "variance {var}");
    assert!(
        (abs / (sigma / 2f64.sqrt()) - 1.0).abs() < 0.01,
        "E|X| {abs}"
    );
    assert!((kurt - 3.0).abs() < 0.3, "excess kurtosis {kurt}");
}

#[test]
fn zero_noise_modes_agree_and_leave_the_rng_alone() {
    let mut rng = ChaCha12Rng::seed_from_u64(15);
    let g = Graph::random_regular(10, 4, &mut rng).unwrap();
    let a = CombinationMatrix::uniform_regular(&g).unwrap();
    let psis: Vec<Vec<f64>> = random_models(10, 3, &mut rng);
    let mut r1 = ChaCha12Rng::seed_from_u64(1);
    let plain = network_round(&psis, &a, Perturbation::None, &mut r1).unwrap();
    for mode in [
        Perturbation::Ghp { sigma: 0.0 },
        Perturbation::Random { sigma: 0.0 },
    ] {
        assert_eq!(network_round(&psis, &a, mode, &mut r1).unwrap(), plain);
    }
    assert_eq!(
        r1,
        ChaCha12Rng::seed_from_u64(1),
        "σ = 0 consumed randomness"
    );
    // With σ = 0 the combine is plain diffusion: node 0 = mean of itself and its 4 neighbours.
    let mut expect = psis[0].clone();
    for &m in g.neighbours(0) {
        expect.iter_mut().zip(&psis[m]).for_each(|(e, x)| *e += x);
    }
    expect.iter_mut().for_each(|e| *e /= 5.0);
    assert!(max_abs_diff(&plain[0], &expect) < 1e-15);
}

#[test]
fn ghp_self_correction_is_minus_r_g_on_regular_graphs() {
    let w = SenderWeights::uniform_regular(8);
    assert!((w.self_correction() + 8.0).abs() < 1e-12);
    let psi = vec![1.0f64; 5];
    let mut rng = ChaCha12Rng::seed_from_u64(16);
    let m = perturb(&psi, Perturbation::Ghp { sigma: 1.0 }, w, &mut rng).unwrap();
    for ((b, o), p) in m.broadcast.iter().zip(&m.own).zip(&psi) {
        let g = b - p;
        assert!((o - (p - 8.0 * g)).abs() < 1e-12);
    }
    assert!(
        perturb(
            &psi,
            Perturbation::Ghp { sigma: 1.0 },
            SenderWeights {
                own: 0.0,
                out_sum: 1.0
            },
            &mut rng
        )
        .is_err(),
        "a_pp = 0 accepted"
    );
}

#[test]
fn combine_refuses_bad_messages() {
    let own = vec![1.0f32, 2.0];
    assert!(combine(0.5, &own, [(0.5, [1.0f32].as_slice())]).is_err());
    assert!(combine(0.5, &own, [(0.5, [1.0f32, f32::NAN].as_slice())]).is_err());
    assert_eq!(
        combine(0.5, &own, [(0.5, [3.0f32, 4.0].as_slice())]).unwrap(),
        vec![2.0, 3.0]
    );
}

#[test]
fn parse_algo_strings() {
    assert_eq!(
        Perturbation::parse("ghp:0.5").unwrap(),
        Perturbation::Ghp { sigma: 0.5 }
    );
    assert_eq!(
        Perturbation::parse("random:2").unwrap(),
        Perturbation::Random { sigma: 2.0 }
    );
    assert_eq!(Perturbation::parse("none").unwrap(), Perturbation::None);
    for bad in ["ghp", "ghp:-1", "ghp:nan", "ghp:inf", "noise:1", "random:x"] {
        assert!(Perturbation::parse(bad).is_err(), "{bad} accepted");
    }
}
