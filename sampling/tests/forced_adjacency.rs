//! Forced adjacency (issue 13): a listed but hostile VN that pushes unsolicited `Confirm`s, `Handover`s naming
//! itself and Cyclon shuffles carrying itself at one victim node's k VNs, twice per sub-step for 50 rounds,
//! is no more often their neighbour than an honest VN is: an overlay edge arises only from the matching
//! protocol (a `Confirm` only for this VN's own offer, a `Handover` only from a current neighbour), and Cyclon
//! keeps at most one shuffle's worth of any one peer's entries in a view.

use sampling::sim::{OverlaySim, Pusher, SimConfig};

const NODES: u32 = 16;
const K: u32 = 8;
const DEGREE: usize = 8;
const ROUNDS: usize = 50;
const N: usize = (NODES * K) as usize;
const ROGUE: usize = N - 1;

/// Seeds of the full comparison.
const SEEDS: [u64; 4] = [1, 2, 3, 4];

/// What the rogue pushes: (confirms, handovers, shuffles).
type Strategy = (bool, bool, bool);

struct Outcome {
    /// Per VN: victim-VN neighbourships over the run, per victim VN and round.
    rate: Vec<f64>,
    /// Per VN: rounds in which it neighboured two or more victim VNs (held two of the victim's chunks).
    multi: Vec<usize>,
    pushed: u64,
}

fn run(strategy: Option<Strategy>, seed: u64) -> Outcome {
    let mut cfg = SimConfig::new(N, DEGREE, seed);
    cfg.warmup = cfg.cyclon.period * 10;
    let mut sim = OverlaySim::new(cfg).unwrap();
    let victims: Vec<u32> = (0..K).collect();
    if let Some((confirms, handovers, shuffles)) = strategy {
        let every = sim.config().overlay.substep / 2;
        sim.set_pusher(Pusher {
            rogue: ROGUE as u32,
            victims: victims.clone(),
            every,
            confirms,
            handovers,
            shuffles,
        });
    }
    let (mut edges, mut multi) = (vec![0usize; N], vec![0usize; N]);
    for _ in 0..ROUNDS {
        let g = sim.run_round();
        let mut per_round = vec![0usize; N];
        for &v in &victims {
            for &w in &g.adj[v as usize] {
                per_round[w as usize] += 1;
            }
        }
        for w in 0..N {
            edges[w] += per_round[w];
            multi[w] += usize::from(per_round[w] >= 2);
        }
    }
    let rate = edges
        .iter()
        .map(|&e| e as f64 / (ROUNDS as f64 * K as f64))
        .collect();
    Outcome {
        rate,
        multi,
        pushed: sim.pushed,
    }
}

/// Checks the bound for one strategy over `seeds` (the rogue's rate averaged over them; the chunk
/// count seed by seed) and returns (rogue rate, honest mean rate, rogue multi rounds, honest max multi
/// rounds), the multi rounds summed over the seeds.
fn check(strategy: Strategy, seeds: &[u64]) -> (f64, f64, usize, usize) {
    let mut sum = (0.0, 0.0, 0, 0);
    for &seed in seeds {
        let (rogue, honest, multi, honest_max) = one_seed(strategy, seed);
        sum = (
            sum.0 + rogue,
            sum.1 + honest,
            sum.2 + multi,
            sum.3 + honest_max,
        );
    }
    let n = seeds.len() as f64;
    let (rogue, honest) = (sum.0 / n, sum.1 / n);
    let uniform = DEGREE as f64 / (N as f64 - 1.0);
    if seeds.len() > 1 {
        eprintln!("{strategy:?} over seeds {seeds:?}: rogue {rogue:.4}, honest mean {honest:.4}");
    }
    assert!(
        rogue <= 1.5 * uniform,
        "{strategy:?}: rogue {rogue:.4} vs r/(N-1) {uniform:.4}"
    );
    (rogue, honest, sum.2, sum.3)
}

/// One seed of `check`: prints the figures and checks the chunk count.
fn one_seed(strategy: Strategy, seed: u64) -> (f64, f64, usize, usize) {
    let o = run(Some(strategy), seed);
    assert!(
        o.pushed > 5_000,
        "{strategy:?}: the rogue pushed only {} messages",
        o.pushed
    );
    // Honest VNs outside the victim node.
    let honest = K as usize..ROGUE;
    let honest_rate = honest.clone().map(|w| o.rate[w]).sum::<f64>() / honest.len() as f64;
    let honest_max = honest.map(|w| o.multi[w]).max().unwrap();
    let uniform = DEGREE as f64 / (N as f64 - 1.0);
    let rogue = o.rate[ROGUE];
    eprintln!(
        "{strategy:?}: per victim VN and round: rogue {rogue:.4}, honest mean {honest_rate:.4}, r/(N-1) \
         {uniform:.4}; rounds holding ≥ 2 of the victim's chunks: rogue {}, luckiest honest VN {honest_max} \
         (of {ROUNDS})",
        o.multi[ROGUE]
    );
    // Two of a victim's chunks in one round happen by chance to honest VNs too (each of the k victim VNs
    // picks r of N − 1 others): the rogue must not do it more often than the luckiest honest VN.
    assert!(
        o.multi[ROGUE] <= honest_max,
        "{strategy:?}: rogue {} vs {honest_max}",
        o.multi[ROGUE]
    );
    (rogue, honest_rate, o.multi[ROGUE], honest_max)
}

/// The strongest push (view presence by shuffles plus unsolicited Confirms; a rogue that also sends
/// Handovers naming itself loses its own edges to the victims, see the ignored test) stays under the bound.
#[test]
fn a_pushing_rogue_is_no_more_often_a_victims_neighbour_than_an_honest_vn() {
    check((true, false, true), &[3]);
}

/// Every strategy, and the same VN when it does not push (the baseline it is compared with), over seeds 1-4:
/// one seed's rate swings by ±0.02 around the mean (shuffles alone: 0.060-0.098 over seeds 1-6). About 40 s
/// in a release build: `cargo test --release -p sampling --test forced_adjacency -- --ignored --nocapture`.
#[test]
#[ignore]
fn every_push_strategy_against_the_quiet_baseline() {
    for s in [
        (true, false, false),
        (false, true, false),
        (false, false, true),
        (true, false, true),
        (true, true, true),
    ] {
        check(s, &SEEDS);
    }
    let quiet = SEEDS
        .iter()
        .map(|&seed| run(None, seed).rate[ROGUE])
        .sum::<f64>()
        / SEEDS.len() as f64;
    eprintln!("the same VN without pushing, over seeds {SEEDS:?}: {quiet:.4}");
}
