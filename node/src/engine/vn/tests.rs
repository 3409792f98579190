//! The VN engine's unit tests, driven through `handle` as a driver would.

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
            bytes,
            token: 1,
        },
    )
}

/// When a VN with send pace `pace` sends its chunk of round 0, counted from its RN's `StartRound`, if the
/// chunk comes `chunk_at` after it (and the RN sent `Prepare` `prepared_ahead` before it, if any).
fn paced_send_time(
    pace: Duration,
    prepared_ahead: Option<Duration>,
    chunk_at: Duration,
) -> Option<Duration> {
    let cfg = VnConfig {
        graph: Graph::Static,
        send_jitter: Duration::ZERO,
        send_pace: SendPace::Fixed(pace),
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = engine_with(cfg, |_| true);
    let start = Duration::from_secs(100);
    if let Some(ahead) = prepared_ahead {
        e.handle(start - ahead, VnInput::Prepare(Round(0)));
    }
    e.handle(start, VnInput::StartRound(Round(0)));
    let mut out = Vec::new();
    e.on_frozen(start, Round(0), vec![5, 7], &mut out);
    let frame = ChunkFrame {
        round: Round(0),
        chunk: protocol::ChunkIndex(0),
        values: vec![1.0],
    };
    let mut t = start + chunk_at;
    let mut out = e.handle(t, VnInput::FromRn(ToVirtualNode::Exchange(frame)));
    // Step time in 5 ms ticks until the chunk goes out, inside the overlay's own window (140 ms here:
    // past it the sampler's negotiation, which has no peers, would replace the injected overlay).
    while t < start + Duration::from_millis(135) {
        if out.iter().any(|o| matches!(o, VnOutput::SendChunk { .. })) {
            return Some(t - start);
        }
        t += Duration::from_millis(5);
        out = e.handle(t, VnInput::Tick);
    }
    None
}

/// The overlay wait a VN reports for round 0 when its RN hands it the chunk `chunk_at` after the round
/// started and the overlay freezes `frozen_at` after it.
fn overlay_wait(chunk_at: Duration, frozen_at: Duration) -> u64 {
    let cfg = VnConfig {
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = engine_with(cfg, |_| true);
    let start = Duration::from_secs(100);
    e.handle(start, VnInput::StartRound(Round(0)));
    let frame = ChunkFrame {
        round: Round(0),
        chunk: protocol::ChunkIndex(0),
        values: vec![1.0],
    };
    let mut events: Vec<(Duration, bool)> = vec![(chunk_at, true), (frozen_at, false)];
    events.sort();
    for (at, is_chunk) in events {
        if is_chunk {
            e.handle(
                start + at,
                VnInput::FromRn(ToVirtualNode::Exchange(frame.clone())),
            );
        } else {
            e.on_frozen(start + at, Round(0), vec![5, 7], &mut Vec::new());
        }
    }
    e.exchanges.get(&Round(0)).unwrap().summary.overlay_wait_us
}

/// A round's summary tells how long its exchange waited for the overlay: from the RN's chunk to the
/// freeze, and nothing when the overlay was frozen before the chunk came (negotiated ahead).
#[test]
fn the_summary_reports_how_long_the_chunk_waited_for_the_overlay() {
    let ms = Duration::from_millis;
    assert_eq!(
        overlay_wait(ms(10), ms(55)),
        45_000,
        "frozen 45 ms after the chunk"
    );
    assert_eq!(overlay_wait(ms(10), ms(10)), 0, "frozen as the chunk came");
    assert_eq!(
        overlay_wait(ms(30), ms(5)),
        0,
        "frozen before the chunk: no wait"
    );
}

/// The send pace holds a chunk until the node's round start + pace, whenever the chunk came: a node that
/// trained fast sends no earlier than one that trained slowly (issue 13); with no pace it sends at once.
#[test]
fn a_paced_chunk_leaves_at_round_start_plus_pace_not_when_training_ended() {
    let sent_at = |pace, chunk_at| paced_send_time(pace, None, chunk_at);
    let ms = Duration::from_millis;
    assert_eq!(
        sent_at(Duration::ZERO, ms(30)),
        Some(ms(30)),
        "no pace: at once"
    );
    // Trained in 30 ms or in 70 ms: both send at the 100 ms pace.
    assert_eq!(sent_at(ms(100), ms(30)), Some(ms(100)));
    assert_eq!(sent_at(ms(100), ms(70)), Some(ms(100)));
    // Slower than the pace: at once, the pace never holds a late chunk longer.
    assert_eq!(sent_at(ms(100), ms(120)), Some(ms(120)));
}

/// `Prepare(0)` (its RN's warm-up ends soon) opens round 0's negotiation as `StartRound(0)` would, but the
/// round has not started: a paced chunk leaves at the `StartRound` that follows plus the pace, not at the
/// prepare plus the pace.
#[test]
fn a_prepared_first_round_is_negotiated_early_and_paced_from_its_real_start() {
    let opened_at = |first: fn(Round) -> VnInput<u32>| {
        let mut e = engine(|_| true);
        e.handle(Duration::ZERO, first(Round(0)));
        (0..200u64)
            .map(Duration::from_millis)
            .find(|&now| {
                e.handle(now, VnInput::Tick);
                e.neighbours(Round(0)).is_some()
            })
            .expect("opened")
    };
    assert_eq!(opened_at(VnInput::Prepare), opened_at(VnInput::StartRound));

    let ms = Duration::from_millis;
    assert_eq!(
        paced_send_time(ms(100), Some(ms(20)), ms(30)),
        Some(ms(100)),
        "paced from StartRound, not from Prepare"
    );
}

/// The automatic pace learns from a completed exchange when the slowest neighbour's chunk came (here 40 ms
/// after the round start, no jitter) and holds the next exchange's chunk until its start + 40 ms.
#[test]
fn the_automatic_pace_learns_when_the_last_neighbours_chunk_came() {
    let cfg = VnConfig {
        graph: Graph::Static,
        send_jitter: Duration::ZERO,
        send_pace: SendPace::Auto {
            floor: Duration::ZERO,
        },
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = VnEngine::new(
        0u32,
        cfg,
        derive_rng(1, 0),
        derive_rng(1, 1),
        Box::new(|_| true),
    )
    .unwrap();
    let ms = Duration::from_millis;
    let frame = |round: u64| ChunkFrame {
        round: Round(round),
        chunk: protocol::ChunkIndex(0),
        values: vec![1.0],
    };
    let sent = |out: &[VnOutput<u32>]| out.iter().any(|o| matches!(o, VnOutput::SendChunk { .. }));
    e.handle(ms(0), VnInput::StartRound(Round(0)));
    let mut out = Vec::new();
    // The static graph of exchange 0 (injected); later exchanges run over it.
    e.on_frozen(ms(0), Round(0), vec![5], &mut out);
    // Exchange 1: nothing learnt yet, so the chunk leaves at once.
    e.handle(ms(10), VnInput::StartRound(Round(1)));
    let out = e.handle(ms(10), VnInput::FromRn(ToVirtualNode::Exchange(frame(1))));
    assert!(sent(&out), "{out:?}");
    let reply = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
    e.handle(
        ms(11),
        VnInput::ChunkReply {
            from: 5,
            round: Round(1),
            bytes: reply,
        },
    );
    let out = send_chunk(&mut e, ms(50), 5, frame(1).encode());
    assert!(
        out.iter()
            .any(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::Done(_)))),
        "exchange 1 complete: {out:?}"
    );
    // Exchange 2 starts at 60 ms, its chunk is ready at 65 ms, and waits for 60 + 40 ms.
    e.handle(ms(60), VnInput::StartRound(Round(2)));
    let mut out = e.handle(ms(65), VnInput::FromRn(ToVirtualNode::Exchange(frame(2))));
    let mut t = ms(65);
    while !sent(&out) && t < ms(130) {
        t += ms(5);
        out = e.handle(t, VnInput::Tick);
    }
    assert_eq!(t, ms(100), "sent at the learnt pace");
}

/// Directed push (EL-Local): no overlay message is ever sent; the chunk goes to r = 2 distinct peers of the
/// Cyclon view; a chunk from a peer we never linked with is accepted (one that comes before the RN starts
/// the round waits for it); a second one from the same peer is a duplicate; the round ends at its
/// deadline, not when the r targets answered (no receiver knows its in-degree).
#[test]
fn push_mode_sends_to_view_peers_and_accepts_from_any_peer() {
    let mut e = engine_with(
        VnConfig {
            graph: Graph::Push,
            ..engine(|_| true).cfg.clone()
        },
        |_| true,
    );
    let t = Duration::from_secs(1);
    let mut all = e.join(t, [1u32, 2, 3, 4, 5]);
    let early = send_chunk(&mut e, t, 9, chunk(0, 0, &[0.1, 0.2, 0.3]));
    assert_eq!(reply_of(&early), None, "held until the RN starts round 0");
    assert_eq!(e.pending_len(), 1);
    let out = e.handle(t, VnInput::StartRound(Round(0)));
    assert_eq!(reply_of(&out), Some(ChunkReply::Accepted));
    assert!(
        out.iter()
            .any(|o| matches!(o, VnOutput::Received { from: 9, .. }))
    );
    let dup = send_chunk(&mut e, t, 9, chunk(0, 0, &[0.1, 0.2, 0.3]));
    assert_eq!(
        reply_of(&dup),
        Some(ChunkReply::Refused(RefuseReason::Duplicate))
    );
    let frame = ChunkFrame {
        round: Round(0),
        chunk: protocol::ChunkIndex(0),
        values: vec![0.5; 3],
    };
    all.extend(e.handle(t, VnInput::FromRn(ToVirtualNode::Exchange(frame))));
    let sent_at = t + Duration::from_millis(150);
    all.extend(e.handle(sent_at, VnInput::Tick));
    let targets: BTreeSet<u32> = all
        .iter()
        .filter_map(|o| match o {
            VnOutput::SendChunk { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(targets.len(), 2, "{all:?}");
    assert!(targets.iter().all(|p| (1..=5).contains(p)), "{targets:?}");
    for to in &targets {
        let bytes = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
        all.extend(e.handle(
            sent_at,
            VnInput::ChunkReply {
                from: *to,
                round: Round(0),
                bytes,
            },
        ));
    }
    let done = |out: &[VnOutput<u32>]| {
        out.iter().find_map(|o| match o {
            VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
            _ => None,
        })
    };
    assert_eq!(
        done(&all),
        None,
        "every target answered, but senders are unknown: wait"
    );
    let out = e.handle(sent_at + e.cfg.exchange_timeout, VnInput::Tick);
    let s = done(&out).expect("the deadline ends the round");
    assert_eq!((s.received, s.delivered, s.neighbours), (1, 2, 2));
    all.extend(out);
    for o in &all {
        if let VnOutput::SendControl { bytes, .. } = o {
            let env: ControlEnvelope<u32> = protocol::codec::decode_control(bytes).unwrap();
            assert!(matches!(env.msg, ControlMsg::Cyclon(_)), "{:?}", env.msg);
        }
    }
}

/// A per-edge exchange that ended before a neighbour's acceptance came back reports the slot undelivered;
/// the acceptance that comes afterwards is reported as a late delivery for that slot (PDMM's mirrors).
#[test]
fn an_acceptance_after_the_deadline_is_reported_late() {
    let cfg = VnConfig {
        graph: Graph::Static,
        edge_slots: true,
        send_jitter: Duration::ZERO,
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = VnEngine::new(
        0u32,
        cfg,
        derive_rng(1, 0),
        derive_rng(1, 1),
        Box::new(|_| true),
    )
    .unwrap();
    let ms = Duration::from_millis;
    e.handle(ms(0), VnInput::StartRound(Round(0)));
    let mut out = Vec::new();
    e.on_frozen(ms(0), Round(0), vec![5], &mut out);
    e.handle(ms(10), VnInput::StartRound(Round(1)));
    e.handle(ms(10), VnInput::FromRn(ToVirtualNode::PerEdge(Round(1))));
    let frame = |v: f32| ChunkFrame {
        round: Round(1),
        chunk: protocol::ChunkIndex(0),
        values: vec![v],
    };
    let out = e.handle(
        ms(10),
        VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
            round: Round(1),
            frames: vec![frame(1.0)],
        }),
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, VnOutput::SendChunk { to: 5, .. })),
        "{out:?}"
    );
    send_chunk(&mut e, ms(20), 5, frame(2.0).encode());
    // No answer from 5 before the 1 s deadline: the exchange ends with slot 0 undelivered.
    let out = e.handle(ms(1100), VnInput::Tick);
    assert!(
        out.iter().any(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges { round: Round(1), accepted }) if accepted == &vec![false])),
        "{out:?}"
    );
    let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
    let out = e.handle(
        ms(1200),
        VnInput::ChunkReply {
            from: 5,
            round: Round(1),
            bytes: accepted,
        },
    );
    assert_eq!(
        out.iter()
            .filter(|o| matches!(
                o,
                VnOutput::ToRn(FromVirtualNode::LateDeliveredOnEdge {
                    round: Round(1),
                    slot: 0
                })
            ))
            .count(),
        1,
        "{out:?}"
    );
}

/// Per-edge exchanges over a static graph: the slots are the graph's sorted neighbours, frame i goes to
/// slot i, copies come back with their slot, delivery is reported per slot; an edge refused later keeps
/// its slot (the count stays 3) but its frame is no longer sent and its flag is false.
#[test]
fn per_edge_frames_go_to_their_slots_and_a_dropped_edge_keeps_its_slot_without_a_frame() {
    let cfg = VnConfig {
        graph: Graph::Static,
        edge_slots: true,
        send_jitter: Duration::ZERO,
        send_pace: SendPace::default(),
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = VnEngine::new(
        0u32,
        cfg,
        derive_rng(1, 0),
        derive_rng(1, 1),
        Box::new(|_| true),
    )
    .unwrap();
    let t = Duration::ZERO;
    e.handle(t, VnInput::StartRound(Round(0)));
    // Exchange 0's overlay freezes with three neighbours (injected: the negotiation is the sampler's).
    let mut out = Vec::new();
    e.on_frozen(t, Round(0), vec![9, 5, 7], &mut out);
    let frame = |round: u64, v: f32| ChunkFrame {
        round: Round(round),
        chunk: protocol::ChunkIndex(0),
        values: vec![v],
    };
    let sends = |out: &[VnOutput<u32>]| -> Vec<(u32, f32)> {
        out.iter()
            .filter_map(|o| match o {
                VnOutput::SendChunk { to, bytes, .. } => {
                    Some((*to, ChunkFrame::decode(bytes).unwrap().values[0]))
                }
                _ => None,
            })
            .collect()
    };
    let edges = |out: &[VnOutput<u32>]| {
        out.iter().find_map(|o| match o {
            VnOutput::ToRn(FromVirtualNode::Edges { round, slots }) => Some((*round, *slots)),
            _ => None,
        })
    };
    let reply = |e: &mut VnEngine<u32>, from: u32, round: u64, r: ChunkReply| {
        let bytes = protocol::codec::encode_control(&r).unwrap();
        e.handle(
            t,
            VnInput::ChunkReply {
                from,
                round: Round(round),
                bytes,
            },
        )
    };

    // Exchange 1: three slots, sorted: 5, 7, 9.
    let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(1))));
    assert_eq!(edges(&out), Some((Round(1), 3)));
    let frames = vec![frame(1, 10.0), frame(1, 11.0), frame(1, 12.0)];
    let out = e.handle(
        t,
        VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
            round: Round(1),
            frames,
        }),
    );
    assert_eq!(
        sends(&out),
        vec![(5, 10.0), (7, 11.0), (9, 12.0)],
        "frame i to slot i"
    );
    let out = e.handle(
        t,
        VnInput::Chunk {
            from: 7,
            bytes: frame(1, 3.0).encode(),
            token: 1,
        },
    );
    assert!(
        out.iter().any(|o| matches!(
            o,
            VnOutput::Received {
                from: 7,
                slot: Some(1),
                ..
            }
        )),
        "{out:?}"
    );
    reply(&mut e, 5, 1, ChunkReply::Accepted);
    reply(&mut e, 7, 1, ChunkReply::Accepted);
    // 9 no longer counts the edge: it is dropped for the rest of the run.
    reply(
        &mut e,
        9,
        1,
        ChunkReply::Refused(RefuseReason::NotNeighbour),
    );
    let out = e.handle(
        t,
        VnInput::Chunk {
            from: 5,
            bytes: frame(1, 4.0).encode(),
            token: 2,
        },
    );
    let report = out.iter().position(|o| {
        matches!(o, VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges { round: Round(1), accepted })
            if accepted == &vec![true, true, false])
    });
    let done = out
        .iter()
        .position(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::Done(_))));
    assert!(
        matches!((report, done), (Some(r), Some(d)) if r < d),
        "{out:?}"
    );
    // The refused edge is not counted as a neighbour whose copies were lost: 2 neighbours, 2 in, 2 out.
    let summary = out.iter().find_map(|o| match o {
        VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
        _ => None,
    });
    assert!(
        summary.is_some_and(|s| (s.neighbours, s.received, s.delivered) == (2, 2, 2)),
        "{summary:?}"
    );

    // Exchange 2: still three slots; slot 2's frame is not sent.
    let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(2))));
    assert_eq!(edges(&out), Some((Round(2), 3)));
    let frames = vec![frame(2, 20.0), frame(2, 21.0), frame(2, 22.0)];
    let out = e.handle(
        t,
        VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
            round: Round(2),
            frames,
        }),
    );
    assert_eq!(sends(&out), vec![(5, 20.0), (7, 21.0)]);
    // Frames that do not match the slots send nothing.
    let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(3))));
    assert_eq!(edges(&out), Some((Round(3), 3)));
    let out = e.handle(
        t,
        VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
            round: Round(3),
            frames: vec![frame(3, 1.0)],
        }),
    );
    assert!(sends(&out).is_empty());
}

#[test]
fn bad_frames_are_refused_with_their_reason() {
    let mut e = engine(|_| true);
    let t = Duration::ZERO;
    e.handle(t, VnInput::StartRound(Round(0)));
    let refused = |out: &[VnOutput<u32>]| {
        reply_of(out).map(|r| match r {
            ChunkReply::Refused(reason) => reason,
            ChunkReply::Accepted => panic!("accepted"),
        })
    };
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, vec![1, 2, 3])),
        Some(RefuseReason::BadChunk),
        "malformed"
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, chunk(0, 7, &[1.0]))),
        Some(RefuseReason::BadChunk),
        "unknown index"
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0; 3]))),
        Some(RefuseReason::BadChunk),
        "wrong length"
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, f32::NAN]))),
        Some(RefuseReason::NonFinite)
    );
    assert_eq!(
        refused(&send_chunk(
            &mut e,
            t,
            1,
            chunk(0, 1, &[f32::INFINITY, 0.0])
        )),
        Some(RefuseReason::NonFinite)
    );
    // The check reads magnitudes from the bit patterns: negative infinities and NaNs with the sign bit set
    // are refused too.
    for bad in [f32::NEG_INFINITY, -f32::NAN] {
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[-0.0, bad]))),
            Some(RefuseReason::NonFinite),
            "{bad}"
        );
    }
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, chunk(99, 1, &[1.0, 2.0]))),
        Some(RefuseReason::WrongRound),
        "far future"
    );
    // Before the freeze, a sender with no link in the round's overlay is refused at once.
    assert_eq!(
        refused(&send_chunk(&mut e, t, 2, chunk(0, 1, &[1.0, 2.0]))),
        Some(RefuseReason::NotNeighbour),
        "no link"
    );
    // A good chunk from a peer with a link waits (no reply yet); a second from it is a duplicate.
    let (peer, t) = reserve_link(&mut e, Round(0), t);
    assert_eq!(
        reply_of(&send_chunk(&mut e, t, peer, chunk(0, 1, &[1.0, 2.0]))),
        None
    );
    assert_eq!(e.pending_len(), 1);
    assert_eq!(
        refused(&send_chunk(&mut e, t, peer, chunk(0, 0, &[1.0, 2.0, 3.0]))),
        Some(RefuseReason::Duplicate)
    );
    // At the freeze the offered slot was never confirmed: the held chunk is refused, not a neighbour's.
    let deadline = sampling::OverlayConfig::new(2, Duration::from_millis(10)).deadline();
    let out = e.handle(deadline + Duration::from_millis(1), VnInput::Tick);
    assert_eq!(refused(&out), Some(RefuseReason::NotNeighbour));
    assert!(
        !out.iter().any(|o| matches!(o, VnOutput::Received { .. })),
        "nothing reached the RN"
    );
    assert_eq!(e.pending_len(), 0);
    assert_eq!(e.counters.refused, 11);
    let by = e.counters.refused_by_reason;
    assert_eq!(
        (
            by.malformed,
            by.bad_chunk,
            by.non_finite,
            by.wrong_round,
            by.duplicate,
            by.not_neighbour
        ),
        (1, 2, 4, 1, 1, 2)
    );
}

#[test]
fn a_peer_flooding_control_messages_is_limited_and_others_are_not() {
    let mut e = engine(|_| true);
    let t = Duration::ZERO;
    let limited = |out: &[VnOutput<u32>]| {
        out.iter().any(|o| {
            matches!(
                o,
                VnOutput::Refused {
                    what: RefusalKind::RateLimited,
                    ..
                }
            )
        })
    };
    // Shuffle requests: the burst is handled (each answered with a reply), the rest dropped unread.
    let shuffle = |from: u32| {
        control(
            from,
            ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
                entries: vec![protocol::control::ViewEntry { id: from, age: 0 }],
            }),
        )
    };
    let handled = (0..20)
        .filter(|_| {
            let out = e.handle(
                t,
                VnInput::Control {
                    from: 5,
                    bytes: shuffle(5),
                },
            );
            !limited(&out)
        })
        .count();
    assert_eq!(handled, SHUFFLE_BURST as usize);
    let other = e.handle(
        t,
        VnInput::Control {
            from: 6,
            bytes: shuffle(6),
        },
    );
    assert!(!limited(&other), "another peer is not limited");
    // One Cyclon period later the flooder may shuffle once more.
    let period = e.cfg.sampler.cyclon.period;
    let out = e.handle(
        t + period,
        VnInput::Control {
            from: 5,
            bytes: shuffle(5),
        },
    );
    assert!(!limited(&out));
    // Any control message: one negotiation open (lookahead 0) gives the peer a burst of
    // CONTROL_BURST_PER_ROUND; garbage counts too (the limit comes before decoding).
    let mut e = engine(|_| true);
    let passed = (0..200)
        .filter(|_| {
            let out = e.handle(
                t,
                VnInput::Control {
                    from: 7,
                    bytes: vec![0xff; 8],
                },
            );
            !limited(&out)
        })
        .count();
    assert_eq!(passed, CONTROL_BURST_PER_ROUND as usize);
    assert_eq!(
        e.counters.refused, 200,
        "every message refused: malformed or limited"
    );
    let by = e.counters.refused_by_reason;
    assert_eq!((by.malformed, by.rate_limited), (64, 136));
}

/// The value-range rule (issue 14): bounded by the floor before the VN's own chunk, then by ratio × the
/// own chunk's largest |v|, never beyond the ceiling; the poison is refused as `OutOfRange` and
/// counted under that reason, NaN keeps its own reason.
#[test]
fn values_out_of_the_models_range_are_refused() {
    let t = Duration::ZERO;
    let refused = |out: &[VnOutput<u32>]| match reply_of(out) {
        // The chunk passed the value checks; these senders have no link in the round, so it is then
        // refused as not a neighbour's (a linked sender's would wait for the freeze).
        Some(ChunkReply::Refused(RefuseReason::NotNeighbour)) | None => None,
        Some(ChunkReply::Refused(reason)) => Some(reason),
        Some(ChunkReply::Accepted) => panic!("accepted before the freeze"),
    };
    let own = |e: &mut VnEngine<u32>, values: &[f32]| {
        e.handle(
            t,
            VnInput::FromRn(ToVirtualNode::Exchange(ChunkFrame {
                round: Round(0),
                chunk: protocol::ChunkIndex(0),
                values: values.to_vec(),
            })),
        );
    };
    // Defaults: the poison is refused before and after the VN knows its scale.
    let mut e = engine(|_| true);
    e.handle(t, VnInput::StartRound(Round(0)));
    let d = ValueBounds::default();
    assert_eq!(e.value_limit(), d.floor, "before any own chunk: the floor");
    let poison: [[f32; 2]; 4] = [
        [1e30, -1e30],
        [f32::MAX, 0.1],
        [0.1, -f32::MAX],
        [0.3, 1e20],
    ];
    for (sender, values) in (10u32..).zip(poison) {
        let out = send_chunk(&mut e, t, sender, chunk(0, 1, &values));
        assert_eq!(refused(&out), Some(RefuseReason::OutOfRange), "{values:?}");
    }
    assert_eq!(
        refused(&send_chunk(&mut e, t, 20, chunk(0, 1, &[f32::NAN, 1e30]))),
        Some(RefuseReason::NonFinite),
        "NaN keeps its reason when another value is also out of range"
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 21, chunk(0, 1, &[-999.0, 0.5]))),
        None
    );
    own(&mut e, &[0.5, -2.0, 1.0]);
    assert_eq!(e.value_limit(), 2.0 * d.ratio);
    assert_eq!(
        refused(&send_chunk(&mut e, t, 22, chunk(0, 1, &[1999.0, 0.0]))),
        None
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 23, chunk(0, 1, &[0.0, -2001.0]))),
        Some(RefuseReason::OutOfRange)
    );
    // 5 out of range, 1 non-finite, and the two that passed refused as not a neighbour's.
    assert_eq!(e.counters.refused, 8);
    assert_eq!(e.counters.refused_by_reason.out_of_range, 5);
    assert_eq!(e.counters.refused_by_reason.non_finite, 1);
    assert_eq!(e.counters.refused_by_reason.not_neighbour, 2);
    let mut summary = RoundSummary::default();
    e.counters.fill(&mut summary);
    assert_eq!(summary.refused, 8);
    assert_eq!(summary.refused_by_reason.total(), 8);
    assert_eq!(summary.refused_by_reason.out_of_range, 5);
    e.counters.fill(&mut summary);
    assert!(summary.refused_by_reason.is_zero(), "reported once");

    // Configured bounds: ratio 10 over the own scale, clamped to [1, 100].
    let bounds = ValueBounds {
        ratio: 10.0,
        floor: 1.0,
        ceiling: 100.0,
    };
    let mut e = engine_with(
        VnConfig {
            values: bounds,
            ..engine(|_| true).cfg.clone()
        },
        |_| true,
    );
    e.handle(t, VnInput::StartRound(Round(0)));
    assert_eq!(
        refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, -1.0]))),
        None
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 2, chunk(0, 1, &[1.5, 0.0]))),
        Some(RefuseReason::OutOfRange),
        "the floor before any own chunk"
    );
    own(&mut e, &[0.0, 0.01, 0.0]);
    assert_eq!(e.value_limit(), 1.0, "a tiny model: the floor");
    own(&mut e, &[0.0, 2.0, 0.0]);
    assert_eq!(
        refused(&send_chunk(&mut e, t, 3, chunk(0, 1, &[-20.0, 0.0]))),
        None
    );
    assert_eq!(
        refused(&send_chunk(&mut e, t, 4, chunk(0, 1, &[20.5, 0.0]))),
        Some(RefuseReason::OutOfRange)
    );
    own(&mut e, &[0.0, 50.0, 0.0]);
    assert_eq!(
        e.value_limit(),
        100.0,
        "the ceiling stops a ratcheted scale"
    );
    own(&mut e, &[f32::NAN, 1e4, 0.0]);
    assert_eq!(
        e.value_limit(),
        100.0,
        "a non-finite own chunk keeps the old scale"
    );

    for bad in [
        ValueBounds {
            ratio: 0.5,
            ..bounds
        },
        ValueBounds {
            floor: 0.0,
            ..bounds
        },
        ValueBounds {
            ceiling: 0.5,
            ..bounds
        },
        ValueBounds {
            ceiling: f32::INFINITY,
            ..bounds
        },
    ] {
        let cfg = VnConfig {
            values: bad,
            ..engine(|_| true).cfg.clone()
        };
        let e = VnEngine::new(
            0u32,
            cfg,
            derive_rng(1, 0),
            derive_rng(1, 1),
            Box::new(|_| true),
        );
        assert!(e.is_err(), "{bad:?}");
    }
}

/// `StartRound(t)` opens the overlays of t ..= t + lookahead, spaced W / lookahead apart so they do not
/// run in phase, each at this VN's own random offset; nothing beyond the lookahead is opened.
#[test]
fn rounds_ahead_are_negotiated_on_a_spaced_own_schedule() {
    let overlay = sampling::OverlayConfig::new(2, Duration::from_millis(10));
    let spacing = overlay.deadline() / 2;
    let jitter = Duration::from_millis(5);
    let make = |seed: u64| {
        let cfg = VnConfig {
            sampler: SamplerConfig {
                cyclon: sampling::CyclonConfig::default(),
                overlay: overlay.clone(),
            },
            exchange_timeout: Duration::from_secs(1),
            send_jitter: Duration::ZERO,
            send_pace: SendPace::default(),
            lookahead: 2,
            last_round: None,
            graph: Graph::PerRound,
            edge_slots: false,
            skip: Arc::default(),
            start_jitter: jitter,
            chunk_lens: Arc::new(LENS.to_vec()),
            values: ValueBounds::default(),
        };
        VnEngine::new(
            0u32,
            cfg,
            derive_rng(seed, 0),
            derive_rng(seed, 1),
            Box::new(|_| true),
        )
        .unwrap()
    };
    // When each of rounds 0..=3 opens, stepping the clock 1 ms at a time.
    let opened = |seed: u64| {
        let mut e = make(seed);
        e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        let mut at = [None; 4];
        for ms in 0..=(3 * spacing.as_millis() as u64) {
            let now = Duration::from_millis(ms);
            e.handle(now, VnInput::Tick);
            for (r, slot) in at.iter_mut().enumerate() {
                if slot.is_none() && e.neighbours(Round(r as u64)).is_some() {
                    *slot = Some(now);
                }
            }
        }
        at
    };
    let a = opened(1);
    for (r, opened_at) in a.iter().enumerate().take(3) {
        let t = opened_at.expect("within the lookahead");
        let base = spacing * r as u32;
        assert!(t >= base && t <= base + jitter, "round {r} opened at {t:?}");
    }
    assert_eq!(a[3], None, "beyond the lookahead until the RN moves on");
    let b = opened(2);
    assert_ne!(a, b, "another VN (another seed) keeps its own phase");
}

/// What an overlay message shows catch-up of its sender's progress: its own walk or answer the round's
/// lookahead below, a walk or answer that may be relayed (hidden origin) `MAX_FUTURE_ROUNDS` further
/// below, a walk it relays for a named origin nothing.
#[test]
fn what_an_overlay_message_shows_of_its_senders_progress() {
    let walk = |origin| OverlayMsg::Propose {
        round: Round(9),
        origin,
        nonce: 1,
        ttl: 3,
    };
    assert_eq!(progress_shown(&walk(Some(5u32)), &5), Some(0));
    assert_eq!(progress_shown(&walk(Some(6)), &5), None);
    assert_eq!(progress_shown(&walk(None), &5), Some(MAX_FUTURE_ROUNDS));
    let accept = |acceptor| OverlayMsg::Accept {
        round: Round(9),
        nonce: 1,
        acceptor,
    };
    assert_eq!(progress_shown(&accept(5u32), &5), Some(0));
    assert_eq!(progress_shown(&accept(6), &5), Some(MAX_FUTURE_ROUNDS));
    let handover = OverlayMsg::Handover {
        round: Round(9),
        nonce: 1,
        newcomer: 6u32,
    };
    assert_eq!(progress_shown(&handover, &5), None);
}

/// A `Prepare`d batch (rounds 0 ..= lookahead) starts its rounds on the same spacing at every VN (the
/// configured window × the cold-start stretch, over the lookahead), whatever round trips each VN has
/// measured (which still stretch each round's own sub-steps): scaled by each VN's stretch, the batch's
/// last rounds started up to a window apart.
#[test]
fn a_prepared_batch_starts_on_the_same_spacing_at_every_vn() {
    let cfg = VnConfig {
        lookahead: 4,
        start_jitter: Duration::ZERO,
        ..engine(|_| true).cfg.clone()
    };
    let make = || {
        VnEngine::new(
            0u32,
            cfg.clone(),
            derive_rng(1, 0),
            derive_rng(1, 1),
            Box::new(|_| true),
        )
        .unwrap()
    };
    let starts = |e: &mut VnEngine<u32>| {
        e.handle(Duration::ZERO, VnInput::Prepare(Round(0)));
        let mut opened = [None; 5];
        for now in (0..400u64).map(Duration::from_millis) {
            e.handle(now, VnInput::Tick);
            for (r, at) in opened.iter_mut().enumerate() {
                if at.is_none() && e.sampler.overlay().freeze_time(Round(r as u64)).is_some() {
                    *at = Some(now);
                }
            }
        }
        opened
    };
    let (mut quiet, mut busy) = (make(), make());
    for _ in 0..crate::engine::vn::round_trips::SAMPLES {
        let rtt = Duration::from_millis(30);
        busy.handle(Duration::ZERO, VnInput::ControlRoundTrip { rtt });
    }
    let q = starts(&mut quiet);
    assert_eq!(q, starts(&mut busy));
    // The configured window (140 ms) twice over the lookahead of 4: 70 ms apart.
    let ms = |t| Some(Duration::from_millis(t));
    assert_eq!(q, [ms(0), ms(70), ms(140), ms(210), ms(280)]);
    // Prepared with no round trip measured yet: the cold start's stretch, as measuring VNs get.
    assert_eq!(
        quiet.sampler.overlay().deadline(),
        cfg.sampler.overlay.deadline() * crate::engine::vn::round_trips::INITIAL_STRETCH
    );
    assert!(busy.sampler.overlay().deadline() > quiet.sampler.overlay().deadline());
}

/// Slow acknowledgements stretch the overlays this VN starts afterwards; without round trips (the
/// simulator) the configured timing holds.
#[test]
fn measured_round_trips_stretch_the_overlays_started_after_them() {
    let configured = sampling::OverlayConfig::new(2, Duration::from_millis(10));
    let mut quiet = engine(|_| true);
    quiet.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
    let freeze = |e: &VnEngine<u32>, r: u64| e.sampler.overlay().freeze_time(Round(r));
    assert_eq!(freeze(&quiet, 0), Some(configured.deadline()));

    let mut busy = engine(|_| true);
    for _ in 0..crate::engine::vn::round_trips::SAMPLES {
        busy.handle(
            Duration::ZERO,
            VnInput::ControlRoundTrip {
                rtt: Duration::from_millis(30),
            },
        );
    }
    busy.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
    // Two round trips of 30 ms: sub-steps of 60 ms instead of 10.
    assert_eq!(freeze(&busy, 0), Some(configured.deadline() * 6));
    busy.check_invariants().unwrap();
}

/// A negotiation started under slow round trips keeps its long window only while they stay slow: once
/// they fall, the VN's next pacing decisions shorten the sub-steps it has still to run, step by step as
/// the sub-step eases; slower round trips never lengthen it.
#[test]
fn round_trips_that_fall_shorten_the_negotiations_still_running() {
    let configured = sampling::OverlayConfig::new(2, Duration::from_millis(10));
    let freeze = |e: &VnEngine<u32>| e.sampler.overlay().freeze_time(Round(0)).unwrap();
    let rtts = |e: &mut VnEngine<u32>, now: Duration, ms: u64| {
        for _ in 0..crate::engine::vn::round_trips::SAMPLES {
            let rtt = Duration::from_millis(ms);
            e.handle(now, VnInput::ControlRoundTrip { rtt });
        }
    };
    let mut e = engine(|_| true);
    rtts(&mut e, Duration::ZERO, 30);
    e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
    let long = freeze(&e);
    assert_eq!(long, configured.deadline() * 6);
    // Slower still: the running round keeps its window.
    rtts(&mut e, Duration::from_millis(50), 80);
    e.handle(Duration::from_millis(50), VnInput::StartRound(Round(1)));
    assert_eq!(freeze(&e), long);
    // Fast again: once the eased sub-step (80 ms after the slow spell, less 10 % a decision, two decisions
    // a round start) is below the round's 60 ms, each round start shortens what is left of it, and never
    // into the past (at 200 ms only its grace is left, and a new grace from then would end later).
    rtts(&mut e, Duration::from_millis(100), 1);
    let mut last = long;
    for (i, ms) in (100..=200).step_by(10).enumerate() {
        let now = Duration::from_millis(ms);
        e.handle(now, VnInput::StartRound(Round(2 + i as u64)));
        let f = freeze(&e);
        assert!(
            f <= last && f > now,
            "decision at {ms} ms: freeze {f:?} after {last:?}"
        );
        if (1..=8).contains(&i) {
            assert!(
                f < last,
                "decision at {ms} ms: the sub-step eased below 60 ms"
            );
        }
        last = f;
    }
    assert!(last < long * 2 / 3, "{last:?} against {long:?}");
    e.check_invariants().unwrap();
}

#[test]
fn stale_rounds_and_unlisted_senders_are_refused() {
    let mut e = engine(|p| *p != 66);
    let t = Duration::ZERO;
    // Round 0 falls out of the kept window once the RN is MAX_KEPT_ROUNDS rounds further.
    for r in 0..=MAX_KEPT_ROUNDS {
        e.handle(t, VnInput::StartRound(Round(r)));
    }
    let out = send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, 2.0]));
    assert_eq!(
        reply_of(&out),
        Some(ChunkReply::Refused(RefuseReason::WrongRound)),
        "stale round"
    );
    let out = send_chunk(&mut e, t, 66, chunk(5, 1, &[1.0, 2.0]));
    assert_eq!(
        reply_of(&out),
        Some(ChunkReply::Refused(RefuseReason::NotNeighbour)),
        "unlisted sender"
    );
    let out = e.handle(
        t,
        VnInput::Control {
            from: 66,
            bytes: vec![0],
        },
    );
    assert!(out.iter().any(|o| matches!(
        o,
        VnOutput::Refused {
            what: RefusalKind::NotAllowed,
            ..
        }
    )));
    // Gossip naming an unlisted peer never enters the view.
    let gossip = ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
        entries: vec![
            protocol::control::ViewEntry { id: 66u32, age: 0 },
            protocol::control::ViewEntry { id: 5, age: 0 },
        ],
    });
    let env = ControlEnvelope {
        sender: 5u32,
        msg: gossip.clone(),
    };
    e.handle(
        t,
        VnInput::Control {
            from: 5,
            bytes: protocol::codec::encode_control(&env).unwrap(),
        },
    );
    assert!(
        e.view().contains(&5) && !e.view().contains(&66),
        "{:?}",
        e.view()
    );

    // A sender claiming another identity than its connection's is refused.
    let spoof = ControlEnvelope {
        sender: 7u32,
        msg: gossip,
    };
    let out = e.handle(
        t,
        VnInput::Control {
            from: 8,
            bytes: protocol::codec::encode_control(&spoof).unwrap(),
        },
    );
    assert!(out.iter().any(|o| matches!(
        o,
        VnOutput::Refused {
            what: RefusalKind::Malformed(_),
            ..
        }
    )));
    assert!(!e.view().contains(&7) && !e.view().contains(&8));
}

/// A static-graph VN with three neighbours (5, 7, 9) frozen for exchange 0 and no send jitter.
fn static_engine() -> VnEngine<u32> {
    let cfg = VnConfig {
        graph: Graph::Static,
        send_jitter: Duration::ZERO,
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = engine_with(cfg, |_| true);
    e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
    let mut out = Vec::new();
    e.on_frozen(Duration::ZERO, Round(0), vec![9, 5, 7], &mut out);
    e
}

fn own_frame(round: u64, v: f32) -> ToVirtualNode {
    ToVirtualNode::Exchange(ChunkFrame {
        round: Round(round),
        chunk: protocol::ChunkIndex(0),
        values: vec![v],
    })
}

fn done_of(out: &[VnOutput<u32>]) -> Option<RoundSummary> {
    out.iter().find_map(|o| match o {
        VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
        _ => None,
    })
}

/// Issue 15, a node running ahead: an exchange with nobody to wait for ends at once — unless most peers
/// heard lately are two or more exchanges behind it (`HOLD_LEAD`): then it stays open until most are
/// within one, and never past its deadline.
#[test]
fn an_exchange_the_network_is_well_behind_is_held() {
    // A static graph without edges: every exchange has nobody to wait for.
    let alone = || {
        let cfg = static_engine().cfg.clone();
        let mut e = VnEngine::new(
            0u32,
            cfg,
            derive_rng(1, 0),
            derive_rng(1, 1),
            Box::new(|_| true),
        )
        .unwrap();
        e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        e.on_frozen(Duration::ZERO, Round(0), vec![], &mut Vec::new());
        e
    };
    let t = Duration::from_millis(10);
    let mut e = alone();
    assert!(
        done_of(&e.handle(t, VnInput::FromRn(own_frame(10, 1.0)))).is_some(),
        "nobody heard: at once"
    );
    let mut e = alone();
    for p in 1..=3 {
        claim(&mut e, t, p, 8);
    }
    assert!(
        done_of(&e.handle(t, VnInput::FromRn(own_frame(10, 1.0)))).is_none(),
        "three peers at 8: held"
    );
    assert!(
        done_of(&claim(&mut e, t, 1, 9)).is_none(),
        "one of three within one"
    );
    assert!(
        done_of(&claim(&mut e, t, 2, 9)).is_some(),
        "two of three within one: done"
    );
    // Bounded by the exchange deadline, however long the peers stay behind.
    let mut e = alone();
    for p in 1..=3 {
        claim(&mut e, t, p, 8);
    }
    e.handle(t, VnInput::FromRn(own_frame(10, 1.0)));
    // The peers keep speaking (claims stay fresh: within one overlay window).
    let deadline = t + e.cfg.exchange_timeout;
    let mut now = t;
    while now + Duration::from_millis(100) < deadline {
        now += Duration::from_millis(100);
        for p in 1..=3 {
            assert!(
                done_of(&claim(&mut e, now, p, 8)).is_none(),
                "held at {now:?}"
            );
        }
    }
    assert!(done_of(&e.handle(deadline, VnInput::Tick)).is_some());
}

/// A VN whose exchange has all its r neighbours' chunks is in step with them: peers' low claims do not
/// hold it (they are lower bounds, and run low in a healthy network too).
#[test]
fn an_exchange_with_all_its_partners_in_is_not_held() {
    let mut e = static_engine();
    let t = Duration::from_millis(10);
    // Five peers heard at exchange 0 while this VN finishes exchange 5: the network looks 5 behind.
    for p in 20..=24 {
        claim(&mut e, t, p, 0);
    }
    let neighbours = [5u32, 7, 9];
    assert!(
        neighbours.len() >= e.cfg.sampler.overlay.degree,
        "a full exchange"
    );
    e.handle(t, VnInput::FromRn(own_frame(5, 1.0)));
    let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
    let mut last = Vec::new();
    for (token, from) in neighbours.into_iter().enumerate() {
        let bytes = ChunkFrame {
            round: Round(5),
            chunk: protocol::ChunkIndex(0),
            values: vec![2.0],
        }
        .encode();
        e.handle(
            t,
            VnInput::Chunk {
                from,
                bytes,
                token: token as u64 + 1,
            },
        );
        let bytes = accepted.clone();
        last = e.handle(
            t,
            VnInput::ChunkReply {
                from,
                round: Round(5),
                bytes,
            },
        );
    }
    assert!(
        done_of(&last).is_some(),
        "all partners in: done, whatever the claims"
    );
}

/// Issue 15: a neighbour whose connection closed for good (`PeerGone`) costs its chunk, not the exchange
/// deadline: the open exchange ends as soon as the others' chunks are in, later exchanges no longer send
/// to it or wait for it, and a chunk it sends after all is refused.
#[test]
fn a_gone_neighbour_is_not_waited_for() {
    let mut e = static_engine();
    let t = Duration::from_millis(10);
    let out = e.handle(t, VnInput::FromRn(own_frame(1, 1.0)));
    let to: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            VnOutput::SendChunk { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(to, vec![5, 7, 9]);
    for (from, token) in [(5, 1), (7, 2)] {
        let bytes = ChunkFrame {
            round: Round(1),
            chunk: protocol::ChunkIndex(0),
            values: vec![2.0],
        }
        .encode();
        let out = e.handle(t, VnInput::Chunk { from, bytes, token });
        assert!(done_of(&out).is_none(), "9's chunk is still awaited");
    }
    let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
    for from in [5, 7] {
        let bytes = accepted.clone();
        e.handle(
            t,
            VnInput::ChunkReply {
                from,
                round: Round(1),
                bytes,
            },
        );
    }
    // 9 is gone: the exchange ends now, with the two copies that came, long before its deadline.
    let out = e.handle(t, VnInput::PeerGone { peer: 9 });
    let s = done_of(&out).expect("done at once");
    assert_eq!((s.round, s.received, s.delivered), (Round(1), 2, 2));
    // 9 stays counted: the edge stood and its copy was missed, which the metrics show.
    assert_eq!(s.neighbours, 3);
    // The next exchange neither sends to 9 nor waits for it.
    let out = e.handle(t, VnInput::FromRn(own_frame(2, 1.0)));
    let to: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            VnOutput::SendChunk { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(to, vec![5, 7]);
    let late = ChunkFrame {
        round: Round(2),
        chunk: protocol::ChunkIndex(0),
        values: vec![2.0],
    };
    let out = e.handle(
        t,
        VnInput::Chunk {
            from: 9,
            bytes: late.encode(),
            token: 3,
        },
    );
    assert_eq!(
        reply_of(&out),
        Some(ChunkReply::Refused(RefuseReason::NotNeighbour))
    );
    for (from, token) in [(5, 4), (7, 5)] {
        e.handle(
            t,
            VnInput::Chunk {
                from,
                bytes: late.encode(),
                token,
            },
        );
    }
    let mut out = Vec::new();
    for from in [5, 7] {
        let bytes = accepted.clone();
        out = e.handle(
            t,
            VnInput::ChunkReply {
                from,
                round: Round(2),
                bytes,
            },
        );
    }
    assert_eq!(done_of(&out).map(|s| s.received), Some(2));
}

/// A probing VN (lookahead 4) over peers 1..=12.
fn probing(resumed_at: Option<u64>) -> VnEngine<u32> {
    let cfg = VnConfig {
        lookahead: 4,
        ..engine(|_| true).cfg.clone()
    };
    VnEngine::new(
        0u32,
        cfg,
        derive_rng(1, 0),
        derive_rng(1, 1),
        Box::new(|p| *p != 66),
    )
    .unwrap()
    .with_round_probes(
        (0..=10).chain([66]).collect(),
        vec![11, 12],
        resumed_at.map(Round),
    )
}

fn queries(out: &[VnOutput<u32>]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            VnOutput::SendRoundQuery { to } => Some(*to),
            _ => None,
        })
        .collect()
}

fn behind(out: &[VnOutput<u32>]) -> Option<Round> {
    out.iter().find_map(|o| match o {
        VnOutput::ToRn(FromVirtualNode::Behind { exchange }) => Some(*exchange),
        _ => None,
    })
}

fn answer(e: &mut VnEngine<u32>, now: Duration, from: u32, at: Option<u64>) -> Vec<VnOutput<u32>> {
    let bytes = protocol::codec::encode_control(&at.map(Round)).unwrap();
    e.handle(now, VnInput::RoundAnswer { from, bytes })
}

/// Issue 15, active catch-up: a resumed VN asks five distinct listed peers (never itself, an unlisted
/// one or one of its own node's VNs, 11 and 12 here, though they are in its view) which exchange they are at as it joins, and adopts the lower median of the answers — two stale
/// answers (the other node restarted with it) do not hold it back; unasked and repeated answers do not
/// count.
#[test]
fn a_resumed_node_asks_peers_and_adopts_the_median_round() {
    let mut e = probing(Some(3));
    let t = Duration::ZERO;
    let out = e.join(t, 1..=12);
    let mut asked = queries(&out);
    assert_eq!(asked.len(), PROBE_PEERS);
    assert!(asked.iter().all(|p| (1..=10).contains(p)), "{asked:?}");
    asked.sort();
    asked.dedup();
    assert_eq!(asked.len(), PROBE_PEERS, "distinct peers");
    // An unasked peer's answer is ignored, however far ahead it claims.
    let stranger = (1..=10).find(|p| !asked.contains(p)).unwrap();
    assert!(behind(&answer(&mut e, t, stranger, Some(40))).is_none());
    let answers = [Some(3), Some(3), Some(10), Some(11), Some(12)];
    let mut out = Vec::new();
    for (i, (&p, at)) in asked.iter().zip(answers).enumerate() {
        out = answer(&mut e, t, p, at);
        if i == 0 {
            // Answering twice does not count twice.
            assert!(behind(&answer(&mut e, t, p, Some(50))).is_none());
        }
        if i < 4 {
            assert!(behind(&out).is_none(), "decided only once all answered");
        }
    }
    // Lower median of 3, 3, 10, 11, 12 is 10; the RN rejoins min(lookahead, MAX_FUTURE_ROUNDS) past it.
    assert_eq!(behind(&out), Some(Round(10 + MAX_FUTURE_ROUNDS)));
}

/// Issue 15: a resumed VN's join probe always lets its RN start at once — past the median when that is
/// beyond its own round even within its window, at its own round when the network is not ahead or too
/// few peers answered — instead of waiting out the warm-up.
#[test]
fn a_resumed_node_starts_at_once_whatever_its_probe_finds() {
    let t = Duration::ZERO;
    let run = |answers: [Option<u64>; 5], failed: usize| {
        let mut e = probing(Some(6));
        let asked = queries(&e.join(t, 1..=12));
        let mut out = Vec::new();
        for (i, (&p, at)) in asked.iter().zip(answers).enumerate() {
            out = if i < failed {
                e.handle(t, VnInput::RoundQueryFailed { to: p })
            } else {
                answer(&mut e, t, p, at)
            };
        }
        behind(&out)
    };
    // Within reach (median 7, 6 + MAX_FUTURE_ROUNDS = 8): lands 2 past it all the same.
    assert_eq!(
        run([Some(7), Some(7), Some(7), Some(8), Some(8)], 0),
        Some(Round(7 + MAX_FUTURE_ROUNDS))
    );
    // The network at its own round or behind it: starts where it is.
    assert_eq!(
        run([Some(3), Some(4), Some(4), Some(4), Some(5)], 0),
        Some(Round(6))
    );
    // Too few answers: starts where it is.
    assert_eq!(
        run([Some(30), Some(30), Some(30), Some(30), Some(30)], 3),
        Some(Round(6))
    );
}

/// The probe keeps the old protection: a VN asks only once three peers it hears are beyond its window,
/// a minority ahead (two of five answers) does not move a VN in step with the rest; fewer than three
/// answers decide nothing; peers that cannot be reached or answer garbage do
/// not vote; and a VN probes at most once per exchange deadline whatever peers claim.
#[test]
fn a_probe_needs_a_majority_ahead_and_is_bounded() {
    let t = Duration::ZERO;
    let mut e = probing(None);
    assert!(
        queries(&e.join(t, 1..=12)).is_empty(),
        "not resumed: no probe at join"
    );
    e.handle(t, VnInput::StartRound(Round(5)));
    // Six peers in step (exchange 5: proposals for 9 with lookahead 4) and peers 1, 2 claiming exchange
    // 20; then peer 3 too: three distinct peers beyond the window, a minority of the nine heard — not
    // enough to move, enough to ask.
    // The queries sent while the crowd and then peer 3 speak (peer 3's earlier claims may still be fresh).
    let crowd = |e: &mut VnEngine<u32>, now: Duration| {
        let mut asked = Vec::new();
        for p in 4..=9 {
            asked.extend(queries(&claim(e, now, p, 9)));
        }
        for p in 1..=3 {
            asked.extend(queries(&claim(e, now, p, 24)));
        }
        asked
    };
    for p in 4..=9 {
        claim(&mut e, t, p, 9);
    }
    assert!(
        queries(&claim(&mut e, t, 1, 24)).is_empty(),
        "one peer ahead: no probe"
    );
    assert!(
        queries(&claim(&mut e, t, 2, 24)).is_empty(),
        "two peers ahead: no probe"
    );
    let out = claim(&mut e, t, 3, 24);
    assert!(behind(&out).is_none());
    let asked = queries(&out);
    assert_eq!(asked.len(), PROBE_PEERS);
    assert!(
        queries(&claim(&mut e, t, 3, 24)).is_empty(),
        "one probe at a time"
    );
    let answers = [Some(5), Some(6), Some(5), Some(20), Some(20)];
    let mut out = Vec::new();
    for (&p, at) in asked.iter().zip(answers) {
        out = answer(&mut e, t, p, at);
    }
    assert!(behind(&out).is_none(), "two of five ahead: in step");
    let soon = t + e.cfg.exchange_timeout / 2;
    assert!(
        crowd(&mut e, soon).is_empty(),
        "at most one probe per deadline"
    );
    // A later probe: two answers ahead, one unreachable, two garbage: too few votes, nothing moves.
    let later = t + e.cfg.exchange_timeout;
    let asked = crowd(&mut e, later);
    assert_eq!(asked.len(), PROBE_PEERS);
    answer(&mut e, later, asked[0], Some(20));
    answer(&mut e, later, asked[1], Some(20));
    e.handle(later, VnInput::RoundQueryFailed { to: asked[2] });
    e.handle(
        later,
        VnInput::RoundAnswer {
            from: asked[3],
            bytes: vec![0xff; 9],
        },
    );
    let out = e.handle(
        later,
        VnInput::RoundAnswer {
            from: asked[4],
            bytes: vec![],
        },
    );
    assert!(behind(&out).is_none());
    assert!(
        e.catch_up.deadline().is_none(),
        "decided (nothing) once every peer asked was heard from"
    );
    // Three of five ahead, one peer never answering: decided at the probe's deadline.
    let again = later + e.cfg.exchange_timeout;
    let asked = crowd(&mut e, again);
    for (&p, at) in asked.iter().zip([Some(21), Some(20), Some(22), Some(5)]) {
        assert!(behind(&answer(&mut e, again, p, at)).is_none());
    }
    let deadline = again + e.cfg.exchange_timeout;
    assert!(e.poll_timeout().is_some_and(|d| d <= deadline));
    let out = e.handle(deadline, VnInput::Tick);
    assert_eq!(
        behind(&out),
        Some(Round(20)),
        "lower median of 5, 20, 21, 22: a running node lands at the median, never past it"
    );
}

/// Round queries are answered with the newest exchange, once per request, within a per-peer rate; an
/// unlisted asker or a query with a body gets nothing.
#[test]
fn round_queries_are_answered_bounded() {
    let mut e = probing(Some(7));
    let t = Duration::ZERO;
    let ask = |e: &mut VnEngine<u32>, from: u32, bytes: Vec<u8>| {
        e.handle(
            t,
            VnInput::RoundQuery {
                from,
                bytes,
                token: 1,
            },
        )
        .into_iter()
        .find_map(|o| match o {
            VnOutput::ReplyRound { bytes, .. } => {
                Some(protocol::codec::decode_control::<Option<Round>>(&bytes).unwrap())
            }
            _ => None,
        })
    };
    assert_eq!(ask(&mut e, 1, vec![]), Some(Some(Round(7))));
    assert_eq!(ask(&mut e, 66, vec![]), None, "unlisted");
    assert_eq!(ask(&mut e, 2, vec![1]), None, "a body");
    let answered = (0..10).filter(|_| ask(&mut e, 3, vec![]).is_some()).count();
    assert_eq!(answered, ROUND_QUERY_BURST as usize);
    assert_eq!(
        ask(&mut engine(|_| true), 1, vec![]),
        Some(None),
        "not started: no round"
    );
}

#[test]
fn malformed_control_is_counted() {
    let mut e = engine(|_| true);
    let out = e.handle(
        Duration::ZERO,
        VnInput::Control {
            from: 3,
            bytes: vec![0xFF; 40],
        },
    );
    assert!(out.iter().any(|o| matches!(
        o,
        VnOutput::Refused {
            what: RefusalKind::Malformed(_),
            ..
        }
    )));
    assert_eq!(e.counters.refused, 1);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), round in 0u64..4) {
        let mut e = engine(|_| true);
        e.handle(Duration::ZERO, VnInput::StartRound(Round(round)));
        e.handle(Duration::ZERO, VnInput::Chunk { from: 1, bytes: bytes.clone(), token: 1 });
        e.handle(Duration::ZERO, VnInput::Control { from: 1, bytes: bytes.clone() });
        e.handle(Duration::ZERO, VnInput::ChunkReply { from: 1, round: Round(round), bytes });
    }
}
