//! Connection flood against a real `node` process: anyone who can reach a VN's port opens thousands of TCP
//! connections, half of them silent and half stalling in the middle of the handshake (inside the
//! pre-shared-key exchange when the network has one, inside multistream-select/noise when not). The victim's
//! open descriptors must stay within its limits (`node::net::limits`), every stalled socket must be closed
//! within the handshake timeout (+ 1 s), and a listed node started during the flood must complete its rounds
//! and exchange chunks with the victim.
//!
//! CI runs 1,000 connections with a 2 s handshake timeout; the full must-show (5,000 connections, the default
//! 10 s timeout, with and without a pre-shared key) is `#[ignore]`d:
//! `cargo test --release -p node --test flood -- --ignored --nocapture`.

#![cfg(target_os = "linux")]
// Wall-clock measurements of a real process under attack; no engine reads them.
#![allow(clippy::disallowed_methods)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{ProcNet, wait_all};
use node::net::limits::MAX_PENDING_INCOMING;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// What the attacker saw of one connection.
struct Sock {
    /// Time from the completed TCP connect to the victim closing it; `None` if it was never connected or is
    /// still open when the attack ends.
    closed_after: Option<Duration>,
}

/// Opens one connection to `to`; if `stall`, sends the start of a handshake and stops; then waits for the
/// victim to close it (or for `hold`).
async fn attack_one(to: SocketAddr, stall: bool, psk: bool, hold: Duration) -> Sock {
    let Ok(Ok(mut s)) = tokio::time::timeout(hold, TcpStream::connect(to)).await else {
        return Sock { closed_after: None };
    };
    let connected = Instant::now();
    if stall {
        // pnet starts with each side's 24-byte nonce: send half of one. Without a key, the dialer's
        // multistream-select header and protocol proposal, then nothing more.
        let partial: &[u8] = if psk {
            &[7u8; 12]
        } else {
            b"\x13/multistream/1.0.0\n\x07/noise\n"
        };
        let _ = s.write_all(partial).await;
    }
    let mut buf = [0u8; 256];
    let end = connected + hold;
    loop {
        match tokio::time::timeout_at(end.into(), s.read(&mut buf)).await {
            Err(_) => return Sock { closed_after: None },
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Sock {
                    closed_after: Some(connected.elapsed()),
                };
            }
            Ok(Ok(_)) => {} // the victim's own handshake bytes
        }
    }
}

struct Outcome {
    baseline_fds: usize,
    max_fds: usize,
    connected: usize,
    closed: usize,
    slowest_close: Duration,
    rounds: Vec<Vec<serde_json::Value>>,
}

/// Starts the victim (node 0), floods its first VN with `connections` sockets, starts node 1 during the
/// flood, and reports what happened.
/// The attacker's sockets live in this process: at most `wanted`, fewer where the open-files limit is low
/// (a CI container), but always well over the victim's pending-handshake limit.
fn affordable(wanted: usize) -> usize {
    let limit = node::limits::raise_open_files_limit().unwrap_or(1024) as usize;
    let n = wanted.min(limit.saturating_sub(256));
    assert!(
        n >= 4 * MAX_PENDING_INCOMING as usize,
        "open-files limit {limit} too low for a flood"
    );
    if n < wanted {
        eprintln!("open-files limit {limit}: flooding with {n} connections instead of {wanted}");
    }
    n
}

fn flood(connections: usize, psk: bool, handshake: Duration, rounds: u64) -> Outcome {
    let mut net = ProcNet::new(2, 2, rounds, psk);
    net.timing = format!("handshake_timeout_ms = {}\n", handshake.as_millis());
    // Node 1 starts a few seconds after the victim (once the flood is on): give the victim a longer warm-up
    // so that both start round 0 at about the same time.
    let victim_warmup = Duration::from_secs(6);
    net.write_config(0, victim_warmup.as_millis() as u64);
    let started = Instant::now();
    let victim = net.spawn(0);
    let pid = victim.id();
    let target: SocketAddr = format!("127.0.0.1:{}", net.ports[0][0]).parse().unwrap();
    // The victim is up once its port accepts; that probe connection is closed by the handshake timeout.
    while std::net::TcpStream::connect(target).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "victim never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let baseline_fds = open_fds(pid);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hold = handshake * 2 + Duration::from_secs(10);
    let opened = Arc::new(AtomicUsize::new(0));
    let attack = {
        let opened = opened.clone();
        rt.spawn(async move {
            let mut tasks = Vec::with_capacity(connections);
            for i in 0..connections {
                tasks.push(tokio::spawn(attack_one(target, i % 2 == 1, psk, hold)));
                opened.fetch_add(1, Ordering::Relaxed);
                if i % 100 == 99 {
                    tokio::task::yield_now().await;
                }
            }
            let mut socks = Vec::with_capacity(connections);
            for t in tasks {
                socks.push(t.await.unwrap());
            }
            socks
        })
    };
    // Sample the victim's descriptors while the flood runs; start node 1 once half of it is out.
    let mut max_fds = baseline_fds;
    let mut others = None;
    while !attack.is_finished() {
        max_fds = max_fds.max(open_fds(pid));
        if others.is_none() && opened.load(Ordering::Relaxed) >= connections / 2 {
            let warmup =
                victim_warmup.saturating_sub(started.elapsed()) + Duration::from_millis(500);
            net.write_config(1, warmup.as_millis() as u64);
            others = Some(net.spawn(1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let socks = rt.block_on(attack).unwrap();
    let mut children = vec![victim, others.expect("node 1 started")];
    let ok = wait_all(&mut children, Duration::from_secs(120));
    assert!(ok, "both nodes exited successfully in time");
    let closed: Vec<Duration> = socks.iter().filter_map(|s| s.closed_after).collect();
    Outcome {
        baseline_fds,
        max_fds,
        connected: socks.len(),
        closed: closed.len(),
        slowest_close: closed.iter().copied().max().unwrap_or_default(),
        rounds: (0..2).map(|i| net.metrics(i)).collect(),
    }
}

fn check(o: &Outcome, connections: usize, handshake: Duration, rounds: usize) {
    eprintln!(
        "victim fds: baseline {}, max {} during the flood; {}/{} attacker sockets closed by the victim, slowest \
         after {:.2} s",
        o.baseline_fds,
        o.max_fds,
        o.closed,
        o.connected,
        o.slowest_close.as_secs_f64()
    );
    // Pending handshakes are capped; established connections are the two nodes' own (a handful per VN).
    let bound = o.baseline_fds + MAX_PENDING_INCOMING as usize + 32;
    assert!(
        o.max_fds <= bound,
        "victim held {} descriptors (bound {bound})",
        o.max_fds
    );
    assert_eq!(o.closed, connections, "every attacker socket was closed");
    assert!(
        o.slowest_close <= handshake + Duration::from_secs(1),
        "a stalled socket stayed open {:?} (handshake timeout {handshake:?})",
        o.slowest_close
    );
    // The pending ones are held until the timeout: had the victim exited before it, the figure above would
    // say nothing about the timeout.
    assert!(
        o.slowest_close >= handshake.mul_f64(0.9),
        "no socket was held until the handshake timeout ({:?}): did the victim exit first?",
        o.slowest_close
    );
    for (i, got) in o.rounds.iter().enumerate() {
        assert_eq!(got.len(), rounds, "node {i} completed every round: {got:?}");
        let copies: u64 = got
            .iter()
            .map(|r| r["copies_received"].as_u64().unwrap())
            .sum();
        assert!(copies > 0, "node {i} received chunks: {got:?}");
    }
}

#[test]
fn a_connection_flood_is_bounded_and_a_listed_node_still_completes_its_rounds() {
    let handshake = Duration::from_secs(2);
    let n = affordable(1000);
    let o = flood(n, true, handshake, 3);
    check(&o, n, handshake, 3);
}

#[test]
#[ignore = "5,000 connections, 10 s handshakes, two runs: about a minute"]
fn five_thousand_connections_with_and_without_a_pre_shared_key() {
    for psk in [false, true] {
        let handshake = node::net::limits::HANDSHAKE_TIMEOUT;
        // Enough rounds that the victim outlives the timeout of the last stalled socket.
        let n = affordable(5000);
        let o = flood(n, psk, handshake, 30);
        eprintln!("pre-shared key: {psk}");
        check(&o, n, handshake, 30);
    }
}
