//! What a VN refuses from peers, and how it counts it: bad frames, floods, values out of range, stale rounds,
//! malformed control.

use super::*;

#[test]
fn bad_frames_are_refused_with_their_reason() {
    let mut e = engine(|_| true);
    let t = Duration::ZERO;
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
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

#[test]
fn stale_rounds_and_unlisted_senders_are_refused() {
    let mut e = engine(|p| *p != 66);
    let t = Duration::ZERO;
    // Round 0 falls out of the kept window once the RN is MAX_KEPT_ROUNDS rounds further.
    for r in 0..=MAX_KEPT_ROUNDS {
        e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(r))));
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
        e.handle(Duration::ZERO, VnInput::FromRn(ToVirtualNode::StartRound(Round(round))));
        e.handle(Duration::ZERO, VnInput::Chunk { from: 1, bytes: bytes.clone().into(), token: 1 });
        e.handle(Duration::ZERO, VnInput::Control { from: 1, bytes: bytes.clone() });
        e.handle(Duration::ZERO, VnInput::ChunkReply { from: 1, round: Round(round), bytes });
    }
}
