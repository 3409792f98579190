//! What a `node run` process prints can neither stop nor stall it (issue 45): a closed standard output
//! (`node run | head -c 1`) used to end it with exit 101 at its next round line (`println!` panics on
//! `EPIPE`); a standard output and error nobody reads blocked its event loop once the pipe's 64 KiB were
//! full. Each test runs a two-node network of real processes on 127.0.0.1; the metrics file says how far
//! the node under test got.

mod common;

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{ProcNet, node, wait_all};

const ROUNDS: u64 = 4;
const LIMIT: Duration = Duration::from_secs(120);

/// Starts both nodes; node 0 with `stdout`/`stderr` set up by `setup`, node 1 quiet.
fn start(net: &ProcNet, setup: impl FnOnce(&mut std::process::Command)) -> (Child, Child) {
    for i in 0..2 {
        net.write_config(i, 1500);
    }
    let mut cmd = node();
    cmd.args(["run", "--config"]).arg(net.config_path(0));
    setup(&mut cmd);
    let n0 = cmd.spawn().unwrap();
    let n1 = net.spawn(1);
    (n0, n1)
}

#[test]
fn a_closed_stdout_leaves_the_node_running_to_its_last_round() {
    let net = ProcNet::new(2, 2, ROUNDS, false);
    let (mut n0, n1) = start(&net, |c| {
        c.stdout(Stdio::piped()).stderr(Stdio::null());
    });
    // `| head -c 1`: one byte read, then the pipe closed.
    let mut out = n0.stdout.take().unwrap();
    let mut byte = [0u8];
    out.read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"{");
    drop(out);
    let mut children = [n0, n1];
    assert!(
        wait_all(&mut children, LIMIT),
        "both exited successfully (not 101 from a panic on EPIPE)"
    );
    assert_eq!(net.metrics(0).len() as u64, ROUNDS, "every round ran");
}

#[test]
fn a_stalled_stdout_and_stderr_leave_the_node_running_to_its_last_round() {
    let net = ProcNet::new(2, 2, ROUNDS, false);
    // Debug logging fills the unread stderr pipe's 64 KiB within the first round.
    let (mut n0, n1) = start(&net, |c| {
        c.env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    });
    #[allow(clippy::disallowed_methods)]
    // a wall-clock bound on a whole process, not an engine input
    let start = Instant::now();
    while (net.metrics(0).len() as u64) < ROUNDS {
        assert!(
            start.elapsed() < LIMIT,
            "node 0 reached only round {} with nobody reading its output",
            net.metrics(0).len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Now read, so that it can exit (it waits a few seconds for its output, then gives up).
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = r.read_to_end(&mut all);
            all
        })
    };
    let out = drain(Box::new(n0.stdout.take().unwrap()));
    let err = drain(Box::new(n0.stderr.take().unwrap()));
    let mut children = [n0, n1];
    assert!(wait_all(&mut children, LIMIT), "both exited successfully");
    let out = String::from_utf8(out.join().unwrap()).unwrap();
    let err = err.join().unwrap();
    assert!(
        err.len() > 64 << 10,
        "the log outgrew the pipe: {} bytes",
        err.len()
    );
    // What was printed is whole lines; the ones that did not fit were dropped, not cut.
    for l in out.lines() {
        serde_json::from_str::<serde_json::Value>(l).unwrap();
    }
}
