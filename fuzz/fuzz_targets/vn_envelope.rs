#![no_main]
//! Control envelopes with the node's real identity type on the wire: `node::id::VnAddr` serialises as
//! (PeerId bytes, Multiaddr bytes) and its `Deserialize` checks both lengths, then parses them with
//! libp2p's `PeerId::from_bytes` and `Multiaddr::try_from`. The `Addr` below repeats those steps (the fuzz
//! crate does not build `node`, which pulls Candle and tokio) so the parsers a hostile peer reaches through
//! every Cyclon entry and overlay claim are fuzzed too: decoding never panics, and a decoded envelope
//! re-encodes to bytes that decode to the same envelope. Keep in step with `node/src/id.rs`.
use libfuzzer_sys::fuzz_target;
use libp2p_identity::PeerId;
use multiaddr::Multiaddr;
use protocol::codec::{decode_control, encode_control};
use protocol::control::ControlEnvelope;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `node::id::MAX_PEER_ID_BYTES` / `MAX_ADDR_BYTES`.
const MAX_PEER_ID_BYTES: usize = 64;
const MAX_ADDR_BYTES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Addr {
    peer: PeerId,
    addr: Multiaddr,
}

impl Serialize for Addr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.peer.to_bytes(), self.addr.to_vec()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (peer, addr): (Vec<u8>, Vec<u8>) = Deserialize::deserialize(d)?;
        if peer.len() > MAX_PEER_ID_BYTES || addr.len() > MAX_ADDR_BYTES {
            return Err(D::Error::custom("field too long"));
        }
        let peer = PeerId::from_bytes(&peer).map_err(D::Error::custom)?;
        let addr = Multiaddr::try_from(addr).map_err(D::Error::custom)?;
        Ok(Addr { peer, addr })
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = decode_control::<ControlEnvelope<Addr>>(data) {
        let _ = env.validate();
        // What we would gossip on must decode back to the same thing (Display/to_vec of a parsed
        // address must not panic either).
        let _ = env.sender.addr.to_string();
        let bytes = encode_control(&env).expect("a decoded envelope re-encodes within the limit");
        let back: ControlEnvelope<Addr> = decode_control(&bytes).expect("re-encoded envelope decodes");
        assert_eq!(back, env);
    }
});
