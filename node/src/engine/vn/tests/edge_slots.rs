//! Per-edge exchanges: frames to their slots, copies back by slot, late deliveries, dropped edges that keep their
//! slot.

use super::*;

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
    e.handle(ms(0), VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
    let mut out = Vec::new();
    e.on_frozen(ms(0), Round(0), vec![5], &mut out);
    e.handle(ms(10), VnInput::FromRn(ToVirtualNode::StartRound(Round(1))));
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
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
            bytes: frame(1, 3.0).encode().into(),
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
            bytes: frame(1, 4.0).encode().into(),
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
