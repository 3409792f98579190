#![no_main]
//! Control messages (Cyclon, overlay) with byte-string peer ids, as the node's ids serialise: decoding and
//! validation never panic.
use libfuzzer_sys::fuzz_target;
use protocol::codec::decode_control;
use protocol::control::{ControlEnvelope, ControlMsg};

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = decode_control::<ControlEnvelope<(Vec<u8>, Vec<u8>)>>(data) {
        let _ = env.validate();
    }
    let _ = decode_control::<ControlMsg<u32>>(data);
});
