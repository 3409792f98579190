//! Writes the seed corpus of the fuzz targets in `fuzz/`: valid encodings of every wire message, so
//! libFuzzer starts from frames that pass the decoders and mutates from there (random bytes rarely get past
//! a version byte or a bincode tag). Deterministic: the same files on every run.
//!
//! `cargo run -p protocol --example fuzz_seeds -- <dir>` writes `<dir>/<target>/<name>` for each target
//! (`fuzz/run.sh` calls it with `fuzz/seeds`).

use std::path::Path;

use protocol::chunk::encode_chunk;
use protocol::codec::encode_control;
use protocol::control::{ControlEnvelope, ControlMsg, CyclonMsg, MAX_TTL, OverlayMsg, ViewEntry};
use protocol::frame::write_frame;
use protocol::link::{LinkBody, LinkMessage};
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use protocol::{ChunkFrame, ChunkIndex, ChunkReply, RefuseReason, Round};

/// The identity type the `control_msg` target decodes: the node's `VnAddr` serialises as (peer id bytes,
/// multiaddr bytes). These are shaped like an Ed25519 PeerId (38 bytes) and `/ip4/127.0.0.1/tcp/<port>`.
type Id = (Vec<u8>, Vec<u8>);

fn id(n: u8) -> Id {
    let mut peer = vec![0x00, 0x24, 0x08, 0x01, 0x12, 0x20];
    peer.extend((0..32).map(|i| i ^ n));
    let port = 4000u16 + n as u16;
    let mut addr = vec![0x04, 127, 0, 0, 1, 0x06];
    addr.extend_from_slice(&port.to_be_bytes());
    (peer, addr)
}

fn overlay_msgs(round: Round) -> Vec<OverlayMsg<Id>> {
    let nonce = 0x0123_4567_89AB_CDEF;
    vec![
        OverlayMsg::Propose {
            round,
            origin: Some(id(1)),
            nonce,
            ttl: 30,
        },
        OverlayMsg::Propose {
            round,
            origin: None,
            nonce,
            ttl: 29,
        },
        OverlayMsg::Accept {
            round,
            nonce,
            acceptor: id(5),
        },
        OverlayMsg::Confirm { round, key: nonce },
        OverlayMsg::ConfirmAck { round, nonce },
        OverlayMsg::Nack { round, nonce },
        OverlayMsg::Drop { round },
        OverlayMsg::SpliceRequest {
            round,
            origin: Some(id(2)),
            nonce,
            ttl: MAX_TTL,
        },
        OverlayMsg::SpliceOffer {
            round,
            nonce,
            splitter: id(6),
            other: id(3),
        },
        OverlayMsg::SpliceAccept { round, key: nonce },
        OverlayMsg::Handover {
            round,
            nonce,
            newcomer: id(4),
        },
    ]
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: fuzz_seeds <dir>")?;
    let dir = Path::new(&dir);

    // chunk_frame: empty, small, odd values, a large round and index.
    let chunks = [
        encode_chunk(0, 0, &[]),
        encode_chunk(1, 0, &[1.0]),
        encode_chunk(7, 3, &[0.5, -2.0, 1e-30, 3.4e38]),
        encode_chunk(u64::MAX, u32::MAX, &[f32::NAN, f32::INFINITY]),
        encode_chunk(42, 7, &(0..64).map(|i| i as f32 * 0.25).collect::<Vec<_>>()),
    ];
    for (i, c) in chunks.iter().enumerate() {
        write(dir, "chunk_frame", &format!("chunk_{i}"), c)?;
    }

    // chunk_reply: every reply.
    let replies = [
        ChunkReply::Accepted,
        ChunkReply::Refused(RefuseReason::NotNeighbour),
        ChunkReply::Refused(RefuseReason::WrongRound),
        ChunkReply::Refused(RefuseReason::BadChunk),
        ChunkReply::Refused(RefuseReason::NonFinite),
        ChunkReply::Refused(RefuseReason::Duplicate),
    ];
    for (i, r) in replies.iter().enumerate() {
        write(
            dir,
            "chunk_reply",
            &format!("reply_{i}"),
            &encode_control(r)?,
        )?;
    }

    // control_msg: every message kind in an envelope with VnAddr-shaped ids, and as a bare ControlMsg<u32>.
    let entries = |n: u8| -> Vec<ViewEntry<Id>> {
        (0..n)
            .map(|k| ViewEntry {
                id: id(k),
                age: k as u32 * 3,
            })
            .collect()
    };
    let mut msgs: Vec<ControlMsg<Id>> = vec![
        ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
            entries: entries(8),
        }),
        ControlMsg::Cyclon(CyclonMsg::ShuffleReply {
            entries: entries(3),
        }),
        ControlMsg::Cyclon(CyclonMsg::ShuffleReply { entries: vec![] }),
    ];
    msgs.extend(overlay_msgs(Round(5)).into_iter().map(ControlMsg::Overlay));
    for (i, msg) in msgs.into_iter().enumerate() {
        let env = ControlEnvelope { sender: id(9), msg };
        let bytes = encode_control(&env)?;
        write(dir, "control_msg", &format!("env_{i}"), &bytes)?;
        // The same ids are valid PeerIds and Multiaddrs: vn_envelope decodes them as the node does.
        write(dir, "vn_envelope", &format!("env_{i}"), &bytes)?;
    }
    // vn_envelope: other address shapes (/ip6/::1/tcp/9, /dns4/example.invalid/tcp/443/p2p/<peer>).
    let mut ip6 = id(5);
    ip6.1 = [&[0x29][..], &[0; 15], &[1, 0x06, 0, 9]].concat();
    let mut dns = id(6);
    let name = b"example.invalid";
    dns.1 = [
        &[0x36, name.len() as u8][..],
        name,
        &[0x06, 0x01, 0xBB, 0xA5, 0x03, 38],
        &id(6).0,
    ]
    .concat();
    for (i, sender) in [ip6, dns].into_iter().enumerate() {
        let env = ControlEnvelope {
            sender,
            msg: ControlMsg::Overlay(OverlayMsg::Drop { round: Round(2) }),
        };
        write(
            dir,
            "vn_envelope",
            &format!("addr_{i}"),
            &encode_control(&env)?,
        )?;
    }
    let small: [ControlMsg<u32>; 3] = [
        ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
            entries: vec![ViewEntry { id: 3, age: 1 }, ViewEntry { id: 9, age: 0 }],
        }),
        ControlMsg::Overlay(OverlayMsg::Propose {
            round: Round(300),
            origin: Some(12),
            nonce: 1,
            ttl: 4,
        }),
        ControlMsg::Overlay(OverlayMsg::Handover {
            round: Round(1),
            nonce: u64::MAX,
            newcomer: 77,
        }),
    ];
    for (i, msg) in small.iter().enumerate() {
        write(
            dir,
            "control_msg",
            &format!("u32_{i}"),
            &encode_control(msg)?,
        )?;
    }

    // frame_split: a stream of several length-prefixed frames (chunk and control payloads), and an empty one.
    let mut stream = Vec::new();
    for c in &chunks[..3] {
        write_frame(c, 1 << 16, &mut stream)?;
    }
    write_frame(
        &encode_control(&ChunkReply::Accepted)?,
        1 << 16,
        &mut stream,
    )?;
    write(dir, "frame_split", "stream_0", &stream)?;
    let mut one = Vec::new();
    write_frame(&[], 1 << 16, &mut one)?;
    write(dir, "frame_split", "stream_1", &one)?;

    // link_msg: link messages of several kinds (setup, address, refusal, commands, reports).
    let frame = |round: u64, values: Vec<f32>| ChunkFrame {
        round: Round(round),
        chunk: ChunkIndex(1),
        values,
    };
    let bodies = [
        LinkBody::Setup(b"setup bytes".to_vec()),
        LinkBody::Ready(b"/ip4/127.0.0.1/tcp/4001".to_vec()),
        LinkBody::Refused("no such key".into()),
        LinkBody::ToVn(ToVirtualNode::StartRound(Round(3))),
        LinkBody::ToVn(ToVirtualNode::Prepare(Round(4))),
        LinkBody::ToVn(ToVirtualNode::Exchange(frame(5, vec![1.0, -2.0]))),
        LinkBody::ToVn(ToVirtualNode::PerEdge(Round(6))),
        LinkBody::ToVn(ToVirtualNode::PerEdgeFrames {
            round: Round(7),
            frames: vec![frame(7, vec![0.5]), frame(7, vec![f32::NAN])],
        }),
        LinkBody::ToVn(ToVirtualNode::Stop),
        LinkBody::FromVn(FromVirtualNode::Received(frame(8, vec![3.0; 4]))),
        LinkBody::FromVn(FromVirtualNode::ReceivedOnEdge {
            slot: 2,
            frame: frame(9, vec![1.5]),
        }),
        LinkBody::FromVn(FromVirtualNode::Edges {
            round: Round(10),
            slots: 3,
        }),
        LinkBody::FromVn(FromVirtualNode::DeliveredOnEdges {
            round: Round(11),
            accepted: vec![true, false, true],
        }),
        LinkBody::FromVn(FromVirtualNode::LateDeliveredOnEdge {
            round: Round(12),
            slot: 1,
        }),
        LinkBody::FromVn(FromVirtualNode::Behind {
            exchange: Round(13),
        }),
    ];
    for (i, body) in bodies.into_iter().enumerate() {
        let msg = LinkMessage {
            vn: i as u32,
            seq: 100 + i as u64,
            body,
        };
        write(dir, "link_msg", &format!("link_{i}"), &msg.encode(4096)?)?;
    }
    Ok(())
}
