//! One round's chunk work on a real node, against memcpy: extract k = 8 chunks from the local model, add
//! k × r = 8 × 8 received chunks (the paper's defaults), and scatter the per-parameter means back.
//! Throughput counts the bytes of received values (r · d · 4); the `memcpy` case copies the same number of
//! bytes with `copy_from_slice`, so `round / memcpy` is the ratio to plain copying (target ≥ 0.3).
//!
//! Sizes: the paper's MovieLens matrix factorisation (d = 206,680) and a ResNet-18 layout (d ≈ 11.2M).
//! `cargo bench -p models --bench chunking`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;

const K: usize = 8;
const R: usize = 8;

/// MovieLens MF, 20 factors: user and item embeddings (610 × 20, 9,724 × 20).
fn movielens_layout() -> Vec<usize> {
    vec![610 * 20, 9724 * 20]
}

/// ResNet-18 for 32×32 inputs without normalisation layers: 3×3 convolutions with biases, 1×1 projection
/// shortcuts where the width doubles, a 512 → 10 classifier.
fn resnet18_layout() -> Vec<usize> {
    let conv = |cin: usize, cout: usize, ks: usize| [cout * cin * ks * ks, cout];
    let mut t: Vec<usize> = conv(3, 64, 3).to_vec();
    let mut cin = 64;
    for cout in [64, 128, 256, 512] {
        for block in 0..2 {
            let inc = if block == 0 { cin } else { cout };
            t.extend(conv(inc, cout, 3));
            t.extend(conv(cout, cout, 3));
            if block == 0 && inc != cout {
                t.extend(conv(inc, cout, 1));
            }
        }
        cin = cout;
    }
    t.extend([512 * 10, 10]);
    t
}

/// Deterministic, finite test values without an RNG dependency in the bench.
fn values(d: usize, salt: usize) -> Vec<f32> {
    (0..d)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 1000) as f32 * 1e-3 - 0.5)
        .collect()
}

fn bench_size(c: &mut Criterion, name: &str, layout: &[usize]) {
    let part = Arc::new(ChunkPartition::new(layout, K, 7).expect("partition"));
    let d = part.d();
    let local = values(d, 0);
    // R distinct received copies of every chunk, each its own buffer as messages off the network would be.
    let received: Vec<Vec<Vec<f32>>> = (0..R)
        .map(|c| {
            let other = values(d, c + 1);
            (0..K)
                .map(|s| part.extract(s, &other).expect("extract"))
                .collect()
        })
        .collect();
    let received_bytes = (R * d * 4) as u64;

    let mut group = c.benchmark_group(format!("chunking_{name}_d{d}"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Bytes(received_bytes));

    let mut agg = Aggregator::new(part.clone());
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); K];
    let mut params = local.clone();
    let mut cut = Vec::new();
    group.bench_function("round", |b| {
        b.iter(|| {
            part.extract_all_into(black_box(&local), &mut cut)
                .expect("extract");
            agg.reset();
            for copies in &received {
                for (s, chunk) in copies.iter().enumerate() {
                    agg.add(s, black_box(chunk)).expect("add");
                }
            }
            agg.finish_into(&mut params).expect("finish");
            black_box(&params);
        })
    });

    // The three steps alone, to see where the time goes, and the k strided single-chunk extractions that
    // extract_all_into replaces.
    group.bench_function("extract_all_only", |b| {
        b.iter(|| {
            part.extract_all_into(black_box(&local), &mut cut)
                .expect("extract");
        })
    });
    // What Shatter and GHP send: one vector per chunk.
    group.bench_function("extract_all_vecs", |b| {
        b.iter(|| black_box(part.extract_all(black_box(&local)).expect("extract")))
    });
    group.bench_function("extract_each_chunk", |b| {
        b.iter(|| {
            for (s, o) in out.iter_mut().enumerate() {
                part.extract_into(s, black_box(&local), o).expect("extract");
            }
        })
    });
    group.bench_function("add_only", |b| {
        b.iter(|| {
            agg.reset();
            for copies in &received {
                for (s, chunk) in copies.iter().enumerate() {
                    agg.add(s, black_box(chunk)).expect("add");
                }
            }
        })
    });
    group.bench_function("finish_only", |b| {
        b.iter(|| {
            agg.finish_into(black_box(&mut params)).expect("finish");
        })
    });

    let src = vec![1u8; received_bytes as usize];
    let mut dst = vec![0u8; received_bytes as usize];
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        })
    });
    group.finish();
}

fn bench_chunking(c: &mut Criterion) {
    bench_size(c, "movielens_mf", &movielens_layout());
    bench_size(c, "resnet18", &resnet18_layout());
}

criterion_group!(benches, bench_chunking);
criterion_main!(benches);
