//! Local training throughput of LeNet and ResNet-18 on a device (`cpu`, `cuda:N`, `metal:N`).
//!
//! ```text
//! cargo run --release -p models --example device_throughput -- --device cpu
//! cargo run --release -p models --features cuda --example device_throughput -- --device cuda:0
//! ```
//!
//! For each model: the CIFAR-10 stand-in (`synthetic-images`: 3×32×32, 10 classes), batches of 32, `--steps` SGD steps
//! after two warm-up steps, timed from the first step to the device's last finished kernel. Prints one TSV
//! row per model: device, model, parameters, steps, seconds, samples per second.
//!
//! Whether the GPU trains the same model as the CPU is the ignored test `models/tests/device_agrees.rs`;
//! `results/gpu/run.sh` runs both on a GPU machine.

// Wall-clock timing is what this file measures; no engine reads it.
#![allow(clippy::disallowed_methods)]

use std::time::Instant;

use anyhow::{Context, Result, bail};
use models::data::{Dataset, DatasetSpec};
use models::device::DeviceSpec;
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{LocalWork, TrainConfig, train_local};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const BATCH: usize = 32;

struct Args {
    device: DeviceSpec,
    models: Vec<ModelSpec>,
    steps: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        device: DeviceSpec::Cpu,
        models: vec![ModelSpec::LeNet, ModelSpec::ResNet18],
        steps: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--device" => a.device = value()?.parse()?,
            "--models" => {
                a.models = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<std::result::Result<_, _>>()?
            }
            "--steps" => a.steps = value()?.parse()?,
            other => bail!("unknown argument {other:?} (expected --device, --models, --steps)"),
        }
    }
    Ok(a)
}

/// The first `n` training images of the CIFAR-10 stand-in (`--dataset synthetic-images`).
fn images(n: usize) -> Result<Dataset> {
    let train = DatasetSpec::synthetic_images().load(1)?.train;
    Ok(train.subset(&(0..n.min(train.len())).collect::<Vec<_>>()))
}

fn config(steps: usize) -> TrainConfig {
    TrainConfig {
        lr: 0.01,
        batch_size: BATCH,
        work: LocalWork::Steps(steps),
        clip: None,
    }
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let (device, fallback) = args.device.open_or_fallback();
    if let Some(why) = fallback {
        bail!("device {}: {why}", args.device);
    }
    let data = images(BATCH * 8)?;
    let info = TaskInfo::of(&data)?;
    println!("device\tmodel\tparams\tsteps\tseconds\tsamples_per_s");
    for spec in &args.models {
        let mut model = Model::new(spec, &info, 0, &device)?;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        train_local(&mut model, &data, &config(2), &mut rng)?;
        device.synchronize()?;
        let start = Instant::now();
        train_local(&mut model, &data, &config(args.steps), &mut rng)?;
        device.synchronize()?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{}\t{spec}\t{}\t{}\t{secs:.3}\t{:.1}",
            args.device,
            model.num_params(),
            args.steps,
            (args.steps * BATCH) as f64 / secs
        );
    }
    Ok(())
}
