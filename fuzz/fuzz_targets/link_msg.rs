#![no_main]
//! RN↔VN link messages (`protocol::link`, carried by `node/src/net/link.rs`): decoding never panics, and what
//! decodes re-encodes to bytes that decode and re-encode to themselves (byte-wise, since a chunk's NaN is not
//! equal to itself and a refusal's text is decoded lossily).
use libfuzzer_sys::fuzz_target;
use protocol::link::LinkMessage;

/// The largest chunk frame the fuzzed link accepts: small, so frames over it are exercised too.
const MAX_CHUNK_FRAME: usize = 4096;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = LinkMessage::decode(data, MAX_CHUNK_FRAME) {
        let bytes = msg.encode(MAX_CHUNK_FRAME).expect("a decoded message re-encodes");
        let again = LinkMessage::decode(&bytes, MAX_CHUNK_FRAME).expect("re-encoded bytes decode");
        assert_eq!(again.encode(MAX_CHUNK_FRAME).unwrap(), bytes);
    }
});
