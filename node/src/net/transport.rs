//! Building one virtual node's Swarm: TCP (names resolved by DNS) + (optional pre-shared-key private network)
//! + noise + yamux.
//!
//! `/dns4/`, `/dns6/` and `/dns/` addresses (in the peer list, in `announce`, learned through gossip) are
//! resolved when dialled, by the system's resolver (`/etc/hosts` first, then the servers of
//! `/etc/resolv.conf`): the resolution sits under the pre-shared key and the handshake timeout, so a name
//! that does not resolve, or resolves slowly, fails that dial within the same bound as a silent address.
//!
//! The same stack also runs over libp2p's in-process memory transport (`/memory/<port>` addresses): a network
//! whose VNs all live in one process (`testnet --mode inproc` at hundreds of VNs) then needs no socket per
//! connection. A memory address is reachable only from the same process; deployments listen on TCP.

use std::sync::Once;
use std::time::Duration;

use libp2p::core::transport::MemoryTransport;
use libp2p::core::transport::upgrade::Version;
use libp2p::core::{Transport, muxing::StreamMuxerBox, transport::Boxed};
use libp2p::dns::{ResolverConfig, ResolverOpts};
use libp2p::identity::Keypair;
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::{PeerId, Swarm, dns, noise, tcp, yamux};

use super::behaviour::{Timeouts, VnBehaviour};
use super::boxed::BoxedHandlers;
use crate::{NodeError, Result};

/// The transport stack; every socket that has not become an authenticated, multiplexed connection within
/// `handshake` is closed (covering the pre-shared-key exchange too: a silent or stalling socket holds a
/// descriptor for at most that long). `max_streams`: yamux streams open at once on one connection (each can
/// hold a receive window of 256 KiB that its reader has not taken yet).
pub(crate) fn transport(
    key: &Keypair,
    psk: Option<PreSharedKey>,
    handshake: Duration,
    max_streams: usize,
) -> Result<Boxed<(PeerId, StreamMuxerBox)>> {
    // DNS wraps the raw sockets, innermost: every address it resolves is then dialled through the same
    // pre-shared key, noise and timeout as one written with its IP address.
    let tcp = with_dns(|| {
        tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
            .or_transport(MemoryTransport::default())
    });
    let noise = noise::Config::new(key).map_err(|e| NodeError::Network(format!("noise: {e}")))?;
    let mut yamux = yamux::Config::default();
    yamux.set_max_num_streams(max_streams);
    Ok(match psk {
        // pnet wraps the raw socket, so a peer without the key fails before noise even starts.
        Some(psk) => tcp
            .and_then(move |socket, _| PnetConfig::new(psk).handshake(socket))
            .upgrade(Version::V1Lazy)
            .authenticate(noise)
            .multiplex(yamux)
            .timeout(handshake)
            .boxed(),
        None => tcp
            .upgrade(Version::V1Lazy)
            .authenticate(noise)
            .multiplex(yamux)
            .timeout(handshake)
            .boxed(),
    })
}

/// The socket transport `make` builds, with names resolved by the system's resolver. Without a readable
/// `/etc/resolv.conf` (a minimal container) names are still resolved from `/etc/hosts`, and `localhost`
/// always; the process says so once (a node builds one transport per VN, the in-process testnet hundreds).
fn with_dns<T>(make: impl Fn() -> T) -> dns::tokio::Transport<T> {
    static WARNED: Once = Once::new();
    // `system` drops the transport it was given when it fails: a second one (no socket is opened before
    // `listen_on` or `dial`) goes to the fallback.
    dns::tokio::Transport::system(make()).unwrap_or_else(|e| {
        WARNED.call_once(|| {
            tracing::warn!(%e, "no DNS servers (/etc/resolv.conf unreadable): names resolve from /etc/hosts only")
        });
        dns::tokio::Transport::custom(
            make(),
            ResolverConfig::from_parts(None, Vec::new(), Vec::new()),
            ResolverOpts::default(),
        )
    })
}

/// One VN's Swarm: its behaviour, with each connection's handler boxed ([`BoxedHandlers`]).
pub type VnSwarm = Swarm<BoxedHandlers<VnBehaviour>>;

/// A Swarm for one VN identity, refusing chunk frames over `max_chunk_frame` bytes. Must be called inside a
/// tokio runtime.
pub fn build_swarm(
    key: Keypair,
    psk: Option<PreSharedKey>,
    timeouts: Timeouts,
    max_chunk_frame: usize,
) -> Result<VnSwarm> {
    build_swarm_with_metrics(key, psk, timeouts, max_chunk_frame, None)
}

/// [`build_swarm`], counting the connections' bytes by direction and transport protocol in `bandwidth`
/// (libp2p's `libp2p_bandwidth_bytes_total`, noise and yamux framing included) when given.
pub fn build_swarm_with_metrics(
    key: Keypair,
    psk: Option<PreSharedKey>,
    timeouts: Timeouts,
    max_chunk_frame: usize,
    bandwidth: Option<&mut prometheus_client::registry::Registry>,
) -> Result<VnSwarm> {
    let t = transport(
        &key,
        psk,
        timeouts.handshake,
        super::limits::YAMUX_STREAMS_PER_CONNECTION,
    )?;
    let t = match bandwidth {
        Some(registry) => libp2p::metrics::BandwidthTransport::new(t, registry)
            .map(|(peer, conn), _| (peer, StreamMuxerBox::new(conn)))
            .boxed(),
        None => t,
    };
    Ok(libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_other_transport(|_| t)
        .map_err(|e| NodeError::Network(format!("transport: {e}")))?
        .with_behaviour(|key| BoxedHandlers(VnBehaviour::new(key, timeouts, max_chunk_frame)))
        .map_err(|e| NodeError::Network(format!("behaviour: {e}")))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(timeouts.idle_connection))
        .build())
}

/// Reads a pre-shared key file in the go-ipfs/libp2p "swarm.key" format
/// (`/key/swarm/psk/1.0.0/`, `/base16/`, 64 hex digits).
pub fn load_psk(path: &std::path::Path) -> Result<PreSharedKey> {
    let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
    text.parse().map_err(|e| {
        NodeError::file(
            path,
            "psk",
            format!("not a swarm.key pre-shared key: {e:?}"),
        )
    })
}
