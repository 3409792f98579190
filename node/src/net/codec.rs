//! The request-response codec for both Shatter protocols: length-prefixed raw frames. Decoding the frame's
//! content is left to the VN, which counts what it refuses; here only the length is checked, before a byte
//! is allocated, and the buffer grows with the bytes that arrive, never with the length announced (a peer
//! announcing the maximum and trickling bytes holds only what it sent). libp2p's stock cbor/json codecs cap
//! messages at 1/10 MiB, too small for a model chunk.

use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use libp2p::request_response::Codec;

/// A request's bytes as the codec takes them: an owned buffer (control messages), or a shared one (chunks:
/// one encoded chunk goes to r neighbours, and libp2p takes each request by value — shared, the frame is
/// encoded once and never copied per neighbour).
pub trait FrameBuf: Send + 'static {
    fn bytes(&self) -> &[u8];
    fn from_vec(v: Vec<u8>) -> Self;
}

impl FrameBuf for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn from_vec(v: Vec<u8>) -> Self {
        v
    }
}

impl FrameBuf for Arc<Vec<u8>> {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn from_vec(v: Vec<u8>) -> Self {
        Arc::new(v)
    }
}

/// Frames with per-direction size limits; requests of type `Req`.
#[derive(Debug)]
pub struct FrameCodec<Req = Vec<u8>> {
    max_request: usize,
    max_response: usize,
    request: PhantomData<fn() -> Req>,
}

// By hand: derived impls would ask `Req: Clone`/`Copy`, which the codec never clones.
impl<Req> Clone for FrameCodec<Req> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Req> Copy for FrameCodec<Req> {}

impl<Req> FrameCodec<Req> {
    pub fn new(max_request: usize, max_response: usize) -> Self {
        Self {
            max_request,
            max_response,
            request: PhantomData,
        }
    }
}

/// The most a read allocates, and zeroes, ahead of the bytes that arrived: a frame's buffer holds what the
/// peer sent plus at most this, whatever length the frame announced (a peer announcing the maximum and
/// trickling bytes holds only what it sent).
pub const READ_AHEAD_BYTES: usize = 64 * 1024;

pub(crate) async fn read_frame<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    max: usize,
) -> io::Result<Vec<u8>> {
    read_frame_charged(io, max, &mut |_| Ok(())).await
}

/// [`read_frame`], calling `charge` with each growth of the buffer's capacity before it is made: a caller
/// that keeps a budget of bytes being read refuses the growth (and the frame) by returning an error.
pub(crate) async fn read_frame_charged<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    max: usize,
    charge: &mut (dyn FnMut(usize) -> io::Result<()> + Send),
) -> io::Result<Vec<u8>> {
    let mut prefix = [0u8; protocol::frame::LENGTH_PREFIX_BYTES];
    io.read_exact(&mut prefix).await?;
    let len = protocol::frame::decode_prefix(prefix, max)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    // Not `read_to_end`: it zeroes its spare room a byte at a time and, to see the end of a frame that
    // filled its buffer exactly, doubles the buffer once more (a chunk frame of 413 KB cost 826 KB of
    // zeroing and a copy, 6% of a MovieLens run's CPU).
    let mut buf = Vec::new();
    let mut filled = 0;
    while filled < len {
        if filled == buf.len() {
            // The capacity at most doubles what arrived (a copy per doubling, rather than one reservation of
            // the whole announced frame); the zeroed room ahead of the bytes is at most one read-ahead, and
            // each byte is zeroed once.
            let zeroed = (filled + READ_AHEAD_BYTES).min(len);
            if buf.capacity() < zeroed {
                let want = (2 * filled).max(zeroed).min(len);
                charge(want - buf.capacity())?;
                buf.reserve_exact(want - buf.len());
            }
            buf.resize(zeroed, 0);
        }
        let n = io.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("frame announced {len} bytes, stream ended after {filled}"),
            ));
        }
        filled += n;
    }
    Ok(buf)
}

pub(crate) async fn write_frame<T: AsyncWrite + Unpin + Send>(
    io: &mut T,
    payload: &[u8],
    max: usize,
) -> io::Result<()> {
    let prefix = protocol::frame::encode_prefix(payload.len(), max)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    io.write_all(&prefix).await?;
    io.write_all(payload).await?;
    io.close().await
}

impl<Req: FrameBuf> Codec for FrameCodec<Req> {
    type Protocol = StreamProtocol;
    type Request = Req;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Req>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.max_request).await.map(Req::from_vec)
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.max_response).await
    }

    async fn write_request<T>(&mut self, _: &StreamProtocol, io: &mut T, req: Req) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, req.bytes(), self.max_request).await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, &res, self.max_response).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::Cursor;

    /// A reader that hands out at most 1,000 bytes per read, as a stream of small network packets would.
    struct Trickle(Cursor<Vec<u8>>);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let n = buf.len().min(1000);
            std::pin::Pin::new(&mut self.0).poll_read(cx, &mut buf[..n])
        }
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused_before_allocation() {
        let mut codec = FrameCodec::<Vec<u8>>::new(16, 4);
        let proto = StreamProtocol::new("/t/1");
        let mut wire = Cursor::new(Vec::new());
        codec
            .write_request(&proto, &mut wire, b"hello".to_vec())
            .await
            .unwrap();
        let mut rd = Cursor::new(wire.into_inner());
        assert_eq!(codec.read_request(&proto, &mut rd).await.unwrap(), b"hello");

        let mut lying = Cursor::new(u32::MAX.to_le_bytes().to_vec());
        let err = codec.read_request(&proto, &mut lying).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        // A frame announcing more than it sends ends in an error, holding only what arrived.
        let mut short = 10u32.to_le_bytes().to_vec();
        short.extend_from_slice(b"abc");
        let err = codec
            .read_request(&proto, &mut Cursor::new(short))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);

        // A frame longer than the first allocation, arriving in small reads, grows its buffer to fit exactly.
        let mut codec = FrameCodec::<Vec<u8>>::new(1 << 20, 4);
        let big: Vec<u8> = (0..3 * READ_AHEAD_BYTES + 7)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut wire = Cursor::new(Vec::new());
        codec
            .write_request(&proto, &mut wire, big.clone())
            .await
            .unwrap();
        let mut trickle = Trickle(Cursor::new(wire.into_inner()));
        let got = codec.read_request(&proto, &mut trickle).await.unwrap();
        assert_eq!(got, big);
        assert_eq!(got.capacity(), big.len());

        let mut sink = Cursor::new(Vec::new());
        assert!(
            codec
                .write_response(&proto, &mut sink, vec![0; 5])
                .await
                .is_err()
        );
    }
}
