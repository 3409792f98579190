//! Chunks between VNs over one long-lived stream per peer and direction (`/shatter/chunk-stream/2`), instead
//! of one request-response stream per chunk.
//!
//! Why: a request-response chunk pays, each time, a stream opening and closing, a protocol negotiation, a
//! request timer and a response stream half. Measured with one 413 KB chunk (MovieLens at k = 2) at a time
//! between two VN Swarms (`cargo bench -p testnet --bench rounds -- --limits-only`, both ends' CPU): 2.2-2.7 ms
//! of CPU per chunk as a request against 1.7-2.1 ms on a stream that stays open; a round of MovieLens at k = 2
//! sends 64 of them.
//!
//! Framing: a chunk is one length-prefixed frame ([`super::codec`]'s framing, at most the run's largest chunk
//! frame and [`NOTE_BYTES`]): the chunk frame, then the sender's note (its chunk grid,
//! `super::chunk_slots::GridNote`; version 2 of the stream), last so that the receiver takes it off without
//! moving the chunk. The receiver answers every chunk, in order, with the engine's reply (`protocol::ChunkReply`) as a
//! length-prefixed frame of at most [`MAX_REPLY_BYTES`]; the sender matches replies to its chunks in order.
//!
//! Tasks: a writer per peer we send to (opens the stream, writes what its queue holds, reads the replies) and,
//! for streams peers open to us, one reader per listed peer; all report to the VN's event loop through one
//! bounded channel. A reader reads one chunk, hands it to the VN with a reply sender and waits for the reply
//! before it reads the next: a peer holds at most one chunk frame of this VN's memory (the frame read grows
//! with the bytes that arrive, never with the length announced), and a chunk the engine holds for a round not
//! yet frozen holds back only that peer's later chunks. Bounds: a writer's queue ([`QUEUE_PER_PEER`], past it a
//! chunk fails at once), the chunks a writer keeps until answered (its queue's worth: shared buffers, no copy),
//! a reply's wait ([`Timeouts::chunk_request`](super::behaviour::Timeouts), past it the link ends and its
//! chunks fail). A stream that ends before its first reply was most likely dropped unread by the peer's
//! `libp2p_stream` accept queue (as control streams are, `super::control_link`): it is opened again, up to
//! [`STREAM_ATTEMPTS`] streams, and its unanswered chunks written again. If every attempt is refused so, the
//! chunks fail with their frames in [`ChunkEvent::Failed::retry`], and the VN sends each once more as a
//! request (request-response's handler queues a connection's inbound streams itself and drops none): in a
//! crowded network, where a round's chunks reach a VN from all its neighbours at once, streams alone lost
//! chunks and neighbours that requests did not. Writers close their stream after [`IDLE`] without traffic,
//! so that connections to peers no longer talked to can idle out.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::io::ReadHalf;
use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::{PeerId, Stream, StreamProtocol};
use protocol::Round;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::stream_link::{self, Lazy, OpenFailed, Writers, accept_streams};
use crate::peers::PeerList;

/// Chunks queued for one peer while its stream opens or its earlier chunks are answered: a VN sends a peer
/// one chunk per round and accepts chunks at most `MAX_FUTURE_ROUNDS` rounds ahead of its own.
pub const QUEUE_PER_PEER: usize = 2 * (protocol::control::MAX_FUTURE_ROUNDS as usize + 1);

/// Bytes of the note after each chunk frame (`super::chunk_slots::GridNote`).
pub const NOTE_BYTES: usize = 2;

/// Events (received chunks, replies, failures) waiting for the VN's event loop.
pub const EVENTS: usize = 32;

/// A writer with nothing to send or to hear for this long closes its stream.
pub const IDLE: Duration = super::control_link::IDLE;

/// Largest reply frame: an encoded `ChunkReply` is one or two bytes; 64 leaves room for future variants.
pub const MAX_REPLY_BYTES: usize = 64;

/// Streams a writer opens for its chunks when the peer drops them unread: the chunks of a round reach a VN
/// from all its neighbours at once, and `libp2p_stream` keeps one new stream per protocol and VN until its
/// accept task takes it, dropping the others. Past these, the chunks go as requests (module documentation):
/// 512 VNs in one process lost chunks of round 0 with 3 and with 8 attempts and no fallback.
pub const STREAM_ATTEMPTS: u32 = 3;

/// Wait before the n-th reopening: about n times this, spread by ±50% per peer and attempt so that the peers
/// refused together do not come back together (at most about 0.8 s over all attempts).
pub const REOPEN_AFTER: Duration = Duration::from_millis(20);

/// The wait before reopening attempt `attempt` (from 1) to `peer`: [`REOPEN_AFTER`] × attempt × a factor in
/// [0.5, 1.5) drawn from a hash of both, so that no RNG is needed and the spread is the same run to run.
fn reopen_after(peer: &PeerId, attempt: u32) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (peer, attempt).hash(&mut h);
    let spread = 0.5 + (h.finish() % 1024) as f64 / 1024.0;
    (REOPEN_AFTER * attempt).mul_f64(spread)
}

/// What the chunk links tell the VN's event loop.
#[derive(Debug)]
pub enum ChunkEvent {
    /// A chunk frame from a listed peer, in the order that peer sent it. Its reply goes back through
    /// `reply`; dropping `reply` closes the peer's stream unanswered (its chunks fail there).
    Chunk {
        peer: PeerId,
        bytes: Vec<u8>,
        /// The note the sender put after it.
        note: [u8; NOTE_BYTES],
        reply: oneshot::Sender<Vec<u8>>,
    },
    /// The peer's reply to our chunk of `round`.
    Reply {
        peer: PeerId,
        round: Round,
        bytes: Vec<u8>,
    },
    /// Our chunk of `round` was not delivered to `peer`. `unreachable`: the peer was dialled and could not be
    /// reached. `retry`: the chunk's frame, when every stream for it was dropped unread (the peer is there but
    /// its accept queue was full): worth sending once more by another path.
    Failed {
        peer: PeerId,
        round: Round,
        unreachable: bool,
        retry: Option<Arc<Vec<u8>>>,
    },
    /// The link `link` to `peer` ended (its chunks were answered or reported failed before this).
    Closed { peer: PeerId, link: u64 },
}

/// One chunk to send: its round, and its frame shared with the other neighbours' writers.
#[derive(Clone)]
struct Outgoing {
    round: Round,
    bytes: Arc<Vec<u8>>,
    note: [u8; NOTE_BYTES],
}

/// One VN's chunk links.
pub struct ChunkLinks {
    control: libp2p_stream::Control,
    open_timeout: Duration,
    reply_timeout: Duration,
    max_frame: usize,
    writers: Writers<Outgoing>,
    events_tx: mpsc::Sender<ChunkEvent>,
    events: mpsc::Receiver<ChunkEvent>,
    /// Failures found at `send` (a full queue), reported through [`Self::next`] like the others.
    failed_now: VecDeque<ChunkEvent>,
    /// Accepts streams from peers: started by the first `send` or `next` (on the VN's runtime).
    accept: Lazy,
    /// The note sent after each chunk from now on.
    note: [u8; NOTE_BYTES],
}

impl ChunkLinks {
    /// Accepts chunk streams from listed peers, reading frames of at most `max_frame` bytes, and sends through
    /// `control` (the VN Swarm's `libp2p_stream::Behaviour`). `open_timeout`: how long a stream may take to
    /// open, dial included; `reply_timeout`: how long a chunk may wait for its reply. Must be called inside a
    /// tokio runtime.
    pub fn new(
        mut control: libp2p_stream::Control,
        peers: Arc<PeerList>,
        max_frame: usize,
        open_timeout: Duration,
        reply_timeout: Duration,
    ) -> crate::Result<Self> {
        let incoming = control
            .accept(protocol_name())
            .map_err(|e| crate::NodeError::Network(format!("chunk protocol: {e}")))?;
        let (events_tx, events) = mpsc::channel(EVENTS);
        let to_vn = events_tx.clone();
        let accept = Lazy::new(accept_streams(incoming, peers, move |peer, stream| {
            read_link(peer, stream, max_frame, to_vn.clone())
        }));
        Ok(Self {
            control,
            open_timeout,
            reply_timeout,
            max_frame,
            writers: Writers::new(QUEUE_PER_PEER),
            events_tx,
            events,
            failed_now: VecDeque::new(),
            accept,
            note: [0; NOTE_BYTES],
        })
    }

    /// Queues our chunk of `round` for `peer`, opening a link if there is none. `dialled`: the caller started a
    /// dial for it, so a failure to open means unreachable.
    pub fn send(&mut self, peer: PeerId, round: Round, bytes: Arc<Vec<u8>>, dialled: bool) {
        let chunk = Outgoing {
            round,
            bytes,
            note: self.note,
        };
        self.accept.start();
        let spawned = self.writers.send(peer, chunk, |id, queue| {
            let writer = Writer {
                control: self.control.clone(),
                peer,
                open_timeout: self.open_timeout,
                reply_timeout: self.reply_timeout,
                max_frame: self.max_frame,
                dialled,
                events: self.events_tx.clone(),
            };
            write_link(writer, id, queue)
        });
        if let Err(c) = spawned {
            tracing::debug!(%peer, round = %c.round, "chunk queue full; chunk not sent");
            self.failed_now.push_back(ChunkEvent::Failed {
                peer,
                round: c.round,
                unreachable: false,
                retry: None,
            });
        }
    }

    /// The note put after each chunk sent from now on.
    pub fn set_note(&mut self, note: [u8; NOTE_BYTES]) {
        self.note = note;
    }

    /// Starts accepting streams from peers, on the current runtime (the first `send` or `next` does it too): a
    /// VN on its own thread starts its links there.
    pub fn start(&mut self) {
        self.accept.start();
    }

    /// The next event; pending forever if there is none (the links hold a sender themselves).
    pub async fn next(&mut self) -> ChunkEvent {
        self.accept.start();
        if let Some(ev) = self.failed_now.pop_front() {
            return ev;
        }
        match self.events.recv().await {
            Some(ChunkEvent::Closed { peer, link }) => {
                self.writers.closed(peer, link);
                ChunkEvent::Closed { peer, link }
            }
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    /// Links open now.
    pub fn open(&self) -> usize {
        self.writers.len()
    }
}

fn protocol_name() -> StreamProtocol {
    StreamProtocol::new(protocol::names::CHUNK_STREAM)
}

/// Reads one peer's chunks one at a time, handing each to the VN and writing back its reply.
async fn read_link(
    peer: PeerId,
    stream: Stream,
    max_frame: usize,
    events: mpsc::Sender<ChunkEvent>,
) {
    let (mut rd, mut wr) = stream.split();
    let mut prefix = Vec::with_capacity(protocol::frame::LENGTH_PREFIX_BYTES + MAX_REPLY_BYTES);
    // A frame over `max_frame` is refused from its prefix, before anything is allocated: the stream closes.
    while let Ok(mut bytes) = super::codec::read_frame(&mut rd, max_frame + NOTE_BYTES).await {
        // A frame too short for its note: the peer does not speak this version; close the stream. The
        // note trails the chunk, so taking it off moves nothing.
        let Some(&note) = bytes.last_chunk::<NOTE_BYTES>() else {
            return;
        };
        bytes.truncate(bytes.len() - NOTE_BYTES);
        let (reply, answer) = oneshot::channel();
        if events
            .send(ChunkEvent::Chunk {
                peer,
                bytes,
                note,
                reply,
            })
            .await
            .is_err()
        {
            return;
        }
        // The VN dropped it unanswered (an unlisted peer, or a VN that is stopping): close the stream.
        let Ok(answer) = answer.await else {
            return;
        };
        prefix.clear();
        if protocol::frame::write_frame(&answer, MAX_REPLY_BYTES, &mut prefix).is_err()
            || wr.write_all(&prefix).await.is_err()
            || wr.flush().await.is_err()
        {
            return;
        }
    }
}

/// What a writer needs besides its queue.
struct Writer {
    control: libp2p_stream::Control,
    peer: PeerId,
    open_timeout: Duration,
    reply_timeout: Duration,
    max_frame: usize,
    dialled: bool,
    events: mpsc::Sender<ChunkEvent>,
}

/// How a writer's link ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Nothing to send for [`IDLE`], or the VN is stopping: nothing was lost.
    Idle,
    /// The stream could not be opened because the peer was dialled and could not be reached.
    Unreachable,
    /// The stream failed, timed out, or the peer answered out of turn.
    Broken,
    /// Every stream opened was dropped unread: the chunks may still go by another path.
    Refused,
}

async fn write_link(mut w: Writer, id: u64, mut queue: mpsc::Receiver<Outgoing>) {
    let mut unanswered = VecDeque::new();
    let why = w.run(&mut queue, &mut unanswered).await;
    if why != Ended::Idle {
        tracing::debug!(peer = %w.peer, ?why, lost = unanswered.len(), "chunk link ended");
    }
    // Every chunk given to this link and not answered fails, those still queued included.
    queue.close();
    while let Ok(c) = queue.try_recv() {
        unanswered.push_back(c);
    }
    for c in unanswered {
        let failed = ChunkEvent::Failed {
            peer: w.peer,
            round: c.round,
            unreachable: why == Ended::Unreachable,
            retry: (why == Ended::Refused).then_some(c.bytes),
        };
        if w.events.send(failed).await.is_err() {
            return;
        }
    }
    let _ = w
        .events
        .send(ChunkEvent::Closed {
            peer: w.peer,
            link: id,
        })
        .await;
}

/// How one stream ended, for the writer to decide whether to open another.
enum Session {
    /// The link is over.
    Ended(Ended),
    /// The stream broke before the peer answered anything: most likely dropped unread (see the module doc).
    Refused,
}

impl Writer {
    /// Runs the link until it ends; `unanswered` holds the chunks written and not answered, oldest first.
    async fn run(
        &mut self,
        queue: &mut mpsc::Receiver<Outgoing>,
        unanswered: &mut VecDeque<Outgoing>,
    ) -> Ended {
        for attempt in 0..STREAM_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(reopen_after(&self.peer, attempt)).await;
                tracing::debug!(peer = %self.peer, n = unanswered.len(), "chunk stream refused; opening another");
            }
            let stream = match self.open().await {
                Ok(s) => s,
                Err(why) => return why,
            };
            match self.session(stream, queue, unanswered).await {
                Session::Ended(why) => return why,
                Session::Refused => {}
            }
        }
        Ended::Refused
    }

    async fn open(&mut self) -> Result<Stream, Ended> {
        let opened = stream_link::open(
            &mut self.control,
            self.peer,
            protocol_name(),
            self.open_timeout,
            self.dialled,
            "chunk",
        )
        .await;
        opened.map_err(|why| match why {
            OpenFailed::Unreachable => Ended::Unreachable,
            OpenFailed::TimedOut => Ended::Broken,
            OpenFailed::Failed => Ended::Broken,
        })
    }

    /// Writes the chunks in `unanswered` again (a new stream), then what the queue brings, on `stream` until it
    /// ends, reporting each reply.
    #[allow(clippy::disallowed_methods)] // the shell's own timers (reply deadline, idle close); no engine input
    async fn session(
        &mut self,
        stream: Stream,
        queue: &mut mpsc::Receiver<Outgoing>,
        unanswered: &mut VecDeque<Outgoing>,
    ) -> Session {
        let (rd, mut wr) = stream.split();
        // A stream of replies, kept across the select below (a read it interrupts is not lost).
        let mut replies = Box::pin(futures::stream::unfold(rd, read_reply));
        let mut answered_any = false;
        let broken = |answered_any: bool| {
            if answered_any {
                Session::Ended(Ended::Broken)
            } else {
                Session::Refused
            }
        };
        let replay: Vec<Outgoing> = unanswered.iter().cloned().collect();
        for c in &replay {
            if self.write(&mut wr, c).await.is_err() {
                return broken(answered_any);
            }
        }
        // When the oldest unanswered chunk was written (or written again).
        let mut oldest_since = Instant::now();
        loop {
            let deadline = oldest_since + self.reply_timeout;
            let idle = Instant::now() + IDLE;
            tokio::select! {
                next = queue.recv(), if unanswered.len() < QUEUE_PER_PEER => {
                    let Some(c) = next else {
                        // The VN is stopping.
                        let _ = wr.close().await;
                        return Session::Ended(Ended::Idle);
                    };
                    if unanswered.is_empty() {
                        oldest_since = Instant::now();
                    }
                    let written = self.write(&mut wr, &c).await;
                    unanswered.push_back(c);
                    if written.is_err() {
                        return broken(answered_any);
                    }
                }
                reply = replies.next() => {
                    let Some(Ok(bytes)) = reply else {
                        return broken(answered_any);
                    };
                    // A reply with nothing to answer: the peer is out of step; the link is not to be trusted.
                    let Some(c) = unanswered.pop_front() else {
                        return Session::Ended(Ended::Broken);
                    };
                    answered_any = true;
                    oldest_since = Instant::now();
                    let ev = ChunkEvent::Reply { peer: self.peer, round: c.round, bytes };
                    if self.events.send(ev).await.is_err() {
                        return Session::Ended(Ended::Idle);
                    }
                }
                _ = tokio::time::sleep_until(deadline), if !unanswered.is_empty() => {
                    tracing::debug!(peer = %self.peer, "chunk reply timed out");
                    return Session::Ended(Ended::Broken);
                }
                _ = tokio::time::sleep_until(idle), if unanswered.is_empty() => {
                    let _ = wr.close().await;
                    return Session::Ended(Ended::Idle);
                }
            }
        }
    }

    /// Writes one chunk frame: its length prefix, the shared frame itself, then the note (no copy into a buffer). A peer
    /// that stops reading fails it after the reply timeout, as a reply that never comes would.
    async fn write(&self, wr: &mut futures::io::WriteHalf<Stream>, c: &Outgoing) -> io::Result<()> {
        let prefix =
            protocol::frame::encode_prefix(c.bytes.len() + NOTE_BYTES, self.max_frame + NOTE_BYTES)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let write = async {
            wr.write_all(&prefix).await?;
            wr.write_all(&c.bytes).await?;
            wr.write_all(&c.note).await?;
            wr.flush().await
        };
        tokio::time::timeout(self.reply_timeout, write)
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
    }
}

/// The next reply frame on a chunk stream, for `futures::stream::unfold`: ends the stream at its end or first
/// error (an error is yielded once, then nothing).
async fn read_reply(rd: ReadHalf<Stream>) -> Option<(io::Result<Vec<u8>>, ReadHalf<Stream>)> {
    let mut rd = rd;
    match super::codec::read_frame(&mut rd, MAX_REPLY_BYTES).await {
        Ok(b) => Some((Ok(b), rd)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => None,
        Err(e) => Some((Err(e), rd)),
    }
}
