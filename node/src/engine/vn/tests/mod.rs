//! The VN engine's unit tests, driven through `handle` as a driver would.

mod catch_up;
mod edge_slots;
mod exchange;
mod inbound;
mod negotiation_starts;
mod push;
mod send_schedule;

use super::*;
use protocol::control::OverlayMsg;
use protocol::rnvn::RoundSummary;
use sampling::SamplerConfig;

use crate::engine::values::ValueBounds;
use proptest::prelude::*;
use sampling::derive_rng;

const LENS: [usize; 2] = [3, 2];

fn engine(allowed: fn(&u32) -> bool) -> VnEngine<u32> {
    let cfg = VnConfig {
        sampler: SamplerConfig {
            cyclon: sampling::CyclonConfig::default(),
            overlay: sampling::OverlayConfig::new(2, Duration::from_millis(10)),
        },
        exchange_timeout: Duration::from_secs(1),
        send_jitter: Duration::from_millis(100),
        send_pace: SendPace::default(),
        lookahead: 0,
        last_round: None,
        graph: Graph::PerRound,
        edge_slots: false,
        skip: Arc::default(),
        start_jitter: Duration::ZERO,
        chunk_lens: Arc::new(LENS.to_vec()),
        values: ValueBounds::default(),
    };
    engine_with(cfg, allowed)
}

/// VN 0 with `cfg`, accepting the peers `allowed` accepts.
fn engine_with(cfg: VnConfig, allowed: fn(&u32) -> bool) -> VnEngine<u32> {
    VnEngine::new(
        0,
        cfg,
        derive_rng(1, 0),
        derive_rng(1, 1),
        Box::new(allowed),
    )
    .unwrap()
}

fn chunk(round: u64, index: u32, values: &[f32]) -> Vec<u8> {
    ChunkFrame {
        round: Round(round),
        chunk: protocol::ChunkIndex(index),
        values: values.to_vec(),
    }
    .encode()
}

/// Control bytes from `from` (its own envelope).
/// `from` walks a proposal for `round` through `e`: a claim that `from` is at least that far (catch-up).
fn claim(e: &mut VnEngine<u32>, now: Duration, from: u32, round: u64) -> Vec<VnOutput<u32>> {
    let msg = ControlMsg::Overlay(OverlayMsg::Propose {
        round: Round(round),
        origin: Some(from),
        nonce: 1,
        ttl: 1,
    });
    e.handle(
        now,
        VnInput::Control {
            from,
            bytes: control(from, msg),
        },
    )
}

fn control(from: u32, msg: ControlMsg<u32>) -> Vec<u8> {
    protocol::codec::encode_control(&ControlEnvelope { sender: from, msg }).unwrap()
}

/// Proposes to `e` from fresh peers, one per sub-step, until it offers one a slot in `round` (it accepts
/// only in its acceptor sub-steps). Returns that peer and the time.
fn reserve_link(e: &mut VnEngine<u32>, round: Round, from: Duration) -> (u32, Duration) {
    let substep = e.cfg.sampler.overlay.substep;
    for i in 0..20u32 {
        let now = from + substep * i + Duration::from_millis(1);
        let peer = 100 + i;
        let msg = ControlMsg::Overlay(OverlayMsg::Propose {
            round,
            origin: Some(peer),
            nonce: i as u64,
            ttl: 1,
        });
        let bytes = control(peer, msg);
        e.handle(now, VnInput::Control { from: peer, bytes });
        if e.sampler.has_link(round, &peer) {
            return (peer, now);
        }
    }
    panic!("no proposal accepted in 20 sub-steps");
}

/// The refusal reason sent back for a chunk, if any.
fn reply_of(out: &[VnOutput<u32>]) -> Option<ChunkReply> {
    out.iter().find_map(|o| match o {
        VnOutput::Reply { bytes, .. } => Some(protocol::codec::decode_control(bytes).unwrap()),
        _ => None,
    })
}

fn send_chunk(
    e: &mut VnEngine<u32>,
    now: Duration,
    from: u32,
    bytes: Vec<u8>,
) -> Vec<VnOutput<u32>> {
    e.handle(
        now,
        VnInput::Chunk {
            from,
            bytes: bytes.into(),
            token: 1,
        },
    )
}
