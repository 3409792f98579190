//! A GPU trains the same model as the CPU: LeNet and ResNet-18 start from the same parameters (drawn on the
//! host from the seed), take the same SGD steps on the same batches on CUDA device 0 and on the CPU, and end
//! within float tolerance of each other. Sums taken in another order (cuBLAS, the GPU's convolutions) differ
//! in the last bits and SGD carries that on, so the parameters are compared relative to max(1, |value|).
//!
//! Needs an NVIDIA GPU and the CUDA build (`scripts/cuda-build.sh` prints the environment):
//!
//! ```text
//! eval "$(scripts/cuda-build.sh --build-env)"
//! cargo test --release --target-dir target/cuda -p models --features cuda --test device_agrees -- --ignored
//! ```
//!
//! `results/gpu/run.sh` runs it with the throughput figures.
#![cfg(feature = "cuda")]

use candle_core::Device;
use models::data::{Dataset, DatasetSpec};
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{LocalWork, TrainConfig, train_local};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Steps each side takes: enough for a wrong kernel to show, few enough that rounding has not yet spread.
const STEPS: usize = 5;

/// Largest difference allowed, relative to max(1, |value|).
const TOLERANCE: f32 = 1e-3;

/// The first `n` training images of the CIFAR-10 stand-in (`--dataset synthetic-images`).
fn images(n: usize) -> Dataset {
    let train = DatasetSpec::synthetic_images()
        .load(1)
        .expect("dataset")
        .train;
    train.subset(&(0..n).collect::<Vec<_>>())
}

fn trained(spec: &ModelSpec, data: &Dataset, device: &Device) -> (Vec<f32>, f64) {
    let info = TaskInfo::of(data).expect("task");
    let mut model = Model::new(spec, &info, 0, device).expect("model");
    let cfg = TrainConfig {
        lr: 0.01,
        batch_size: 32,
        work: LocalWork::Steps(STEPS),
        clip: None,
    };
    let report =
        train_local(&mut model, data, &cfg, &mut ChaCha8Rng::seed_from_u64(5)).expect("train");
    (model.flat_params().expect("params"), report.mean_loss)
}

#[test]
#[ignore = "needs an NVIDIA GPU: see the file's header for the command"]
fn the_gpu_and_the_cpu_train_the_same_model() {
    let gpu = Device::new_cuda(0).expect("CUDA device 0");
    let data = images(32 * STEPS);
    let info = TaskInfo::of(&data).expect("task");
    for spec in [ModelSpec::LeNet, ModelSpec::ResNet18] {
        let start = Model::new(&spec, &info, 0, &Device::Cpu)
            .expect("model")
            .flat_params()
            .expect("params");
        let (on_gpu, loss_gpu) = trained(&spec, &data, &gpu);
        let (on_cpu, loss_cpu) = trained(&spec, &data, &Device::Cpu);
        assert_ne!(on_gpu, start, "{spec}: training on the GPU changed nothing");
        let (mut abs, mut rel) = (0f32, 0f32);
        for (g, c) in on_gpu.iter().zip(&on_cpu) {
            abs = abs.max((g - c).abs());
            rel = rel.max((g - c).abs() / c.abs().max(1.0));
        }
        println!(
            "{spec}: {STEPS} steps, max |gpu - cpu| = {abs:.3e} ({rel:.3e} relative), loss {loss_gpu:.6} on the GPU, {loss_cpu:.6} on the CPU"
        );
        assert!(
            rel <= TOLERANCE,
            "{spec}: the GPU's parameters differ from the CPU's by {rel:.3e} relative (tolerance {TOLERANCE:.0e})"
        );
        assert!((loss_gpu - loss_cpu).abs() <= 1e-3 * loss_cpu.abs().max(1.0));
    }
}
