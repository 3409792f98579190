//! An exchange's end: held while the network is well behind, not held with its partners in, not waiting for a gone
//! neighbour.

use super::*;

/// A static-graph VN with three neighbours (5, 7, 9) frozen for exchange 0 and no send jitter.
fn static_engine() -> VnEngine<u32> {
    let cfg = VnConfig {
        graph: Graph::Static,
        send_jitter: Duration::ZERO,
        chunk_lens: Arc::new(vec![1]),
        ..engine(|_| true).cfg.clone()
    };
    let mut e = engine_with(cfg, |_| true);
    e.handle(
        Duration::ZERO,
        VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
    );
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
        e.handle(
            Duration::ZERO,
            VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
        );
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
                bytes: bytes.into(),
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
        let out = e.handle(
            t,
            VnInput::Chunk {
                from,
                bytes: bytes.into(),
                token,
            },
        );
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
            bytes: late.encode().into(),
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
                bytes: late.encode().into(),
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

/// Issue 44: neighbour 9 takes the edge, then neither acknowledges our chunk nor sends its own: the exchange
/// waits out its deadline. `How` 9 behaves afterwards decides: speaking again (alive, withholding) shuns it
/// for the overlay's window; its late chunk, or its connection closing for good (dead), does not.
fn after_a_mute_neighbour(then: impl FnOnce(&mut VnEngine<u32>, Duration)) -> VnEngine<u32> {
    let mut e = static_engine();
    let t = Duration::from_millis(10);
    e.handle(t, VnInput::FromRn(own_frame(1, 1.0)));
    let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
    for (from, token) in [(5, 1), (7, 2)] {
        e.handle(
            t,
            VnInput::Chunk {
                from,
                bytes: chunk(1, 0, &[2.0]).into(),
                token,
            },
        );
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
    let late = Duration::from_secs(5);
    let out = e.handle(late, VnInput::Tick);
    let s = done_of(&out).expect("the deadline passed");
    assert_eq!((s.round, s.received), (Round(1), 2));
    assert!(!e.sampler.overlay().is_shunned(Round(2), &9), "not yet");
    then(&mut e, late + Duration::from_secs(1));
    e
}

#[test]
fn a_neighbour_that_withholds_everything_and_speaks_again_is_shunned() {
    let e = after_a_mute_neighbour(|e, t| {
        e.handle(
            t,
            VnInput::Control {
                from: 9,
                bytes: vec![0xff],
            },
        );
    });
    assert!(e.sampler.overlay().is_shunned(Round(2), &9));
    assert!(!e.sampler.overlay().is_shunned(Round(2), &5));
}

#[test]
fn a_mute_neighbour_that_was_dead_or_only_late_is_not_shunned() {
    let speak = |e: &mut VnEngine<u32>, t: Duration| {
        e.handle(
            t + Duration::from_secs(1),
            VnInput::Control {
                from: 9,
                bytes: vec![0xff],
            },
        );
    };
    let gone = after_a_mute_neighbour(|e, t| {
        e.handle(t, VnInput::PeerGone { peer: 9 });
        speak(e, t);
    });
    assert!(
        !gone.sampler.overlay().is_shunned(Round(2), &9),
        "dead, then restarted"
    );
    let late = after_a_mute_neighbour(|e, t| {
        e.handle(
            t,
            VnInput::Chunk {
                from: 9,
                bytes: chunk(1, 0, &[2.0]).into(),
                token: 9,
            },
        );
        speak(e, t);
    });
    assert!(
        !late.sampler.overlay().is_shunned(Round(2), &9),
        "its chunk came, late"
    );
}
