//! Many VNs running Cyclon + the overlay builder — one [`Sampler`] each, the composition the node runs — on
//! a simulated [`Network`], round after round.

use std::collections::HashSet;
use std::time::Duration;

use protocol::Round;
use protocol::control::{ControlMsg, CyclonMsg, OverlayMsg, ViewEntry};
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha12Rng;

use super::rogue::{Rogue, RogueState, Sent};
use super::{Event, NetConfig, Network};
use crate::cyclon::{Cyclon, CyclonConfig};
use crate::overlay::{OverlayBuilder, OverlayConfig};
use crate::sampler::{Sampler, SamplerConfig, SamplerInput, SamplerOutput};
use crate::{Error, Stream, derive_rng, vn_rng};

/// Timer tag for "run the state machines' due timers".
const TAG_TICK: u64 = 0;

/// Bytes of a libp2p PeerId on the wire as a length-prefixed byte string (34-38 byte multihash of an
/// Ed25519 key + 1 length byte): used to estimate real message sizes from the u32 ids the simulator uses.
pub const PEER_ID_WIRE_BYTES: u64 = 39;

/// Simulation parameters.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub n_vns: usize,
    pub cyclon: CyclonConfig,
    pub overlay: OverlayConfig,
    pub net: NetConfig,
    /// Time between two round starts.
    pub round_period: Duration,
    /// Rounds negotiated ahead (the node's `overlay_lookahead`). 0: each round is negotiated alone, the next
    /// starts `round_period` after it is collected. L > 0: round starts are `round_period` apart whatever the
    /// window, so with `round_period` < the overlay window up to L + 1 negotiations overlap, as in a node
    /// whose rounds are shorter than the window.
    pub lookahead: u64,
    /// Each VN starts a round at a uniform random offset in [0, start_jitter] (unsynchronised clocks and
    /// training times).
    pub start_jitter: Duration,
    /// Cyclon-only time before the first round.
    pub warmup: Duration,
    /// Bootstrap entries each VN joins with (random other VNs).
    pub bootstrap: usize,
    /// Probability that an alive VN crashes at a round start.
    pub crash_prob: f64,
    pub seed: u64,
    /// Run every VN's [`Sampler::check_invariants`] after every event and panic on a violation (tests).
    pub check_invariants: bool,
}

impl SimConfig {
    /// Defaults: 100 ms sub-steps, 1-50 ms latency, a round every deadline + 1 s, Cyclon every round/5, and
    /// the network's size known to every VN (as a node knows its peer list's).
    pub fn new(n_vns: usize, degree: usize, seed: u64) -> Self {
        let overlay = OverlayConfig {
            network_size: Some(n_vns),
            ..OverlayConfig::new(degree, Duration::from_millis(100))
        };
        let start_jitter = Duration::from_millis(200);
        let round_period = overlay.deadline() + start_jitter + Duration::from_secs(1);
        let cyclon = CyclonConfig {
            period: round_period / 5,
            ..CyclonConfig::default()
        };
        Self {
            n_vns,
            warmup: cyclon.period * 30,
            cyclon,
            overlay,
            net: NetConfig::default(),
            round_period,
            lookahead: 0,
            start_jitter,
            bootstrap: 5,
            crash_prob: 0.0,
            seed,
            check_invariants: false,
        }
    }
}

/// Message counters (all VNs, whole run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    pub cyclon_msgs: u64,
    pub overlay_msgs: u64,
    /// bincode 2 (standard config, serde) payload bytes with the simulator's u32 ids.
    pub cyclon_bytes: u64,
    pub overlay_bytes: u64,
    /// The same with every id replaced by a PeerId-sized byte string ([`PEER_ID_WIRE_BYTES`]).
    pub cyclon_bytes_peerid: u64,
    pub overlay_bytes_peerid: u64,
    pub invalid: u64,
}

/// Result of one round.
#[derive(Debug, Clone)]
pub struct RoundGraph {
    pub round: Round,
    /// Final adjacency over all VNs (sorted lists): edges counted by both ends. Crashed VNs have none.
    pub adj: Vec<Vec<u32>>,
    pub alive: Vec<bool>,
    /// Edges counted by exactly one end when the round was collected (after `Drop`s), before the chunk-time
    /// check; each was then removed from the counting end via `EdgeRefused`.
    pub half_open: usize,
    /// Edges still counted by one end after the chunk-time check (must be 0).
    pub one_sided_after_check: usize,
    /// Self-loops or duplicate entries seen in any neighbour set (must be 0).
    pub malformed: usize,
}

/// A listed but hostile VN, for attack tests: it runs the honest protocol and, every `every`, pushes
/// unsolicited messages at each of `victims` — for every round started in the last `lookahead + 1` round
/// periods a `Confirm` with a fresh nonce (`confirms`) and a `Handover` naming itself (`handovers`), and a
/// Cyclon shuffle request carrying only itself (`shuffles`) — trying to become their neighbour without being
/// chosen by the matching protocol.
#[derive(Debug, Clone)]
pub struct Pusher {
    pub rogue: u32,
    pub victims: Vec<u32>,
    pub every: Duration,
    pub confirms: bool,
    pub handovers: bool,
    pub shuffles: bool,
}

struct Vn {
    sampler: Sampler<u32>,
    scheduled: Option<Duration>,
}

/// VNs 0..n running Cyclon + overlay on a [`Network`].
pub struct OverlaySim {
    cfg: SimConfig,
    net: Network<ControlMsg<u32>>,
    vns: Vec<Vn>,
    rng: ChaCha12Rng,
    pub traffic: Traffic,
    next_round: Round,
    /// Every round scheduled so far (rounds up to `next_round + lookahead`) and its start.
    round_starts: Vec<(Round, Duration)>,
    out: Vec<SamplerOutput<u32>>,
    /// The hostile pusher, its next push time and its own RNG (nonces), apart from the simulation's.
    pusher: Option<(Pusher, Duration, ChaCha12Rng)>,
    /// Messages the pusher sent.
    pub pushed: u64,
    /// Unordered VN pairs that have exchanged a control message or shared an edge (so chunks) so far.
    contacts: HashSet<(u32, u32)>,
    /// The rogue node, its next push time, its own RNG (keys) and its state.
    rogue: Option<(Rogue, Duration, ChaCha12Rng, RogueState)>,
}

fn varint_len(v: u64) -> u64 {
    // bincode 2 standard config: < 251 in one byte, then a tag byte + u16/u32/u64.
    if v < 251 {
        1
    } else if v <= u16::MAX as u64 {
        3
    } else if v <= u32::MAX as u64 {
        5
    } else {
        9
    }
}

/// Wire-size correction from u32 ids to PeerId-sized ids.
fn id_overhead(msg: &ControlMsg<u32>) -> u64 {
    let ids: Vec<u32> = match msg {
        ControlMsg::Cyclon(
            CyclonMsg::ShuffleRequest { entries } | CyclonMsg::ShuffleReply { entries },
        ) => entries.iter().map(|e| e.id).collect(),
        ControlMsg::Overlay(OverlayMsg::SpliceOffer {
            splitter, other, ..
        }) => vec![*splitter, *other],
        ControlMsg::Overlay(
            OverlayMsg::Propose {
                origin: Some(i), ..
            }
            | OverlayMsg::SpliceRequest {
                origin: Some(i), ..
            }
            | OverlayMsg::Accept { acceptor: i, .. }
            | OverlayMsg::Handover { newcomer: i, .. },
        ) => vec![*i],
        ControlMsg::Overlay(_) => vec![],
    };
    ids.iter()
        .map(|&i| PEER_ID_WIRE_BYTES - varint_len(i as u64))
        .sum()
}

impl OverlaySim {
    pub fn new(cfg: SimConfig) -> Result<Self, Error> {
        if cfg.lookahead > protocol::control::MAX_LOOKAHEAD {
            return Err(Error::Config(format!(
                "lookahead {} exceeds {}",
                cfg.lookahead,
                protocol::control::MAX_LOOKAHEAD
            )));
        }
        let mut rng = derive_rng(cfg.seed, u64::MAX);
        let net = Network::new(cfg.net.clone(), derive_rng(cfg.seed, u64::MAX - 1));
        let n = cfg.n_vns;
        let mut vns = Vec::with_capacity(n);
        for i in 0..n as u32 {
            vns.push(Self::make_vn(&cfg, i)?);
        }
        let mut sim = Self {
            cfg,
            net,
            vns: Vec::new(),
            rng: derive_rng(0, 0),
            traffic: Traffic::default(),
            next_round: Round::ZERO,
            round_starts: Vec::new(),
            out: Vec::new(),
            pusher: None,
            pushed: 0,
            contacts: HashSet::new(),
            rogue: None,
        };
        sim.vns = vns;
        for i in 0..n as u32 {
            let b = sim.cfg.bootstrap.min(n.saturating_sub(1));
            let boot: Vec<u32> = sample(&mut rng, n - 1, b)
                .into_iter()
                .map(|j| j as u32 + u32::from(j as u32 >= i))
                .collect();
            sim.input(Duration::ZERO, i, SamplerInput::Join { bootstrap: boot });
            sim.flush(i);
        }
        sim.rng = rng;
        let warm = sim.cfg.warmup;
        sim.run_until(warm);
        Ok(sim)
    }

    fn make_vn(cfg: &SimConfig, i: u32) -> Result<Vn, Error> {
        // Independent streams per VN and per state machine (siblings never share one).
        let cfg_s = SamplerConfig {
            cyclon: cfg.cyclon.clone(),
            overlay: cfg.overlay.clone(),
        };
        let sampler = Sampler::new(
            i,
            cfg_s,
            vn_rng(cfg.seed, i as u64, Stream::Cyclon),
            vn_rng(cfg.seed, i as u64, Stream::Overlay),
        )?;
        Ok(Vn {
            sampler,
            scheduled: None,
        })
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    pub fn now(&self) -> Duration {
        self.net.now()
    }

    pub fn len(&self) -> usize {
        self.vns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vns.is_empty()
    }

    pub fn is_alive(&self, i: u32) -> bool {
        self.net.is_up(i)
    }

    pub fn set_loss(&mut self, loss: f64) {
        self.net.set_loss(loss);
    }

    pub fn cyclon(&self, i: u32) -> &Cyclon<u32> {
        self.vns[i as usize].sampler.cyclon()
    }

    pub fn overlay(&self, i: u32) -> &OverlayBuilder<u32> {
        self.vns[i as usize].sampler.overlay()
    }

    /// Feeds VN `i` one input; its outputs wait in `self.out` for [`Self::flush`].
    fn input(&mut self, now: Duration, i: u32, input: SamplerInput<u32>) {
        self.vns[i as usize]
            .sampler
            .handle(now, input, &mut self.out);
        if self.cfg.check_invariants
            && let Err(e) = self.vns[i as usize].sampler.check_invariants()
        {
            panic!("at {now:?}: {e}");
        }
    }

    /// Crash VN `i`: it stops processing, messages to it fail.
    pub fn crash(&mut self, i: u32) {
        self.net.set_up(i, false);
    }

    /// Add a VN that joins via `bootstrap`; returns its index.
    pub fn add_vn(&mut self, bootstrap: Vec<u32>) -> Result<u32, Error> {
        let i = self.vns.len() as u32;
        self.vns.push(Self::make_vn(&self.cfg, i)?);
        let now = self.now();
        self.input(now, i, SamplerInput::Join { bootstrap });
        self.flush(i);
        Ok(i)
    }

    /// Unordered VN pairs that have exchanged a control message, or shared an edge of a collected round,
    /// since the start: the connections a libp2p deployment opens over the run (it keeps each until it
    /// idles out), whose handshakes and buffers are most of what hundreds of VNs in one process cost.
    pub fn contact_pairs(&self) -> usize {
        self.contacts.len()
    }

    fn contact(&mut self, a: u32, b: u32) {
        self.contacts.insert((a.min(b), a.max(b)));
    }

    /// In-degree of every VN in the Cyclon view graph (alive VNs' views only).
    pub fn view_in_degrees(&self) -> Vec<usize> {
        let mut d = vec![0; self.vns.len()];
        for (i, v) in self.vns.iter().enumerate() {
            if self.net.is_up(i as u32) {
                // Entries past the network's (a rogue's junk) are not VNs.
                for e in v.sampler.cyclon().entries() {
                    if let Some(x) = d.get_mut(e.id as usize) {
                        *x += 1;
                    }
                }
            }
        }
        d
    }

    /// Send the pending outputs of VN `i` and schedule its next tick.
    fn flush(&mut self, i: u32) {
        let cfg = bincode::config::standard();
        for o in std::mem::take(&mut self.out) {
            match o {
                SamplerOutput::Send { to, msg } => {
                    let b = bincode::serde::encode_to_vec(&msg, cfg)
                        .map(|v| v.len() as u64)
                        .unwrap_or(0);
                    let t = &mut self.traffic;
                    let (msgs, bytes, bytes_peerid) = match msg {
                        ControlMsg::Cyclon(_) => (
                            &mut t.cyclon_msgs,
                            &mut t.cyclon_bytes,
                            &mut t.cyclon_bytes_peerid,
                        ),
                        ControlMsg::Overlay(_) => (
                            &mut t.overlay_msgs,
                            &mut t.overlay_bytes,
                            &mut t.overlay_bytes_peerid,
                        ),
                    };
                    *msgs += 1;
                    *bytes += b;
                    *bytes_peerid += b + id_overhead(&msg);
                    self.contact(i, to);
                    self.net.send(i, to, msg);
                }
                SamplerOutput::Invalid { .. } => self.traffic.invalid += 1,
                SamplerOutput::Frozen { .. }
                | SamplerOutput::EdgeDropped { .. }
                | SamplerOutput::ShuffleTimedOut { .. } => {}
            }
        }
        let vn = &mut self.vns[i as usize];
        if let Some(t) = vn.sampler.poll_timeout() {
            let now = self.net.now();
            if vn.scheduled.is_none_or(|s| s <= now || t < s) {
                vn.scheduled = Some(t);
                self.net.timer(i, t, TAG_TICK);
            }
        }
    }

    fn dispatch(&mut self, now: Duration, ev: Event<ControlMsg<u32>>) {
        let i = match ev {
            Event::Deliver { from, to, msg } => {
                if self.rogue_intercept(now, from, to, &msg) {
                    return;
                }
                self.input(now, to, SamplerInput::Message { from, msg });
                to
            }
            Event::SendFailed { from, to } => {
                self.input(now, from, SamplerInput::SendFailed { to });
                from
            }
            Event::Timer { node, tag } => {
                let vn = &mut self.vns[node as usize];
                if vn.scheduled.is_some_and(|s| s <= now) {
                    vn.scheduled = None;
                }
                self.input(now, node, SamplerInput::Tick);
                if tag != TAG_TICK {
                    self.input(
                        now,
                        node,
                        SamplerInput::StartRound {
                            round: Round(tag - 1),
                        },
                    );
                }
                node
            }
        };
        self.flush(i);
    }

    /// Makes `p.rogue` push unsolicited messages at `p.victims` from now on (see [`Pusher`]).
    pub fn set_pusher(&mut self, p: Pusher) {
        assert!(!p.every.is_zero(), "a pusher needs a positive period");
        let rng = derive_rng(self.cfg.seed, u64::MAX - 2);
        let first = self.now();
        self.pusher = Some((p, first, rng));
    }

    /// Process every event up to virtual time `t` (and the pusher's pushes as they fall due).
    pub fn run_until(&mut self, t: Duration) {
        loop {
            let push_at = self
                .pusher
                .as_ref()
                .map(|(_, at, _)| *at)
                .filter(|&at| at <= t);
            let rogue_at = self
                .rogue
                .as_ref()
                .map(|(_, at, _, _)| *at)
                .filter(|&at| at <= t);
            let until = match (push_at, rogue_at) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(t),
            };
            while let Some((now, ev)) = self.net.pop_until(until) {
                self.dispatch(now, ev);
            }
            if push_at == Some(until) {
                self.push(until);
            } else if rogue_at == Some(until) {
                self.rogue_push(until);
            } else {
                return;
            }
        }
    }

    /// Makes a rogue node of `r.ids` from now on (see [`Rogue`]). Ids past the network's (the rogue's junk
    /// entries) are down: a send to one fails, as a dial to a bogus address does.
    pub fn set_rogue(&mut self, r: Rogue) {
        assert!(!r.every.is_zero(), "a rogue needs a positive period");
        assert!(
            r.ids.iter().all(|&i| (i as usize) < self.vns.len()),
            "rogue ids must be VNs"
        );
        let phantom = self.vns.len() as u32;
        for i in 0..r.ids.len() as u32 * 8 + 8 {
            self.net.set_up(phantom + i, false);
        }
        let rng = derive_rng(self.cfg.seed, u64::MAX - 3);
        let first = self.now();
        self.rogue = Some((r, first, rng, RogueState::default()));
    }

    /// The rogue's state (its edges, what it sent), if there is one.
    pub fn rogue(&self) -> Option<&RogueState> {
        self.rogue.as_ref().map(|(_, _, _, s)| s)
    }

    /// Rounds whose overlay may be running at `at` (started in the last `lookahead + 1` round periods).
    fn open_rounds(&self, at: Duration) -> Vec<Round> {
        let window = self.cfg.round_period * (self.cfg.lookahead as u32 + 1);
        self.round_starts
            .iter()
            .filter(|(_, s)| *s <= at && at <= *s + window)
            .map(|(r, _)| *r)
            .collect()
    }

    fn rogue_send(&mut self, sent: Vec<Sent>) {
        for (from, to, msg) in sent {
            self.contact(from, to);
            self.net.send(from, to, msg);
        }
    }

    /// One round of the rogue's pushes, at `at`.
    fn rogue_push(&mut self, at: Duration) {
        let open = self.open_rounds(at);
        let phantom = self.vns.len() as u32;
        let Some((r, next, rng, state)) = self.rogue.as_mut() else {
            return;
        };
        let mut sent = Vec::new();
        state.push(r, &open, phantom, rng, &mut sent);
        *next = (*next).max(at) + r.every;
        self.rogue_send(sent);
    }

    /// A message for one of the rogue's identities: true if the rogue handled it itself.
    fn rogue_intercept(
        &mut self,
        now: Duration,
        from: u32,
        to: u32,
        msg: &ControlMsg<u32>,
    ) -> bool {
        if !self
            .rogue
            .as_ref()
            .is_some_and(|(r, ..)| r.ids.contains(&to))
        {
            return false;
        }
        let open = self.open_rounds(now);
        let (r, _, _, state) = self.rogue.as_mut().expect("checked");
        let mut sent = Vec::new();
        let handled = state.intercept(r, &open, from, to, msg, &mut sent);
        self.rogue_send(sent);
        handled
    }

    /// One round of the pusher's unsolicited messages, at `at`.
    fn push(&mut self, at: Duration) {
        let Some((p, next, mut rng)) = self.pusher.take() else {
            return;
        };
        let open = self.open_rounds(at);
        for &v in &p.victims {
            for &round in &open {
                let nonce = rng.random::<u64>();
                let confirm = OverlayMsg::Confirm { round, key: nonce };
                let handover = OverlayMsg::Handover {
                    round,
                    nonce,
                    newcomer: p.rogue,
                };
                for (on, msg) in [(p.confirms, confirm), (p.handovers, handover)] {
                    if on {
                        self.net.send(p.rogue, v, ControlMsg::Overlay(msg));
                        self.pushed += 1;
                    }
                }
            }
            if p.shuffles {
                let entries = vec![ViewEntry {
                    id: p.rogue,
                    age: 0,
                }];
                let msg = ControlMsg::Cyclon(CyclonMsg::ShuffleRequest { entries });
                self.net.send(p.rogue, v, msg);
                self.pushed += 1;
            }
        }
        let every = p.every;
        self.pusher = Some((p, next.max(at) + every, rng));
    }

    /// Schedules the next round's start at every VN (each at its own jittered time) and its crashes: now
    /// without lookahead, else `round_period` after the previous round's start.
    fn schedule_round(&mut self) {
        let round = self
            .round_starts
            .last()
            .map_or(Round::ZERO, |(r, _)| r.next());
        let soonest = self.now() + Duration::from_millis(1);
        let start = match self.round_starts.last() {
            Some((_, prev)) if self.cfg.lookahead > 0 => {
                (*prev + self.cfg.round_period).max(soonest)
            }
            _ => soonest,
        };
        let n = self.vns.len();
        for i in 0..n as u32 {
            if self.net.is_up(i)
                && self.cfg.crash_prob > 0.0
                && self.rng.random_bool(self.cfg.crash_prob)
            {
                self.crash(i);
            }
        }
        for i in 0..n as u32 {
            let at = start + self.cfg.start_jitter.mul_f64(self.rng.random::<f64>());
            self.net.timer(i, at, round.get() + 1);
        }
        self.round_starts.push((round, start));
    }

    /// The neighbours VN `i` counts in `round` (sorted): its sampler's, and for a rogue identity also the
    /// edges the rogue made outside it.
    fn counted(&self, round: Round, i: usize, alive: &[bool]) -> Vec<u32> {
        if !alive[i] {
            return vec![];
        }
        let mut s = self.vns[i].sampler.neighbours(round).unwrap_or_default();
        if let Some((r, _, _, state)) = &self.rogue
            && r.ids.contains(&(i as u32))
        {
            s.extend(state.peers(round, i as u32));
            s.sort_unstable();
            s.dedup();
        }
        s
    }

    /// Run one overlay round: every alive VN starts it at its own jittered time, the network runs until all
    /// have frozen and their `Drop`s have arrived, then the chunk-time check removes half-open edges.
    pub fn run_round(&mut self) -> RoundGraph {
        let round = self.next_round;
        self.next_round = round.next();
        let n = self.vns.len();
        while self
            .round_starts
            .last()
            .is_none_or(|(r, _)| *r < round + self.cfg.lookahead)
        {
            self.schedule_round();
        }
        let start = self
            .round_starts
            .iter()
            .find(|(r, _)| *r == round)
            .expect("scheduled above")
            .1;
        let lat = self.cfg.net.latency_max;
        let collect = start + self.cfg.start_jitter + self.cfg.overlay.deadline() + lat * 4;
        self.run_until(collect);

        let alive: Vec<bool> = (0..n as u32).map(|i| self.net.is_up(i)).collect();
        let sets: Vec<Vec<u32>> = (0..n).map(|i| self.counted(round, i, &alive)).collect();
        let mut malformed = 0;
        for (i, s) in sets.iter().enumerate() {
            malformed += s.iter().filter(|&&j| j as usize == i).count();
            malformed += s.windows(2).filter(|w| w[0] == w[1]).count();
        }
        // Chunk-time check: a VN refuses chunks over an edge it does not count; the sender learns it.
        let mut half_open = 0;
        let now = self.now();
        for i in 0..n {
            for &j in &sets[i] {
                let j = j as usize;
                if !alive[j] || !sets[j].contains(&(i as u32)) {
                    half_open += 1;
                    if let Some((r, _, _, state)) = &mut self.rogue
                        && r.ids.contains(&(i as u32))
                    {
                        state.refused(round, i as u32, j as u32);
                    }
                    let refused = SamplerInput::EdgeRefused {
                        round,
                        peer: j as u32,
                    };
                    self.input(now, i as u32, refused);
                    self.flush(i as u32);
                }
            }
        }
        let after: Vec<Vec<u32>> = (0..n).map(|i| self.counted(round, i, &alive)).collect();
        let mut one_sided = 0;
        let mut adj = vec![Vec::new(); n];
        for i in 0..n {
            for &j in &after[i] {
                if after[j as usize].contains(&(i as u32)) {
                    adj[i].push(j);
                    self.contact(i as u32, j);
                } else {
                    one_sided += 1;
                }
            }
        }
        if self.cfg.lookahead == 0 {
            // Idle until the next round start.
            let next = start + self.cfg.round_period;
            self.run_until(next);
        }
        RoundGraph {
            round,
            adj,
            alive,
            half_open,
            one_sided_after_check: one_sided,
            malformed,
        }
    }
}
