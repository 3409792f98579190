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
    e.handle(t, VnInput::FromRn(ToVirtualNode::StartRound(Round(5))));
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
