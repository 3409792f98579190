//! What the two kinds of long-lived per-peer stream links (`super::control_link`, `super::chunk_link`) share:
//! tasks that end with their VN, one writer per peer behind a bounded queue, opening a stream to a peer
//! (dial included) within a time limit, and accepting streams from listed peers with one reader each.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use libp2p::{PeerId, Stream, StreamProtocol};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::AbortHandle;

use crate::peers::PeerList;

/// Aborts a task when dropped: a VN's links end with it.
pub(super) struct AbortOnDrop(pub(super) AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A task spawned on first use, so that it runs on the runtime of whoever uses it (a VN on its own thread,
/// `vn_task`), not on the one that built it.
pub(super) struct Lazy {
    fut: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
    running: Option<AbortOnDrop>,
}

impl Lazy {
    pub(super) fn new(fut: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
            running: None,
        }
    }

    /// Spawns the task on the current runtime if it is not running yet.
    pub(super) fn start(&mut self) {
        if let Some(fut) = self.fut.take() {
            self.running = Some(AbortOnDrop(tokio::spawn(fut).abort_handle()));
        }
    }
}

/// Why a stream could not be opened.
#[derive(Debug)]
pub(super) enum OpenFailed {
    /// The peer was dialled for it and could not be reached.
    Unreachable,
    /// Not within the time allowed.
    TimedOut,
    /// Refused or failed otherwise (already logged).
    Failed,
}

/// Opens a `protocol` stream to `peer` within `timeout`, dial included. `dialled`: the caller started a dial
/// for it, so "not connected" means unreachable. `what` names the link in the debug log.
pub(super) async fn open(
    control: &mut libp2p_stream::Control,
    peer: PeerId,
    protocol: StreamProtocol,
    timeout: Duration,
    dialled: bool,
    what: &'static str,
) -> Result<Stream, OpenFailed> {
    match tokio::time::timeout(timeout, control.open_stream(peer, protocol)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(libp2p_stream::OpenStreamError::Io(e)))
            if e.kind() == io::ErrorKind::NotConnected && dialled =>
        {
            Err(OpenFailed::Unreachable)
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, %e, "{what} stream not opened");
            Err(OpenFailed::Failed)
        }
        Err(_) => Err(OpenFailed::TimedOut),
    }
}

/// Accepts streams; one reader per listed peer, spawned by `read` (a newer stream replaces the older one,
/// whose reader is aborted). A stream from a peer off the list is dropped unread: that closes it, and the
/// allow-list closes the connection.
pub(super) async fn accept_streams<R>(
    mut incoming: libp2p_stream::IncomingStreams,
    peers: Arc<PeerList>,
    mut read: impl FnMut(PeerId, Stream) -> R,
) where
    R: Future<Output = ()> + Send + 'static,
{
    let mut readers: HashMap<PeerId, AbortOnDrop> = HashMap::new();
    while let Some((peer, stream)) = incoming.next().await {
        if !peers.is_allowed(&peer) {
            continue;
        }
        readers.retain(|_, r| !r.0.is_finished());
        let reader = tokio::spawn(read(peer, stream));
        readers.insert(peer, AbortOnDrop(reader.abort_handle()));
    }
}

/// One writer task per peer, each fed by a bounded queue: the send side of a link kind. A link is known by
/// an id, so that the end of an old link does not forget a newer one to the same peer.
pub(super) struct Writers<T> {
    links: HashMap<PeerId, Writer<T>>,
    next_id: u64,
    queue_len: usize,
}

struct Writer<T> {
    id: u64,
    queue: mpsc::Sender<T>,
    _task: AbortOnDrop,
}

impl<T: Send + 'static> Writers<T> {
    /// Writers whose queues hold `queue_len` items each.
    pub(super) fn new(queue_len: usize) -> Self {
        Self {
            links: HashMap::new(),
            next_id: 0,
            queue_len,
        }
    }

    /// Queues `item` for `peer`. With no writer for `peer` (or one that has ended, its end not yet
    /// reported), `spawn(id, queue)` makes a new writer, whose queue holds `item` first. `Err(item)`: the
    /// peer's queue is full.
    pub(super) fn send<F>(
        &mut self,
        peer: PeerId,
        item: T,
        spawn: impl FnOnce(u64, mpsc::Receiver<T>) -> F,
    ) -> Result<(), T>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let item = match self.links.get(&peer) {
            None => item,
            Some(w) => match w.queue.try_send(item) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(item)) => return Err(item),
                Err(TrySendError::Closed(item)) => item,
            },
        };
        let (tx, rx) = mpsc::channel(self.queue_len);
        let _ = tx.try_send(item);
        self.next_id += 1;
        let task = tokio::spawn(spawn(self.next_id, rx));
        self.links.insert(
            peer,
            Writer {
                id: self.next_id,
                queue: tx,
                _task: AbortOnDrop(task.abort_handle()),
            },
        );
        Ok(())
    }

    /// Forgets writer `id` to `peer` once its end is reported (a newer writer to the peer stays).
    pub(super) fn closed(&mut self, peer: PeerId, id: u64) {
        if self.links.get(&peer).is_some_and(|w| w.id == id) {
            self.links.remove(&peer);
        }
    }

    /// Writers running now.
    pub(super) fn len(&self) -> usize {
        self.links.len()
    }
}
