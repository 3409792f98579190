//! What an honest-but-curious PDMM neighbour learns of the sender's model (`--audit` with `--algo pdmm`).
//!
//! A PDMM frame is not a model: in round 0 it carries the sender's initial dual, later the increment
//! `Δy_{j|i}(t+1) = −θ (y_{j|i}(t) + y_{i|j}(t) + 2ρ w_i(t))` (`node::algo::Pdmm`, eq. 7 on signed duals). But
//! the receiver j holds both duals of the edge — its own `y_{j|i}` (the initial value it drew and sent,
//! plus every increment it accepted from i) and its mirror of `y_{i|j}` (the initial value i sent it, plus
//! every increment it sent i that i accepted) — so it recovers the sender's model exactly:
//!
//! ```text
//! w_i(t) = −(Δ/θ + y_{j|i}(t) + y_{i|j}(t)) / (2ρ)
//! ```
//!
//! (the paper's Proposition 1 / eq. 35: the models are no secret of PDMM; its privacy is about gradients.)
//! [`PdmmView`] replays, from the frames the audit observer sees (every accepted frame, at its receiver),
//! exactly the state each attacker holds, and turns each frame of round t ≥ 1 into `w_i(t)`; the audit then
//! attacks that model as it attacks EL's. The duals are tracked in f64 from the f32 values that travelled,
//! as the nodes do.

use std::collections::{BTreeMap, HashMap};

/// One dual `y_{owner|peer}` as both ends of the edge know it.
#[derive(Default)]
struct Dual {
    value: Vec<f64>,
    /// Increments not applied yet, by the exchange that sent them (applied once a later exchange is read).
    pending: BTreeMap<u64, Vec<f32>>,
}

impl Dual {
    /// The value at the start of exchange `t`: every increment of an exchange before t applied.
    fn at(&mut self, t: u64) -> &[f64] {
        let later = self.pending.split_off(&t);
        for (_, dz) in std::mem::replace(&mut self.pending, later) {
            self.value
                .iter_mut()
                .zip(&dz)
                .for_each(|(y, &d)| *y += d as f64);
        }
        &self.value
    }
}

/// Every edge's duals, replayed from the frames the receivers accepted (one VN per node).
pub struct PdmmView {
    theta: f64,
    rho: f64,
    /// `(owner, peer)` → `y_{owner|peer}`.
    duals: HashMap<(usize, usize), Dual>,
}

impl PdmmView {
    pub fn new(theta: f64, rho: f64) -> Self {
        Self {
            theta,
            rho,
            duals: HashMap::new(),
        }
    }

    /// Node `receiver` accepted `values` from node `sender` in exchange `exchange`. Returns the sender's
    /// model of that round as the receiver computes it (`None` for the setup round, or when the edge's setup
    /// was not seen).
    pub fn observe(
        &mut self,
        receiver: usize,
        sender: usize,
        exchange: u64,
        values: &[f32],
    ) -> Option<Vec<f32>> {
        if exchange == 0 {
            // The sender's initial dual on this edge: the receiver's mirror of y_{sender|receiver}.
            let d = self.duals.entry((sender, receiver)).or_default();
            d.value = values.iter().map(|&v| v as f64).collect();
            d.pending.clear();
            return None;
        }
        let (theta, rho) = (self.theta, self.rho);
        let own = self
            .duals
            .get_mut(&(receiver, sender))?
            .at(exchange)
            .to_vec();
        let mirror = self.duals.get_mut(&(sender, receiver))?.at(exchange);
        if own.len() != values.len() || mirror.len() != values.len() {
            return None;
        }
        let w = values
            .iter()
            .zip(&own)
            .zip(mirror)
            .map(|((&dz, &a), &b)| (-(dz as f64 / theta + a + b) / (2.0 * rho)) as f32)
            .collect();
        // The increment updates the receiver's own dual after this exchange.
        self.duals
            .get_mut(&(receiver, sender))?
            .pending
            .insert(exchange, values.to_vec());
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use node::algo::{Algorithm, Pdmm, PdmmParams, PerEdge};
    use protocol::Round;
    use rand::SeedableRng;

    /// In the simulator, with a real MLP and σ_Z > 0: every model the view recovers from a frame is the
    /// sender's model of that round (what it starts the next round from), to float precision.
    #[test]
    fn in_the_simulator_every_recovered_model_is_the_senders_true_model() {
        use models::data::{DatasetSpec, SyntheticConfig};
        use std::sync::{Arc, Mutex};
        let nodes = 6;
        let lc = node::learner::LearningConfig {
            dataset: DatasetSpec::Synthetic(SyntheticConfig {
                train_samples: 120,
                test_samples: 20,
                sample_shape: vec![4],
                num_classes: 2,
                ..SyntheticConfig::default()
            }),
            model: Some(models::nn::ModelSpec::Mlp { hidden: vec![3] }),
            partition: models::data::Partition::Iid,
            nodes,
            train: models::train::TrainConfig {
                lr: 0.1,
                batch_size: 8,
                work: models::train::LocalWork::Steps(2),
                clip: None,
            },
            seed: 3,
            max_test_samples: Some(20),
        };
        let (split, parts) = lc.load().unwrap();
        let learners = lc.learners(&split, &parts, 0..nodes).unwrap();
        let partition = Arc::new(lc.chunk_partition(&learners[0].model, 1).unwrap());
        let params = PdmmParams::pdmm(0.5);
        struct Check {
            view: Mutex<PdmmView>,
            /// (sender, round) → recovered model; node → (round, model it starts that round from).
            recovered: Mutex<Vec<(usize, u64, Vec<f32>)>>,
            starts: Mutex<Vec<(usize, u64, Vec<f32>)>>,
        }
        impl node::observe::Observer<u32> for Check {
            fn wants_params(&self, _: usize, _: Round) -> bool {
                true
            }
            fn round_start(&self, node: usize, round: Round, params: &[f32]) {
                self.starts
                    .lock()
                    .unwrap()
                    .push((node, round.get(), params.to_vec()));
            }
            fn chunk_received(&self, node: usize, _: usize, from: &u32, f: &protocol::ChunkFrame) {
                let sender = *from as usize;
                let seen =
                    self.view
                        .lock()
                        .unwrap()
                        .observe(node, sender, f.round.get(), &f.values);
                if let Some(w) = seen {
                    self.recovered
                        .lock()
                        .unwrap()
                        .push((sender, f.round.get(), w));
                }
            }
        }
        let check = Check {
            view: Mutex::new(PdmmView::new(params.theta, params.rho)),
            recovered: Mutex::default(),
            starts: Mutex::default(),
        };
        let cfg = node::sim::SimConfig {
            algorithm: Some(node::algo::AlgoSpec::Pdmm(params)),
            ..node::sim::SimConfig::new(1, 2, 5, 3)
        };
        node::sim::run_observed(&cfg, learners, partition, |_, _| {}, Some(&check)).unwrap();
        let starts = check.starts.into_inner().unwrap();
        let recovered = check.recovered.into_inner().unwrap();
        let mut compared = 0;
        for (sender, round, w) in &recovered {
            // The sender's model of round t is what it starts round t + 1 from.
            let Some((_, _, truth)) = starts
                .iter()
                .find(|(n, r, _)| n == sender && *r == round + 1)
            else {
                continue;
            };
            let gap = w
                .iter()
                .zip(truth)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(gap < 1e-3, "sender {sender} round {round}: gap {gap}");
            compared += 1;
        }
        assert!(
            compared >= nodes * 2 * 3,
            "{compared} recovered models compared"
        );
    }

    /// Two nodes on one edge, running the real algorithm with random initial duals: from the frames alone
    /// the view recovers each sender's model of every round to float precision.
    #[test]
    fn a_neighbour_recovers_the_senders_model_exactly_from_the_frames() {
        let params = PdmmParams::pdmm(1.0);
        let d = 4;
        let mut algos: Vec<Pdmm> = (0..2)
            .map(|i| {
                Pdmm::new(
                    "pdmm",
                    d,
                    params,
                    rand_chacha::ChaCha12Rng::seed_from_u64(i),
                )
                .unwrap()
            })
            .collect();
        let mut view = PdmmView::new(params.theta, params.rho);
        let mut models = [vec![0.5f32, -1.0, 2.0, 0.0], vec![1.5f32, 1.0, -2.0, 3.0]];
        for t in 0..6u64 {
            let round = Round(t);
            let mut frames = Vec::new();
            for (a, m) in algos.iter_mut().zip(&models) {
                a.begin_round(round);
                // "Training": a fixed nudge.
                let trained: Vec<f32> = m.iter().map(|v| v * 0.9 + 0.1).collect();
                a.outgoing(round, 0, &trained).unwrap();
                frames.push(a.frames(round, 0, 0, 1).unwrap().remove(0));
            }
            for (i, a) in algos.iter_mut().enumerate() {
                let other = 1 - i;
                a.receive_on_edge(0, 0, 0, &frames[other]).unwrap();
                a.delivered_on_edges(0, 0, &[true]);
                models[i] = a.combine(round, 0, &[]).unwrap();
            }
            for i in 0..2 {
                let seen = view.observe(1 - i, i, t, &frames[i].values);
                if t == 0 {
                    assert!(seen.is_none());
                    continue;
                }
                let seen = seen.expect("setup seen");
                let gap = seen
                    .iter()
                    .zip(&models[i])
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    gap < 1e-4,
                    "round {t}, sender {i}: {seen:?} vs {:?}",
                    models[i]
                );
            }
        }
    }
}
