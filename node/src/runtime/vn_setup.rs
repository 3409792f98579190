//! [`VnSetup`]: everything a virtual node needs from its real node's run to start (degree, timing, the
//! exchanges, chunk lengths, value bounds, seed), and the one place a VN's Swarm, engine and task are built
//! from it. The node builder uses it for in-process VNs; a VN host (`node vn`) receives it over the RN↔VN
//! link and builds the same VN, so a hosted VN behaves exactly as an in-process one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use protocol::Round;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use sampling::{Stream, derive_rng, vn_rng};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::timing::Timing;
use crate::algo::Graph;
use crate::engine::{ValueBounds, VnConfig, VnEngine, VnRun};
use crate::events::EventSink;
use crate::net::behaviour::Timeouts;
use crate::net::preconnect::Preconnect;
use crate::net::transport::build_swarm_with_metrics;
use crate::net::vn_task::{RefusalLog, VnTask, listen};
use crate::observe::Observer;
use crate::peers::PeerList;
use crate::{NodeError, Result, VnAddr};

/// Commands queued per VN: a start and an exchange per round, and a stop. A handful is plenty; the bound
/// makes a stuck VN slow its RN down instead of growing a queue.
pub(crate) const VN_COMMAND_CAPACITY: usize = 8;

/// Longest time a setup may name (a week): far beyond any honest timing, far below a Duration overflow.
const MAX_SETUP_MS: u64 = 7 * 24 * 3600 * 1000;

/// A VN's run parameters, as its RN decides them. Serialisable: it travels to VN hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VnSetup {
    /// The VN's PeerId (the host holds its key; the RN names which of its VNs it means).
    pub vn: String,
    pub degree: usize,
    pub timing: Timing,
    /// Exchanges in the run (the engine's, not rounds: Muffliato has several per round).
    pub exchanges: u64,
    pub chunk_lens: Vec<usize>,
    /// The graph the algorithm exchanges over (per-round overlay, static graph, directed push).
    pub graph: Graph,
    /// Exchanges the RN sits out (dropout): no overlay is negotiated for them.
    pub skip: Vec<u64>,
    /// The algorithm keeps per-edge state (PDMM): the VN reports edge slots.
    pub per_edge: bool,
    pub values: ValueBounds,
    /// The run's seed: with the VN's secret key, its RNG streams.
    pub seed: u64,
    pub chunk_request_ms: u64,
    pub control_request_ms: u64,
    pub idle_connection_ms: u64,
    /// The exchange a resumed node starts at (`node run --resume`): the VN probes the network's round as
    /// it joins.
    pub resumed_at: Option<u64>,
}

/// Mixed into the run seed for the warm-up dials' RNG (`Preconnect`): a key of its own, so the VN's engine
/// streams (and the simulator's runs) draw exactly what they drew before.
const PRECONNECT_SEED: u64 = 0x7072_6563_6f6e_6e65;

/// What the builder or the host supplies beside the setup to start one VN.
pub(crate) struct VnPlace {
    pub key: Keypair,
    pub listen: Multiaddr,
    pub announce: Option<Multiaddr>,
    pub peers: Arc<PeerList>,
    pub psk: Option<PreSharedKey>,
    /// The VN's index at its RN (s), and the RN's index (only for observers and logs).
    pub index: usize,
    pub node: usize,
    pub to_rn: mpsc::Sender<(usize, FromVirtualNode)>,
    pub events: EventSink,
    pub epoch: Instant,
    pub observer: Option<Arc<dyn Observer<PeerId>>>,
    pub restored_view: Vec<protocol::control::ViewEntry<VnAddr>>,
    pub view_board: Option<crate::checkpoint::ViewBoard>,
    /// The node's VNs, which catch-up probes do not ask (they are exactly as far behind). Known to a node's
    /// own process only: a VN host is not told which other VNs belong to the node (issue 43: that list tied
    /// them together for whoever runs the host), so its VN may ask a sibling, which answers as the VN's own
    /// node would and so only ever holds a jump back.
    pub own: Vec<PeerId>,
    /// The node's contact board (`net::contact`), where the node runs its VNs itself; none in a VN host.
    pub contact: Option<Arc<crate::net::contact::Contact>>,
    /// The node's metrics registry, where it serves one (`metrics_addr`): the VN's swarm metrics go there.
    pub telemetry: Option<crate::telemetry::Telemetry>,
}

impl VnSetup {
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            chunk_request: Duration::from_millis(self.chunk_request_ms),
            control_request: Duration::from_millis(self.control_request_ms),
            idle_connection: Duration::from_millis(self.idle_connection_ms),
            handshake: Duration::from_millis(self.timing.handshake_timeout_ms),
            peer_silence: Duration::from_millis(self.timing.peer_silence_ms),
        }
    }

    /// The largest chunk frame of the run: longer frames are refused from their length prefix.
    pub(crate) fn max_chunk_frame(&self) -> usize {
        protocol::chunk::chunk_frame_bytes(self.chunk_lens.iter().copied().max().unwrap_or(0))
    }

    /// The engine's configuration, for a VN on a network of `network_size` VNs (where known).
    fn vn_config(&self, network_size: Option<usize>) -> VnConfig {
        VnConfig::new(
            &self.timing.vn_timing(self.degree),
            VnRun {
                network_size,
                exchanges: self.exchanges,
                chunk_lens: Arc::new(self.chunk_lens.clone()),
                graph: self.graph,
                edge_slots: self.per_edge,
                skip: Arc::new(self.skip.iter().map(|&r| Round(r)).collect::<BTreeSet<_>>()),
                values: self.values,
            },
        )
    }

    /// Binds the VN's Swarm and builds its engine and task (not yet spawned), with the command channel to
    /// drive it and its address. Refuses a key that is not the setup's VN.
    pub(crate) async fn build(
        &self,
        place: VnPlace,
    ) -> Result<(VnTask, mpsc::Sender<ToVirtualNode>, VnAddr)> {
        let peer = place.key.public().to_peer_id();
        if peer.to_string() != self.vn {
            return Err(NodeError::Config(format!(
                "the setup is for VN {} but the key is {peer}",
                self.vn
            )));
        }
        let stream = vn_stream(&place.key);
        let mut release = crate::net::release::ReleaseSchedule::new(
            self.timing.release_delay(),
            crate::secret::private_rng(&place.key, crate::secret::Purpose::Release)?,
        );
        // libp2p's swarm metrics (connections, bandwidth, identify, ping) of this VN, under its `vn` label.
        let (mut swarm, swarm_metrics) = match &place.telemetry {
            Some(t) => t.with_vn_registry(place.index, |registry| {
                let metrics = libp2p::metrics::Metrics::new(registry);
                let swarm = build_swarm_with_metrics(
                    place.key,
                    place.psk,
                    self.timeouts(),
                    self.max_chunk_frame(),
                    Some(registry),
                )?;
                Ok::<_, NodeError>((swarm, Some(metrics)))
            })?,
            None => (
                build_swarm_with_metrics(
                    place.key,
                    place.psk,
                    self.timeouts(),
                    self.max_chunk_frame(),
                    None,
                )?,
                None,
            ),
        };
        for p in place.peers.allowed() {
            swarm.behaviour_mut().allow.allow_peer(*p);
        }
        let bound = listen(&mut swarm, place.listen).await?;
        let me = VnAddr::new(peer, place.announce.unwrap_or(bound));
        // The one address identify tells peers (it hides listen addresses): a VN listening on 0.0.0.0
        // would otherwise announce every interface of its host, and with `announce` set its private ones.
        swarm.add_external_address(me.addr.clone());
        // The network is the peer list, and this VN (listed or not).
        let network_size = place.peers.len() + usize::from(!place.peers.is_allowed(&peer));
        let allowed = place.peers.clone();
        let engine = VnEngine::new(
            me.clone(),
            self.vn_config(Some(network_size)),
            vn_rng(self.seed, stream, Stream::Cyclon),
            vn_rng(self.seed, stream, Stream::Overlay),
            Box::new(move |a: &VnAddr| allowed.is_allowed(&a.peer)),
        )?
        // Catch-up probes ask listed peers other than this node's own VNs (where this process knows them).
        .with_round_probes(
            place.peers.bootstrap(),
            place
                .own
                .iter()
                .map(|p| VnAddr::new(*p, Multiaddr::empty()))
                .collect(),
            self.resumed_at.map(Round),
        );
        // A resumed VN joins a running network: its warm-up is cut short and the rounds dial on demand.
        let preconnect = match self.resumed_at {
            Some(_) => Preconnect::default(),
            None => Preconnect::plan(
                peer,
                place.peers.bootstrap(),
                crate::net::preconnect::PER_DEGREE * self.degree,
                place.epoch.elapsed(),
                Duration::from_millis(self.timing.warmup_ms),
                &mut derive_rng(self.seed ^ PRECONNECT_SEED, stream),
            ),
        };
        let (tx, rx) = mpsc::channel(VN_COMMAND_CAPACITY);
        let bootstrap = place
            .peers
            .bootstrap()
            .into_iter()
            .filter(|b| b.peer != peer)
            .collect();
        let chunk_slots = crate::net::chunk_slots::ChunkSlots::new(
            self.timing.chunk_slot_period(),
            release.fork_rng(),
        );
        let links = crate::net::control_link::ControlLinks::with_delayed_acks(
            swarm.behaviour().stream.new_control(),
            place.peers.clone(),
            place.epoch,
            self.timeouts().control_request,
            release.fork(),
        )?;
        let chunks = crate::net::chunk_link::ChunkLinks::new(
            swarm.behaviour().chunk_stream.new_control(),
            place.peers.clone(),
            self.max_chunk_frame(),
            // Opening, dial included, may take as long as a chunk request did (a crowded network's
            // handshakes take seconds); a chunk lost to a short timeout costs a neighbour's copy.
            self.timeouts().chunk_request,
            self.timeouts().chunk_request,
        )?;
        let task = VnTask {
            index: place.index,
            swarm,
            engine,
            bootstrap,
            peers: place.peers,
            commands: rx,
            to_rn: place.to_rn,
            log: RefusalLog::new(place.events),
            epoch: place.epoch,
            node: place.node,
            observer: place.observer,
            restored_view: place.restored_view,
            view_board: place.view_board,
            round_channels: Default::default(),
            redialing: Default::default(),
            links,
            chunks,
            chunk_replies: Default::default(),
            chunk_requests: Default::default(),
            preconnect,
            release: crate::net::release::Held::new(release),
            own_thread: self.timing.vn_threads,
            chunk_slots,
            swarm_metrics,
            contact: place.contact.map(|board| {
                crate::net::contact::VnContact::new(board, place.own.iter().copied().chain([peer]))
            }),
            liveness: crate::net::liveness::Liveness::new(self.timeouts().peer_silence),
            queued: Default::default(),
        };
        Ok((task, tx, me))
    }

    /// Encodes the setup for the link.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        protocol::codec::encode_control(self)
            .map_err(|e| NodeError::Config(format!("VN setup: {e}")))
    }

    /// Decodes a setup received on the link, checking what the VN would otherwise trip on.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        let s: Self = protocol::codec::decode_control(bytes)
            .map_err(|e| NodeError::Config(format!("VN setup: {e}")))?;
        if s.degree == 0 || s.chunk_lens.is_empty() {
            return Err(NodeError::Config(
                "VN setup: degree and chunk lengths must not be empty".into(),
            ));
        }
        if s.chunk_lens
            .iter()
            .any(|&l| l > protocol::chunk::MAX_CHUNK_VALUES)
        {
            return Err(NodeError::Config(
                "VN setup: a chunk over the protocol's limit".into(),
            ));
        }
        // Degree and times feed sub-step counts and durations the engine multiplies: values beyond any
        // honest run are refused here rather than overflowing there.
        if s.degree > protocol::rnvn::MAX_EDGE_SLOTS {
            return Err(NodeError::Config(format!(
                "VN setup: degree {} over {}",
                s.degree,
                protocol::rnvn::MAX_EDGE_SLOTS
            )));
        }
        let t = &s.timing;
        let times = [
            t.cyclon_period_ms,
            t.shuffle_timeout_ms,
            t.substep_ms,
            t.exchange_timeout_ms,
            t.send_jitter_ms,
            t.send_pace_ms,
            t.warmup_ms,
            t.handshake_timeout_ms,
            t.peer_silence_ms,
            t.chunk_slot_ms,
            s.chunk_request_ms,
            s.control_request_ms,
            s.idle_connection_ms,
        ];
        if times.iter().any(|&ms| ms > MAX_SETUP_MS) {
            return Err(NodeError::Config(format!(
                "VN setup: a time over {MAX_SETUP_MS} ms"
            )));
        }
        t.validate()
            .map_err(|e| NodeError::Config(format!("VN setup: {e}")))?;
        s.values
            .validate()
            .map_err(|e| NodeError::Config(format!("VN setup: {e}")))?;
        Ok(s)
    }
}

/// A per-VN RNG stream from the VN's secret key: unpredictable to others (unlike one derived from the public
/// PeerId) and distinct between siblings. FNV-1a is enough here: the secret, not the hash, gives the secrecy.
fn vn_stream(key: &Keypair) -> u64 {
    let bytes = key.to_protobuf_encoding().unwrap_or_default();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> VnSetup {
        VnSetup {
            vn: PeerId::random().to_string(),
            degree: 4,
            timing: Timing::loopback(),
            exchanges: 10,
            chunk_lens: vec![3, 4],
            graph: Graph::PerRound,
            skip: vec![2, 5],
            per_edge: true,
            values: ValueBounds::default(),
            seed: 7,
            chunk_request_ms: 1000,
            control_request_ms: 500,
            idle_connection_ms: 60_000,
            resumed_at: Some(3),
        }
    }

    #[test]
    fn a_setup_survives_the_link() {
        let s = setup();
        let back = VnSetup::decode(&s.encode().unwrap()).unwrap();
        assert_eq!(back, s);
        let cfg = back.vn_config(Some(5));
        // Walks in a network of 5 VNs take at most one hop per other VN.
        assert_eq!(cfg.sampler.overlay.walk_ttl(), 4);
        assert_eq!(
            cfg.skip.iter().map(|r| r.get()).collect::<Vec<_>>(),
            vec![2, 5]
        );
        assert_eq!(*cfg.chunk_lens, vec![3, 4]);
        assert_eq!(
            back.max_chunk_frame(),
            protocol::chunk::chunk_frame_bytes(4)
        );
    }

    #[test]
    fn a_setup_that_would_break_the_vn_is_refused() {
        let mut s = setup();
        s.degree = 0;
        assert!(VnSetup::decode(&s.encode().unwrap()).is_err());
        let mut s = setup();
        s.chunk_lens = vec![protocol::chunk::MAX_CHUNK_VALUES + 1];
        assert!(VnSetup::decode(&s.encode().unwrap()).is_err());
        let mut s = setup();
        s.degree = usize::MAX;
        assert!(VnSetup::decode(&s.encode().unwrap()).is_err());
        let mut s = setup();
        s.timing.substep_ms = u64::MAX;
        assert!(VnSetup::decode(&s.encode().unwrap()).is_err());
        assert!(VnSetup::decode(&[1, 2, 3]).is_err());
    }

    #[tokio::test]
    async fn a_key_that_is_not_the_setups_vn_is_refused() {
        let s = setup();
        let (to_rn, _rx) = mpsc::channel(1);
        let (events, _ev) = EventSink::new(4);
        let place = VnPlace {
            key: Keypair::generate_ed25519(),
            listen: "/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            announce: None,
            peers: Arc::new(PeerList::from_entries([])),
            psk: None,
            index: 0,
            node: 0,
            to_rn,
            events,
            #[allow(clippy::disallowed_methods)] // a test's clock
            epoch: Instant::now(),
            observer: None,
            restored_view: Vec::new(),
            view_board: None,
            own: Vec::new(),
            contact: None,
            telemetry: None,
        };
        let err = s.build(place).await.err().expect("refused");
        assert!(err.to_string().contains("the setup is for VN"), "{err}");
    }
}
