//! Control messages of the peer sampler (Cyclon) and the per-round overlay negotiation.
//!
//! All types are generic over the peer identity `I`: the simulator and tests use `u32`, the node uses a
//! libp2p peer wrapper. They are plain serde types (owned data, externally tagged enums) so the codec can
//! encode them with bincode 2's serde support. Nothing decoded off the wire is trusted: call
//! [`ControlMsg::validate`] (or the per-protocol `validate`) before acting on a message. The state machines in
//! `sampling` validate again, so a caller that forgets cannot make them allocate or loop without bound.
//!
//! The sender of a message is the authenticated remote peer of the connection it arrived on; the
//! [`ControlEnvelope`] repeats it only to carry a dial-back address, and a mismatch is refused. Identities that
//! are carried as third parties (`acceptor`, `splitter`, `other`, `newcomer`, view entries) are
//! claims; the protocol is built so that a false claim only wastes a message (a `Confirm` sent to a spoofed
//! acceptor is answered with `Nack`, a spoofed view entry is removed when its shuffle times out).
//!
//! A walk (`Propose`, `SpliceRequest`) may name its origin, and its answer (`Accept`, `SpliceOffer`) then goes
//! straight to it; or name none, and the answer travels back along the walk's path, each hop relaying it to
//! the peer it had the walk from, so that no field tells a receiver whether its sender started the walk or
//! relayed it (issue 13; `sampling::overlay` documents the cost).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{DecodeError, Round};

/// The public name (`nonce`) of a walk whose origin keeps `key` secret: the first 8 bytes of SHA-256 of the
/// key (little-endian). Every message names a walk by its nonce except the origin's commitments (`Confirm`,
/// `SpliceAccept`), which carry the key: a VN on the walk's path learns the nonce, not the key, so it cannot
/// take up the acceptor's offer in the origin's place (forced adjacency, issue 13).
pub fn walk_nonce(key: u64) -> u64 {
    let digest = Sha256::digest(key.to_le_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("SHA-256 is 32 bytes"))
}

/// Most entries one shuffle message may carry. Cyclon's shuffle length l defaults to 8 (Voulgaris et al.,
/// "CYCLON", J. Netw. Syst. Manage. 2005, §5 uses l = 8 with c = 20 .. 50); 64 leaves room for configs with a
/// larger view (l ≤ c) while keeping a message to a few kilobytes.
pub const MAX_SHUFFLE_ENTRIES: usize = 64;

/// Largest hop budget a forwarded proposal may carry. DESIGN §5 uses TTL 30; a random walk on the Cyclon
/// graph (c = 20) mixes in a handful of hops, so anything above 64 only multiplies forwarding traffic.
pub const MAX_TTL: u8 = 64;

/// Most rounds a VN negotiates ahead of the round its node is in. The overlay of a round takes a fixed
/// window of sub-steps (about 2.4 s at r = 4 with 100 ms sub-steps) while a round of a small model trains in
/// a fraction of that; negotiating L rounds ahead lets rounds run up to L times faster than the window
/// (round t's overlay started when the node began round t − L). 16 covers rounds 16× shorter than the
/// window (0.06 s at r = 4 with 40 ms sub-steps, where two cores already saturate); more would only multiply
/// the rounds a peer must keep open.
pub const MAX_LOOKAHEAD: u64 = 16;

/// Round states a VN keeps (overlay negotiation and chunk exchange alike): the rounds negotiated ahead
/// ([`MAX_LOOKAHEAD`]), the one whose chunks are being exchanged, and slack for late `Drop`s, refusals and
/// chunks. Older rounds are forgotten and messages for them are dropped or refused as stale.
pub const MAX_KEPT_ROUNDS: u64 = MAX_LOOKAHEAD + 4;

/// How far ahead of its newest started round a VN still takes a message (forwards a proposal, holds a
/// chunk). Nodes drift apart by about one round (one local training); more means a confused or malicious
/// peer.
pub const MAX_FUTURE_ROUNDS: u64 = 2;

/// Largest age a view entry may claim. Ages grow by one per shuffle period; an entry older than this is
/// long dead (Cyclon removes entries after a failed shuffle, and the oldest entry is shuffled first), so a
/// larger value is either a bug or an attempt to bias target selection.
pub const MAX_AGE: u32 = 1 << 16;

/// One entry of a Cyclon view: a peer and how many shuffle periods ago the entry was created by that peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ViewEntry<I> {
    pub id: I,
    pub age: u32,
}

/// Cyclon shuffle (Voulgaris et al. 2005, §3.2 "enhanced shuffling").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CyclonMsg<I> {
    /// Initiator → target: l−1 random entries of the initiator's view plus a fresh (age 0) entry of itself.
    ShuffleRequest { entries: Vec<ViewEntry<I>> },
    /// Target → initiator: up to l random entries of the target's view.
    ShuffleReply { entries: Vec<ViewEntry<I>> },
}

impl<I> CyclonMsg<I> {
    pub fn entries(&self) -> &[ViewEntry<I>] {
        match self {
            CyclonMsg::ShuffleRequest { entries } | CyclonMsg::ShuffleReply { entries } => entries,
        }
    }

    pub fn validate(&self) -> Result<(), DecodeError> {
        let entries = self.entries();
        if entries.len() > MAX_SHUFFLE_ENTRIES {
            return Err(too_large(
                "shuffle entry count",
                entries.len() as u64,
                MAX_SHUFFLE_ENTRIES as u64,
            ));
        }
        if let Some(e) = entries.iter().find(|e| e.age > MAX_AGE) {
            return Err(too_large("view entry age", e.age as u64, MAX_AGE as u64));
        }
        Ok(())
    }
}

/// Negotiation of round `round`'s random regular overlay (DESIGN §5; `sampling::overlay` documents the
/// protocol and its timing). Whoever starts an exchange (a walk) draws a random key and names the exchange
/// by its `nonce` ([`walk_nonce`] of the key), so replies to an old or foreign exchange are recognised and
/// ignored, and only the key's holder can commit to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OverlayMsg<I> {
    /// Walks the Cyclon view graph (each hop forwards to a random view entry, `ttl` lowered) until an
    /// acceptor takes it; the answer goes to `origin`, or back along the path if the walk names none. A walk
    /// that runs out of `ttl` ends silently.
    Propose {
        round: Round,
        origin: Option<I>,
        nonce: u64,
        ttl: u8,
    },
    /// Acceptor → origin (directly, or relayed back along the walk's path): `acceptor` reserved a degree
    /// slot for the walk's origin, who commits with `Confirm` sent to `acceptor` directly.
    Accept {
        round: Round,
        nonce: u64,
        acceptor: I,
    },
    /// Proposer → acceptor: I commit to the edge of the walk whose nonce is [`walk_nonce`]`(key)`.
    /// Retransmitted until `ConfirmAck` or the deadline.
    Confirm { round: Round, key: u64 },
    /// The receiver of a commitment (`Confirm`, `SpliceAccept`, `Handover`) now counts the edge.
    ConfirmAck { round: Round, nonce: u64 },
    /// Refusal of an `Accept`, `Confirm`, `SpliceOffer`, `SpliceAccept` or `Handover`: the edge is not counted.
    Nack { round: Round, nonce: u64 },
    /// The sender does not count the edge with the receiver in this round (sent when a round freezes with an
    /// unacknowledged commitment, or when an acknowledgement arrives too late). The receiver stops counting it.
    Drop { round: Round },
    /// Splice repair: a VN short by ≥ 2 looks (random walk, like `Propose`) for a VN x that will split one of
    /// its edges.
    SpliceRequest {
        round: Round,
        origin: Option<I>,
        nonce: u64,
        ttl: u8,
    },
    /// x → origin (directly, or relayed back along the walk's path): `splitter` (x) will split its edge (x, `other`) into
    /// (x, origin), (origin, `other`).
    SpliceOffer {
        round: Round,
        nonce: u64,
        splitter: I,
        other: I,
    },
    /// origin → x: go ahead (the splice walk's key, as in `Confirm`).
    SpliceAccept { round: Round, key: u64 },
    /// x → other: our edge is replaced by one between you and `newcomer`, who committed to it.
    Handover {
        round: Round,
        nonce: u64,
        newcomer: I,
    },
}

impl<I> OverlayMsg<I> {
    pub fn round(&self) -> Round {
        match self {
            OverlayMsg::Propose { round, .. }
            | OverlayMsg::Accept { round, .. }
            | OverlayMsg::Confirm { round, .. }
            | OverlayMsg::ConfirmAck { round, .. }
            | OverlayMsg::Nack { round, .. }
            | OverlayMsg::Drop { round }
            | OverlayMsg::SpliceRequest { round, .. }
            | OverlayMsg::SpliceOffer { round, .. }
            | OverlayMsg::SpliceAccept { round, .. }
            | OverlayMsg::Handover { round, .. } => *round,
        }
    }

    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            OverlayMsg::Propose { ttl, .. } | OverlayMsg::SpliceRequest { ttl, .. }
                if *ttl > MAX_TTL =>
            {
                Err(too_large("ttl", *ttl as u64, MAX_TTL as u64))
            }
            _ => Ok(()),
        }
    }
}

fn too_large(what: &'static str, got: u64, max: u64) -> DecodeError {
    DecodeError::TooLarge { what, got, max }
}

/// Everything that travels on the control protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlMsg<I> {
    Cyclon(CyclonMsg<I>),
    Overlay(OverlayMsg<I>),
}

impl<I> ControlMsg<I> {
    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            ControlMsg::Cyclon(m) => m.validate(),
            ControlMsg::Overlay(m) => m.validate(),
        }
    }
}

/// What travels on the control protocol: the sender's own identity and the message. The receiver checks the
/// identity against the authenticated peer of the connection and refuses a mismatch, so the claim only adds
/// what a bare peer id cannot carry — the node's identity type includes the address to dial the sender back
/// at, which a connection's remote address (an ephemeral port for the dialer) does not give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlEnvelope<I> {
    pub sender: I,
    pub msg: ControlMsg<I>,
}

impl<I> ControlEnvelope<I> {
    pub fn validate(&self) -> Result<(), DecodeError> {
        self.msg.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_bounds() {
        let e = |n: usize| CyclonMsg::ShuffleRequest {
            entries: (0..n as u32).map(|id| ViewEntry { id, age: 0 }).collect(),
        };
        assert!(e(MAX_SHUFFLE_ENTRIES).validate().is_ok());
        assert_eq!(
            e(MAX_SHUFFLE_ENTRIES + 1).validate(),
            Err(too_large(
                "shuffle entry count",
                MAX_SHUFFLE_ENTRIES as u64 + 1,
                MAX_SHUFFLE_ENTRIES as u64
            ))
        );
        let old = CyclonMsg::ShuffleReply {
            entries: vec![ViewEntry {
                id: 1u32,
                age: MAX_AGE + 1,
            }],
        };
        assert!(old.validate().is_err());
        let p = |ttl| OverlayMsg::<u32>::Propose {
            round: Round(1),
            origin: None,
            nonce: 3,
            ttl,
        };
        assert!(p(MAX_TTL).validate().is_ok());
        assert_eq!(
            p(MAX_TTL + 1).validate(),
            Err(too_large("ttl", MAX_TTL as u64 + 1, MAX_TTL as u64))
        );
        assert!(ControlMsg::Overlay(p(MAX_TTL + 1)).validate().is_err());
    }

    #[test]
    fn bincode_roundtrip() {
        let cfg = bincode::config::standard();
        let msgs = vec![
            ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
                entries: vec![ViewEntry { id: 5u32, age: 2 }],
            }),
            ControlMsg::Overlay(OverlayMsg::Handover {
                round: Round(9),
                nonce: u64::MAX,
                newcomer: 4,
            }),
            ControlMsg::Overlay(OverlayMsg::Drop { round: Round(3) }),
            ControlMsg::Overlay(OverlayMsg::SpliceOffer {
                round: Round(2),
                nonce: 8,
                splitter: 6,
                other: 7,
            }),
        ];
        for m in msgs {
            let bytes = bincode::serde::encode_to_vec(&m, cfg).unwrap();
            let (back, n): (ControlMsg<u32>, usize) =
                bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
            assert_eq!(n, bytes.len());
            assert_eq!(back, m);
        }
    }
}
