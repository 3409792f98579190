//! The round engine over the in-memory simulator (no libp2p): convergence against central SGD, the wire
//! cost model, determinism, and EL (k = 1) on the same code path.

use std::sync::Arc;

use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{LocalWork, TrainConfig, evaluate, train_local};
use node::learner::LearningConfig;
use node::sim::{SimConfig, SimReport, run};
use rand::SeedableRng;

const NODES: usize = 8;
const ROUNDS: u64 = 10;
const SEED: u64 = 7;

fn learning() -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![32] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Epochs(1),
        },
        seed: SEED,
        max_test_samples: None,
    }
}

fn simulate(vns: usize, degree: usize) -> (SimReport, usize, Vec<usize>) {
    let lc = learning();
    let (split, parts) = lc.load().unwrap();
    let learners = lc.learners(&split, &parts, 0..NODES).unwrap();
    let partition = Arc::new(lc.chunk_partition(&learners[0].model, vns).unwrap());
    let lens = (0..vns).map(|s| partition.chunk_len(s)).collect();
    let d = partition.d();
    let report = run(
        &SimConfig::new(vns, degree, ROUNDS, SEED),
        learners,
        partition,
        |_, _| {},
    )
    .unwrap();
    (report, d, lens)
}

fn final_mean(report: &SimReport) -> f64 {
    let last: Vec<f64> = report
        .metrics
        .iter()
        .map(|m| m.last().unwrap().test_metric)
        .collect();
    last.iter().sum::<f64>() / last.len() as f64
}

/// Central SGD with as many steps as each node takes in the decentralized run, on all the training data.
fn central_accuracy(steps: usize) -> f64 {
    let lc = learning();
    let split = lc.dataset.load(SEED).unwrap();
    let info = TaskInfo::of(&split.train).unwrap();
    let mut model = Model::new(
        lc.model.as_ref().unwrap(),
        &info,
        SEED,
        &models::device::cpu(),
    )
    .unwrap();
    let cfg = TrainConfig {
        work: LocalWork::Steps(steps),
        ..lc.train
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    train_local(&mut model, &split.train, &cfg, &mut rng).unwrap();
    evaluate(&model, &split.test).unwrap().metric()
}

#[test]
fn shatter_8x4_converges_like_central_sgd_and_pays_the_cost_model() {
    let (vns, degree) = (4, 4);
    let (report, d, lens) = simulate(vns, degree);
    assert!(
        report.metrics.iter().all(|m| m.len() == ROUNDS as usize),
        "every node finished every round"
    );

    let shatter = final_mean(&report);
    let per_node_steps = (4000 / NODES).div_ceil(32) * ROUNDS as usize;
    let central = central_accuracy(per_node_steps);
    let first = report.metrics.iter().map(|m| m[0].test_metric).sum::<f64>() / NODES as f64;
    println!(
        "shatter final accuracy {shatter:.4} (round 0: {first:.4}), central {central:.4} after {per_node_steps} steps"
    );
    assert!(
        shatter > first + 0.05,
        "training made progress: {first} -> {shatter}"
    );
    assert!(
        shatter >= central - 0.05,
        "shatter {shatter} within 0.05 of central {central}"
    );

    // Cost model: each VN sends its chunk (4·len + 17-byte header + 4-byte prefix) to each neighbour, so
    // with a full overlay an RN sends 4·d·r bytes of values per round, plus headers.
    let (lo, hi) = (
        *lens.iter().min().unwrap() as u64,
        *lens.iter().max().unwrap() as u64,
    );
    let mut total_neighbours = 0u64;
    let mut total_chunk_bytes = 0u64;
    for m in report.metrics.iter().flatten() {
        let nb = m.neighbours as u64;
        assert!(
            m.chunk_bytes_sent >= nb * (4 * lo + 21) && m.chunk_bytes_sent <= nb * (4 * hi + 21),
            "{m:?}"
        );
        assert!(
            m.copies_received <= m.neighbours,
            "never more copies than neighbours: {m:?}"
        );
        assert_eq!(m.refused, 0, "no refusals without faults: {m:?}");
        total_neighbours += nb;
        total_chunk_bytes += m.chunk_bytes_sent;
    }
    let samples = (NODES as u64) * ROUNDS;
    let full = (vns * degree) as u64;
    assert!(
        total_neighbours as f64 >= 0.97 * (samples * full) as f64,
        "near-regular overlay: {total_neighbours}"
    );
    let per_rn_round = total_chunk_bytes as f64 / samples as f64;
    let model = 4.0 * d as f64 * degree as f64 * total_neighbours as f64 / (samples * full) as f64;
    println!(
        "chunk bytes per RN per round {per_rn_round:.0}, cost model 4·d·r (scaled by realised degree) {model:.0}"
    );
    assert!(
        (per_rn_round - model).abs() <= 21.0 * full as f64 + 4.0 * full as f64,
        "{per_rn_round} vs {model}"
    );
}

#[test]
fn same_seed_same_result_and_el_uses_the_same_path() {
    // k = 1 is Epidemic Learning: one VN per node carrying the whole model.
    let (a, _, _) = simulate(1, 3);
    let (b, _, _) = simulate(1, 3);
    let bits = |r: &SimReport| -> Vec<u64> {
        r.metrics
            .iter()
            .flatten()
            .map(|m| m.test_metric.to_bits())
            .collect()
    };
    assert_eq!(
        bits(&a),
        bits(&b),
        "bit-identical metrics for the same seed"
    );
    assert_eq!(a.virtual_secs, b.virtual_secs);
    let first = a.metrics.iter().map(|m| m[0].test_metric).sum::<f64>() / NODES as f64;
    assert!(final_mean(&a) > first, "EL learns");
}

/// One observed copy: (node, vn, from, round, chunk, values).
type Seen = (usize, usize, u32, u64, u32, usize);

/// Records what an [`node::observe::Observer`] is shown.
#[derive(Default)]
struct Recorder {
    starts: std::sync::Mutex<Vec<(usize, u64, usize)>>,
    chunks: std::sync::Mutex<Vec<Seen>>,
}

impl node::observe::Observer<u32> for Recorder {
    fn wants_params(&self, _node: usize, round: protocol::Round) -> bool {
        round.get() != 1
    }
    fn round_start(&self, node: usize, round: protocol::Round, params: &[f32]) {
        self.starts
            .lock()
            .unwrap()
            .push((node, round.get(), params.len()));
    }
    fn chunk_received(&self, node: usize, vn: usize, from: &u32, frame: &protocol::ChunkFrame) {
        self.chunks.lock().unwrap().push((
            node,
            vn,
            *from,
            frame.round.get(),
            frame.chunk.0,
            frame.values.len(),
        ));
    }
}

#[test]
fn observer_sees_every_accepted_copy_and_the_round_start_models() {
    let (vns, rounds) = (2, 3);
    let lc = learning();
    let (split, parts) = lc.load().unwrap();
    let learners = lc.learners(&split, &parts, 0..NODES).unwrap();
    let partition = Arc::new(lc.chunk_partition(&learners[0].model, vns).unwrap());
    let d = partition.d();
    let rec = Recorder::default();
    let report = node::sim::run_observed(
        &SimConfig::new(vns, 3, rounds, SEED),
        learners,
        partition.clone(),
        |_, _| {},
        Some(&rec),
    )
    .unwrap();
    // Round starts: every node, every round it asked for (not round 1), with the whole model.
    let starts = rec.starts.into_inner().unwrap();
    assert_eq!(starts.len(), NODES * 2);
    assert!(
        starts
            .iter()
            .all(|&(n, r, len)| n < NODES && r != 1 && len == d)
    );
    // Chunks: exactly the copies the nodes counted, each whole, from another node's VN.
    let chunks = rec.chunks.into_inner().unwrap();
    let counted: u64 = report
        .metrics
        .iter()
        .flatten()
        .map(|m| m.copies_received as u64)
        .sum();
    assert_eq!(chunks.len() as u64, counted);
    assert!(counted > 0);
    for &(node, vn, from, round, chunk, len) in &chunks {
        assert!(node < NODES && vn < vns && round < rounds);
        assert!((from as usize) < NODES * vns && from as usize != node * vns + vn);
        assert_eq!(len, partition.chunk_len(chunk as usize));
    }
}
