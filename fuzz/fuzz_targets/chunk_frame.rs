#![no_main]
//! Chunk frames: decoding never panics, and whatever decodes re-encodes to the same bytes.
use libfuzzer_sys::fuzz_target;
use protocol::ChunkFrame;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = ChunkFrame::decode(data) {
        assert_eq!(frame.encode(), data);
    }
});
