#![no_main]
//! The receiver's reply to a chunk: decoding never panics.
use libfuzzer_sys::fuzz_target;
use protocol::ChunkReply;
use protocol::codec::decode_control;

fuzz_target!(|data: &[u8]| {
    let _ = decode_control::<ChunkReply>(data);
});
