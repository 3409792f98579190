//! `node kit`: a network written from one HOSTS file runs as it is. Three nodes on 127.0.0.1 (ports picked
//! free), the kit's folders used as written, `node run` started in each: every node reaches neighbours and
//! receives chunks in every round.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{node, wait_each};

const ROUNDS: usize = 3;

/// A base port p on 127.0.0.1 with p + 1 free too, none of `taken`; the listeners are held until the
/// caller drops them, so that no two nodes get overlapping ports.
fn two_free_ports(held: &mut Vec<std::net::TcpListener>) -> u16 {
    loop {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < u16::MAX
            && let Ok(b) = std::net::TcpListener::bind(("127.0.0.1", p + 1))
        {
            held.extend([a, b]);
            return p;
        }
    }
}

fn hosts_file(ports: &[u16]) -> String {
    let mut text = String::from(
        "rounds = 3\ndegree = 2\nvns = 2\npsk = true\nisolation_timeout_s = 30\n\n\
         [learning]\ndataset = \"synthetic\"\nmodel = \"mlp:16\"\nlr = 0.05\nlocal_epochs = 1\nseed = 5\n\
         max_test_samples = 200\n\n\
         [timing]\ncyclon_period_ms = 250\nshuffle_timeout_ms = 500\nsubstep_ms = 100\n\
         exchange_timeout_ms = 5000\nsend_jitter_ms = 200\nwarmup_ms = 1500\n",
    );
    for (name, port) in ["alice", "bob", "carol"].iter().zip(ports) {
        text += &format!(
            "\n[[node]]\nname = \"{name}\"\nhost = \"127.0.0.1\"\nlisten_ip = \"127.0.0.1\"\nport = {port}\n"
        );
    }
    text
}

fn start(folder: &Path) -> Child {
    let log = std::fs::File::create(folder.join("node.log")).unwrap();
    node()
        .args(["run", "--config", "node.toml"])
        .current_dir(folder)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[test]
fn a_network_written_by_the_kit_runs_its_rounds_with_neighbours_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let mut held = Vec::new();
    let ports: Vec<u16> = (0..3).map(|_| two_free_ports(&mut held)).collect();
    let hosts = dir.path().join("HOSTS.toml");
    std::fs::write(&hosts, hosts_file(&ports)).unwrap();
    let out = dir.path().join("kit");
    let made = node()
        .arg("kit")
        .arg(&hosts)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    drop(held);
    let names = ["alice", "bob", "carol"];
    let mut children: Vec<Child> = names.iter().map(|n| start(&out.join(n))).collect();
    let statuses = wait_each(&mut children, Duration::from_secs(120));
    for (name, status) in names.iter().zip(statuses) {
        let folder = out.join(name);
        let log = std::fs::read_to_string(folder.join("node.log")).unwrap_or_default();
        assert!(
            status.is_some_and(|s| s.success()),
            "{name} finished its rounds: {log}"
        );
        let rounds: Vec<serde_json::Value> = std::fs::read_to_string(folder.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rounds.len(), ROUNDS, "{name}: {rounds:?}");
        for r in &rounds {
            assert!(
                r["neighbours"].as_u64().unwrap() > 0 && r["copies_received"].as_u64().unwrap() > 0,
                "{name} reached neighbours and received chunks in round {}: {r}",
                r["round"]
            );
        }
    }
}
