//! What the two kinds of long-lived per-peer stream links (`super::control_link`, `super::chunk_link`) share:
//! tasks that end with their VN, opening a stream to a peer (dial included) within a time limit, and
//! accepting streams from listed peers with one reader each.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use libp2p::{PeerId, Stream, StreamProtocol};
use tokio::task::AbortHandle;

use crate::peers::PeerList;

/// Aborts a task when dropped: a VN's links end with it.
pub(super) struct AbortOnDrop(pub(super) AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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
