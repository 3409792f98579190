//! The chunk protocol's frame cap comes from the run: two real Swarms (libp2p's in-process memory transport,
//! the node's own noise + yamux stack and behaviour), the receiver built for a largest chunk of `LEN` values.
//! A frame of that size is delivered; one byte more is refused from its length prefix (the receiver never
//! sees a request, the sender's request fails), and the connection stays usable for the next frame.

use std::time::Duration;

use libp2p::futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::request_response::{Event, Message};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId};
use node::net::behaviour::{Timeouts, VnBehaviourEvent};
use node::net::transport::{VnSwarm, build_swarm};

const LEN: usize = 1000;
const LIMIT: Duration = Duration::from_secs(20);

/// What the sender learned about one request.
#[derive(Debug, PartialEq)]
enum Outcome {
    Answered,
    Failed,
}

async fn send(
    a: &mut VnSwarm,
    b: &mut VnSwarm,
    to: PeerId,
    addr: &Multiaddr,
    bytes: Vec<u8>,
) -> (Outcome, usize) {
    a.behaviour_mut()
        .chunk
        .send_request_with_addresses(&to, bytes.into(), vec![addr.clone()]);
    let mut requests_seen = 0;
    let outcome = loop {
        tokio::select! {
            ev = a.select_next_some() => match ev {
                SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::Message {
                    message: Message::Response { .. }, ..
                })) => break Outcome::Answered,
                SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::OutboundFailure { .. })) => {
                    break Outcome::Failed;
                }
                _ => {}
            },
            ev = b.select_next_some() => {
                if let SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::Message {
                    message: Message::Request { channel, .. }, ..
                })) = ev
                {
                    requests_seen += 1;
                    let _ = b.behaviour_mut().chunk.send_response(channel, vec![0, 0]);
                }
            }
        }
    };
    (outcome, requests_seen)
}

#[tokio::test]
async fn a_chunk_frame_over_the_runs_largest_is_refused_and_the_next_one_delivered() {
    let (ka, kb) = (Keypair::generate_ed25519(), Keypair::generate_ed25519());
    let (pa, pb) = (ka.public().to_peer_id(), kb.public().to_peer_id());
    let max = protocol::chunk::chunk_frame_bytes(LEN);
    // The sender allows the protocol's maximum, so the refusal below is the receiver's.
    let mut a = build_swarm(
        ka,
        None,
        Timeouts::default(),
        protocol::chunk::MAX_CHUNK_FRAME_BYTES,
    )
    .unwrap();
    let mut b = build_swarm(kb, None, Timeouts::default(), max).unwrap();
    a.behaviour_mut().allow.allow_peer(pb);
    b.behaviour_mut().allow.allow_peer(pa);
    b.listen_on("/memory/0".parse().unwrap()).unwrap();
    let addr = loop {
        if let SwarmEvent::NewListenAddr { address, .. } = b.select_next_some().await {
            break address;
        }
    };
    tokio::time::timeout(LIMIT, async {
        let (outcome, seen) = send(&mut a, &mut b, pb, &addr, vec![7; max]).await;
        assert_eq!(
            (outcome, seen),
            (Outcome::Answered, 1),
            "a frame of the largest chunk"
        );
        let (outcome, seen) = send(&mut a, &mut b, pb, &addr, vec![7; max + 1]).await;
        assert_eq!((outcome, seen), (Outcome::Failed, 0), "one byte over");
        let (outcome, seen) = send(&mut a, &mut b, pb, &addr, vec![7; 10]).await;
        assert_eq!((outcome, seen), (Outcome::Answered, 1), "the next frame");
    })
    .await
    .expect("within the time limit");
}
