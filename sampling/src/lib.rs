//! Sans-IO peer sampling and per-round random regular overlay for Shatter's virtual nodes (VNs).
//!
//! The paper (Shatter, PETS 2025) draws each round's random r-regular graph of VNs from a central oracle.
//! This crate builds it without a coordinator: a Cyclon gossip peer sampler keeps each VN's partial view of
//! the network, and a per-round matching-style proposal protocol turns the views into a near-r-regular graph
//! (DESIGN §5). Both are state machines (`handle(now, input, ..) -> outputs`) with injected time and seeded
//! ChaCha RNGs: the node drives them over libp2p, the simulator here drives them in memory, same code.
//!
//! Layout:
//! - `lib.rs` — this overview, the [`PeerId`] bound, the crate [`Error`], the one RNG-stream derivation
//!   ([`vn_rng`]).
//! - `cyclon.rs` — [`cyclon::Cyclon`], the Cyclon shuffle state machine (Voulgaris et al. 2005).
//! - `overlay.rs` — [`overlay::OverlayBuilder`], the per-round overlay negotiation (protocol, timing,
//!   half-open edge handling documented there; one method per message).
//! - `sampler.rs` — [`Sampler`], Cyclon + the overlay builder composed once (one input enum, one output
//!   enum, `poll_timeout`): what the node's VN engine and the simulator both hold.
//! - `sim/mod.rs` — [`sim::Network`], a deterministic discrete-event network (virtual clock, latency, loss,
//!   crashes), generic over the message type so the node can reuse it.
//! - `sim/driver.rs` — [`sim::OverlaySim`], many VNs, one [`Sampler`] each, on a `Network` for many rounds.
//! - `sim/rogue.rs` — [`sim::Rogue`], a whole rogue node (k identities) crowding a victim node, and
//!   [`sim::crowding`], the measurement of its share.
//! - `metrics.rs` — degree statistics, the paper's privacy quantities, per-round report aggregation.
//! - `spectral.rs` — λ₂ and λ_min of W = (I + A)/(r + 1) by deflated Lanczos on the sparse graph.
//! - `uniform.rs` — reference uniform random r-regular graphs (Steger–Wormald pairing).
//! - `examples/overlay_report.rs` — Cyclon + overlay in the simulator vs theory; one JSON line.
//! - `examples/cyclon_stats.rs` — Cyclon in-degree spread over time.
//! - `examples/insider_crowding.rs` — a rogue node's share of a victim's neighbours, per deviation.
//! - `tests/cyclon.rs`, `tests/overlay.rs` — seeded protocol tests (small N, fast in debug);
//!   `tests/hostile_inputs.rs` — property tests of a `Sampler` under hostile input interleavings;
//!   `tests/forced_adjacency.rs`, `tests/crowding.rs` — a rogue VN, and a whole rogue node, against a victim.
//!
//! Wire message types live in `protocol::control`; this crate only adds behaviour.

pub mod cyclon;
pub mod metrics;
pub mod overlay;
pub mod sampler;
pub mod sim;
pub mod spectral;
pub mod uniform;

use std::fmt::Debug;
use std::hash::Hash;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

pub use cyclon::{Cyclon, CyclonConfig, CyclonInput, CyclonOutput};
pub use overlay::{OverlayBuilder, OverlayConfig, OverlayInput, OverlayOutput, RoundTiming};
pub use sampler::{Protocol, Sampler, SamplerConfig, SamplerInput, SamplerOutput};

/// What a peer identity must support. Ordered (not just hashed) so iteration order, and with it every
/// output, is deterministic.
pub trait PeerId: Clone + Eq + Ord + Hash + Debug {}
impl<T: Clone + Eq + Ord + Hash + Debug> PeerId for T {}

/// The crate's error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A ChaCha RNG for one (run seed, stream) pair. VNs take theirs through [`vn_rng`]; a driver's own streams
/// (the simulated network, bootstrap draws) use the top of the range (`u64::MAX`, `u64::MAX - 1`, …), which
/// `vn_rng` leaves free.
pub fn derive_rng(seed: u64, stream: u64) -> ChaCha12Rng {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// What one of a VN's RNG streams is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    /// Cyclon's shuffle choices and first-shuffle jitter.
    Cyclon = 0,
    /// Overlay roles and walks; the VN engine's send jitter and bootstrap shuffle are drawn from its start.
    Overlay = 1,
    /// A real node's algorithm (which chunk to share, local noise), with the RN's index as identity.
    Algorithm = 2,
    /// A real node's dropout schedule (the rounds it sits out), with the RN's index as identity.
    Dropout = 3,
}

/// The one derivation of a VN's RNG streams, used by the node, the node's simulator and the overlay
/// simulator alike: stream `identity · 4 + purpose` of the run seed's ChaCha. `identity` is the VN's number
/// in a simulator, and in the node a hash of the VN's *secret* key (unpredictable to others, distinct
/// between siblings, so siblings never share a stream). Slots 2 and 3 of every four are an RN's algorithm and
/// dropout streams (identity = the RN's index); a driver's own streams at the top of the range ([`derive_rng`])
/// fall in slot 3 of the last identities, which no run reaches.
pub fn vn_rng(seed: u64, identity: u64, purpose: Stream) -> ChaCha12Rng {
    derive_rng(seed, identity.wrapping_mul(4).wrapping_add(purpose as u64))
}
