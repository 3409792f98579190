#![no_main]
//! Length-prefixed framing: splitting never panics and never yields more than the limit.
use libfuzzer_sys::fuzz_target;
use protocol::frame::split_frame;

const MAX: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok((payload, r)) = split_frame(rest, MAX) {
        assert!(payload.len() <= MAX);
        rest = r;
    }
});
