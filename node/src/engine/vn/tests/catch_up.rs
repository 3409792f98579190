//! Catch-up probes and round queries: medians, majorities, bounds, a resumed node's start.

use super::*;

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

/// A resumed VN joins at `t` and its join probe goes out (after its own delay, issue 43): the time it did and
/// the peers it asked.
fn join_probe(e: &mut VnEngine<u32>, t: Duration) -> (Duration, Vec<u32>) {
    assert!(
        queries(&e.join(t, 1..=12)).is_empty(),
        "not at the join instant"
    );
    let at = e.catch_up.join_probe_at().expect("a join probe is due");
    assert!(at <= t + JOIN_PROBE_SPREAD);
    (at, queries(&e.handle(at, VnInput::Tick)))
}

/// `from` sends a `Drop` for `round`: what the rogue node sent (any overlay message claims its round).
fn drop_claim(e: &mut VnEngine<u32>, now: Duration, from: u32, round: u64) -> Vec<VnOutput<u32>> {
    let msg = ControlMsg::Overlay(OverlayMsg::Drop {
        round: Round(round),
    });
    e.handle(
        now,
        VnInput::Control {
            from,
            bytes: control(from, msg),
        },
    )
}

/// This VN's newest finished exchange was `exchange`, with (`copies`) or without neighbours' copies.
fn exchanged(e: &mut VnEngine<u32>, exchange: u64, copies: bool) {
    e.catch_up.exchange_done(Round(exchange), copies);
}

/// Issue 15, active catch-up: a resumed VN asks nine distinct listed peers (never itself, an unlisted one or
/// one of its own node's VNs, 11 and 12 here, though they are in its view) which exchange they are at as it
/// joins, and adopts the lower median of the answers — four stale answers (nodes restarted with it) do not
/// hold it back; unasked and repeated answers do not count.
#[test]
fn a_resumed_node_asks_peers_and_adopts_the_median_round() {
    let mut e = probing(Some(3));
    let (t, mut asked) = join_probe(&mut e, Duration::ZERO);
    assert_eq!(asked.len(), PROBE_PEERS);
    assert!(asked.iter().all(|p| (1..=10).contains(p)), "{asked:?}");
    asked.sort();
    asked.dedup();
    assert_eq!(asked.len(), PROBE_PEERS, "distinct peers");
    // An unasked peer's answer is ignored, however far ahead it claims.
    let stranger = (1..=10).find(|p| !asked.contains(p)).unwrap();
    assert!(behind(&answer(&mut e, t, stranger, Some(40))).is_none());
    let answers = [3, 3, 3, 3, 10, 11, 12, 12, 13].map(Some);
    let mut out = Vec::new();
    for (i, (&p, at)) in asked.iter().zip(answers).enumerate() {
        out = answer(&mut e, t, p, at);
        if i == 0 {
            // Answering twice does not count twice.
            assert!(behind(&answer(&mut e, t, p, Some(50))).is_none());
        }
        if i + 1 < PROBE_PEERS {
            assert!(behind(&out).is_none(), "decided only once all answered");
        }
    }
    // The lower median is 10, beyond the window: before jumping, the VN asks again, the peer it did not
    // ask first among them (ten candidates: the rest are asked again).
    assert!(behind(&out).is_none(), "a jump waits for a second probe");
    let second = queries(&out);
    assert_eq!(second.len(), PROBE_PEERS);
    assert!(second.contains(&stranger), "{second:?}");
    for (i, &p) in second.iter().enumerate() {
        out = answer(&mut e, t, p, Some(if i < 5 { 11 } else { 12 }));
    }
    // The lower of the two medians; the RN rejoins min(lookahead, MAX_FUTURE_ROUNDS) past it.
    assert_eq!(behind(&out), Some(Round(10 + MAX_FUTURE_ROUNDS)));
}

/// Issue 44: a resumed VN whose first probe drew five identities of one rogue node among its nine (claiming
/// round 40 while the network is at 8) does not jump there: the jump waits for a second probe of other
/// peers, and takes the lower of the two medians. Before, the first probe's median moved it to round 42.
#[test]
fn a_resumed_node_jumps_only_as_far_as_two_draws_of_peers_agree() {
    let mut e = probing(Some(3));
    let (t, first) = join_probe(&mut e, Duration::ZERO);
    let mut out = Vec::new();
    for (i, &p) in first.iter().enumerate() {
        out = answer(&mut e, t, p, Some(if i < 5 { 40 } else { 8 }));
    }
    assert!(behind(&out).is_none(), "no jump on one draw");
    let second = queries(&out);
    assert_eq!(second.len(), PROBE_PEERS);
    for (i, &p) in second.iter().enumerate() {
        // The rogue's identities are asked again where the network is this small; they hold three here.
        out = answer(&mut e, t, p, Some(if i < 3 { 40 } else { 8 }));
    }
    assert_eq!(behind(&out), Some(Round(8 + MAX_FUTURE_ROUNDS)));
}

/// Issue 43: the join probes of a resumed node's VNs leave at independent instants, not as they join.
#[test]
fn a_resumed_nodes_vns_probe_at_their_own_instants() {
    let mut instants: Vec<Duration> = (0..6u64)
        .map(|seed| {
            let mut e = VnEngine::new(
                0u32,
                probing(None).cfg.clone(),
                derive_rng(seed, 0),
                derive_rng(seed, 1),
                Box::new(|p| *p != 66),
            )
            .unwrap()
            .with_round_probes((0..=10).collect(), vec![11, 12], Some(Round(3)));
            let (at, asked) = join_probe(&mut e, Duration::ZERO);
            assert_eq!(asked.len(), PROBE_PEERS);
            at
        })
        .collect();
    instants.sort();
    instants.dedup();
    assert_eq!(instants.len(), 6, "{instants:?}");
}

/// Issue 15: a resumed VN's join probe always lets its RN start at once — past the median when that is
/// beyond its own round even within its window, at its own round when the network is not ahead or too
/// few peers answered — instead of waiting out the warm-up.
#[test]
fn a_resumed_node_starts_at_once_whatever_its_probe_finds() {
    let run = |answers: [Option<u64>; PROBE_PEERS], failed: usize| {
        let mut e = probing(Some(6));
        let (t, asked) = join_probe(&mut e, Duration::ZERO);
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
        run([7, 7, 7, 7, 7, 8, 8, 8, 8].map(Some), 0),
        Some(Round(7 + MAX_FUTURE_ROUNDS))
    );
    // The network at its own round or behind it: starts where it is.
    assert_eq!(
        run([3, 4, 4, 4, 4, 5, 5, 5, 5].map(Some), 0),
        Some(Round(6))
    );
    // Peers that have not started vote "not ahead".
    assert_eq!(
        run(
            [
                None,
                None,
                None,
                None,
                None,
                Some(30),
                Some(30),
                Some(30),
                Some(30)
            ],
            0
        ),
        Some(Round(6))
    );
    // Too few answers (four of nine, all far ahead: they may be one node's identities): starts where it is.
    assert_eq!(run([Some(30); PROBE_PEERS], 5), Some(Round(6)));
}

/// Issue 44, the warm-up fast-forward: three identities of one node, before any honest VN has spoken,
/// claim the run's last round (one `Drop` each, then walks). Nothing moves and nobody is asked: a fresh VN
/// that has not exchanged is behind no one. Before, the three were all the voters there were, every VN
/// reported `Behind`, and every node of a real network jumped to its last round 0.25 s after start.
#[test]
fn three_identities_of_one_node_cannot_fast_forward_a_fresh_node() {
    let t = Duration::ZERO;
    let mut e = probing(None);
    let mut out = e.join(t, 1..=12);
    out.extend(e.handle(t, VnInput::FromRn(ToVirtualNode::Prepare(Round::ZERO))));
    for rogue in [8, 9, 10] {
        out.extend(drop_claim(&mut e, t, rogue, u64::MAX));
        out.extend(claim(&mut e, t, rogue, 1_000_000));
    }
    assert_eq!(behind(&out), None);
    assert!(queries(&out).is_empty());
    // In round 0, before its first exchange is done: the same.
    let out = e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round::ZERO)));
    assert_eq!(behind(&out), None);
    for rogue in [8, 9, 10] {
        let out = drop_claim(&mut e, t + Duration::from_millis(1), rogue, u64::MAX);
        assert_eq!(behind(&out), None);
        assert!(queries(&out).is_empty());
    }
}

/// Issue 44, mid-run: five identities of one node (of the eight `keygen` makes) claim the last round to a VN
/// in step — its last exchange got its neighbours' copies — while four honest peers speak in step. The third
/// identity used to start a probe and the fifth (five of nine heard) to move the node outright (every node
/// of a real network jumped from round 15 to 29); now nothing moves and nobody is asked.
#[test]
fn five_identities_cannot_fast_forward_a_node_in_step() {
    let t = Duration::ZERO;
    let mut e = probing(None);
    e.join(t, 1..=12);
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(15))));
    exchanged(&mut e, 14, true);
    for p in 1..=4 {
        claim(&mut e, t, p, 19);
    }
    for rogue in 5..=9 {
        let out = drop_claim(&mut e, t, rogue, u64::MAX);
        assert_eq!(behind(&out), None, "identity {rogue}");
        assert!(queries(&out).is_empty());
    }
}

/// A VN cut off (its newest exchange got no copy) with three peers beyond its window asks nine peers drawn
/// from the whole list; four liars among them cannot move it, five honest answers far ahead do (an honest
/// node that really fell behind still catches up).
#[test]
fn a_cut_off_node_asks_and_a_minority_of_liars_among_the_asked_cannot_move_it() {
    let run = |ahead: usize| {
        let t = Duration::ZERO;
        let mut e = probing(None);
        e.join(t, 1..=12);
        e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(15))));
        exchanged(&mut e, 15, false);
        let mut asked = Vec::new();
        for rogue in [8, 9, 10] {
            asked.extend(queries(&drop_claim(&mut e, t, rogue, 10_000)));
        }
        assert_eq!(asked.len(), PROBE_PEERS, "the third claim asks");
        let mut out = Vec::new();
        for (i, &p) in asked.iter().enumerate() {
            let at = if i < ahead { 40 } else { 15 };
            out = answer(&mut e, t, p, Some(at));
        }
        behind(&out)
    };
    assert_eq!(run(4), None, "four of nine ahead");
    assert_eq!(run(5), Some(Round(40)), "five of nine: lands at the median");
}

/// An exchange that ends without a neighbour's copy marks its VN cut off; one with a copy marks it in step.
#[test]
fn an_exchange_without_copies_marks_the_vn_cut_off() {
    let t = Duration::ZERO;
    let mut e = probing(None);
    e.join(t, 1..=12);
    assert!(!e.catch_up.isolated(), "fresh: behind no one");
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(0))));
    e.handle(
        t,
        VnInput::FromRn(ToVirtualNode::Exchange(ChunkFrame {
            round: Round(0),
            chunk: protocol::ChunkIndex(0),
            values: vec![0.0; LENS[0]],
        })),
    );
    // Nobody proposed: the overlay freezes empty and the exchange ends with nothing.
    let mut now = t;
    let mut done = false;
    for _ in 0..1000 {
        let Some(next) = e.poll_timeout() else { break };
        now = next.max(now);
        let out = e.handle(now, VnInput::Tick);
        done |= out
            .iter()
            .any(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::Done(s)) if s.round == Round(0)));
        if done {
            break;
        }
    }
    assert!(done, "exchange 0 ended");
    assert!(e.catch_up.isolated());
    exchanged(&mut e, 1, true);
    assert!(!e.catch_up.isolated());
}

/// The probe keeps the old protection: a cut-off VN asks only once three peers it hears are beyond its
/// window, a minority ahead (four of nine answers) does not move it; answers from fewer than most of the
/// peers asked decide nothing; peers that cannot be reached or answer garbage do not vote; and a VN probes
/// at most once per exchange deadline whatever peers claim.
#[test]
fn a_probe_needs_a_majority_ahead_and_is_bounded() {
    let t = Duration::ZERO;
    let mut e = probing(None);
    assert!(
        queries(&e.join(t, 1..=12)).is_empty(),
        "not resumed: no probe at join"
    );
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(5))));
    exchanged(&mut e, 5, false);
    // Six peers in step (exchange 5: proposals for 9 with lookahead 4) and peers 1, 2 claiming exchange
    // 20; then peer 3 too: three distinct peers beyond the window — enough to ask.
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
    let answers = [5, 6, 5, 5, 6, 20, 20, 20, 20].map(Some);
    let mut out = Vec::new();
    for (&p, at) in asked.iter().zip(answers) {
        out = answer(&mut e, t, p, at);
    }
    assert!(behind(&out).is_none(), "four of nine ahead: in step");
    let soon = t + e.cfg.exchange_timeout / 2;
    assert!(
        crowd(&mut e, soon).is_empty(),
        "at most one probe per deadline"
    );
    // A later probe: four answers ahead, three unreachable, two garbage: too few votes, nothing moves.
    let later = t + e.cfg.exchange_timeout;
    let asked = crowd(&mut e, later);
    assert_eq!(asked.len(), PROBE_PEERS);
    for &p in &asked[..4] {
        answer(&mut e, later, p, Some(20));
    }
    for &p in &asked[4..7] {
        e.handle(later, VnInput::RoundQueryFailed { to: p });
    }
    e.handle(
        later,
        VnInput::RoundAnswer {
            from: asked[7],
            bytes: vec![0xff; 9],
        },
    );
    let out = e.handle(
        later,
        VnInput::RoundAnswer {
            from: asked[8],
            bytes: vec![],
        },
    );
    assert!(behind(&out).is_none());
    assert!(
        e.catch_up.deadline().is_none(),
        "decided (nothing) once every peer asked was heard from"
    );
    // Five of nine ahead, three never answering: decided at the probe's deadline.
    let again = later + e.cfg.exchange_timeout;
    let asked = crowd(&mut e, again);
    for (&p, at) in asked.iter().zip([21, 20, 22, 23, 20, 5].map(Some)) {
        assert!(behind(&answer(&mut e, again, p, at)).is_none());
    }
    let deadline = again + e.cfg.exchange_timeout;
    assert!(e.poll_timeout().is_some_and(|d| d <= deadline));
    let out = e.handle(deadline, VnInput::Tick);
    assert_eq!(
        behind(&out),
        Some(Round(20)),
        "lower median of 5, 20, 20, 21, 22, 23: a running node lands at the median, never past it"
    );
}

/// Round queries are answered with the newest exchange (a resumed VN's at once), once per request, within a
/// per-peer rate; an unlisted asker or a query with a body gets nothing.
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
