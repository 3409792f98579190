//! How virtual nodes name each other on the wire: a [`VnAddr`] is a PeerId plus the one address the VN
//! listens on, which is what a Cyclon view entry must carry for its holder to be able to dial it.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest encoded PeerId accepted off the wire. An Ed25519 PeerId (identity multihash) is 38 bytes; a
/// SHA-256 one is 34. 64 admits both with margin.
pub const MAX_PEER_ID_BYTES: usize = 64;

/// Longest encoded Multiaddr accepted off the wire. `/ip6/…/tcp/…/p2p/…` is under 70 bytes; DNS names can be
/// longer. 256 bounds a gossip entry while admitting any sensible address.
pub const MAX_ADDR_BYTES: usize = 256;

/// A virtual node's identity and dial address. Equality, ordering and hashing use the PeerId only: the same
/// VN gossiped with two addresses is one view entry, not two.
#[derive(Clone)]
pub struct VnAddr {
    pub peer: PeerId,
    pub addr: Multiaddr,
}

impl VnAddr {
    pub fn new(peer: PeerId, addr: Multiaddr) -> Self {
        Self { peer, addr }
    }
}

impl fmt::Debug for VnAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.peer, self.addr)
    }
}

impl PartialEq for VnAddr {
    fn eq(&self, other: &Self) -> bool {
        self.peer == other.peer
    }
}

impl Eq for VnAddr {}

impl Hash for VnAddr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.peer.hash(state)
    }
}

impl PartialOrd for VnAddr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for VnAddr {
    fn cmp(&self, other: &Self) -> Ordering {
        self.peer.to_bytes().cmp(&other.peer.to_bytes())
    }
}

impl Serialize for VnAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.peer.to_bytes(), self.addr.to_vec()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for VnAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // The control codec's byte limit already bounds these allocations; the checks below bound the
        // fields themselves.
        let (peer, addr): (Vec<u8>, Vec<u8>) = Deserialize::deserialize(d)?;
        if peer.len() > MAX_PEER_ID_BYTES {
            return Err(D::Error::custom(format!(
                "peer id of {} bytes exceeds MAX_PEER_ID_BYTES",
                peer.len()
            )));
        }
        if addr.len() > MAX_ADDR_BYTES {
            return Err(D::Error::custom(format!(
                "address of {} bytes exceeds MAX_ADDR_BYTES",
                addr.len()
            )));
        }
        let peer =
            PeerId::from_bytes(&peer).map_err(|e| D::Error::custom(format!("bad peer id: {e}")))?;
        let addr =
            Multiaddr::try_from(addr).map_err(|e| D::Error::custom(format!("bad address: {e}")))?;
        Ok(VnAddr { peer, addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::identity::Keypair;

    #[test]
    fn round_trips_through_the_control_codec_and_compares_by_peer() {
        let peer = Keypair::generate_ed25519().public().to_peer_id();
        let a = VnAddr::new(peer, "/ip4/127.0.0.1/tcp/4001".parse().unwrap());
        let bytes = protocol::codec::encode_control(&a).unwrap();
        let back: VnAddr = protocol::codec::decode_control(&bytes).unwrap();
        assert_eq!(back.addr, a.addr);
        assert_eq!(back, a);
        let same_peer_other_addr = VnAddr::new(peer, "/ip4/127.0.0.1/tcp/9".parse().unwrap());
        assert_eq!(a, same_peer_other_addr);
    }

    #[test]
    fn garbage_and_oversized_fields_are_refused() {
        let bytes = protocol::codec::encode_control(&(vec![1u8, 2, 3], vec![0u8; 4])).unwrap();
        assert!(protocol::codec::decode_control::<VnAddr>(&bytes).is_err());
        let bytes =
            protocol::codec::encode_control(&(vec![0u8; MAX_PEER_ID_BYTES + 1], vec![0u8; 4]))
                .unwrap();
        let err = protocol::codec::decode_control::<VnAddr>(&bytes).unwrap_err();
        assert!(err.to_string().contains("MAX_PEER_ID_BYTES"), "{err}");
    }
}
