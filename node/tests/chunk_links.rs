//! Chunk links (`node::net::chunk_link`) between real Swarms (the node's own stack and behaviour over libp2p's
//! in-process memory transport): chunks arrive whole and in order on one stream per peer, and each reply
//! reaches the sender with its chunk's round; a frame over the receiver's cap, a chunk the receiver drops
//! unanswered, a stream from a peer off the list and an unreachable peer each fail their chunks at the
//! sender, and a later chunk still goes through. A chunk whose every stream was dropped unread fails with its
//! frame, for the VN to send once more as a request; an unreachable peer's chunks fail without.

// Wall-clock limits on each step; no engine reads them.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use libp2p::identity::Keypair;
use node::net::chunk_link::{ChunkEvent, ChunkLinks, STREAM_ATTEMPTS};
use node::peers::PeerList;
use protocol::Round;

use common::swarms::{LIMIT, Vn, connected_pair, vn};

/// Chunk links for `v` listing `listed`, reading frames of at most `max_frame` bytes.
fn links(v: &Vn, listed: &[&Vn], max_frame: usize) -> ChunkLinks {
    let list = PeerList::from_entries(listed.iter().map(|p| (p.id, Some(p.addr.clone()))));
    let mut l = ChunkLinks::new(
        v.stream.clone(),
        Arc::new(list),
        max_frame,
        Duration::from_secs(5),
        Duration::from_secs(10),
    )
    .unwrap();
    // Accepting streams starts with the links' first use (a VN's own runtime); a test starts it here.
    l.start();
    l
}

async fn next(l: &mut ChunkLinks) -> ChunkEvent {
    tokio::time::timeout(LIMIT, l.next())
        .await
        .expect("an event in time")
}

/// The next event that is not a link's end.
async fn next_open(l: &mut ChunkLinks) -> ChunkEvent {
    loop {
        match next(l).await {
            ChunkEvent::Closed { .. } => {}
            ev => return ev,
        }
    }
}

/// Receives one chunk at `l` and answers it with `answer`; returns its bytes.
async fn answer(l: &mut ChunkLinks, answer: Vec<u8>) -> Vec<u8> {
    match next_open(l).await {
        ChunkEvent::Chunk { bytes, reply, .. } => {
            reply.send(answer).unwrap();
            bytes
        }
        other => panic!("{other:?}"),
    }
}

/// The reply to our next chunk at `l`: (round, bytes).
async fn reply(l: &mut ChunkLinks) -> (Round, Vec<u8>) {
    match next_open(l).await {
        ChunkEvent::Reply { round, bytes, .. } => (round, bytes),
        other => panic!("{other:?}"),
    }
}

/// The failure of our next chunk at `l`: (round, unreachable, the frame handed back for a retry).
async fn failed(l: &mut ChunkLinks) -> (Round, bool, Option<Vec<u8>>) {
    match next_open(l).await {
        ChunkEvent::Failed {
            round,
            unreachable,
            retry,
            ..
        } => (round, unreachable, retry.map(Arc::unwrap_or_clone)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn chunks_arrive_in_order_on_one_stream_and_each_reply_names_its_round() {
    let v = connected_pair().await;
    let mut a = links(&v[0], &[&v[1]], 1 << 20);
    let mut b = links(&v[1], &[&v[0]], 1 << 20);
    const N: u64 = 5;
    for i in 0..N {
        // Sizes from a few bytes to past one yamux frame and window.
        let bytes = vec![i as u8; 10 + (i as usize) * 100_000];
        a.send(v[1].id, Round(10 + i), Arc::new(bytes), false);
    }
    assert_eq!(a.open(), 1, "one link per peer, however many chunks");
    for i in 0..N {
        let got = answer(&mut b, vec![i as u8]).await;
        assert_eq!(
            got,
            vec![i as u8; 10 + (i as usize) * 100_000],
            "chunk {i} whole, in order"
        );
    }
    for i in 0..N {
        assert_eq!(reply(&mut a).await, (Round(10 + i), vec![i as u8]));
    }
}

#[tokio::test]
async fn a_frame_over_the_receivers_cap_fails_and_the_next_chunk_goes_through() {
    let v = connected_pair().await;
    // The sender allows more, so the refusal is the receiver's, from the length prefix alone.
    let mut a = links(&v[0], &[&v[1]], 10_000);
    let mut b = links(&v[1], &[&v[0]], 1_000);
    a.send(v[1].id, Round(1), Arc::new(vec![1; 1_000]), false);
    assert_eq!(
        answer(&mut b, vec![0]).await.len(),
        1_000,
        "a frame at the cap"
    );
    assert_eq!(reply(&mut a).await.0, Round(1));
    a.send(v[1].id, Round(2), Arc::new(vec![2; 1_001]), false);
    assert_eq!(
        failed(&mut a).await,
        (Round(2), false, None),
        "one byte over the cap: the stream had answered a chunk, so it broke, it was not refused (no retry)"
    );
    a.send(v[1].id, Round(3), Arc::new(vec![3; 10]), false);
    assert_eq!(
        answer(&mut b, vec![0]).await,
        vec![3; 10],
        "the next chunk, on a new stream"
    );
    assert_eq!(reply(&mut a).await.0, Round(3));
}

#[tokio::test]
async fn a_chunk_the_receiver_drops_unanswered_is_sent_again_then_fails() {
    let v = connected_pair().await;
    let mut a = links(&v[0], &[&v[1]], 1 << 16);
    let mut b = links(&v[1], &[&v[0]], 1 << 16);
    a.send(v[1].id, Round(4), Arc::new(vec![4; 100]), false);
    // Dropped unanswered on every stream: a stream that ends before its first reply may have been dropped
    // unread by the peer's accept queue, so the chunk is written again on a new one, up to the attempts.
    for _ in 0..STREAM_ATTEMPTS {
        match next_open(&mut b).await {
            ChunkEvent::Chunk { bytes, reply, .. } => {
                assert_eq!(bytes, vec![4; 100]);
                drop(reply);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        failed(&mut a).await,
        (Round(4), false, Some(vec![4; 100])),
        "handed back for a request"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), next_open(&mut b))
            .await
            .is_err(),
        "no more attempts than {STREAM_ATTEMPTS}"
    );
}

#[tokio::test]
async fn a_stream_from_a_peer_off_the_list_is_dropped_unread() {
    let v = connected_pair().await;
    let mut c = links(&v[0], &[&v[1]], 1 << 16);
    let mut b = links(&v[1], &[], 1 << 16);
    c.send(v[1].id, Round(0), Arc::new(b"let me in".to_vec()), false);
    // Handed back for a request, which the VN refuses too (`VnTask::refuse_unlisted`).
    assert_eq!(
        failed(&mut c).await,
        (Round(0), false, Some(b"let me in".to_vec()))
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b.next())
            .await
            .is_err(),
        "nothing from an unlisted peer reaches the VN"
    );
}

#[tokio::test]
async fn a_peer_that_cannot_be_dialled_fails_its_chunks_as_unreachable() {
    let a = vn(Keypair::generate_ed25519(), &[]).await;
    let ghost = Keypair::generate_ed25519().public().to_peer_id();
    let mut l = ChunkLinks::new(
        a.stream.clone(),
        Arc::new(PeerList::from_entries([(ghost, None)])),
        1 << 16,
        Duration::from_secs(5),
        Duration::from_secs(10),
    )
    .unwrap();
    a.dial.send((ghost, "/memory/1".parse().unwrap())).unwrap();
    l.send(ghost, Round(7), Arc::new(b"anyone?".to_vec()), true);
    l.send(ghost, Round(8), Arc::new(b"still?".to_vec()), true);
    assert_eq!(failed(&mut l).await, (Round(7), true, None));
    assert_eq!(
        failed(&mut l).await,
        (Round(8), true, None),
        "the queued chunk fails too"
    );
}
