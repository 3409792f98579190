//! Control links (`node::net::control_link`) between real Swarms (the node's own stack and behaviour over
//! libp2p's in-process memory transport): messages arrive in order with round trips measured; a stream from
//! a peer not on the list is dropped; a stream the receiver drops unread is opened once more and its messages
//! sent again; a receiver that acknowledges what was never sent, an oversized frame and an unreachable peer
//! each end only their own link, with the reason the VN acts on.

// The links time round trips from an epoch, as a VN task does; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::{AsyncReadExt, AsyncWriteExt, StreamExt};
use libp2p::StreamProtocol;
use libp2p::identity::Keypair;
use node::net::control_link::{Closed, ControlLinks, LinkEvent};
use node::peers::PeerList;

use common::swarms::{LIMIT, Vn, connected_pair, vn, vns};
use tokio::sync::mpsc;
use tokio::time::Instant;

fn links(v: &Vn, listed: &[&Vn], epoch: Instant) -> ControlLinks {
    let list = PeerList::from_entries(listed.iter().map(|p| (p.id, Some(p.addr.clone()))));
    let mut l = ControlLinks::new(
        v.stream.clone(),
        Arc::new(list),
        epoch,
        Duration::from_secs(5),
    )
    .unwrap();
    // Accepting streams starts with the links' first use (a VN's own runtime); a test starts it here.
    l.start();
    l
}

async fn next(l: &mut ControlLinks) -> LinkEvent {
    tokio::time::timeout(LIMIT, l.next())
        .await
        .expect("an event in time")
}

#[tokio::test]
async fn messages_arrive_in_order_and_their_acknowledgements_time_round_trips() {
    let v = connected_pair().await;
    let epoch = Instant::now();
    let mut a = links(&v[0], &[&v[1]], epoch);
    let mut b = links(&v[1], &[&v[0]], epoch);
    const N: usize = 200;
    for i in 0..N {
        a.send(v[1].id, vec![i as u8; 1 + i], Some(epoch.elapsed()), true);
    }
    assert_eq!(a.open(), 1, "one link per peer, however many messages");
    for i in 0..N {
        match next(&mut b).await {
            LinkEvent::Message { peer, bytes } => {
                assert_eq!(peer, v[0].id);
                assert_eq!(
                    bytes,
                    vec![i as u8; 1 + i],
                    "message {i} in order and whole"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let mut trips = 0;
    while trips == 0 {
        match next(&mut a).await {
            LinkEvent::RoundTrip(rtt) => {
                assert!(rtt < LIMIT, "{rtt:?}");
                trips += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    // The reverse direction has its own link; b's messages reach a.
    b.send(v[0].id, b"back".to_vec(), None, false);
    loop {
        match next(&mut a).await {
            LinkEvent::Message { peer, bytes } => {
                assert_eq!((peer, bytes.as_slice()), (v[1].id, b"back".as_slice()));
                break;
            }
            LinkEvent::RoundTrip(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(a.dropped(), 0);
}

#[tokio::test]
async fn a_stream_from_a_peer_off_the_list_is_dropped_unread() {
    // Connections are allowed all round; only b's control links do not list c.
    let v = connected_pair().await;
    let epoch = Instant::now();
    let mut c = links(&v[0], &[&v[1]], epoch);
    let mut b = links(&v[1], &[], epoch);
    c.send(v[1].id, b"let me in".to_vec(), None, true);
    match next(&mut c).await {
        LinkEvent::Closed { peer, why, .. } => {
            assert_eq!(peer, v[1].id);
            assert_eq!(why, Closed::Broken, "the stream was closed under it");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b.next())
            .await
            .is_err(),
        "nothing from an unlisted peer reaches the VN"
    );
}

#[tokio::test]
async fn a_receiver_acknowledging_more_than_was_sent_breaks_only_that_link() {
    let mut v = vns(3).await;
    let (a, rest) = v.split_first_mut().unwrap();
    let (liar, rest) = rest.split_first_mut().unwrap();
    let honest = &rest[0];
    a.connect(liar).await;
    a.connect(honest).await;
    // The liar accepts control streams and acknowledges five messages at once.
    let mut incoming = liar
        .stream
        .accept(StreamProtocol::new(protocol::names::CONTROL))
        .unwrap();
    tokio::spawn(async move {
        while let Some((_, mut s)) = incoming.next().await {
            let _ = s.write_all(&5u64.to_le_bytes()).await;
            let _ = s.flush().await;
            tokio::time::sleep(LIMIT).await;
        }
    });
    let epoch = Instant::now();
    let mut from_a = links(a, &[liar, honest], epoch);
    let mut at_honest = links(honest, &[a], epoch);
    from_a.send(liar.id, b"one".to_vec(), None, true);
    from_a.send(honest.id, b"fine".to_vec(), None, true);
    let mut saw_liar_closed = false;
    let mut saw_honest = false;
    while !(saw_liar_closed && saw_honest) {
        tokio::select! {
            ev = next(&mut from_a) => match ev {
                LinkEvent::Closed { peer, why, link } => {
                    assert_eq!((peer, why), (liar.id, Closed::Broken));
                    from_a.closed(peer, link);
                    saw_liar_closed = true;
                }
                other => panic!("{other:?}"),
            },
            ev = next(&mut at_honest) => match ev {
                LinkEvent::Message { peer, bytes } => {
                    assert_eq!((peer, bytes.as_slice()), (a.id, b"fine".as_slice()));
                    saw_honest = true;
                }
                other => panic!("{other:?}"),
            },
        }
    }
    assert_eq!(from_a.open(), 1, "the honest link stays open");
}

#[tokio::test]
async fn an_oversized_frame_ends_its_stream_and_the_next_stream_is_read() {
    let v = connected_pair().await;
    let epoch = Instant::now();
    let mut b = links(&v[1], &[&v[0]], epoch);
    let mut raw = v[0].stream.clone();
    let proto = StreamProtocol::new(protocol::names::CONTROL);
    let mut s = tokio::time::timeout(LIMIT, raw.open_stream(v[1].id, proto.clone()))
        .await
        .unwrap()
        .unwrap();
    let too_big = (protocol::codec::MAX_CONTROL_BYTES as u32 + 1).to_le_bytes();
    s.write_all(&too_big).await.unwrap();
    s.flush().await.unwrap();
    // The receiver closes the stream without reading on: the sender sees its end.
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(LIMIT, s.read(&mut buf)).await.unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let mut s2 = raw.open_stream(v[1].id, proto).await.unwrap();
    s2.write_all(&3u32.to_le_bytes()).await.unwrap();
    s2.write_all(b"hey").await.unwrap();
    s2.flush().await.unwrap();
    match next(&mut b).await {
        LinkEvent::Message { peer, bytes } => {
            assert_eq!((peer, bytes.as_slice()), (v[0].id, b"hey".as_slice()))
        }
        other => panic!("{other:?}"),
    }
    s2.read_exact(&mut buf).await.unwrap();
    assert_eq!(u64::from_le_bytes(buf), 1, "acknowledged: one message read");
}

#[tokio::test]
async fn a_peer_that_cannot_be_dialled_is_unreachable() {
    let a = vn(Keypair::generate_ed25519(), &[]).await;
    let ghost = Keypair::generate_ed25519().public().to_peer_id();
    let epoch = Instant::now();
    let mut l = ControlLinks::new(
        a.stream.clone(),
        Arc::new(PeerList::from_entries([(ghost, None)])),
        epoch,
        Duration::from_secs(5),
    )
    .unwrap();
    a.dial.send((ghost, "/memory/1".parse().unwrap())).unwrap();
    l.send(ghost, b"anyone?".to_vec(), None, true);
    match next(&mut l).await {
        LinkEvent::Closed { peer, why, .. } => {
            assert_eq!((peer, why), (ghost, Closed::Unreachable))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stream_dropped_unread_is_opened_again_and_its_messages_sent_again() {
    let mut v = connected_pair().await;
    let (x, y) = v.split_at_mut(1);
    let (a, peer) = (&x[0], &mut y[0]);
    // The peer drops its first control stream unread (as libp2p_stream does when its accept queue is full),
    // then reads the next one: every frame, acknowledged.
    let mut incoming = peer
        .stream
        .accept(StreamProtocol::new(protocol::names::CONTROL))
        .unwrap();
    let (got_tx, mut got) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let (_, first) = incoming.next().await.unwrap();
        drop(first);
        let (_, mut s) = incoming.next().await.unwrap();
        let mut n = 0u64;
        loop {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
            s.read_exact(&mut buf).await.unwrap();
            n += 1;
            s.write_all(&n.to_le_bytes()).await.unwrap();
            s.flush().await.unwrap();
            let _ = got_tx.send(buf);
        }
    });
    let epoch = Instant::now();
    let mut from_a = links(a, &[peer], epoch);
    for i in 0..3u8 {
        from_a.send(peer.id, vec![i; 8], None, false);
    }
    for i in 0..3u8 {
        let bytes = tokio::time::timeout(LIMIT, got.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            bytes,
            vec![i; 8],
            "message {i}, in order, on the second stream"
        );
    }
    assert_eq!(from_a.open(), 1, "the link stayed up");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), from_a.next())
            .await
            .is_err(),
        "no failure was reported"
    );
}
