//! When negotiations start and with what sub-step: spacing, own offsets, prepared batches, round trips.

use super::*;

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
        e.handle(
            Duration::ZERO,
            VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
        );
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
        e.handle(
            Duration::ZERO,
            VnInput::FromRn(ToVirtualNode::Prepare(Round(0))),
        );
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
    quiet.handle(
        Duration::ZERO,
        VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
    );
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
    busy.handle(
        Duration::ZERO,
        VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
    );
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
    e.handle(
        Duration::ZERO,
        VnInput::FromRn(ToVirtualNode::StartRound(Round(0))),
    );
    let long = freeze(&e);
    assert_eq!(long, configured.deadline() * 6);
    // Slower still: the running round keeps its window.
    rtts(&mut e, Duration::from_millis(50), 80);
    e.handle(
        Duration::from_millis(50),
        VnInput::FromRn(ToVirtualNode::StartRound(Round(1))),
    );
    assert_eq!(freeze(&e), long);
    // Fast again: once the eased sub-step (80 ms after the slow spell, less 10 % a decision, two decisions
    // a round start) is below the round's 60 ms, each round start shortens what is left of it, and never
    // into the past (at 200 ms only its grace is left, and a new grace from then would end later).
    rtts(&mut e, Duration::from_millis(100), 1);
    let mut last = long;
    for (i, ms) in (100..=200).step_by(10).enumerate() {
        let now = Duration::from_millis(ms);
        e.handle(
            now,
            VnInput::FromRn(ToVirtualNode::StartRound(Round(2 + i as u64))),
        );
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
