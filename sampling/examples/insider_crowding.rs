//! A whole rogue node crowding a victim node (issue 44, item 2): every deviation of `sim::Rogue` alone and all
//! together, seed by seed, with the overlay's repeat cap as configured or off. One JSON object per run on
//! stdout; `results/insider/run.sh` turns them into its summary.
//!
//! cargo run --release -p sampling --example insider_crowding -- --seeds 1,2,3 --rounds 50
//! (add `--repeat-window 0` for the overlay without the cap)

use anyhow::Context;
use clap::Parser;
use sampling::overlay::REPEAT_WINDOW;
use sampling::sim::{DirectKind, Rogue, SimConfig, crowding};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Real nodes n (the victim is node 0, the rogue the last).
    #[arg(long, default_value_t = 16)]
    rns: u32,
    /// VNs per real node k (the rogue uses all of its k).
    #[arg(long, default_value_t = 8)]
    vns: u32,
    #[arg(long, default_value_t = 8)]
    degree: usize,
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// The overlay's repeat window (`OverlayConfig::repeat_window`); 0: no repeat cap.
    #[arg(long, default_value_t = REPEAT_WINDOW)]
    repeat_window: u64,
    /// Only the variants whose name contains this.
    #[arg(long)]
    only: Option<String>,
}

/// (name, walks hide their origin, the rogue's deviations).
type Variant = (&'static str, bool, fn(&mut Rogue));

const VARIANTS: [Variant; 9] = [
    ("quiet", false, |_| {}),
    ("direct-named", false, |r| {
        r.direct = Some(DirectKind::Named)
    }),
    ("direct-sibling", false, |r| {
        r.direct = Some(DirectKind::Sibling)
    }),
    ("direct-hidden", true, |r| {
        r.direct = Some(DirectKind::Hidden)
    }),
    ("greedy", false, |r| r.greedy = true),
    ("forge+flood-hidden", true, |r| {
        r.forge = true;
        r.flood = true;
    }),
    ("flood-junk", false, |r| {
        r.flood = true;
        r.junk = true;
    }),
    ("all-sibling", false, |r| {
        *r = Rogue::all(
            r.ids.clone(),
            r.victims.clone(),
            r.every,
            DirectKind::Sibling,
        )
    }),
    ("all-hidden", true, |r| {
        *r = Rogue::all(
            r.ids.clone(),
            r.victims.clone(),
            r.every,
            DirectKind::Hidden,
        )
    }),
];

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let n = (a.rns * a.vns) as usize;
    for (name, hidden, set) in VARIANTS {
        if a.only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        for &seed in &a.seeds {
            let mut cfg = SimConfig::new(n, a.degree, seed);
            cfg.warmup = cfg.cyclon.period * 10;
            cfg.overlay.hide_origin = hidden;
            cfg.overlay.repeat_window = a.repeat_window;
            let every = cfg.overlay.substep / 2;
            let ids = (n as u32 - a.vns..n as u32).collect();
            let mut rogue = Rogue::quiet(ids, (0..a.vns).collect(), every);
            set(&mut rogue);
            let c = crowding(cfg, a.vns, rogue, a.rounds).context(name)?;
            let line = json!({
                "variant": name, "hidden_walks": hidden, "seed": seed, "repeat_window": a.repeat_window,
                "rounds": a.rounds, "rns": a.rns, "vns": a.vns, "degree": a.degree,
                "rogue_max_vn": c.rogue_max_vn, "rogue_copies": c.rogue_copies, "rogue_chunks": c.rogue_chunks,
                "honest_copies": c.honest_copies, "honest_chunks": c.honest_chunks,
                "honest_max_copies": c.honest_max_copies, "expected_copies": c.expected_copies,
                "victim_deficient": c.victim_deficient, "deficient": c.deficient, "rogue_sent": c.sent,
            });
            println!("{line}");
        }
    }
    Ok(())
}
