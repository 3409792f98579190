//! The one routing layer between the sans-IO engines and their drivers.
//!
//! A driver (the in-memory simulator in `sim.rs`, the libp2p tasks in `net/vn_task.rs` and
//! `runtime/rn_task.rs`) implements two small traits — what it means to send, to set a timer, to hand a message
//! to the other role, to report — and hands every engine output to [`route_vn`] or [`route_rn`]. Each output
//! kind is matched here and nowhere else, so a rule that concerns both drivers is written once. The one that
//! matters most: **a real node never learns which VN sent it a copy.** The VN engine emits
//! [`VnOutput::Received`] with the sender's identity; [`route_vn`] gives that identity only to
//! [`VnDriver::observe_copy`] (a research harness's observer) and hands the RN the bare frame.

use std::sync::Arc;
use std::time::Duration;

use protocol::ChunkFrame;
use protocol::Round;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};

use super::metrics::RoundMetrics;
use super::rn::RnOutput;
use super::vn::{RefusalKind, ReplyToken, VnEngine, VnIdentity, VnOutput};

/// What a driver does for one VN engine.
pub trait VnDriver<I> {
    /// Send a control message (an encoded envelope) to `to`.
    fn send_control(&mut self, to: I, bytes: Vec<u8>);
    /// Send our chunk frame of `round` to `to`; its reply comes back as `VnInput::ChunkReply`.
    fn send_chunk(&mut self, to: I, round: Round, bytes: Arc<Vec<u8>>);
    /// Answer the inbound chunk request `token`.
    fn reply(&mut self, token: ReplyToken, bytes: Vec<u8>);
    /// Hand a message to this VN's real node. It never names a peer.
    fn to_rn(&mut self, msg: FromVirtualNode);
    /// An accepted copy and the VN that sent it, for an observer (`crate::observe`); never the RN's business.
    fn observe_copy(&mut self, from: &I, frame: &ChunkFrame);
    /// Something was refused (already counted by the engine): for logs and the event stream.
    fn refused(&mut self, from: I, what: RefusalKind);
    /// Feed the engine `VnInput::Tick` at or after `at` (the engine's earliest deadline after this input).
    fn set_timer(&mut self, at: Duration);
    /// Ask `to` which exchange it is at (catch-up probes); the answer comes back as `VnInput::RoundAnswer`,
    /// a failure as `VnInput::RoundQueryFailed`. Only engines built `with_round_probes` ask, so a driver
    /// without that message (the simulator) keeps this default.
    fn send_round_query(&mut self, _to: I) {}
    /// Answer the inbound round query `token`.
    fn reply_round(&mut self, _token: ReplyToken, _bytes: Vec<u8>) {}
}

/// Carries out `out`, the outputs of one `engine.handle`/`join`, in order, then asks the engine for its next
/// deadline.
pub fn route_vn<I: VnIdentity, D: VnDriver<I>>(
    engine: &VnEngine<I>,
    out: Vec<VnOutput<I>>,
    driver: &mut D,
) {
    for o in out {
        match o {
            VnOutput::SendControl { to, bytes } => driver.send_control(to, bytes),
            VnOutput::SendChunk { to, round, bytes } => driver.send_chunk(to, round, bytes),
            VnOutput::Reply { token, bytes } => driver.reply(token, bytes),
            VnOutput::SendRoundQuery { to } => driver.send_round_query(to),
            VnOutput::ReplyRound { token, bytes } => driver.reply_round(token, bytes),
            VnOutput::ToRn(msg) => driver.to_rn(msg),
            VnOutput::Received { from, slot, frame } => {
                // The sender stops here: the observer may see it, the RN gets the frame alone (with its edge
                // slot, a position in the VN's neighbour list, for algorithms with per-edge state).
                driver.observe_copy(&from, &frame);
                driver.to_rn(match slot {
                    Some(slot) => FromVirtualNode::ReceivedOnEdge { slot, frame },
                    None => FromVirtualNode::Received(frame),
                });
            }
            VnOutput::Refused { from, what } => driver.refused(from, what),
        }
    }
    if let Some(at) = engine.poll_timeout() {
        driver.set_timer(at);
    }
}

/// What a driver does for one real-node engine. Training and evaluation are the driver's: it owns the model
/// and runs them off the event loop, then feeds `RnInput::Trained` / `RnInput::Evaluated`.
pub trait RnDriver {
    type Error;
    fn to_vn(&mut self, vn: usize, msg: ToVirtualNode) -> Result<(), Self::Error>;
    /// Train the local model for `round` (the observer sees the model the round starts from first).
    fn train(&mut self, round: Round) -> Result<(), Self::Error>;
    /// Load `params` (the aggregated model of `round`) and evaluate it.
    fn evaluate(&mut self, round: Round, params: Vec<f32>) -> Result<(), Self::Error>;
    fn round_done(&mut self, metrics: RoundMetrics) -> Result<(), Self::Error>;
    /// The node sits out `round`: feed `RnInput::Idled` after `wait`.
    fn idle(&mut self, round: Round, wait: Duration) -> Result<(), Self::Error>;
    /// All rounds are done (every VN was already told to stop).
    fn finished(&mut self) -> Result<(), Self::Error>;
    /// The engine cannot go on: return the driver's error for `why`.
    fn failed(&mut self, why: String) -> Result<(), Self::Error>;
}

/// Carries out `out`, the outputs of one `RnEngine::handle`, in order, for an RN with `k` VNs.
pub fn route_rn<D: RnDriver>(k: usize, out: Vec<RnOutput>, driver: &mut D) -> Result<(), D::Error> {
    for o in out {
        match o {
            RnOutput::StartRound { exchange } => {
                for vn in 0..k {
                    driver.to_vn(vn, ToVirtualNode::StartRound(exchange))?;
                }
            }
            RnOutput::Train { round } => driver.train(round)?,
            RnOutput::ToVn { vn, msg } => driver.to_vn(vn, msg)?,
            RnOutput::Evaluate { round, params } => driver.evaluate(round, params)?,
            RnOutput::RoundDone(m) => driver.round_done(m)?,
            RnOutput::Idle { round, wait } => driver.idle(round, wait)?,
            RnOutput::Finished => driver.finished()?,
            RnOutput::Failed(why) => driver.failed(why)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what the router asked for.
    #[derive(Default)]
    struct Recorder {
        to_rn: Vec<FromVirtualNode>,
        observed: Vec<(u32, Round)>,
        timers: Vec<Duration>,
        sent: usize,
    }

    impl VnDriver<u32> for Recorder {
        fn send_control(&mut self, _: u32, _: Vec<u8>) {
            self.sent += 1;
        }
        fn send_chunk(&mut self, _: u32, _: Round, _: Arc<Vec<u8>>) {
            self.sent += 1;
        }
        fn reply(&mut self, _: ReplyToken, _: Vec<u8>) {}
        fn to_rn(&mut self, msg: FromVirtualNode) {
            self.to_rn.push(msg);
        }
        fn observe_copy(&mut self, from: &u32, frame: &ChunkFrame) {
            self.observed.push((*from, frame.round));
        }
        fn refused(&mut self, _: u32, _: RefusalKind) {}
        fn set_timer(&mut self, at: Duration) {
            self.timers.push(at);
        }
    }

    #[test]
    fn a_received_copy_reaches_the_rn_without_its_sender() {
        let cfg = super::super::vn::VnConfig {
            sampler: sampling::SamplerConfig::default(),
            exchange_timeout: Duration::from_secs(1),
            send_jitter: Duration::ZERO,
            send_pace: super::super::SendPace::default(),
            lookahead: 0,
            last_round: None,
            graph: crate::algo::Graph::PerRound,
            edge_slots: false,
            skip: Arc::default(),
            start_jitter: Duration::ZERO,
            chunk_lens: Arc::new(vec![2]),
            values: super::super::ValueBounds::default(),
        };
        let rng = |s| sampling::derive_rng(1, s);
        let mut e = VnEngine::new(0u32, cfg, rng(0), rng(1), Box::new(|_| true)).unwrap();
        let mut d = Recorder::default();
        let out = e.join(Duration::ZERO, [5u32, 6]);
        route_vn(&e, out, &mut d);
        assert_eq!(d.timers.len(), 1, "a joined VN has a shuffle pending");
        let frame = ChunkFrame {
            round: Round(3),
            chunk: protocol::ChunkIndex(0),
            values: vec![1.0, 2.0],
        };
        let out = vec![VnOutput::Received {
            from: 42u32,
            slot: None,
            frame: frame.clone(),
        }];
        route_vn(&e, out, &mut d);
        assert_eq!(
            d.observed,
            vec![(42, Round(3))],
            "the observer sees the sender"
        );
        assert_eq!(
            d.to_rn,
            vec![FromVirtualNode::Received(frame)],
            "the RN gets the frame alone"
        );
    }
}
