//! The RN↔VN link's codec: the length-prefixed frames of [`super::codec`], each refused from its prefix above
//! the link's message bound, and a budget of bytes being read at once on one connection, so that a peer
//! opening many streams and announcing large messages holds at most that budget (a read that would pass it
//! is refused, and the link task resets the peer: `super::link`).
//!
//! A refused read is handed on as an empty request ([`REFUSED`]; no link message is empty): request-response
//! does not report a read that failed (libp2p-request-response 0.30 drops an inbound failure whose request
//! it never saw), and the link task must learn which peer to reset.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{AsyncRead, AsyncWrite};
use libp2p::StreamProtocol;
use libp2p::request_response::Codec;

use super::codec::{read_frame, read_frame_charged, write_frame};

/// What [`LinkCodec`] hands on for a message refused while being read (over the message bound, or over its
/// connection's budget of bytes being read).
pub const REFUSED: &[u8] = &[];

/// Link frames with a per-connection budget of bytes being read.
///
/// request-response clones the behaviour's codec once per connection (into the connection's handler) and
/// the handler's once per stream (libp2p-request-response 0.30, `handle_established_*_connection` and
/// `on_fully_negotiated_*`). So the behaviour holds a template without a budget, a clone of the template
/// starts a connection's budget, and clones of that share it: every stream of one connection, and only
/// those, charge one counter. `a_connections_streams_share_one_budget` below and the link tests hold this.
#[derive(Debug)]
pub struct LinkCodec {
    max_message: usize,
    reading_limit: usize,
    reading: Option<Arc<AtomicUsize>>,
}

impl LinkCodec {
    /// The behaviour's template: messages of at most `max_message` bytes, at most `reading_limit` bytes being
    /// read per connection.
    pub fn new(max_message: usize, reading_limit: usize) -> Self {
        Self {
            max_message,
            reading_limit,
            reading: None,
        }
    }

    /// Bytes charged to this connection's budget now (0 for the template).
    pub fn reading(&self) -> usize {
        self.reading
            .as_ref()
            .map_or(0, |r| r.load(Ordering::Relaxed))
    }
}

impl Clone for LinkCodec {
    fn clone(&self) -> Self {
        Self {
            max_message: self.max_message,
            reading_limit: self.reading_limit,
            reading: Some(self.reading.clone().unwrap_or_default()),
        }
    }
}

/// One frame's share of its connection's budget, given back when the frame is read (the link task counts it
/// from then on) or its read failed.
struct Charge {
    budget: Arc<AtomicUsize>,
    limit: usize,
    held: usize,
}

impl Charge {
    fn take(&mut self, n: usize) -> io::Result<()> {
        let before = self.budget.fetch_add(n, Ordering::Relaxed);
        if before + n > self.limit {
            self.budget.fetch_sub(n, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "link messages being read on this connection would hold {} bytes (at most {})",
                    before + n,
                    self.limit
                ),
            ));
        }
        self.held += n;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.held, Ordering::Relaxed);
    }
}

impl Codec for LinkCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        let mut charge = Charge {
            budget: self.reading.clone().unwrap_or_default(),
            limit: self.reading_limit,
            held: 0,
        };
        match read_frame_charged(io, self.max_message, &mut |n| charge.take(n)).await {
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                tracing::debug!(error = %e, "link message refused while being read");
                Ok(REFUSED.to_vec())
            }
            other => other,
        }
    }

    /// Acknowledgements are empty.
    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, 0).await
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        write_frame(io, &req, self.max_message).await
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
        write_frame(io, &res, 0).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::Cursor;

    fn frame(len: usize) -> Vec<u8> {
        let mut v = (len as u32).to_le_bytes().to_vec();
        v.resize(4 + len, 7);
        v
    }

    /// A stream that sends the first `sent` bytes of a frame and then stalls (as a peer that announces a large
    /// message and trickles it).
    struct Stalled(Cursor<Vec<u8>>);

    impl AsyncRead for Stalled {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<io::Result<usize>> {
            match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
                std::task::Poll::Ready(Ok(0)) => std::task::Poll::Pending,
                other => other,
            }
        }
    }

    #[tokio::test]
    async fn a_connections_streams_share_one_budget() {
        let proto = StreamProtocol::new("/t/1");
        let template = LinkCodec::new(1 << 20, 300_000);
        let conn = template.clone();
        let mut stream_a = conn.clone();
        let mut stream_b = conn.clone();
        // Stream a has 150,000 bytes of a 1 MiB message in hand (262,144 reserved), and waits for the rest.
        let mut half = frame(1 << 20);
        half.truncate(4 + 150_000);
        let mut stalled = Stalled(Cursor::new(half));
        let pending = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            stream_a.read_request(&proto, &mut stalled),
        )
        .await;
        assert!(pending.is_err(), "still reading");
        // Its read was dropped with the timeout: its charge is back.
        assert_eq!(conn.reading(), 0);

        // Two streams of one connection: the second's growth past the budget fails.
        let a = async {
            let mut half = frame(1 << 20);
            half.truncate(4 + 150_000);
            let mut s = Stalled(Cursor::new(half));
            stream_a.read_request(&proto, &mut s).await
        };
        let b = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let mut whole = Cursor::new(frame(100_000));
            stream_b.read_request(&proto, &mut whole).await
        };
        tokio::select! {
            _ = a => panic!("a stalled read never ends"),
            r = b => assert_eq!(r.unwrap(), REFUSED, "refused, for the link task to reset the peer"),
        }
        assert_eq!(conn.reading(), 0, "every charge is given back");

        // Another connection has a budget of its own, and a message within it is read whole.
        let mut other = template.clone();
        let mut whole = Cursor::new(frame(150_000));
        assert_eq!(
            other.read_request(&proto, &mut whole).await.unwrap().len(),
            150_000
        );
        // The prefix bound holds before a byte is charged.
        let mut too_long = Cursor::new(((1u32 << 20) + 1).to_le_bytes().to_vec());
        assert_eq!(
            other.read_request(&proto, &mut too_long).await.unwrap(),
            REFUSED
        );
        // A stream that ends early is an error, as before (the peer's own loss, not a refusal).
        let mut short = frame(1000);
        short.truncate(500);
        assert!(
            other
                .read_request(&proto, &mut Cursor::new(short))
                .await
                .is_err()
        );
        assert_eq!(template.reading(), 0);
    }
}
