//! Catch-up (issue 15) over the in-memory simulator: a node held back several rounds finds the network ahead
//! (its VNs see later rounds from several peers and then an exchange of their own without copies, so they
//! ask peers drawn from the whole network), skips to the network's round instead of staying isolated, and
//! finishes the run; the others never wait for it.

use std::sync::Arc;
use std::time::Duration;

use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::sim::{SimConfig, SimReport, run};
use protocol::Round;

const NODES: usize = 8;
const ROUNDS: u64 = 16;
const SEED: u64 = 5;
const HELD: usize = 3;

fn simulate(stall: Option<(usize, Round, Duration)>) -> SimReport {
    let lc = LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![8] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Steps(2),
            clip: None,
        },
        seed: SEED,
        max_test_samples: Some(100),
    };
    let (split, parts) = lc.load().unwrap();
    let learners = lc.learners(&split, &parts, 0..NODES).unwrap();
    let partition = Arc::new(lc.chunk_partition(&learners[0].model, 2).unwrap());
    let cfg = SimConfig {
        stall,
        ..SimConfig::new(2, 3, ROUNDS, SEED)
    };
    run(&cfg, learners, partition, |_, _| {}).unwrap()
}

#[test]
fn a_node_held_back_four_rounds_catches_up_rejoins_and_finishes() {
    // Rounds take 12-20 s (10 s of training, the overlay, the exchange): held 80 s in round 2, the node comes
    // back about four rounds behind.
    let report = simulate(Some((HELD, Round(2), Duration::from_secs(80))));
    let held = &report.metrics[HELD];
    let rounds: Vec<u64> = held.iter().map(|m| m.round.get()).collect();

    let jump = held
        .iter()
        .find(|m| m.skipped_rounds > 0)
        .unwrap_or_else(|| panic!("the held node never caught up: rounds {rounds:?}"));
    // It asks where the network is once an exchange of its own got no copy (issue 44: what peers claim never
    // moves a node by itself), and lands at the median of the answers: measured, seed 5, rounds 3-4 still got
    // their copies, 5-6 got none, and it skipped 7-8 to the network's round 9.
    assert!(
        jump.skipped_rounds >= 2,
        "it skipped to the network's round, not just a step: {jump:?}"
    );
    assert_eq!(
        held.last().unwrap().round,
        Round(ROUNDS - 1),
        "it finished the run: {rounds:?}"
    );
    assert!(
        rounds.windows(2).all(|w| w[0] < w[1]),
        "one line per round it ran, in order: {rounds:?}"
    );
    assert_eq!(
        rounds.len() as u64 + held.iter().map(|m| m.skipped_rounds).sum::<u64>(),
        ROUNDS,
        "every round is run or counted as skipped"
    );
    // Back in the network within two rounds of the jump: from then on it gets its neighbours' copies again
    // (measured, seed 5: none in the first two, 3 then 6 of 6 per round after).
    let after: Vec<u32> = held
        .iter()
        .skip_while(|m| m.skipped_rounds == 0)
        .skip(2)
        .map(|m| m.copies_received)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|n| *n > 0),
        "copies received after the catch-up: {after:?}"
    );
    // Nobody else waited for it, and nobody else skipped.
    for (rn, m) in report
        .metrics
        .iter()
        .enumerate()
        .filter(|(rn, _)| *rn != HELD)
    {
        assert_eq!(m.len() as u64, ROUNDS, "node {rn} ran every round");
        assert!(m.iter().all(|r| r.skipped_rounds == 0), "node {rn} skipped");
    }
}

#[test]
fn an_undisturbed_run_never_skips() {
    let report = simulate(None);
    for m in &report.metrics {
        assert_eq!(m.len() as u64, ROUNDS);
        assert!(m.iter().all(|r| r.skipped_rounds == 0 && !r.resumed));
    }
}
