//! What a frame that announces more than it sends makes a VN allocate (issue 45): the bytes that arrived plus
//! at most one read-ahead (`node::net::codec::READ_AHEAD_BYTES`), whatever length the frame announced. Before,
//! the whole announced frame was reserved once 64 KiB had arrived, and the room ahead was zeroed up to twice
//! what had arrived. Measured as the process's address space (the workspace forbids the `unsafe` a counting
//! allocator needs).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::AsyncRead;
use libp2p::StreamProtocol;
use libp2p::request_response::Codec;
use node::net::codec::{FrameCodec, READ_AHEAD_BYTES};

/// The process's address space (`VmSize`), in bytes: what it reserved, touched or not (what strict
/// overcommit accounting charges). This test binary runs one test, so nothing else moves it.
fn vm_size() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| {
            v.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .unwrap()
        * 1024
}

/// A peer that announces `announced` bytes, sends `sent` of them in reads of at most 16 KiB (yamux's frames),
/// then stalls.
struct Stalling {
    prefix: [u8; 4],
    at: usize,
    sent: usize,
}

impl AsyncRead for Stalling {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let total = 4 + self.sent;
        if self.at >= total {
            return Poll::Pending;
        }
        let n = buf.len().min(total - self.at).min(16 * 1024);
        for (i, b) in buf[..n].iter_mut().enumerate() {
            let pos = self.at + i;
            *b = if pos < 4 { self.prefix[pos] } else { 7 };
        }
        self.at += n;
        Poll::Ready(Ok(n))
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_stalled_frame_holds_what_arrived_plus_one_read_ahead() {
    let announced: usize = 64 << 20;
    let mut codec = FrameCodec::<Vec<u8>>::new(announced, 16);
    let proto = StreamProtocol::new("/t/1");
    for sent in [10, 100 * 1024, 1 << 20] {
        let mut peer = Stalling {
            prefix: (announced as u32).to_le_bytes(),
            at: 0,
            sent,
        };
        let before = vm_size();
        let mut read = Box::pin(codec.read_request(&proto, &mut peer));
        let waker = futures::task::noop_waker();
        assert!(
            read.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        let held = vm_size().saturating_sub(before);
        // Capacity at most twice what arrived, or one read-ahead; the allocator's own rounding (a mapping of
        // whole pages, an arena) on top.
        let bound = 2 * sent.max(READ_AHEAD_BYTES) + READ_AHEAD_BYTES + (1 << 20);
        assert!(
            held <= bound,
            "{sent} bytes sent of a frame announcing {announced}: {held} bytes allocated (bound {bound})"
        );
        drop(read);
    }
}
