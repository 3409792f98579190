//! Local training throughput (samples/s) of every model family on the CPU, at the paper's batch size of 32:
//! MLP on feature vectors, LeNet and ResNet-8 on 3×32×32 images, MF on (user, item) pairs at MovieLens scale.
//! Each iteration is a fixed number of SGD steps, so Criterion's throughput is samples per second.
//!
//! `cargo bench -p models --bench training`. Measurement windows are short: the whole run takes about a minute
//! on two cores. The convolutional models are slow on the CPU because Candle's CPU backward pass of `conv2d`
//! uses a direct (non-GEMM) `conv_transpose2d` for the input gradient and computes it even for the network
//! input; an unfold + matmul convolution measured only ~1.2-1.3x faster, so Candle's is kept.
//!
//! MF on the CPU takes the sparse-row SGD step (`models/src/train/mf_sgd.rs`), not the autograd path: ~1.2 µs a
//! step. At 32 steps per call about half of its time is the one copy of both embeddings out of and back into
//! their `Var`s that every `train_local` call makes (measured with 1,280 steps a call: ~27M samples/s).

use std::hint::black_box;
use std::time::Duration;

use candle_core::Device;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use models::data::{Dataset, Inputs, Targets};
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{LocalWork, TrainConfig, train_local};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BATCH: usize = 32;

fn random_images(n: usize, shape: &[usize], classes: usize) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let stride: usize = shape.iter().product();
    Dataset::new(
        Inputs::Dense {
            values: (0..n * stride).map(|_| rng.random::<f32>() - 0.5).collect(),
            sample_shape: shape.to_vec(),
        },
        Targets::Classes {
            labels: (0..n).map(|i| (i % classes) as u32).collect(),
            num_classes: classes,
        },
        None,
    )
    .expect("valid dataset")
}

fn random_ratings(n: usize, users: usize, items: usize) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    Dataset::new(
        Inputs::Pairs {
            pairs: (0..n)
                .map(|_| {
                    [
                        rng.random_range(0..users as u32),
                        rng.random_range(0..items as u32),
                    ]
                })
                .collect(),
            num_users: users,
            num_items: items,
        },
        Targets::Ratings(
            (0..n)
                .map(|_| rng.random_range(1..=10) as f32 / 2.0)
                .collect(),
        ),
        None,
    )
    .expect("valid dataset")
}

fn bench_training(c: &mut Criterion) {
    let cases: Vec<(&str, ModelSpec, Dataset, usize)> = vec![
        (
            "mlp_32x128x10",
            ModelSpec::Mlp { hidden: vec![128] },
            random_images(1024, &[32], 10),
            32,
        ),
        (
            "lenet_3x32x32",
            ModelSpec::LeNet,
            random_images(256, &[3, 32, 32], 10),
            2,
        ),
        (
            "resnet8_3x32x32",
            ModelSpec::ResNet8,
            random_images(128, &[3, 32, 32], 10),
            1,
        ),
        (
            "mf_610x9724x20",
            ModelSpec::MatrixFactorization {
                factors: 20,
                centred: false,
            },
            random_ratings(4096, 610, 9724),
            32,
        ),
    ];
    let mut group = c.benchmark_group("train_local");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, spec, data, steps) in cases {
        let info = TaskInfo::of(&data).expect("task");
        let mut model = Model::new(&spec, &info, 0, &Device::Cpu).expect("model");
        let cfg = TrainConfig {
            lr: 0.01,
            batch_size: BATCH,
            work: LocalWork::Steps(steps),
            clip: None,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        group.throughput(Throughput::Elements((steps * BATCH) as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(train_local(&mut model, &data, &cfg, &mut rng).expect("train")))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_training);
criterion_main!(benches);
