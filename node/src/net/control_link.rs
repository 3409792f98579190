//! Control messages between VNs (Cyclon shuffles, overlay negotiation) over one long-lived stream per peer
//! and direction (`/shatter/control/3`, the framing of version 2), instead of one request-response stream
//! per message.
//!
//! Why: a VN sends a few dozen control messages per round, each a few hundred bytes. As its own
//! request-response stream, each cost a stream opening and closing, a protocol negotiation, an empty response
//! and a per-request timer: about 9 `send` syscalls and 11 futex calls per message in the default run (measured
//! with `perf stat -e syscalls:sys_enter_sendto`), most of the CPU a round spends outside training. On a
//! stream that stays open a message is one length-prefixed frame ([`super::codec`]'s framing).
//!
//! The receiver acknowledges what it read: after each burst, the count of messages read so far on the stream
//! (a little-endian u64), after a random delay of its VN's own ([`ControlLinks::with_delayed_acks`],
//! `super::release`): an acknowledgement sent the instant a message arrives would show when the receiving
//! process got the CPU, which is the same instant for all its VNs, so an observer that messages two siblings
//! at once would see them answer within the same millisecond. The sender turns the acknowledgement of its latest message into a round trip
//! (`VnInput::ControlRoundTrip`, which paces the overlay's sub-steps), measured from when its VN sent the
//! message to when the receiver had handed it to its VN's bounded queue, so a busy receiver still reads slow.
//!
//! Tasks: a writer per peer we send to (opens the stream, writes what its queue holds, reads the
//! acknowledgements) and, for streams peers open to us, one reader per listed peer; all report to the VN's
//! event loop through one bounded channel. Bounds: a writer's queue ([`QUEUE_PER_PEER`]: past it messages are
//! dropped and counted, as a busy network loses them), its unacknowledged record ([`MAX_UNACKED`]), the copies
//! a new stream keeps until its first acknowledgement ([`REPLAY`]: a stream the peer drops unread is opened
//! again, up to [`STREAM_ATTEMPTS`] streams, and those messages sent again), a reader's buffer (one frame of
//! at most `protocol::codec::MAX_CONTROL_BYTES` plus [`READ_BUFFER`]); a peer opening a second stream
//! replaces its first. Writers close their stream after [`IDLE`] without traffic, so that
//! connections to peers no longer talked to can idle out; a write that does not go out within
//! [`WRITE_TIMEOUT`] ends its link as slow, and a reader that hears nothing for [`READ_IDLE`] closes its
//! stream (a peer that vanished without a reset leaves both waiting otherwise).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::io::BufReader;
use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::{PeerId, Stream, StreamProtocol};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::release::ReleaseSchedule;
use super::stream_link::{self, Lazy, OpenFailed, Writers, accept_streams};
use crate::peers::PeerList;

/// Messages queued for one peer while its stream opens or its receiver is slow: a VN negotiating
/// `MAX_LOOKAHEAD` rounds sends one peer at most a few dozen per sub-step.
pub const QUEUE_PER_PEER: usize = 256;

/// Events (received messages, round trips, closed links) waiting for the VN's event loop. Small on purpose:
/// a reader waits for room before acknowledging, so a VN that falls behind shows in its peers' round trips.
pub const EVENTS: usize = 32;

/// A writer with nothing to send or to hear for this long closes its stream.
pub const IDLE: Duration = Duration::from_secs(30);

/// A write (a burst of messages, or an acknowledgement) that has not gone out in this long ends its link
/// as slow: the peer reads nothing, so its stream's window stays full. Without it a writer to a vanished
/// peer waited for ever once its window was full, holding its queue.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A reader that has heard nothing for this long closes its stream: the peer's writer closes its own after
/// [`IDLE`] without traffic, so a stream silent for twice that belongs to a peer that left without closing
/// it (or holds it open on purpose), and would otherwise keep its reader and buffer for ever.
pub const READ_IDLE: Duration = Duration::from_secs(2 * IDLE.as_secs());

/// Sent messages whose acknowledgement is awaited; past it the oldest are forgotten (their round trips are
/// not measured), so a peer that never acknowledges costs a bounded record.
pub const MAX_UNACKED: usize = 1024;

/// A reader's buffer: several control messages (a few hundred bytes each), read in one go. Small, because a
/// reader lives as long as its peer's stream, one per peer that sends to this VN: 4 KB readers were 3 % of
/// the heap of 128 VNs in one process.
pub const READ_BUFFER: usize = 1024;

/// Why a link (one writer and its stream) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Its stream could not be opened: the peer was dialled and could not be reached.
    Unreachable,
    /// Its stream failed, or the peer closed it or acknowledged what was never sent.
    Broken,
    /// Its stream did not open, or a write did not go out, in time: a peer too busy to be of use, or gone.
    Slow,
    /// Nothing to send for [`IDLE`], or the VN is stopping.
    Idle,
}

/// What the links tell the VN's event loop.
#[derive(Debug)]
pub enum LinkEvent {
    /// A control message from a peer, in the order that peer sent it.
    Message { peer: PeerId, bytes: Vec<u8> },
    /// The round trip of a message sent on a connection that was already up.
    RoundTrip(Duration),
    /// The link `link` to `peer` ended; messages still queued on it are lost.
    Closed {
        peer: PeerId,
        link: u64,
        why: Closed,
    },
}

struct Outgoing {
    bytes: Vec<u8>,
    /// When the VN sent it (time since the epoch), if its acknowledgement measures a round trip.
    sent: Option<Duration>,
}

/// One VN's control links.
pub struct ControlLinks {
    control: libp2p_stream::Control,
    epoch: Instant,
    open_timeout: Duration,
    writers: Writers<Outgoing>,
    events_tx: mpsc::Sender<LinkEvent>,
    events: mpsc::Receiver<LinkEvent>,
    /// Accepts streams from peers: started by the first `send` or `next` (on the VN's runtime).
    accept: Lazy,
    dropped: u64,
}

impl ControlLinks {
    /// Accepts control streams from listed peers and sends through `control` (the VN Swarm's
    /// `libp2p_stream::Behaviour`). `open_timeout`: how long a stream may take to open, dial included. Must
    /// be called inside a tokio runtime. Acknowledges at once.
    pub fn new(
        control: libp2p_stream::Control,
        peers: Arc<PeerList>,
        epoch: Instant,
        open_timeout: Duration,
    ) -> crate::Result<Self> {
        Self::with_delayed_acks(control, peers, epoch, open_timeout, ReleaseSchedule::off())
    }

    /// As [`ControlLinks::new`], each reader acknowledging after delays drawn from its own fork of `acks`.
    pub fn with_delayed_acks(
        mut control: libp2p_stream::Control,
        peers: Arc<PeerList>,
        epoch: Instant,
        open_timeout: Duration,
        mut acks: ReleaseSchedule,
    ) -> crate::Result<Self> {
        let incoming = control
            .accept(protocol_name())
            .map_err(|e| crate::NodeError::Network(format!("control protocol: {e}")))?;
        let (events_tx, events) = mpsc::channel(EVENTS);
        let to_vn = events_tx.clone();
        let accept = Lazy::new(accept_streams(incoming, peers, move |peer, stream| {
            read_link(peer, stream, to_vn.clone(), acks.fork())
        }));
        Ok(Self {
            control,
            epoch,
            open_timeout,
            writers: Writers::new(QUEUE_PER_PEER),
            events_tx,
            events,
            accept,
            dropped: 0,
        })
    }

    /// Queues `bytes` for `peer`, opening a link if there is none. `sent`: when the VN sent it, if its
    /// acknowledgement should measure a round trip (a message that waits for a dial would also time the
    /// handshake). `dialled`: the caller started a dial for it, so a failure to open means unreachable.
    pub fn send(&mut self, peer: PeerId, bytes: Vec<u8>, sent: Option<Duration>, dialled: bool) {
        let msg = Outgoing { bytes, sent };
        self.accept.start();
        let spawned = self.writers.send(peer, msg, |id, queue| {
            let writer = Writer {
                control: self.control.clone(),
                peer,
                epoch: self.epoch,
                open_timeout: self.open_timeout,
                dialled,
                events: self.events_tx.clone(),
            };
            write_link(writer, id, queue)
        });
        if spawned.is_err() {
            self.dropped += 1;
            tracing::debug!(%peer, dropped = self.dropped, "control queue full; message dropped");
        }
    }

    /// Starts accepting streams from peers, on the current runtime (the first `send` or `next` does it too): a
    /// VN on its own thread starts its links there.
    pub fn start(&mut self) {
        self.accept.start();
    }

    /// The next event; pending forever if there is none (the links hold a sender themselves).
    pub async fn next(&mut self) -> LinkEvent {
        self.accept.start();
        match self.events.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    /// Forgets link `id` to `peer` once its end is reported (a newer link to the peer stays).
    pub fn closed(&mut self, peer: PeerId, id: u64) {
        self.writers.closed(peer, id);
    }

    /// Messages dropped so far because a peer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Links open now.
    pub fn open(&self) -> usize {
        self.writers.len()
    }
}

fn protocol_name() -> StreamProtocol {
    StreamProtocol::new(protocol::names::CONTROL)
}

/// Reads one peer's messages, handing each to the VN and acknowledging each burst (after a delay drawn from
/// `acks`, reading on meanwhile).
async fn read_link(
    peer: PeerId,
    stream: Stream,
    events: mpsc::Sender<LinkEvent>,
    mut acks: ReleaseSchedule,
) {
    let (rd, mut wr) = stream.split();
    let rd = BufReader::with_capacity(READ_BUFFER, rd);
    // Frames, with whether more are already buffered, as a stream kept across the select below (a read it
    // interrupts is not lost).
    let mut frames = Box::pin(futures::stream::unfold(rd, |mut rd| async move {
        let bytes = super::codec::read_frame(&mut rd, protocol::codec::MAX_CONTROL_BYTES)
            .await
            .ok()?;
        let more = !rd.buffer().is_empty();
        Some(((bytes, more), rd))
    }));
    let mut count = 0u64;
    let mut ack: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let idle = tokio::time::sleep(READ_IDLE);
    tokio::pin!(idle);
    loop {
        let due = async {
            match ack.as_mut() {
                Some(s) => s.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut idle => return,
            frame = frames.next() => {
                let Some((bytes, more)) = frame else { return };
                // A driver's timer (the idle rule of a stream task), not an engine input.
                #[allow(clippy::disallowed_methods)]
                idle.as_mut().reset(Instant::now() + READ_IDLE);
                count += 1;
                if events
                    .send(LinkEvent::Message { peer, bytes })
                    .await
                    .is_err()
                {
                    return;
                }
                // Acknowledge once what arrived together has been handed over.
                if !more && ack.is_none() {
                    if !acks.delays() {
                        if !acknowledge(&mut wr, count).await {
                            return;
                        }
                        continue;
                    }
                    ack = Some(Box::pin(tokio::time::sleep(acks.draw())));
                }
            }
            () = due => {
                ack = None;
                if !acknowledge(&mut wr, count).await {
                    return;
                }
            }
        }
    }
}

/// Writes the count of messages read; false if the stream failed or the peer took nothing for
/// [`WRITE_TIMEOUT`].
async fn acknowledge(wr: &mut futures::io::WriteHalf<Stream>, count: u64) -> bool {
    let write = async {
        wr.write_all(&count.to_le_bytes()).await?;
        wr.flush().await
    };
    matches!(tokio::time::timeout(WRITE_TIMEOUT, write).await, Ok(Ok(())))
}

/// What a writer needs besides its queue.
struct Writer {
    control: libp2p_stream::Control,
    peer: PeerId,
    epoch: Instant,
    open_timeout: Duration,
    dialled: bool,
    events: mpsc::Sender<LinkEvent>,
}

async fn write_link(mut w: Writer, id: u64, mut queue: mpsc::Receiver<Outgoing>) {
    let why = w.run(&mut queue).await;
    if why != Closed::Idle {
        tracing::debug!(peer = %w.peer, ?why, "control link ended");
    }
    let _ = w
        .events
        .send(LinkEvent::Closed {
            peer: w.peer,
            link: id,
            why,
        })
        .await;
}

/// How a stream ended, for the writer to decide whether to open another.
enum Session {
    /// The link is over.
    Ended(Closed),
    /// The stream broke before the peer acknowledged anything, with these messages (all it was given) unread
    /// as far as the writer knows: most likely the peer's stream library dropped the stream unread, which
    /// `libp2p_stream` does when several arrive at a VN before its accept task runs (79 dropped in one default
    /// run, all in its first seconds, before this retry; a second stream was dropped too for 12 links).
    Refused(Vec<Outgoing>),
}

/// Streams a writer opens for its messages when the peer drops them unread.
pub const STREAM_ATTEMPTS: u32 = 3;

/// Wait before the n-th reopening: n times this.
pub const REOPEN_AFTER: Duration = Duration::from_millis(20);

/// Messages a stream keeps a copy of until its first acknowledgement, so that they can be sent again on a new
/// stream if the peer dropped the first unread. Past this many, a refused stream ends the link.
pub const REPLAY: usize = 64;

impl Writer {
    async fn run(&mut self, queue: &mut mpsc::Receiver<Outgoing>) -> Closed {
        let mut replay = Vec::new();
        // More streams if the first was dropped unread, each after a short wait for the peer's accept queue to
        // drain; a refusal of the last is a broken link.
        for attempt in 0..STREAM_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(REOPEN_AFTER * attempt).await;
            }
            let stream = match self.open().await {
                Ok(s) => s,
                Err(why) => return why,
            };
            match self
                .session(stream, queue, std::mem::take(&mut replay))
                .await
            {
                Session::Ended(why) => return why,
                Session::Refused(unread) if attempt + 1 < STREAM_ATTEMPTS => {
                    tracing::debug!(peer = %self.peer, n = unread.len(), "control stream refused; opening another");
                    // Their round trips would include the refusal: not samples of the network.
                    replay = unread
                        .into_iter()
                        .map(|m| Outgoing { sent: None, ..m })
                        .collect();
                }
                Session::Refused(_) => return Closed::Broken,
            }
        }
        Closed::Broken
    }

    async fn open(&mut self) -> Result<Stream, Closed> {
        let opened = stream_link::open(
            &mut self.control,
            self.peer,
            protocol_name(),
            self.open_timeout,
            self.dialled,
            "control",
        )
        .await;
        opened.map_err(|why| match why {
            OpenFailed::Unreachable => Closed::Unreachable,
            OpenFailed::TimedOut => Closed::Slow,
            OpenFailed::Failed => Closed::Broken,
        })
    }

    /// Writes `replay`, then what the queue brings, on `stream` until it ends.
    async fn session(
        &mut self,
        stream: Stream,
        queue: &mut mpsc::Receiver<Outgoing>,
        replay: Vec<Outgoing>,
    ) -> Session {
        let (rd, mut wr) = stream.split();
        // A stream of acknowledgements, kept across the select below (a read it interrupts is not lost).
        let mut acks = Box::pin(futures::stream::unfold(rd, |mut rd| async move {
            let mut b = [0u8; 8];
            rd.read_exact(&mut b).await.ok()?;
            Some((u64::from_le_bytes(b), rd))
        }));
        // (sequence number, when the VN sent it if measured), oldest first.
        let mut unacked: VecDeque<(u64, Option<Duration>)> = VecDeque::new();
        let mut written = 0u64;
        let mut frame = Vec::new();
        // Copies of what was written, until the first acknowledgement (`None` once one came, or past REPLAY).
        let mut kept: Option<Vec<Outgoing>> = Some(Vec::new());
        let mut pending: VecDeque<Outgoing> = replay.into();
        let refused = |kept: Option<Vec<Outgoing>>| match kept {
            Some(k) => Session::Refused(k),
            None => Session::Ended(Closed::Broken),
        };
        loop {
            if pending.is_empty() {
                tokio::select! {
                    next = tokio::time::timeout(IDLE, queue.recv()) => {
                        let Ok(Some(first)) = next else {
                            let _ = wr.close().await;
                            return Session::Ended(Closed::Idle);
                        };
                        pending.push_back(first);
                    }
                    ack = acks.next() => {
                        let Some(count) = ack.filter(|&c| c <= written) else {
                            return match ack {
                                // The peer closed the stream (or dropped it unread).
                                None => refused(kept),
                                // It acknowledged what was never sent.
                                Some(_) => Session::Ended(Closed::Broken),
                            };
                        };
                        kept = None;
                        let mut latest = None;
                        while unacked.front().is_some_and(|(seq, _)| *seq < count) {
                            if let Some((_, Some(sent))) = unacked.pop_front() {
                                latest = Some(sent);
                            }
                        }
                        // Awaited, not tried: when the VN is busy its queue is full, and those are the slow round
                        // trips the pacing must see (the writer waits, its own queue holds what comes meanwhile).
                        if let Some(sent) = latest {
                            let rtt = self.epoch.elapsed().saturating_sub(sent);
                            if self.events.send(LinkEvent::RoundTrip(rtt)).await.is_err() {
                                return Session::Ended(Closed::Idle);
                            }
                        }
                        continue;
                    }
                }
            }
            // Everything queued goes out before one flush.
            while let Some(msg) = pending.pop_front().or_else(|| queue.try_recv().ok()) {
                frame.clear();
                let Ok(prefix) = protocol::frame::encode_prefix(
                    msg.bytes.len(),
                    protocol::codec::MAX_CONTROL_BYTES,
                ) else {
                    continue; // the engine never makes one this large; not worth the link
                };
                frame.extend_from_slice(&prefix);
                frame.extend_from_slice(&msg.bytes);
                let Ok(written_ok) =
                    tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(&frame)).await
                else {
                    return Session::Ended(Closed::Slow);
                };
                if written_ok.is_err() {
                    kept = kept.map(|mut k| {
                        k.push(msg);
                        k.extend(pending.drain(..));
                        k
                    });
                    return refused(kept);
                }
                unacked.push_back((written, msg.sent));
                written += 1;
                if unacked.len() > MAX_UNACKED {
                    unacked.pop_front();
                }
                kept = kept.and_then(|mut k| {
                    k.push(msg);
                    (k.len() <= REPLAY).then_some(k)
                });
            }
            match tokio::time::timeout(WRITE_TIMEOUT, wr.flush()).await {
                Err(_) => return Session::Ended(Closed::Slow),
                Ok(Err(_)) => return refused(kept),
                Ok(Ok(())) => {}
            }
        }
    }
}
