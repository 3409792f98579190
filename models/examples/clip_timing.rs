//! Cost of per-sample gradient clipping (`TrainConfig::clip`): local SGD steps on the real MNIST subset with
//! and without clipping, for the MLP and LeNet, on the CPU.
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p models --example clip_timing -- ../shared/data/mnist
//! ```
//!
//! Measured on two shared cores with one thread (ms per step of 32 samples): MLP 784-128-10 0.4 unclipped,
//! 5.5 clipped (one forward/backward per sample: ~14×); LeNet 17.1 unclipped, 26.2 clipped (~1.5×). With
//! the default thread pool on the loaded machine every figure was dominated by thread contention (MLP 7–9 ms
//! unclipped), so take them as orders of magnitude.

// Wall-clock timing is what this file measures; no engine reads it.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use models::data::DatasetSpec;
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{LocalWork, TrainConfig, train_local};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn main() -> Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "../shared/data/mnist".into());
    let split = format!("mnist:{dir}").parse::<DatasetSpec>()?.load(0)?;
    let data = split.train.subset(&(0..512).collect::<Vec<_>>());
    let info = TaskInfo::of(&data)?;
    let steps = 16;
    for spec in [ModelSpec::Mlp { hidden: vec![128] }, ModelSpec::LeNet] {
        for clip in [None, Some(1.0)] {
            let mut m = Model::new(&spec, &info, 0, &Device::Cpu)?;
            let cfg = TrainConfig {
                lr: 0.05,
                batch_size: 32,
                work: LocalWork::Steps(steps),
                clip,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let t = Instant::now();
            train_local(&mut m, &data, &cfg, &mut rng)?;
            let per_step = t.elapsed().as_secs_f64() / steps as f64;
            println!(
                "{spec} clip {clip:?}: {:.1} ms per step of 32",
                per_step * 1e3
            );
        }
    }
    Ok(())
}
