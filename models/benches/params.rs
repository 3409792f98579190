//! Flat parameter get/set at the paper's largest model, ResNet-18 (d ≈ 11.2M): what every round pays to cut
//! the model into chunks and to write the aggregate back. Throughput is parameters per second.
//!
//! `get` allocates a fresh vector each time; `write_into_buffer` reuses one (what a node does every round).
//!
//! `cargo bench -p models --bench params`.

use std::hint::black_box;
use std::time::Duration;

use candle_core::Device;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use models::nn::{Model, ModelSpec, TaskInfo};

fn bench_params(c: &mut Criterion) {
    let info = TaskInfo::Classification {
        sample_shape: vec![3, 32, 32],
        num_classes: 10,
    };
    let mut model = Model::new(&ModelSpec::ResNet18, &info, 0, &Device::Cpu).expect("model");
    let d = model.num_params();
    let flat = model.flat_params().expect("flat");

    let mut group = c.benchmark_group(format!("flat_params_resnet18_d{d}"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(d as u64));
    group.bench_function("get", |b| {
        b.iter(|| black_box(model.flat_params().expect("get")))
    });
    let mut buf = vec![0.0f32; d];
    group.bench_function("write_into_buffer", |b| {
        b.iter(|| model.write_flat_params(black_box(&mut buf)).expect("write"))
    });
    group.bench_function("set", |b| {
        b.iter(|| model.set_flat_params(black_box(&flat)).expect("set"))
    });
    group.finish();
}

criterion_group!(benches, bench_params);
criterion_main!(benches);
