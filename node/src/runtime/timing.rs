//! [`Timing`]: the protocol's real-network timing, as a node config or a builder sets it.

use std::sync::Arc;
use std::time::Duration;

use sampling::{CyclonConfig, OverlayConfig, SamplerConfig};
use serde::{Deserialize, Serialize};

use crate::engine::VnConfig;

/// Protocol timing on a real network. The defaults suit a LAN or the Internet with rounds of seconds to
/// minutes; tests shorten them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// Time between two Cyclon shuffles of one VN (DESIGN §5: ≥ 4 shuffles per round).
    pub cyclon_period_ms: u64,
    /// A shuffle without reply after this long removes its target.
    pub shuffle_timeout_ms: u64,
    /// One overlay sub-step; must exceed a round trip. The overlay takes (4r + r + 4) sub-steps.
    pub substep_ms: u64,
    /// How long a VN waits for its neighbours' chunks after sending its own.
    pub exchange_timeout_ms: u64,
    /// Upper bound of each VN's random delay before sending its chunk, so sibling VNs do not all send at the
    /// instant their node finishes training (DESIGN §5).
    pub send_jitter_ms: u64,
    /// Gossip before round 0, so views are mixed (and peers are up) when the first overlay is built.
    pub warmup_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            cyclon_period_ms: 1000,
            shuffle_timeout_ms: 2000,
            substep_ms: 200,
            exchange_timeout_ms: 30_000,
            send_jitter_ms: 1000,
            warmup_ms: 5000,
        }
    }
}

impl Timing {
    /// Short timing for loopback tests and local testnets.
    pub fn loopback() -> Self {
        Self {
            cyclon_period_ms: 250,
            shuffle_timeout_ms: 500,
            // Round starts of different nodes differ by up to a training time (hundreds of ms for small
            // models); sub-steps of 100 ms keep the overlay window
            // several times wider than that skew (the window is 5r + 4 sub-steps, `OverlayConfig::deadline`).
            substep_ms: 100,
            exchange_timeout_ms: 5000,
            send_jitter_ms: 200,
            warmup_ms: 1500,
        }
    }

    pub(crate) fn vn_config(&self, degree: usize, chunk_lens: Arc<Vec<usize>>) -> VnConfig {
        VnConfig {
            sampler: SamplerConfig {
                cyclon: CyclonConfig {
                    period: Duration::from_millis(self.cyclon_period_ms),
                    shuffle_timeout: Duration::from_millis(self.shuffle_timeout_ms),
                    ..CyclonConfig::default()
                },
                overlay: OverlayConfig::new(degree, Duration::from_millis(self.substep_ms)),
            },
            exchange_timeout: Duration::from_millis(self.exchange_timeout_ms),
            send_jitter: Duration::from_millis(self.send_jitter_ms),
            chunk_lens,
        }
    }
}
