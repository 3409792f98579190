//! Decentralised-learning algorithms behind one trait, driven unchanged by the simulator and the libp2p
//! shell. One file per algorithm; the round engine ([`crate::engine::RnEngine`]) owns one `Box<dyn
//! Algorithm>` and asks it, each round, what each virtual node sends and how what came back combines.
//!
//! # The round, as the engine runs it
//! 1. [`Algorithm::begin_round`], then local training (the driver's).
//! 2. For each exchange step `0..steps()`: [`Algorithm::outgoing`] gives each VN its [`Payload`]; the VNs
//!    exchange over the round's [`Graph`]; every copy a VN accepts goes to [`Algorithm::receive`] (the RN
//!    never learns which peer sent it); when every VN reported the step done, [`Algorithm::combine`] turns
//!    the local model and what was received into the next model.
//! 3. The driver evaluates the combined model.
//!
//! # What the trait expresses, and how each planned algorithm fits
//! | need | how | algorithms |
//! |---|---|---|
//! | same payload to every neighbour | [`Payload::Broadcast`] | Shatter, EL, EL-Local, GHP, D-PSGD, chunking-only |
//! | one payload per neighbour | [`Payload::PerNeighbour`] with [`PerEdge::frames`]: frames per *edge slot* (the VN's sorted neighbour set, by position; the RN never sees identities) | PDMM / ADMM (Δz per edge) |
//! | several exchange steps per round | [`Algorithm::steps`] > 1; `outgoing`/`receive`/`combine` get the step | Muffliato (10 gossip steps) |
//! | a subset of coordinates | a [`ChunkFrame`] carries a chunk index into the static partition; sparsification uses a partition of d into 1/F chunks and sends a (random or top-k-chosen) chunk, chunking-only one random chunk of K | sparsify-random/topk:F, chunking:K |
//! | per-round overlay, a static graph or a directed push | [`Algorithm::graph`]: [`Graph::PerRound`], [`Graph::Static`] (negotiated once by the same overlay protocol, then reused) or [`Graph::Push`] (no overlay: r targets from the VN's Cyclon view) | D-PSGD, PDMM: static; EL-Local: push; the rest per round |
//! | another combine rule | [`Algorithm::combine`] is the algorithm's own: per-parameter mean (Shatter, EL), mean with self-correction of the noise (GHP: own term − r·g), Metropolis-style weights (D-PSGD), dual update then primal step (PDMM) | all |
//! | local noise before sending | inside `outgoing` (the model is the algorithm's to perturb) | Muffliato, GHP, random:σ |
//!
//! The engine carries broadcast and per-neighbour payloads over per-round or static graphs, in one or several
//! steps per round (each step its own exchange, numbered `round · steps + step` on the wire). A per-neighbour
//! payload goes RN → VN as `PerEdge` (the VN answers with its number of edge slots once its neighbours are
//! known) then `PerEdgeFrames` (frame i for slot i); see `engine/vn/edge_slots.rs` for what happens to a dropped edge's
//! slot. An algorithm with per-edge state ([`Algorithm::per_edge`] gives its [`PerEdge`]) gets every copy with its slot.
//!
//! # Layout
//! - `mod.rs`: the [`Algorithm`] trait, [`Payload`], [`Graph`], [`AlgoError`].
//! - `shatter.rs`: [`Shatter`], k VNs, static seeded chunk partition, per-parameter mean.
//! - `el.rs`: Epidemic Learning, Shatter with k = 1 ([`el`]).
//! - `spec.rs`: [`AlgoSpec`], the algorithm as configs and command lines name it, and its construction.
//! - `el_local.rs`: [`ElLocal`], EL's local variant: the whole model pushed to r peers of the own Cyclon view
//!   (directed, [`Graph::Push`]).
//! - `dpsgd.rs`: [`Dpsgd`], EL's exchange over one static graph negotiated before round 0 (`WholeModel`, which
//!   EL-local shares: the whole model over a given graph).
//! - `ghp.rs`: [`Perturbed`], Laplace noise on every chunk sent, cancelled in the network average by the own
//!   term's correction (GHP) or not (the random baseline).
//! - `muffliato.rs`: [`Muffliato`], local Gaussian noise then gossip steps over fresh overlays.
//! - `topk.rs`: [`TopK`], top-k sparsification: the coordinates that changed most, named in the frame.
//! - `chunking.rs`: [`OneChunk`], one random chunk of K per round through one VN: the chunking-only
//!   ablation (static partition) and random sparsification (a fresh partition per round).
//! - `pdmm.rs`: [`Pdmm`], A/PDMM over a static graph with random initial duals and per-neighbour Δz frames.

mod chunking;
mod dpsgd;
mod el;
mod el_local;
mod ghp;
mod muffliato;
mod pdmm;
mod shatter;
mod spec;
mod topk;

pub use chunking::OneChunk;
pub use dpsgd::Dpsgd;
pub use el::el;
pub use el_local::ElLocal;
pub use ghp::Perturbed;
pub use muffliato::{GOSSIP_STEPS, Muffliato};
pub use pdmm::{Pdmm, PdmmParams};
pub use shatter::Shatter;
pub use spec::AlgoSpec;
pub use topk::{TopK, decode_sparse, encode_sparse, sparse_len};

use std::sync::Arc;

use models::chunking::ChunkPartition;
use protocol::ChunkFrame;
use protocol::Round;

/// The algorithm a partition of k chunks means today: EL for k = 1, Shatter with k VNs otherwise.
pub fn shatter_or_el(partition: Arc<ChunkPartition>) -> Box<dyn Algorithm> {
    if partition.k() == 1 {
        Box::new(el(partition).expect("k = 1"))
    } else {
        Box::new(Shatter::new(partition))
    }
}

/// The graph an algorithm exchanges over, and so how its VNs find their neighbours (the VN's exchange mode,
/// `VnConfig::graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Graph {
    /// A fresh random r-regular overlay every round (Shatter, EL, Muffliato).
    #[default]
    PerRound,
    /// One overlay negotiated before round 0 and reused every round (D-PSGD, PDMM).
    Static,
    /// No overlay: each round every VN pushes to r peers drawn from its own Cyclon view and accepts from any
    /// peer (directed; EL-Local). The round ends at the exchange deadline: no receiver knows its in-degree.
    Push,
}

/// What one VN sends in one exchange step.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// The same frame to every neighbour.
    Broadcast(ChunkFrame),
    /// A different frame per neighbour: the RN asks [`PerEdge::frames`] once the VN knows how many
    /// neighbours the round's graph gave it.
    PerNeighbour,
}

/// An algorithm's refusal of a copy or a combine.
#[derive(Debug, thiserror::Error)]
pub enum AlgoError {
    #[error(transparent)]
    Models(#[from] models::ModelsError),
    #[error("{0}")]
    Other(String),
}

/// One decentralised-learning algorithm, as one real node runs it.
pub trait Algorithm: Send {
    /// Name in metrics and reports ("shatter", "el", …).
    fn name(&self) -> &str;

    /// Network identities (VNs) per real node: k for Shatter, 1 for the others.
    fn virtual_nodes(&self) -> usize;

    /// Length of each chunk index a VN may send or accept (`len() == virtual_nodes()` for Shatter; the VN
    /// refuses frames of another length).
    fn chunk_lens(&self) -> Vec<usize>;

    fn graph(&self) -> Graph {
        Graph::PerRound
    }

    /// Exchange steps per round.
    fn steps(&self) -> u32 {
        1
    }

    /// A round starts (before local training): reset per-round state.
    fn begin_round(&mut self, round: Round);

    /// What each VN sends in `step` of `round`, from the trained (or last combined) model: `(vn, payload)`.
    fn outgoing(
        &mut self,
        round: Round,
        step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError>;

    /// VN `vn`'s payload of `step` was accepted by `copies` neighbours (GHP corrects its own term by it).
    fn delivered(&mut self, step: u32, vn: usize, copies: u32) {
        let _ = (step, vn, copies);
    }

    /// The algorithm's state per edge, if it keeps any ([`PerEdge`]; PDMM's duals). Its VNs then hand every
    /// copy over with the sender's edge slot, its payloads may be [`Payload::PerNeighbour`], and delivery is
    /// reported per slot. `None` (the default): the RN learns nothing of slots.
    fn per_edge(&mut self) -> Option<&mut dyn PerEdge> {
        None
    }

    /// A copy VN `vn` accepted in `step` (index, length and finiteness already checked by the VN).
    fn receive(&mut self, step: u32, vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError>;

    /// End of `step`: the next model from the local one and what was received.
    fn combine(&mut self, round: Round, step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError>;
}

/// What an algorithm that keeps state per edge needs of the engine: one payload per neighbour, the copies
/// with the edge they came on, and per-edge delivery, so that both ends of an edge can agree on whether an
/// exchange happened on it (PDMM's duals; any algorithm whose state lives on edges, such as ADMM's or a
/// gossip with per-neighbour weights). An edge is named by its **slot**: a position in the VN's sorted
/// neighbour list — of the round, or with [`Graph::Static`] of the graph negotiated once, so the same
/// neighbour all run — never an identity.
pub trait PerEdge {
    /// For [`Payload::PerNeighbour`]: VN `vn`'s frames for its `edges` neighbours in `step` of `round`, in
    /// slot order.
    fn frames(
        &mut self,
        round: Round,
        step: u32,
        vn: usize,
        edges: usize,
    ) -> Result<Vec<ChunkFrame>, AlgoError>;

    /// A copy VN `vn` accepted in `step` from the neighbour in slot `slot` (index, length and finiteness
    /// already checked by the VN).
    fn receive_on_edge(
        &mut self,
        step: u32,
        vn: usize,
        slot: u32,
        frame: &ChunkFrame,
    ) -> Result<(), AlgoError>;

    /// End of a per-neighbour `step` at VN `vn`: `accepted[i]` says whether the neighbour in slot i accepted
    /// our frame (false for a dropped edge, a refused frame or an answer that did not come back in time).
    fn delivered_on_edges(&mut self, step: u32, vn: usize, accepted: &[bool]);

    /// The neighbour in slot `slot` of VN `vn` accepted our frame of exchange `exchange` after that
    /// exchange's [`PerEdge::delivered_on_edges`] had said it did not (its answer came after the deadline).
    fn late_delivered_on_edge(&mut self, exchange: Round, vn: usize, slot: u32) {
        let _ = (exchange, vn, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{RnEngine, RnInput, RnOutput};
    use protocol::rnvn::{FromVirtualNode, RoundSummary, ToVirtualNode};
    use std::time::Duration;

    fn partition(k: usize) -> Arc<ChunkPartition> {
        Arc::new(ChunkPartition::new(&[4, 2], k, 7).unwrap())
    }

    #[test]
    fn shatter_sends_each_vn_its_chunk_and_averages_per_parameter() {
        let p = partition(2);
        let mut a = Shatter::new(p.clone());
        a.begin_round(Round::ZERO);
        let local = vec![0.0f32; 6];
        let out = a.outgoing(Round::ZERO, 0, &local).unwrap();
        assert_eq!(out.len(), 2);
        // A copy of chunk 0 with every value 3: those parameters average to 1.5, the others stay local.
        let copy = ChunkFrame {
            round: Round::ZERO,
            chunk: protocol::ChunkIndex(0),
            values: vec![3.0; p.chunk_len(0)],
        };
        a.receive(0, 0, &copy).unwrap();
        let next = a.combine(Round::ZERO, 0, &local).unwrap();
        assert_eq!(next.iter().filter(|&&v| v == 1.5).count(), p.chunk_len(0));
        assert_eq!(next.iter().filter(|&&v| v == 0.0).count(), p.chunk_len(1));
        assert!(el(p).is_err(), "EL needs a one-chunk partition");
        assert_eq!(shatter_or_el(partition(1)).name(), "el");
    }

    /// A per-neighbour algorithm for the engine's plumbing: frame i carries the value i (or `frames` frames
    /// when set, to test the count check), and it records what came back, by slot.
    #[derive(Default)]
    struct PerSlot {
        frames: Option<usize>,
        received: Vec<(u32, f32)>,
        accepted: Vec<bool>,
    }
    impl Algorithm for PerSlot {
        fn name(&self) -> &str {
            "perslot"
        }
        fn virtual_nodes(&self) -> usize {
            1
        }
        fn chunk_lens(&self) -> Vec<usize> {
            vec![1]
        }
        fn per_edge(&mut self) -> Option<&mut dyn PerEdge> {
            Some(self)
        }
        fn begin_round(&mut self, _: Round) {}
        fn outgoing(
            &mut self,
            _: Round,
            _: u32,
            _: &[f32],
        ) -> Result<Vec<(usize, Payload)>, AlgoError> {
            Ok(vec![(0, Payload::PerNeighbour)])
        }
        fn receive(&mut self, _: u32, _: usize, _: &ChunkFrame) -> Result<(), AlgoError> {
            Err(AlgoError::Other("needs the slot".into()))
        }
        fn combine(&mut self, _: Round, _: u32, l: &[f32]) -> Result<Vec<f32>, AlgoError> {
            // The model after the round says what the algorithm saw: Σ slot·value + 10·(accepted count).
            let seen: f32 = self.received.iter().map(|(s, v)| *s as f32 * v).sum();
            let ok = self.accepted.iter().filter(|a| **a).count() as f32;
            Ok(vec![l[0] + seen + 10.0 * ok])
        }
    }
    impl PerEdge for PerSlot {
        fn frames(
            &mut self,
            round: Round,
            _: u32,
            _: usize,
            edges: usize,
        ) -> Result<Vec<ChunkFrame>, AlgoError> {
            Ok((0..self.frames.unwrap_or(edges))
                .map(|i| ChunkFrame {
                    round,
                    chunk: protocol::ChunkIndex(0),
                    values: vec![i as f32],
                })
                .collect())
        }
        fn receive_on_edge(
            &mut self,
            _: u32,
            _: usize,
            slot: u32,
            f: &ChunkFrame,
        ) -> Result<(), AlgoError> {
            self.received.push((slot, f.values[0]));
            Ok(())
        }
        fn delivered_on_edges(&mut self, _: u32, _: usize, accepted: &[bool]) {
            self.accepted = accepted.to_vec();
        }
    }

    fn trained() -> RnInput {
        RnInput::Trained {
            round: Round::ZERO,
            params: vec![1.0],
            train_loss: 0.0,
            secs: 0.0,
        }
    }

    /// A per-neighbour payload goes out as a request for the VN's edge slots, then one frame per slot; copies
    /// come back with their slot and the per-slot delivery report reaches the algorithm before the combine.
    #[test]
    fn per_neighbour_payloads_go_out_one_frame_per_edge_slot_and_come_back_by_slot() {
        let mut e = RnEngine::new(Box::<PerSlot>::default(), 1).unwrap();
        assert!(e.per_edge());
        let t = Duration::ZERO;
        e.handle(t, RnInput::Start);
        // A slot report before the RN asked (still training) is ignored.
        let early = FromVirtualNode::Edges {
            round: Round(0),
            slots: 9,
        };
        assert!(
            e.handle(t, RnInput::FromVn { vn: 0, msg: early })
                .is_empty()
        );
        let out = e.handle(t, trained());
        assert!(
            matches!(
                &out[..],
                [RnOutput::ToVn {
                    vn: 0,
                    msg: ToVirtualNode::PerEdge(Round(0))
                }]
            ),
            "{out:?}"
        );
        let edges = FromVirtualNode::Edges {
            round: Round(0),
            slots: 3,
        };
        let out = e.handle(
            t,
            RnInput::FromVn {
                vn: 0,
                msg: edges.clone(),
            },
        );
        let [
            RnOutput::ToVn {
                vn: 0,
                msg:
                    ToVirtualNode::PerEdgeFrames {
                        round: Round(0),
                        frames,
                    },
            },
        ] = &out[..]
        else {
            panic!("{out:?}")
        };
        let values: Vec<f32> = frames.iter().map(|f| f.values[0]).collect();
        assert_eq!(values, vec![0.0, 1.0, 2.0], "frame i for slot i");
        assert!(frames.iter().all(|f| f.round == Round(0)));
        assert!(
            e.handle(t, RnInput::FromVn { vn: 0, msg: edges })
                .is_empty(),
            "frames go out once per step"
        );
        let copy = |slot, v: f32| RnInput::FromVn {
            vn: 0,
            msg: FromVirtualNode::ReceivedOnEdge {
                slot,
                frame: ChunkFrame {
                    round: Round(0),
                    chunk: protocol::ChunkIndex(0),
                    values: vec![v],
                },
            },
        };
        e.handle(t, copy(2, 5.0));
        e.handle(t, copy(1, 3.0));
        let report = FromVirtualNode::DeliveredOnEdges {
            round: Round(0),
            accepted: vec![true, false, true],
        };
        e.handle(t, RnInput::FromVn { vn: 0, msg: report });
        let done = FromVirtualNode::Done(RoundSummary::default());
        let out = e.handle(t, RnInput::FromVn { vn: 0, msg: done });
        // 1 + (2·5 + 1·3) + 10·2.
        assert!(
            matches!(out.last(), Some(RnOutput::Evaluate { params, .. }) if params == &vec![34.0]),
            "{out:?}"
        );
    }

    /// An algorithm that answers with another number of frames than the VN has slots stops the node at that
    /// step, before anything is sent.
    #[test]
    fn frames_that_do_not_match_the_edge_slots_fail_the_node_instead_of_going_out() {
        let algo = PerSlot {
            frames: Some(2),
            ..PerSlot::default()
        };
        let mut e = RnEngine::new(Box::new(algo), 1).unwrap();
        let t = Duration::ZERO;
        e.handle(t, RnInput::Start);
        e.handle(t, trained());
        let edges = FromVirtualNode::Edges {
            round: Round(0),
            slots: 3,
        };
        let out = e.handle(t, RnInput::FromVn { vn: 0, msg: edges });
        assert!(
            matches!(&out[..], [RnOutput::Failed(why)] if why.contains("2 frames for 3 edge slots")),
            "{out:?}"
        );
    }

    #[test]
    fn a_round_of_several_steps_exchanges_step_by_step_on_its_own_exchange_numbers() {
        let p = Arc::new(ChunkPartition::new(&[4, 2], 1, 7).unwrap());
        let algo = Muffliato::new(p, 0.0, rand::SeedableRng::seed_from_u64(1)).unwrap();
        let mut e = RnEngine::new(Box::new(algo), 2).unwrap();
        let t = Duration::ZERO;
        e.handle(t, RnInput::Start);
        let mut out = e.handle(
            t,
            RnInput::Trained {
                round: Round::ZERO,
                params: vec![1.0; 6],
                train_loss: 0.0,
                secs: 0.0,
            },
        );
        for step in 0..GOSSIP_STEPS as u64 {
            let sent: Vec<u64> = out
                .iter()
                .filter_map(|o| match o {
                    RnOutput::ToVn {
                        msg: ToVirtualNode::Exchange(f),
                        ..
                    } => Some(f.round.get()),
                    _ => None,
                })
                .collect();
            assert_eq!(sent, vec![step], "step {step} goes out as exchange {step}");
            // A neighbour's copy of all 3s for this exchange, then the VN is done.
            let copy = ChunkFrame {
                round: Round(step),
                chunk: protocol::ChunkIndex(0),
                values: vec![3.0; 6],
            };
            e.handle(
                t,
                RnInput::FromVn {
                    vn: 0,
                    msg: FromVirtualNode::Received(copy),
                },
            );
            let done = RoundSummary {
                round: Round(step),
                ..RoundSummary::default()
            };
            out = e.handle(
                t,
                RnInput::FromVn {
                    vn: 0,
                    msg: FromVirtualNode::Done(done),
                },
            );
        }
        // Ten halvings of the distance to 3: 1 → 3 − 2/2¹⁰.
        let Some(RnOutput::Evaluate { params, .. }) = out.last() else {
            panic!("{out:?}")
        };
        assert!(
            params
                .iter()
                .all(|v| (v - (3.0 - 2.0 / 1024.0)).abs() < 1e-5),
            "{params:?}"
        );
    }

    /// A NaN training loss is the learner's word that training diverged and the params are the model
    /// from before it: the round goes on with them and the metrics say so.
    #[test]
    fn a_diverged_training_is_reported_and_the_round_goes_on() {
        let mut e = RnEngine::new(shatter_or_el(partition(1)), 1).unwrap();
        let t = Duration::ZERO;
        e.handle(t, RnInput::Start);
        let out = e.handle(
            t,
            RnInput::Trained {
                round: Round::ZERO,
                params: vec![2.0; 6],
                train_loss: f64::NAN,
                secs: 0.0,
            },
        );
        assert!(out.iter().any(|o| matches!(
            o,
            RnOutput::ToVn {
                msg: ToVirtualNode::Exchange(_),
                ..
            }
        )));
        let done = FromVirtualNode::Done(RoundSummary::default());
        let out = e.handle(t, RnInput::FromVn { vn: 0, msg: done });
        assert!(
            matches!(out.last(), Some(RnOutput::Evaluate { params, .. }) if params == &vec![2.0; 6])
        );
        let out = e.handle(
            t,
            RnInput::Evaluated {
                round: Round::ZERO,
                metric_name: models::train::MetricKind::Accuracy,
                metric: 0.5,
                loss: 1.0,
                secs: 0.0,
            },
        );
        let m = out
            .iter()
            .find_map(|o| match o {
                RnOutput::RoundDone(m) => Some(m.clone()),
                _ => None,
            })
            .unwrap();
        assert!(m.train_diverged && m.train_loss == 0.0, "{m:?}");
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"train_diverged\":true"), "{json}");
        assert!(
            !json.contains("refused_by_reason"),
            "left out when nothing was refused: {json}"
        );
        let back: crate::engine::RoundMetrics = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn the_engine_runs_a_round_through_the_algorithm() {
        let mut e = RnEngine::new(shatter_or_el(partition(2)), 1).unwrap();
        let t = Duration::ZERO;
        let out = e.handle(t, RnInput::Start);
        assert!(matches!(
            out[..],
            [
                RnOutput::StartRound { exchange: Round(0) },
                RnOutput::Train { round: Round(0) }
            ]
        ));
        let out = e.handle(
            t,
            RnInput::Trained {
                round: Round::ZERO,
                params: vec![1.0; 6],
                train_loss: 0.0,
                secs: 0.0,
            },
        );
        let sent: Vec<usize> = out
            .iter()
            .filter_map(|o| match o {
                RnOutput::ToVn {
                    vn,
                    msg: ToVirtualNode::Exchange(_),
                } => Some(*vn),
                _ => None,
            })
            .collect();
        assert_eq!(sent, vec![0, 1]);
        for vn in 0..2 {
            let done = FromVirtualNode::Done(RoundSummary::default());
            let out = e.handle(t, RnInput::FromVn { vn, msg: done });
            assert_eq!(
                matches!(out.last(), Some(RnOutput::Evaluate { params, .. }) if params == &vec![1.0; 6]),
                vn == 1,
                "evaluates once every VN is done"
            );
        }
    }
}
