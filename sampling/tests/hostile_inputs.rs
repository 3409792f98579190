//! Stateful property tests: one [`Sampler`] (Cyclon + overlay builder) under arbitrary interleavings of
//! hostile inputs — arbitrary control messages from arbitrary peers (itself included) with arbitrary rounds,
//! TTLs, nonces, ages and entry counts; answers to what it sent, from the right peer or another one
//! (unsolicited or misdirected `Accept`/`Confirm`/`ConfirmAck`/`SpliceOffer`/`Handover`/shuffle replies);
//! send failures, refused edges, round starts in any order and ticks at arbitrary times.
//!
//! After every input: no panic; both state machines' invariants hold (`check_invariants`: view ≤ c, no self
//! or duplicate entry, age ≤ `MAX_AGE`; rounds kept ≤ `MAX_KEPT_ROUNDS`; per round ≤ r established edges,
//! ≤ r + 1 links of any kind, ≤ one open walk per sub-step run, nothing pending once frozen); every neighbour
//! set (frozen or not) ≤ r; the outputs of one input are bounded by a constant of the config; and after a
//! `Tick` at `now` no timer is due at or before `now` (a driver following `poll_timeout` never spins).
//!
//! Case counts are set explicitly so the file stays well under 2 s in a debug build.

use std::time::Duration;

use proptest::prelude::*;
use protocol::Round;
use protocol::control::{
    ControlMsg, CyclonMsg, MAX_KEPT_ROUNDS, MAX_SHUFFLE_ENTRIES, OverlayMsg, ViewEntry,
};
use sampling::{
    CyclonConfig, OverlayConfig, Sampler, SamplerConfig, SamplerInput, SamplerOutput, derive_rng,
};

/// This VN. Peers are 1..PEERS; inputs may also claim to come from `ME`.
const ME: u32 = 0;
const PEERS: u32 = 8;
const DEGREE: usize = 3;

fn config() -> SamplerConfig {
    SamplerConfig {
        cyclon: CyclonConfig {
            view_size: 5,
            shuffle_len: 3,
            period: Duration::from_millis(100),
            shuffle_timeout: Duration::from_millis(50),
        },
        overlay: OverlayConfig::new(DEGREE, Duration::from_millis(10)),
    }
}

/// Most outputs one input may produce: every kept round can fire all its sub-steps at once (a late tick), one
/// retransmission per link, and at the freeze one `Drop` per link and one `Frozen`; plus the reply to the
/// message itself and Cyclon's shuffle, timeout and reply.
fn max_outputs(cfg: &SamplerConfig) -> usize {
    let o = &cfg.overlay;
    let per_round = (o.substeps + o.repair_steps) as usize + 2 * (o.degree + 1) + 1;
    MAX_KEPT_ROUNDS as usize * per_round + 8
}

#[derive(Debug, Clone)]
enum Op {
    /// Let `ms` pass, then tick.
    Advance(u64),
    Join(Vec<u32>),
    StartRound(u64),
    /// An arbitrary message.
    Msg {
        from: u32,
        msg: ControlMsg<u32>,
    },
    /// A protocol-shaped answer to the `k`-th most recent message this VN sent, from its addressee or from
    /// `from` (a third party), of the kind picked by `kind`.
    Answer {
        k: usize,
        from: Option<u32>,
        kind: u8,
        other: u32,
    },
    SendFailed(u32),
    EdgeRefused(u64, u32),
}

fn peer() -> impl Strategy<Value = u32> {
    0..PEERS
}

fn round() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..30, 1 => any::<u64>()]
}

fn nonce() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..4, any::<u64>()]
}

fn overlay_msg() -> impl Strategy<Value = OverlayMsg<u32>> {
    let r = || round().prop_map(Round);
    prop_oneof![
        (r(), prop::option::of(peer()), nonce(), any::<u8>()).prop_map(
            |(round, origin, nonce, ttl)| OverlayMsg::Propose {
                round,
                origin,
                nonce,
                ttl,
            }
        ),
        (r(), nonce(), peer()).prop_map(|(round, nonce, acceptor)| OverlayMsg::Accept {
            round,
            nonce,
            acceptor
        }),
        (r(), nonce()).prop_map(|(round, key)| OverlayMsg::Confirm { round, key }),
        (r(), nonce()).prop_map(|(round, nonce)| OverlayMsg::ConfirmAck { round, nonce }),
        (r(), nonce()).prop_map(|(round, nonce)| OverlayMsg::Nack { round, nonce }),
        r().prop_map(|round| OverlayMsg::Drop { round }),
        (r(), prop::option::of(peer()), nonce(), any::<u8>()).prop_map(
            |(round, origin, nonce, ttl)| OverlayMsg::SpliceRequest {
                round,
                origin,
                nonce,
                ttl,
            }
        ),
        (r(), nonce(), peer(), peer()).prop_map(|(round, nonce, splitter, other)| {
            OverlayMsg::SpliceOffer {
                round,
                nonce,
                splitter,
                other,
            }
        }),
        (r(), nonce()).prop_map(|(round, key)| OverlayMsg::SpliceAccept { round, key }),
        (r(), nonce(), peer()).prop_map(|(round, nonce, newcomer)| OverlayMsg::Handover {
            round,
            nonce,
            newcomer
        }),
    ]
}

fn entries() -> impl Strategy<Value = Vec<ViewEntry<u32>>> {
    let age = prop_oneof![0u32..10, any::<u32>()];
    prop::collection::vec(
        (peer(), age).prop_map(|(id, age)| ViewEntry { id, age }),
        0..MAX_SHUFFLE_ENTRIES + 4,
    )
}

fn control_msg() -> impl Strategy<Value = ControlMsg<u32>> {
    prop_oneof![
        3 => overlay_msg().prop_map(ControlMsg::Overlay),
        1 => entries().prop_map(|entries| ControlMsg::Cyclon(CyclonMsg::ShuffleRequest { entries })),
        1 => entries().prop_map(|entries| ControlMsg::Cyclon(CyclonMsg::ShuffleReply { entries })),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![0u64..15, 0u64..400].prop_map(Op::Advance),
        1 => prop::collection::vec(peer(), 0..10).prop_map(Op::Join),
        2 => round().prop_map(Op::StartRound),
        4 => (peer(), control_msg()).prop_map(|(from, msg)| Op::Msg { from, msg }),
        8 => (0usize..8, prop::option::weighted(0.2, peer()), any::<u8>(), peer())
            .prop_map(|(k, from, kind, other)| Op::Answer { k, from, kind, other }),
        1 => peer().prop_map(Op::SendFailed),
        1 => (round(), peer()).prop_map(|(r, p)| Op::EdgeRefused(r, p)),
    ]
}

/// A plausible answer to `sent` (what an honest or confused peer would send back), picked by `kind`; `from`
/// is who sends it (an acceptor or splitter names itself, or lies).
fn answer(sent: &ControlMsg<u32>, kind: u8, other: u32, from: u32) -> ControlMsg<u32> {
    use OverlayMsg::*;
    let o = |m| ControlMsg::Overlay(m);
    match sent {
        ControlMsg::Cyclon(_) => ControlMsg::Cyclon(CyclonMsg::ShuffleReply {
            entries: (0..kind as u32 % 6)
                .map(|i| ViewEntry {
                    id: (other + i) % PEERS,
                    age: i,
                })
                .collect(),
        }),
        ControlMsg::Overlay(m) => {
            let (round, nonce) = match m {
                Propose { round, nonce, .. }
                | SpliceRequest { round, nonce, .. }
                | Accept { round, nonce, .. }
                | ConfirmAck { round, nonce }
                | Nack { round, nonce }
                | SpliceOffer { round, nonce, .. }
                | Handover { round, nonce, .. } => (*round, *nonce),
                Confirm { round, key } | SpliceAccept { round, key } => {
                    (*round, protocol::control::walk_nonce(*key))
                }
                Drop { round } => (*round, 0),
            };
            match (m, kind % 4) {
                (Propose { .. }, 0) => o(Accept {
                    round,
                    nonce,
                    acceptor: from,
                }),
                (Propose { .. }, _) => o(Accept {
                    round,
                    nonce,
                    acceptor: other,
                }),
                (SpliceRequest { .. }, 0 | 1) => o(SpliceOffer {
                    round,
                    nonce,
                    splitter: if kind.is_multiple_of(4) { from } else { other },
                    other,
                }),
                (Accept { .. } | SpliceOffer { .. }, 0 | 1) => {
                    if matches!(m, Accept { .. }) {
                        o(Confirm { round, key: nonce })
                    } else {
                        o(SpliceAccept { round, key: nonce })
                    }
                }
                (Confirm { .. } | SpliceAccept { .. } | Handover { .. }, 0 | 1) => {
                    o(ConfirmAck { round, nonce })
                }
                (_, 2) => o(Nack { round, nonce }),
                (_, 3) => o(Handover {
                    round,
                    nonce,
                    newcomer: other,
                }),
                _ => o(Drop { round }),
            }
        }
    }
}

struct Harness {
    s: Sampler<u32>,
    now: Duration,
    /// Recent (addressee, message) this VN sent, newest last.
    sent: Vec<(u32, ControlMsg<u32>)>,
    bound: usize,
}

impl Harness {
    fn new(seed: u64) -> Self {
        let mut cfg = config();
        // Half the cases start walks that hide their origin (answered back along their path).
        cfg.overlay.hide_origin = !seed.is_multiple_of(2);
        let bound = max_outputs(&cfg);
        let s = Sampler::new(ME, cfg, derive_rng(seed, 0), derive_rng(seed, 1)).unwrap();
        Self {
            s,
            now: Duration::ZERO,
            sent: Vec::new(),
            bound,
        }
    }

    fn feed(&mut self, input: SamplerInput<u32>) -> Result<(), TestCaseError> {
        let mut out = Vec::new();
        self.s.handle(self.now, input, &mut out);
        prop_assert!(
            out.len() <= self.bound,
            "{} outputs for one input > {}",
            out.len(),
            self.bound
        );
        for o in out {
            match o {
                SamplerOutput::Send { to, msg } => {
                    prop_assert_ne!(to, ME, "sent to itself: {:?}", msg);
                    self.sent.push((to, msg));
                }
                SamplerOutput::Frozen { neighbours, round } => {
                    prop_assert!(neighbours.len() <= DEGREE, "round {round}: {neighbours:?}");
                    prop_assert!(!neighbours.contains(&ME));
                }
                _ => {}
            }
        }
        let keep = self.sent.len().saturating_sub(16);
        self.sent.drain(..keep);
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        if let Err(e) = self.s.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
        let rounds: Vec<Round> = self.s.overlay().rounds().collect();
        prop_assert!(rounds.len() as u64 <= MAX_KEPT_ROUNDS);
        for r in rounds {
            let n = self.s.neighbours(r).unwrap();
            prop_assert!(n.len() <= DEGREE, "round {r}: {} neighbours", n.len());
        }
        prop_assert!(self.s.view().len() <= config().cyclon.view_size);
        Ok(())
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Advance(ms) => {
                self.now += Duration::from_millis(ms);
                self.feed(SamplerInput::Tick)?;
                // Everything due at `now` fired: a driver that follows poll_timeout does not spin.
                if let Some(t) = self.s.poll_timeout() {
                    prop_assert!(t > self.now, "timer at {t:?} still due at {:?}", self.now);
                }
            }
            Op::Join(bootstrap) => self.feed(SamplerInput::Join { bootstrap })?,
            Op::StartRound(r) => self.feed(SamplerInput::StartRound { round: Round(r) })?,
            Op::Msg { from, msg } => self.feed(SamplerInput::Message { from, msg })?,
            Op::Answer {
                k,
                from,
                kind,
                other,
            } => {
                if self.sent.is_empty() {
                    return Ok(());
                }
                let (to, sent) = self.sent[self.sent.len() - 1 - k % self.sent.len()].clone();
                let from = from.unwrap_or(to);
                let msg = answer(&sent, kind, other, from);
                self.feed(SamplerInput::Message { from, msg })?
            }
            Op::SendFailed(to) => self.feed(SamplerInput::SendFailed { to })?,
            Op::EdgeRefused(r, peer) => self.feed(SamplerInput::EdgeRefused {
                round: Round(r),
                peer,
            })?,
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Any interleaving, starting from a joined VN negotiating round 0.
    #[test]
    fn sampler_survives_hostile_interleavings(seed in any::<u64>(), ops in prop::collection::vec(op(), 1..250)) {
        let mut h = Harness::new(seed);
        h.feed(SamplerInput::Join { bootstrap: (1..PEERS).collect() })?;
        h.feed(SamplerInput::StartRound { round: Round(0) })?;
        for op in ops {
            h.apply(op)?;
        }
    }

    /// Many rounds started while hostile traffic arrives: the kept rounds stay bounded as rounds advance.
    #[test]
    fn rounds_stay_bounded_as_rounds_advance(seed in any::<u64>(), ops in prop::collection::vec(op(), 1..120)) {
        let mut h = Harness::new(seed);
        h.feed(SamplerInput::Join { bootstrap: (1..PEERS).collect() })?;
        for (i, op) in ops.into_iter().enumerate() {
            if i % 3 == 0 {
                h.feed(SamplerInput::StartRound { round: Round(i as u64 / 3) })?;
            }
            h.apply(op)?;
        }
    }
}
