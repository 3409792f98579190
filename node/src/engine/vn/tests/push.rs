//! Directed push: targets from the view, chunks accepted from any peer, rounds that run to their deadline.

use super::*;

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
    let out = e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
