//! The `node` binary: keygen output, errors that name file and field, and two real processes completing
//! rounds from config files (the path a deployment uses).

mod common;

use std::time::Duration;

use common::{ProcNet, node, wait_all};

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

#[test]
fn two_node_processes_complete_rounds_from_config_files() {
    let net = ProcNet::new(2, 2, 2, false);
    let mut children: Vec<_> = (0..2)
        .map(|i| {
            net.write_config(i, 1500);
            net.spawn(i)
        })
        .collect();
    assert!(
        wait_all(&mut children, Duration::from_secs(90)),
        "both nodes exited successfully in time"
    );
    for i in 0..2 {
        let rounds = net.metrics(i);
        assert_eq!(rounds.len(), 2, "{rounds:?}");
        assert_eq!(rounds[0]["node"], i);
        let copies: u64 = rounds
            .iter()
            .map(|r| r["copies_received"].as_u64().unwrap())
            .sum();
        assert!(copies > 0, "chunks crossed between the processes: {rounds:?}");
    }
}
