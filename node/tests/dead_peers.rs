//! A peer that vanishes without a reset costs the others at most a stated few seconds, once (issue 45). Its
//! connections stay open as far as the kernel knows; before the silence rule (`node::net::liveness`) every
//! round whose overlay included it waited the whole exchange timeout, round after round.
//!
//! Four `node run` processes on 127.0.0.1; node 3 is frozen with SIGSTOP (its kernel keeps acknowledging TCP,
//! so nothing resets a connection: to its peers it is silent, as a machine behind a partition is). The root
//! variant black-holes it in a network namespace instead: run it with
//! `sudo -E cargo test -p node --test dead_peers -- --ignored`.
//!
//! Both run with the default chunk grid: the rounds that waited for the peer until it was noticed are not
//! taken for work (`node::net::chunk_slots::MAX_RISE`); before that bound the network ran on rounds of 10 s
//! for the rest of the run.

// Wall-clock timing of whole processes; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{ProcNet, wait_each};

const ROUNDS: u64 = 24;
/// Node 3 vanishes once node 0 has finished this many rounds.
const VANISH_AFTER: usize = 4;
/// Long, so that a round waiting for the vanished peer is unmistakable.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(20);
/// The default silence bound and its check's granularity (`Liveness::bound`).
const NOTICED_WITHIN: Duration = Duration::from_secs(7);
/// Slack for a loaded machine, on top of the bound.
const SLACK: Duration = Duration::from_secs(3);
const LIMIT: Duration = Duration::from_secs(240);

/// When each surviving node finished each round (wall clock), and what its metrics say each round took.
struct Rounds {
    ended: Vec<Vec<Instant>>,
    secs: Vec<Vec<f64>>,
    /// Per node, per round: (round, exchange, overlay wait) seconds and (neighbours, copies received), for
    /// the failure messages.
    detail: Vec<Vec<String>>,
}

/// Runs a 4-node network, makes node 3 vanish with `vanish` once node 0 finished [`VANISH_AFTER`] rounds,
/// and returns when the survivors finished their rounds and when node 3 vanished.
fn run(
    net: &ProcNet,
    spawn: impl Fn(usize) -> Child,
    vanish: impl FnOnce(&Child),
) -> (Rounds, Instant) {
    for i in 0..4 {
        net.write_config(i, 1500);
        let path = net.config_path(i);
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "exchange_timeout_ms = 5000",
            &format!("exchange_timeout_ms = {}", EXCHANGE_TIMEOUT.as_millis()),
        );
        std::fs::write(&path, text).unwrap();
    }
    let mut children: Vec<Child> = (0..4).map(&spawn).collect();
    let start = Instant::now();
    let mut ended: Vec<Vec<Instant>> = vec![Vec::new(); 3];
    let mut vanished = None;
    let mut vanish = Some(vanish);
    loop {
        for (i, e) in ended.iter_mut().enumerate() {
            let n = net.metrics(i).len();
            while e.len() < n {
                e.push(Instant::now());
            }
        }
        if ended[0].len() >= VANISH_AFTER
            && let Some(vanish) = vanish.take()
        {
            vanish(&children[3]);
            vanished = Some(Instant::now());
        }
        if ended.iter().all(|e| e.len() as u64 >= ROUNDS) || start.elapsed() > LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let statuses = wait_each(&mut children[..3], Duration::from_secs(30));
    let _ = children[3].kill();
    let _ = Command::new("kill")
        .args(["-CONT", &children[3].id().to_string()])
        .status();
    let _ = children[3].wait();
    for (i, s) in statuses.iter().enumerate() {
        assert!(
            s.is_some_and(|s| s.success()),
            "node {i} ran its {ROUNDS} rounds and exited ({s:?}); it reached {} in {LIMIT:?}",
            ended[i].len()
        );
    }
    let secs = (0..3)
        .map(|i| {
            net.metrics(i)
                .iter()
                .map(|m| m["round_secs"].as_f64().unwrap())
                .collect()
        })
        .collect();
    let detail = (0..3)
        .map(|i| {
            net.metrics(i)
                .iter()
                .map(|m| {
                    format!(
                        "{:.1}/{:.1}/{:.1}s {}/{}",
                        m["round_secs"].as_f64().unwrap(),
                        m["exchange_secs"].as_f64().unwrap(),
                        m["overlay_wait_secs"].as_f64().unwrap(),
                        m["neighbours"],
                        m["copies_received"]
                    )
                })
                .collect()
        })
        .collect();
    (
        Rounds {
            ended,
            secs,
            detail,
        },
        vanished.expect("node 3 vanished"),
    )
}

/// The survivors noticed within the bound: no round ending after it took long, none took the exchange
/// timeout, and the rounds after it were no slower than the rounds before the peer vanished.
fn check(r: &Rounds, vanished: Instant) {
    let noticed = vanished + NOTICED_WITHIN;
    for i in 0..3 {
        let before: Vec<f64> = r.secs[i][..VANISH_AFTER.min(r.secs[i].len())].to_vec();
        let mut after = Vec::new();
        for (round, (&end, &secs)) in r.ended[i].iter().zip(&r.secs[i]).enumerate() {
            if end <= vanished {
                continue;
            }
            // A round that waited for the vanished peer past the bound would have taken the exchange timeout.
            assert!(
                secs < (NOTICED_WITHIN + SLACK).as_secs_f64(),
                "node {i} round {round} took {secs:.1} s: it waited for the vanished peer \
                 (exchange timeout {EXCHANGE_TIMEOUT:?}); rounds (round/exchange/overlay wait, neighbours/copies \
                 received) of every node: {:#?}",
                r.detail
            );
            // Rounds that began once every survivor had noticed: no slower than before.
            if end > noticed + Duration::from_secs_f64(secs) {
                after.push(secs);
            }
        }
        assert!(
            after.len() >= 3,
            "node {i}: {} rounds began after the bound ({:?})",
            after.len(),
            r.secs[i]
        );
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (b, a) = (median(&mut before.clone()), median(&mut after.clone()));
        assert!(
            a <= 2.0 * b + 0.5,
            "node {i}: rounds after the peer was noticed gone (median {a:.2} s) slower than before it \
             vanished ({b:.2} s): {:?}",
            r.secs[i]
        );
    }
}

#[test]
fn a_frozen_peer_is_noticed_within_the_bound_and_the_next_rounds_do_not_wait_for_it() {
    let net = ProcNet::new(4, 2, ROUNDS, false);
    let (rounds, vanished) = run(
        &net,
        |i| net.spawn(i),
        |c| {
            let ok = Command::new("kill")
                .args(["-STOP", &c.id().to_string()])
                .status()
                .unwrap();
            assert!(ok.success());
        },
    );
    check(&rounds, vanished);
}

/// Node 3 in a network namespace of its own behind a veth pair; it vanishes when every packet on the pair
/// is dropped (a `blackhole` queueing discipline on both ends), so that neither end sees a reset or an
/// error. Needs root:
/// `sudo -E cargo test -p node --test dead_peers -- --ignored`.
#[test]
#[ignore = "root: creates a network namespace"]
fn a_black_holed_peer_is_noticed_within_the_bound_and_the_next_rounds_do_not_wait_for_it() {
    let tag = std::process::id() % 200 + 20;
    let ns = format!("shatter-dp{tag}");
    let (outer, inner) = (format!("dpo{tag}"), format!("dpi{tag}"));
    let (host, away) = (format!("10.78.{tag}.1"), format!("10.78.{tag}.2"));
    let sh = |args: &str| {
        let ok = Command::new("sh").args(["-c", args]).status().unwrap();
        assert!(ok.success(), "{args}");
    };
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    sh(&format!(
        "ip netns add {ns} && ip link add {outer} type veth peer name {inner} && \
         ip link set {inner} netns {ns} && ip addr add {host}/24 dev {outer} && ip link set {outer} up && \
         ip -n {ns} addr add {away}/24 dev {inner} && ip -n {ns} link set {inner} up && \
         ip -n {ns} link set lo up"
    ));
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _cleanup = Cleanup(ns.clone());

    let mut net = ProcNet::new(4, 2, ROUNDS, false);
    let ip = |node: usize| if node == 3 { &away } else { &host };
    net.host = format!("/ip4/{host}");
    net.write_peer_list_with(|node, vn| {
        Some(format!("/ip4/{}/tcp/{}", ip(node), net.ports[node][vn]))
    });
    let (rounds, vanished) = run(
        &net,
        |i| {
            // Each node listens on its own side of the pair.
            let path = net.config_path(i);
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace("/ip4/127.0.0.1/", &format!("/ip4/{}/", ip(i)));
            std::fs::write(&path, text).unwrap();
            let mut cmd = if i == 3 {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_node")]);
                c
            } else {
                common::node()
            };
            cmd.args(["run", "--config"])
                .arg(path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        },
        |_| {
            sh(&format!(
                "tc qdisc add dev {outer} root blackhole && \
                 ip netns exec {ns} tc qdisc add dev {inner} root blackhole"
            ))
        },
    );
    check(&rounds, vanished);
}
