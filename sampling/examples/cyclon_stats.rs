//! Cyclon view statistics over time in the simulator: in-degree spread vs a random c-out graph.
//! cargo run --release -p sampling --example cyclon_stats -- [N] [cycles] [seed]

use std::time::Duration;

use sampling::sim::{OverlaySim, SimConfig};

fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let n = *args.first().unwrap_or(&1000) as usize;
    let cycles = *args.get(1).unwrap_or(&100) as u32;
    let seed = *args.get(2).unwrap_or(&1);
    let mut cfg = SimConfig::new(n, 4, seed);
    cfg.warmup = Duration::ZERO;
    let mut s = OverlaySim::new(cfg)?;
    let p = s.config().cyclon.period;
    let c = s.config().cyclon.view_size as f64;
    for cycle in 1..=cycles {
        s.run_until(p * cycle);
        if cycle % 10 == 0 {
            let d = s.view_in_degrees();
            let m = d.iter().sum::<usize>() as f64 / n as f64;
            let sd = (d.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n as f64).sqrt();
            let random_sd = (c * (1.0 - c / (n as f64 - 1.0))).sqrt();
            println!(
                "cycle {cycle}: in-degree mean {m:.2} sd {sd:.2} (random c-out sd {random_sd:.2}) min {:?} max {:?}",
                d.iter().min(),
                d.iter().max()
            );
        }
    }
    Ok(())
}
