//! Golden output of the overlay simulator: Cyclon + the overlay builder on `sim::OverlaySim`, a fixed seed,
//! every round's graph, the traffic counters and the final view in-degrees, as JSON. Recorded before the
//! sampler was recomposed (one `Sampler` for the node and the simulator); a refactor must reproduce it byte
//! for byte. A deliberate behaviour change re-records it with
//! `SHATTER_BLESS=1 cargo test -p sampling --test golden` and says why in its commit.

use std::path::PathBuf;

use sampling::sim::{OverlaySim, SimConfig};
use serde_json::json;

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("SHATTER_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (record with SHATTER_BLESS=1)", path.display()));
    assert!(
        expected == actual,
        "{} differs from this run's output:\n{actual}",
        path.display()
    );
}

fn run(n: usize, degree: usize, seed: u64, loss: f64, crash: f64, rounds: usize) -> String {
    let mut cfg = SimConfig::new(n, degree, seed);
    cfg.net.loss = loss;
    cfg.crash_prob = crash;
    let mut sim = OverlaySim::new(cfg).unwrap();
    let mut out = Vec::new();
    for _ in 0..rounds {
        let g = sim.run_round();
        out.push(json!({
            "round": g.round,
            "adj": g.adj,
            "alive": g.alive,
            "half_open": g.half_open,
            "one_sided_after_check": g.one_sided_after_check,
            "malformed": g.malformed,
        }));
    }
    let t = &sim.traffic;
    let v = json!({
        "rounds": out,
        "traffic": {
            "cyclon_msgs": t.cyclon_msgs, "overlay_msgs": t.overlay_msgs,
            "cyclon_bytes": t.cyclon_bytes, "overlay_bytes": t.overlay_bytes,
            "cyclon_bytes_peerid": t.cyclon_bytes_peerid, "overlay_bytes_peerid": t.overlay_bytes_peerid,
            "invalid": t.invalid,
        },
        "view_in_degrees": sim.view_in_degrees(),
        "virtual_ns": sim.now().as_nanos() as u64,
    });
    serde_json::to_string(&v).unwrap() + "\n"
}

#[test]
fn overlay_sim_matches_its_golden_output() {
    golden("overlay_n48_r4_seed7.json", &run(48, 4, 7, 0.0, 0.0, 4));
}

#[test]
fn overlay_sim_with_loss_and_crashes_matches_its_golden_output() {
    golden(
        "overlay_n40_r3_seed3_lossy.json",
        &run(40, 3, 3, 0.05, 0.02, 3),
    );
}
