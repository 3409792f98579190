//! The kit's refusals, and what it writes: keys made once and kept, the peer list in PeerId order with the
//! bootstrap entries' names, configs the node's own parsers take, and compose/unit files of the right shape.

use std::path::Path;

use libp2p::PeerId;

use super::*;

const NET: &str = r#"
rounds = 3
degree = 2
vns = 2
psk = true

[learning]
dataset = "synthetic"
lr = 0.05
seed = 5
"#;

/// Three nodes: two with their own VNs, one whose VNs run at two VN hosts.
fn hosts_text() -> String {
    format!(
        "{NET}
[[node]]
name = \"alice\"
host = \"alice.example.org\"
port = 4001

[[node]]
name = \"bob\"
host = \"192.0.2.7\"
port = 4001
metrics_addr = \"0.0.0.0:9464\"

[[node]]
name = \"carol\"
host = \"alice.example.org\"
vn_hosts = [\"h1\", \"h2\"]

[[vn_host]]
name = \"h1\"
host = \"h1.example.org\"
port = 7000

[[vn_host]]
name = \"h2\"
host = \"h2.example.org\"
port = 7000
"
    )
}

fn parse(text: &str) -> Result<Plan> {
    Plan::parse(Path::new("HOSTS.toml"), text)
}

fn refused(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn a_good_hosts_file_parses() {
    let plan = parse(&hosts_text()).unwrap();
    assert_eq!(plan.nodes.len(), 3);
    assert_eq!(plan.vn_hosts[0].serves, vec![(2, 0)]);
    assert_eq!(plan.vn_hosts[1].serves, vec![(2, 1)]);
    assert!(
        plan.nodes[0].bootstrap && !plan.nodes[1].bootstrap,
        "the first node by default"
    );
    assert_eq!(
        plan.nodes[1].metrics_addr,
        Some("0.0.0.0:9464".parse().unwrap())
    );
}

/// Issue 43's rule, as `node vn` enforces it for one host's config: the kit refuses the placement before any
/// file is written, naming the node, both VNs and the host.
#[test]
fn two_vns_of_one_node_on_one_vn_host_are_refused_naming_both() {
    let e = refused(&hosts_text().replace("[\"h1\", \"h2\"]", "[\"h2\", \"h2\"]"));
    assert!(
        e.contains("HOSTS.toml: node[2].vn_hosts")
            && e.contains("node carol's VN 0 and VN 1 are both placed on VN host h2")
            && e.contains("at most one VN of each node"),
        "{e}"
    );
}

#[test]
fn a_port_taken_twice_on_one_host_is_refused_naming_both() {
    // carol's VNs move home to alice's host, overlapping alice's 4001-4002.
    let text = hosts_text().replace(
        "host = \"alice.example.org\"\nvn_hosts = [\"h1\", \"h2\"]",
        "host = \"Alice.example.org.\"\nport = 4002",
    );
    let e = refused(&text);
    assert!(
        e.contains("node[2].port")
            && e.contains("port 4002 on host alice.example.org is taken twice")
            && e.contains("by node alice's VN 1 and by node carol's VN 0"),
        "{e}"
    );
    // A metrics endpoint on a VN's port.
    let e = refused(&hosts_text().replace("0.0.0.0:9464", "0.0.0.0:4002"));
    assert!(
        e.contains("node bob's VN 1 and by node bob's metrics_addr"),
        "{e}"
    );
    // A VN host's hosted VN on a node's port (h1 on bob's address).
    let e = refused(&hosts_text().replace(
        "\"h1.example.org\"\nport = 7000",
        "\"192.0.2.7\"\nport = 4000",
    ));
    assert!(
        e.contains("by node bob's VN 0 and by VN host h1's hosted VN 0"),
        "{e}"
    );
    // The same ports on two hosts are fine (h1 and h2 both use 7000).
    parse(&hosts_text()).unwrap();
    let e = refused(&hosts_text().replace("port = 7000", "port = 65535"));
    assert!(e.contains("beyond 65535"), "{e}");
}

#[test]
fn names_that_are_not_host_names_are_refused() {
    for (bad, why) in [
        ("al ice", "not a letter, digit"),
        ("-alice", "starts or ends with '-'"),
        ("alice.a", "no '.'"),
        ("_alice", "starts with '_'"),
        ("", "empty"),
        ("Dockerfile", "a file the kit writes"),
    ] {
        let e = refused(&hosts_text().replace("name = \"alice\"", &format!("name = {bad:?}")));
        assert!(e.contains("node[0].name") && e.contains(why), "{bad}: {e}");
    }
    let e = refused(&hosts_text().replace("name = \"h2\"", "name = \"BOB\""));
    assert!(
        e.contains("vn_host[1].name") && e.contains("'BOB' is also node[1].name"),
        "{e}"
    );
    let e = refused(&hosts_text().replace("\"192.0.2.7\"", "\"192.0.2.7:4001\""));
    assert!(
        e.contains("node[1].host") && e.contains("not a host name"),
        "{e}"
    );
}

#[test]
fn schema_errors_name_the_field() {
    let cases = [
        (
            hosts_text().replace("vns = 2\n", "vns = 2\nbogus = 1\n"),
            "unknown field `bogus`",
        ),
        (
            hosts_text().replace("seed = 5", "seed = 5\nindex = 1"),
            "unknown field `index`",
        ),
        (
            hosts_text().replace("port = 4001\nmetrics", "metrics"),
            "node[1].port",
        ),
        (
            hosts_text().replace("[\"h1\", \"h2\"]", "[\"h1\"]"),
            "1 VN hosts for node carol's 2 VNs",
        ),
        (
            hosts_text().replace("[\"h1\", \"h2\"]", "[\"h1\", \"h9\"]"),
            "no [[vn_host]] is named 'h9'",
        ),
        (
            hosts_text().replace("vn_hosts", "port = 5000\nvn_hosts"),
            "node[2].port",
        ),
        (hosts_text().replace("degree = 2", "degree = 6"), "degree"),
        (
            hosts_text().replace("psk = true", "psk = true\nbootstrap = [\"dave\"]"),
            "bootstrap[0]",
        ),
        (NET.to_string(), "at least one [[node]]"),
    ];
    for (text, want) in cases {
        let e = refused(&text);
        assert!(
            e.starts_with("HOSTS.toml: ") && e.contains(want),
            "{want}: {e}"
        );
    }
}

fn kit(dir: &Path, text: &str) -> Result<Kit> {
    let hosts = dir.join("HOSTS.toml");
    std::fs::write(&hosts, text).unwrap();
    build(&hosts, &dir.join("out"))
}

#[test]
fn settings_the_node_refuses_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let e = kit(dir.path(), &hosts_text().replace("lr = 0.05", "lr = -1.0"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("HOSTS.toml: node[0]") && e.contains("learning.lr"),
        "{e}"
    );
    assert!(!dir.path().join("out").exists(), "nothing written");
}

fn ids_in(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| Some(l.strip_prefix("id = \"")?.strip_suffix('"')?.to_string()))
        .collect()
}

#[test]
fn a_kit_holds_keys_configs_and_one_peer_list_and_keeps_its_keys_when_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let first = kit(dir.path(), &hosts_text()).unwrap();
    // 2 + 2 VN keys, carol's 2 hosted VN keys and her link, 2 host links.
    assert_eq!((first.keys_made, first.keys_kept), (9, 0));
    let list = crate::peers::PeerList::load(&out.join("alice/peers.toml")).unwrap();
    assert_eq!(list.len(), 6);
    let ids = ids_in(&out.join("alice/peers.toml"));
    let mut sorted: Vec<PeerId> = ids.iter().map(|i| i.parse().unwrap()).collect();
    sorted.sort();
    assert_eq!(
        ids,
        sorted.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "PeerId order"
    );
    let boot: Vec<String> = list
        .bootstrap()
        .iter()
        .map(|b| b.addr.to_string())
        .collect();
    assert_eq!(boot.len(), 2, "alice's VNs: {boot:?}");
    assert!(
        boot.iter()
            .all(|a| a.starts_with("/dns4/alice.example.org/tcp/400")),
        "{boot:?}"
    );
    for f in ["bob", "carol", "h1", "h2"] {
        assert_eq!(
            std::fs::read(out.join(f).join("peers.toml")).unwrap(),
            std::fs::read(out.join("alice/peers.toml")).unwrap()
        );
        assert_eq!(
            std::fs::read(out.join(f).join("swarm.key")).unwrap(),
            std::fs::read(out.join("swarm.key")).unwrap(),
            "one network key"
        );
    }
    #[cfg(unix)]
    for key in [
        "alice/keys/vn-1.key",
        "carol/link/vn-0.key",
        "h1/keys/carol-vn-0.key",
        "bob/swarm.key",
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    // carol's VN keys live at her hosts, not with her.
    assert!(!out.join("carol/keys").exists());
    let carol = crate::config::NodeConfig::load(&out.join("carol/node.toml")).unwrap();
    assert_eq!(carol.hosted.as_ref().unwrap().vns.len(), 2);
    assert_eq!(carol.learning.nodes, 3);
    assert_eq!(carol.index, 2);
    let h1 = crate::host_config::load(&out.join("h1/host.toml")).unwrap();
    assert_eq!(h1.vns.len(), 1);

    // Written again with a fourth node: every key kept, the new node's made, configs rewritten.
    let more = format!(
        "{}\n[[node]]\nname = \"dave\"\nhost = \"192.0.2.7\"\nport = 5001\n",
        hosts_text()
    );
    let second = kit(dir.path(), &more).unwrap();
    assert_eq!((second.keys_made, second.keys_kept), (2, 9));
    let after = ids_in(&out.join("alice/peers.toml"));
    assert!(
        ids.iter().all(|i| after.contains(i)),
        "the first identities kept"
    );
    assert_eq!(after.len(), 8);
    let bob = std::fs::read_to_string(out.join("bob/node.toml")).unwrap();
    assert!(bob.contains("nodes = 4"), "{bob}");

    // A folder holding another key than the network's is not overwritten.
    std::fs::remove_file(out.join("bob/swarm.key")).unwrap();
    crate::psk::generate(&out.join("bob/swarm.key")).unwrap();
    let e = kit(dir.path(), &more).unwrap_err().to_string();
    assert!(
        e.contains("bob/swarm.key") && e.contains("refusing to overwrite"),
        "{e}"
    );
}

/// compose.yaml cannot be run here (no container engine), so its shape is checked as text: one service per
/// folder, each mounting its own folder and running the right command, host names as network aliases, and
/// every value a JSON string (YAML's double-quoted scalars), so nothing in a name can break the file.
#[test]
fn compose_and_units_have_one_service_per_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    kit(dir.path(), &hosts_text()).unwrap();
    let compose = std::fs::read_to_string(out.join("compose.yaml")).unwrap();
    let services: Vec<&str> = compose
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   ") && l.ends_with(':'))
        .map(|l| l.trim().trim_end_matches(':'))
        .collect();
    assert_eq!(services, ["alice", "bob", "carol", "h1", "h2"], "{compose}");
    for (name, cmd, config) in [
        ("alice", "run", "node.toml"),
        ("bob", "run", "node.toml"),
        ("carol", "run", "node.toml"),
        ("h1", "vn", "host.toml"),
    ] {
        let block: String = compose
            .split(&format!("\n  {name}:\n"))
            .nth(1)
            .unwrap()
            .lines()
            .take_while(|l| l.starts_with("    "))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            block.contains(&format!(
                "command: [\"{cmd}\", \"--config\", \"/var/lib/shatter/{config}\"]"
            )) && block.contains(&format!("- \"./{name}:/var/lib/shatter\""))
                && block.contains("image: \"shatter-node\""),
            "{name}: {block}"
        );
    }
    assert!(compose.contains("aliases: [\"alice.example.org\"]"));
    assert!(compose.contains("aliases: [\"h2.example.org\"]"));
    for l in compose.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if let Some((_, v)) = l.split_once(": ")
            && v.starts_with('"')
        {
            serde_json::from_str::<String>(v).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
    }
    let unit = std::fs::read_to_string(out.join("shatter-node@.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/node run --config /var/lib/shatter/%i/node.toml\n")
    );
    let unit = std::fs::read_to_string(out.join("shatter-vn@.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/node vn --config /var/lib/shatter/%i/host.toml\n")
    );
    let docker = std::fs::read_to_string(out.join("Dockerfile")).unwrap();
    assert_eq!(
        docker.matches("\nFROM ").count(),
        2,
        "multi-stage: {docker}"
    );
    assert!(
        docker.contains("cargo build --release --locked -p node")
            && docker.contains("\nUSER shatter\n")
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("| `h2/` | h2.example.org"), "{readme}");
    assert!(readme.contains("bob given by IP address"), "{readme}");
}
