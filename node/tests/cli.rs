//! The `node` binary: keygen output, errors that name file and field, and two real processes completing
//! rounds from config files (the path a deployment uses).

// Wall-clock timing of a whole run is what this file measures; no engine reads it.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn node() -> Command {
    Command::new(env!("CARGO_BIN_EXE_node"))
}

#[test]
fn keygen_prints_one_peer_id_per_vn_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = node()
        .args(["keygen", "--dir"])
        .arg(dir.path())
        .args(["--vns", "3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let ids: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(
        ids.iter().all(|i| i.parse::<libp2p::PeerId>().is_ok()),
        "{ids:?}"
    );
    let again = node()
        .args(["keygen", "--dir"])
        .arg(dir.path())
        .args(["--vns", "3"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("vn-0.key"));
}

#[test]
fn a_bad_config_fails_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, "key_dir = \"k\"\nvns = 0\nlisten = []\npeer_list = \"p\"\ndegree = 1\nrounds = 1\n[learning]\ndataset = \"synthetic\"\nnodes = 1\nindex = 0\nlr = 0.1\nseed = 1\n").unwrap();
    let out = node().args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node.toml") && err.contains("vns"), "{err}");
    let out = node()
        .args(["run", "--config"])
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &Path, i: usize, ports: &[u16]) {
    let listen: Vec<String> = ports
        .iter()
        .map(|p| format!("\"/ip4/127.0.0.1/tcp/{p}\""))
        .collect();
    let text = format!(
        "key_dir = \"keys{i}\"\nvns = 2\nlisten = [{}]\npeer_list = \"peers.toml\"\ndegree = 2\nrounds = 2\n\
         metrics = \"metrics{i}.jsonl\"\n[learning]\ndataset = \"synthetic\"\nmodel = \"mlp:16\"\nnodes = 2\nindex = {i}\n\
         lr = 0.05\nlocal_epochs = 1\nseed = 5\nmax_test_samples = 200\n\
         [timing]\ncyclon_period_ms = 250\nshuffle_timeout_ms = 500\nsubstep_ms = 100\nexchange_timeout_ms = 5000\nsend_jitter_ms = 200\nwarmup_ms = 1500\n",
        listen.join(", ")
    );
    std::fs::write(dir.join(format!("node{i}.toml")), text).unwrap();
}

#[test]
fn two_node_processes_complete_rounds_from_config_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut peers = String::new();
    let ports: Vec<Vec<u16>> = (0..2).map(|_| vec![free_port(), free_port()]).collect();
    for (i, node_ports) in ports.iter().enumerate() {
        let out = node()
            .args(["keygen", "--dir"])
            .arg(d.join(format!("keys{i}")))
            .args(["--vns", "2"])
            .output()
            .unwrap();
        assert!(out.status.success());
        for (id, port) in String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .zip(node_ports)
        {
            peers.push_str(&format!(
                "[[peer]]\nid = \"{id}\"\naddr = \"/ip4/127.0.0.1/tcp/{port}\"\n"
            ));
        }
        write_config(d, i, node_ports);
    }
    std::fs::write(d.join("peers.toml"), peers).unwrap();
    let mut children: Vec<_> = (0..2)
        .map(|i| {
            node()
                .args(["run", "--config"])
                .arg(d.join(format!("node{i}.toml")))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut ok = true;
    for c in &mut children {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                ok &= status.success();
                break;
            }
            if start.elapsed() > Duration::from_secs(90) {
                let _ = c.kill();
                ok = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(ok, "both nodes exited successfully in time");
    for i in 0..2 {
        let lines = std::fs::read_to_string(d.join(format!("metrics{i}.jsonl"))).unwrap();
        let rounds: Vec<serde_json::Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rounds.len(), 2, "{lines}");
        assert_eq!(rounds[0]["node"], i);
        let copies: u64 = rounds
            .iter()
            .map(|r| r["copies_received"].as_u64().unwrap())
            .sum();
        assert!(copies > 0, "chunks crossed between the processes: {lines}");
    }
}
