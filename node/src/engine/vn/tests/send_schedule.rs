//! When a VN sends its chunk: the pace from the round start, the automatic pace, the overlay wait reported.

use super::*;

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
        e.handle(
            start - ahead,
            VnInput::FromRn(ToVirtualNode::Prepare(Round(0))),
        );
    }
    e.handle(start, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
    e.handle(start, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
    let opened_at = |first: fn(Round) -> ToVirtualNode| {
        let mut e = engine(|_| true);
        e.handle(Duration::ZERO, VnInput::FromRn(first(Round(0))));
        (0..200u64)
            .map(Duration::from_millis)
            .find(|&now| {
                e.handle(now, VnInput::Tick);
                e.neighbours(Round(0)).is_some()
            })
            .expect("opened")
    };
    assert_eq!(
        opened_at(ToVirtualNode::Prepare),
        opened_at(ToVirtualNode::StartRound)
    );

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
    e.handle(ms(0), VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
    let mut out = Vec::new();
    // The static graph of exchange 0 (injected); later exchanges run over it.
    e.on_frozen(ms(0), Round(0), vec![5], &mut out);
    // Exchange 1: nothing learnt yet, so the chunk leaves at once.
    e.handle(ms(10), VnInput::FromRn(ToVirtualNode::StartRound(Round(1))));
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
    e.handle(ms(60), VnInput::FromRn(ToVirtualNode::StartRound(Round(2))));
    let mut out = e.handle(ms(65), VnInput::FromRn(ToVirtualNode::Exchange(frame(2))));
    let mut t = ms(65);
    while !sent(&out) && t < ms(130) {
        t += ms(5);
        out = e.handle(t, VnInput::Tick);
    }
    assert_eq!(t, ms(100), "sent at the learnt pace");
}
