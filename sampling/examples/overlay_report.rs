//! Run Cyclon + the overlay builder in the simulator and compare the graphs with theory and with a uniform
//! random r-regular reference. Prints progress to stderr and one JSON object as the last stdout line.
//!
//! cargo run --release -p sampling --example overlay_report -- --rns 64 --vns 8 --degree 6 --rounds 100 --seed 1

// Wall-clock timing of a whole run is what this file measures; no engine reads it.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use sampling::derive_rng;
use sampling::metrics::{
    Mean, degree_stats, frac_received_exact, frac_received_paper, privacy_sample,
};
use sampling::sim::{OverlaySim, SimConfig, Traffic};
use sampling::spectral::spectrum;
use sampling::uniform::random_regular;
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Real nodes n.
    #[arg(long, default_value_t = 64)]
    rns: usize,
    /// VNs per real node k.
    #[arg(long, default_value_t = 8)]
    vns: usize,
    /// Overlay degree r.
    #[arg(long, default_value_t = 6)]
    degree: usize,
    #[arg(long, default_value_t = 100)]
    rounds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Message loss probability.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Overlay sub-step length in (virtual) milliseconds.
    #[arg(long, default_value_t = 100)]
    substep_ms: u64,
    /// Probability that a VN crashes at each round start.
    #[arg(long, default_value_t = 0.0)]
    crash: f64,
    /// Hop budget of proposal and splice walks. [default: the overlay's, 30]
    #[arg(long)]
    ttl: Option<u8>,
    /// Walks that name no origin, answered back along their path (`OverlayConfig::hide_origin`).
    #[arg(long)]
    hide_origin: bool,
    /// Start every walk with the whole hop budget, as if the network's size were unknown (by default a
    /// network of fewer VNs than the budget starts them with one hop per other VN,
    /// `OverlayConfig::walk_ttl`).
    #[arg(long)]
    full_walks: bool,
    /// Rounds negotiated ahead (the node's `overlay_lookahead`); with it, a round starts every
    /// `--round-period-ms` whatever the overlay window, so up to L + 1 negotiations overlap.
    #[arg(long, default_value_t = 0)]
    lookahead: u64,
    /// Time between round starts with `--lookahead` (virtual ms). [default: window / lookahead]
    #[arg(long)]
    round_period_ms: Option<u64>,
    /// Time between two Cyclon shuffles of one VN (virtual ms). [default: the simulator's, a fifth of a
    /// round]
    #[arg(long)]
    cyclon_period_ms: Option<u64>,
    /// Entries one Cyclon shuffle swaps. [default: Cyclon's, 8]
    #[arg(long)]
    shuffle_len: Option<usize>,
    /// Cyclon-only time before round 0 (virtual ms). [default: the simulator's, 30 of its default shuffle
    /// periods, whatever `--cyclon-period-ms` says]
    #[arg(long)]
    warmup_ms: Option<u64>,
    /// Rounds over which one peer's neighbourships are capped (`OverlayConfig::repeat_window`); 0: no cap.
    #[arg(long, default_value_t = sampling::overlay::REPEAT_WINDOW)]
    repeat_window: u64,
}

fn per(t: u64, d: f64) -> f64 {
    t as f64 / d
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.rns < 2 || a.vns < 1 || a.degree < 1 {
        bail!("need --rns ≥ 2, --vns ≥ 1, --degree ≥ 1");
    }
    let big_n = a.rns * a.vns;
    let t0 = Instant::now();
    let mut cfg = SimConfig::new(big_n, a.degree, a.seed);
    cfg.overlay = sampling::OverlayConfig {
        network_size: (!a.full_walks).then_some(big_n),
        ..sampling::OverlayConfig::new(a.degree, Duration::from_millis(a.substep_ms))
    };
    cfg.net.loss = a.loss;
    cfg.crash_prob = a.crash;
    if let Some(ttl) = a.ttl {
        cfg.overlay.ttl = ttl;
    }
    cfg.overlay.hide_origin = a.hide_origin;
    cfg.overlay.repeat_window = a.repeat_window;
    if let Some(ms) = a.cyclon_period_ms {
        cfg.cyclon.period = Duration::from_millis(ms);
    }
    if let Some(ms) = a.warmup_ms {
        cfg.warmup = Duration::from_millis(ms);
    }
    if let Some(l) = a.shuffle_len {
        cfg.cyclon.shuffle_len = l;
    }
    if a.lookahead > 0 {
        cfg.lookahead = a.lookahead;
        cfg.round_period = match a.round_period_ms {
            Some(ms) => Duration::from_millis(ms),
            None => cfg.overlay.deadline() / a.lookahead as u32,
        };
    }
    let walk_ttl = cfg.overlay.walk_ttl();
    let mut sim = OverlaySim::new(cfg).context("simulator config")?;
    let before: Traffic = sim.traffic.clone();
    let mut rng = derive_rng(a.seed, u64::MAX - 7);

    let r = a.degree;
    let (mut defi, mut l2, mut l2u, mut lmin, mut lminu) = (
        Mean::default(),
        Mean::default(),
        Mean::default(),
        Mean::default(),
        Mean::default(),
    );
    let (mut frac, mut frac_exp, mut all, mut meandeg) = (
        Mean::default(),
        Mean::default(),
        Mean::default(),
        Mean::default(),
    );
    let mut defi_max: f64 = 0.0;
    let mut min_degree = usize::MAX;
    let mut hist = vec![0usize; r + 1];
    let (mut half_open, mut one_sided, mut malformed) = (0usize, 0usize, 0usize);
    for _ in 0..a.rounds {
        let g = sim.run_round();
        half_open += g.half_open;
        one_sided += g.one_sided_after_check;
        malformed += g.malformed;
        // Metrics over alive VNs (reindexed).
        let alive_idx: Vec<usize> = (0..g.adj.len()).filter(|&i| g.alive[i]).collect();
        let mut map = vec![u32::MAX; g.adj.len()];
        for (new, &old) in alive_idx.iter().enumerate() {
            map[old] = new as u32;
        }
        let adj: Vec<Vec<u32>> = alive_idx
            .iter()
            .map(|&i| g.adj[i].iter().map(|&j| map[j as usize]).collect())
            .collect();
        let ds = degree_stats(&adj, r);
        defi.push(ds.deficient_fraction);
        defi_max = defi_max.max(ds.deficient_fraction);
        meandeg.push(ds.mean_degree);
        min_degree = min_degree.min(ds.min_degree);
        for (d, c) in ds.histogram.iter().enumerate() {
            if hist.len() <= d {
                hist.resize(d + 1, 0);
            }
            hist[d] += c;
        }
        let s = spectrum(&adj, r, &mut rng);
        l2.push(s.lambda2);
        lmin.push(s.lambda_min);
        if (adj.len() * r).is_multiple_of(2) && adj.len() > r {
            let u = random_regular(adj.len(), r, &mut rng);
            let su = spectrum(&u, r, &mut rng);
            l2u.push(su.lambda2);
            lminu.push(su.lambda_min);
        }
        if alive_idx.len() == big_n {
            let p = privacy_sample(&g.adj, a.rns, a.vns, &mut rng);
            frac.push(p.frac_received);
            frac_exp.push(p.frac_expected_for_degrees);
            all.push(p.all_chunks);
        }
        if g.round.get() % 10 == 9 {
            eprintln!(
                "round {:>4}: deficient {:.4} min degree {} λ₂ {:.4} (uniform {:.4}) half-open {} [{:.1}s]",
                g.round.next(),
                ds.deficient_fraction,
                ds.min_degree,
                s.lambda2,
                l2u.mean(),
                g.half_open,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let t = &sim.traffic;
    let vr = (big_n as u64 * a.rounds) as f64;
    let p = frac_received_exact(a.rns, a.vns, r);
    let pp = frac_received_paper(a.rns, a.vns, r);
    let cy = t.cyclon_msgs - before.cyclon_msgs;
    let ov = t.overlay_msgs - before.overlay_msgs;
    let bytes = t.cyclon_bytes + t.overlay_bytes - before.cyclon_bytes - before.overlay_bytes;
    let bytes_pid = t.cyclon_bytes_peerid + t.overlay_bytes_peerid
        - before.cyclon_bytes_peerid
        - before.overlay_bytes_peerid;
    let report = json!({
        "n": a.rns, "k": a.vns, "r": r, "n_vns": big_n, "rounds": a.rounds, "seed": a.seed, "hide_origin": a.hide_origin, "walk_ttl": walk_ttl, "loss": a.loss,
        "crash": a.crash,
        "deficient_fraction": defi.mean(), "deficient_fraction_max": defi_max, "min_degree": min_degree,
        "mean_degree": meandeg.mean(), "degree_histogram": hist,
        "lambda2_mean": l2.mean(), "lambda2_uniform_mean": lambda_or_null(&l2u),
        "lambda_min_mean": lmin.mean(), "lambda_min_uniform_mean": lambda_or_null(&lminu),
        "frac_received_mean": frac.mean(), "frac_received_stderr": frac.stderr(),
        "frac_received_expected_for_degrees": frac_exp.mean(),
        "frac_received_exact": p, "frac_received_paper": pp,
        "all_chunks_mc": all.mean(), "all_chunks_paper": pp.powi(a.vns as i32), "all_chunks_exact_pk": p.powi(a.vns as i32),
        "control_msgs_per_vn": per(cy + ov, vr), "cyclon_msgs_per_vn": per(cy, vr), "overlay_msgs_per_vn": per(ov, vr),
        "control_bytes_per_vn": per(bytes, vr), "control_bytes_per_vn_peerid": per(bytes_pid, vr),
        "half_open_edges": half_open, "one_sided_after_check": one_sided, "malformed_neighbour_sets": malformed,
        "invalid_msgs": t.invalid,
        "contacts_per_vn": per(2 * sim.contact_pairs() as u64, big_n as f64), "elapsed_s": t0.elapsed().as_secs_f64(),
    });
    println!("{report}");
    Ok(())
}

fn lambda_or_null(m: &Mean) -> serde_json::Value {
    if m.count() == 0 {
        serde_json::Value::Null
    } else {
        json!(m.mean())
    }
}
