//! The `node` binary: keygen output, errors that name file and field, and two real processes completing
//! rounds from config files (the path a deployment uses).

mod common;

use std::time::Duration;

use common::{ProcNet, free_port, node, wait_all, wait_each};

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

/// Two nodes' keygen outputs (one with a bootstrap address) become one peer list in PeerId order, whatever
/// the order of files and lines: a list written node by node would tell every participant which VNs are
/// siblings. A bad line fails naming the file and line.
#[test]
fn peer_list_merges_keygen_outputs_in_peer_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut all = Vec::new();
    for (n, with_addr) in [("a", true), ("b", false)] {
        let out = node()
            .args(["keygen", "--dir"])
            .arg(dir.path().join(n))
            .args(["--vns", "4"])
            .output()
            .unwrap();
        let ids: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let text: String = ids
            .iter()
            .enumerate()
            .map(|(s, id)| match (with_addr, s) {
                (true, 0) => format!("{id} /ip4/127.0.0.1/tcp/4001  # bootstrap\n"),
                _ => format!("{id}\n"),
            })
            .collect();
        let f = dir.path().join(format!("{n}.txt"));
        std::fs::write(&f, text).unwrap();
        files.push(f);
        all.extend(ids);
    }
    let out_file = dir.path().join("peers.toml");
    let out = node()
        .arg("peer-list")
        .args(&files)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = node::peers::PeerList::load(&out_file).unwrap();
    assert_eq!(list.len(), 8);
    assert_eq!(list.bootstrap().len(), 1, "the one line with an address");
    let text = std::fs::read_to_string(&out_file).unwrap();
    let written: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id = \"")?.strip_suffix('"'))
        .collect();
    let mut sorted: Vec<libp2p::PeerId> = all.iter().map(|i| i.parse().unwrap()).collect();
    sorted.sort();
    let sorted: Vec<String> = sorted.iter().map(|p| p.to_string()).collect();
    assert_eq!(written, sorted, "written in PeerId order, not node by node");

    std::fs::write(&files[1], "12D3KooWnotapeerid\n").unwrap();
    let bad = node().arg("peer-list").args(&files).output().unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("b.txt") && err.contains("line 1"), "{err}");
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
        assert!(
            copies > 0,
            "chunks crossed between the processes: {rounds:?}"
        );
    }
}

/// Issue 46: a peer list that names every VN by a DNS name (`/dns4/localhost/tcp/PORT`), VNs that announce
/// the same names, and a pre-shared key: the names are resolved under the key's handshake and the nodes
/// learn from each other. Before libp2p's DNS transport was built in, such nodes dialled nobody and ran
/// every round alone (0 neighbours, 0 copies, exit 0).
#[test]
fn node_processes_named_by_dns_reach_each_other_and_learn_together() {
    let mut net = ProcNet::new(3, 2, 2, true);
    net.host = "/dns4/localhost".into();
    net.announce = true;
    net.write_peer_list();
    let peers = std::fs::read_to_string(net.path().join("peers.toml")).unwrap();
    assert!(!peers.contains("/ip4/"), "only names: {peers}");
    let mut children: Vec<_> = (0..3)
        .map(|i| {
            net.write_config(i, 1500);
            net.spawn_logged(i, &[])
        })
        .collect();
    let ok = wait_all(&mut children, Duration::from_secs(120));
    assert!(ok, "all three exited successfully in time: {}", net.log(0));
    for i in 0..3 {
        let rounds = net.metrics(i);
        assert_eq!(rounds.len(), 2, "{rounds:?}");
        let sum = |k: &str| -> u64 { rounds.iter().map(|r| r[k].as_u64().unwrap()).sum() };
        assert!(
            sum("neighbours") > 0 && sum("copies_received") > 0,
            "node {i} had neighbours and received chunks: {rounds:?}"
        );
        assert!(!net.log(i).contains("isolated"), "{}", net.log(i));
    }
}

/// Issue 46: three node processes whose peer list names the bootstrap VNs (node 0's) at addresses nobody
/// listens on. They used to run all their rounds alone, without a warning, and exit 0. Now each warns that
/// it reaches nobody, naming the address it dialled and why that failed, and stops with an error once alone
/// for `isolation_timeout_s` — well before its 200 rounds.
#[test]
fn node_processes_that_reach_nobody_say_so_and_stop_with_an_error() {
    let mut net = ProcNet::new(3, 2, 200, false);
    net.top = "isolation_timeout_s = 4\n".into();
    let dead: Vec<u16> = (0..2).map(|_| free_port()).collect();
    net.write_peer_list_with(|i, s| (i == 0).then(|| format!("/ip4/127.0.0.1/tcp/{}", dead[s])));
    let mut children: Vec<_> = (0..3)
        .map(|i| {
            net.write_config(i, 1500);
            net.spawn_logged(i, &[])
        })
        .collect();
    let statuses = wait_each(&mut children, Duration::from_secs(60));
    for (i, status) in statuses.iter().enumerate() {
        let log = net.log(i);
        let status = status.unwrap_or_else(|| panic!("node {i} still ran after 60 s: {log}"));
        assert!(!status.success(), "node {i} exited 0: {log}");
        assert!(
            log.contains("error: isolated: this node reached no peer outside itself in 4 s"),
            "node {i}: {log}"
        );
        assert!(
            dead.iter()
                .any(|p| log.contains(&format!("/ip4/127.0.0.1/tcp/{p}"))),
            "node {i} names an address it dialled: {log}"
        );
        assert!(
            log.to_lowercase().contains("connection refused"),
            "node {i} says why the dial failed: {log}"
        );
        assert!(net.metrics(i).len() < 200, "stopped early");
    }
}

/// With `--wait-for-peers` the same isolation is warned of every round, and the node runs its rounds to the
/// end (the config's `isolation_timeout_s = 1` does not stop it). Its two VNs reach each other: siblings are
/// not the network.
#[test]
fn a_node_told_to_wait_for_peers_warns_every_round_alone_and_finishes() {
    let mut net = ProcNet::new(2, 2, 3, false);
    net.top = "isolation_timeout_s = 1\n".into();
    let dead: Vec<u16> = (0..2).map(|_| free_port()).collect();
    net.write_peer_list_with(|i, s| {
        Some(match i {
            0 => format!("/ip4/127.0.0.1/tcp/{}", net.ports[0][s]),
            _ => format!("/dns4/localhost/tcp/{}", dead[s]),
        })
    });
    net.write_config(0, 1500);
    let mut child = [net.spawn_logged(0, &["--wait-for-peers"])];
    let status = wait_each(&mut child, Duration::from_secs(90));
    let log = net.log(0);
    assert!(
        status[0].is_some_and(|s| s.success()),
        "finished its rounds: {log}"
    );
    assert_eq!(net.metrics(0).len(), 3);
    let warnings = log
        .matches("isolated: this node has reached no peer")
        .count();
    assert!(warnings >= 2, "a warning every round alone: {log}");
    assert!(log.contains("waits for peers for ever"), "{log}");
    assert!(
        dead.iter()
            .any(|p| log.contains(&format!("/dns4/localhost/tcp/{p}"))),
        "names the address it dialled: {log}"
    );
}

/// `node psk` writes a key only its owner reads (it was 0644), never over anything already at `--out`: a
/// file, or a dangling symlink planted there (checked with `exists()` first, the old code followed it and
/// created the link's target).
#[cfg(unix)]
#[test]
fn psk_is_private_and_never_written_over_or_through_anything() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("swarm.key");
    let psk = |out: &std::path::Path| node().arg("psk").arg("--out").arg(out).output().unwrap();
    assert!(psk(&key).status.success());
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(
        text.starts_with("/key/swarm/psk/1.0.0/\n/base16/\n"),
        "{text}"
    );
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = psk(&key);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("refusing"));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), text, "the key kept");
    let planted = dir.path().join("planted.key");
    let target = dir.path().join("elsewhere");
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    assert!(!psk(&planted).status.success());
    assert!(!target.exists(), "the symlink was not followed");
}
