//! Real `node` processes for the integration tests: keys, config files and a peer list in a temporary
//! directory, the way a deployment writes them.

#![allow(dead_code)]
// each test binary uses its own part
// Wall-clock waits for whole processes; no engine reads them.
#![allow(clippy::disallowed_methods)]

pub mod http;
pub mod swarms;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn node() -> Command {
    Command::new(env!("CARGO_BIN_EXE_node"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A network of `node` processes on 127.0.0.1, `vns` VNs each, every VN on its own port.
pub struct ProcNet {
    pub dir: tempfile::TempDir,
    pub ports: Vec<Vec<u16>>,
    /// Each node's VN identities, as `node keygen` printed them.
    pub peer_ids: Vec<Vec<libp2p::PeerId>>,
    /// More identities to list (without an address): a test's own, e.g. an attacker's.
    pub extra_peers: Vec<libp2p::PeerId>,
    pub vns: usize,
    pub rounds: u64,
    pub psk: bool,
    /// Extra `[timing]` lines (e.g. `handshake_timeout_ms = 2000`).
    pub timing: String,
    /// Extra top-level config lines (e.g. `isolation_timeout_s = 5`).
    pub top: String,
    /// How the peer list and `announce` name the VNs' host: `/ip4/127.0.0.1`, or a name (`/dns4/localhost`).
    pub host: String,
    /// Each VN announces `{host}/tcp/{port}` (else the address it binds).
    pub announce: bool,
}

impl ProcNet {
    /// Generates keys with `node keygen` and writes the peer list (and `swarm.key` if `psk`); config files
    /// are written by [`ProcNet::write_config`], so that a test can start nodes with different settings.
    pub fn new(nodes: usize, vns: usize, rounds: u64, psk: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ports: Vec<Vec<u16>> = (0..nodes)
            .map(|_| (0..vns).map(|_| free_port()).collect())
            .collect();
        let peer_ids = (0..nodes)
            .map(|i| {
                let out = node()
                    .args(["keygen", "--dir"])
                    .arg(d.join(format!("keys{i}")))
                    .args(["--vns", &vns.to_string()])
                    .output()
                    .unwrap();
                assert!(out.status.success());
                String::from_utf8(out.stdout)
                    .unwrap()
                    .lines()
                    .map(|l| l.parse().unwrap())
                    .collect()
            })
            .collect();
        if psk {
            std::fs::write(
                d.join("swarm.key"),
                format!("/key/swarm/psk/1.0.0/\n/base16/\n{}\n", "ab".repeat(32)),
            )
            .unwrap();
        }
        let net = Self {
            dir,
            ports,
            peer_ids,
            extra_peers: Vec::new(),
            vns,
            rounds,
            psk,
            timing: String::new(),
            top: String::new(),
            host: "/ip4/127.0.0.1".into(),
            announce: false,
        };
        net.write_peer_list();
        net
    }

    /// (Re)writes `peers.toml`: every node's VNs with their addresses (`{host}/tcp/{port}`), then
    /// [`ProcNet::extra_peers`].
    pub fn write_peer_list(&self) {
        self.write_peer_list_with(|node, vn| {
            Some(format!("{}/tcp/{}", self.host, self.ports[node][vn]))
        });
    }

    /// (Re)writes `peers.toml` with `addr(node, vn)` as each VN's address (`None`: listed without one), then
    /// [`ProcNet::extra_peers`].
    pub fn write_peer_list_with(&self, addr: impl Fn(usize, usize) -> Option<String>) {
        let mut peers = String::new();
        for (i, ids) in self.peer_ids.iter().enumerate() {
            for (s, id) in ids.iter().enumerate() {
                peers.push_str(&format!("[[peer]]\nid = \"{id}\"\n"));
                if let Some(a) = addr(i, s) {
                    peers.push_str(&format!("addr = \"{a}\"\n"));
                }
            }
        }
        for id in &self.extra_peers {
            peers.push_str(&format!("[[peer]]\nid = \"{id}\"\n"));
        }
        std::fs::write(self.path().join("peers.toml"), peers).unwrap();
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self, i: usize) -> PathBuf {
        self.path().join(format!("node{i}.toml"))
    }

    /// Writes node `i`'s config with `warmup_ms` of gossip before round 0.
    pub fn write_config(&self, i: usize, warmup_ms: u64) {
        let listen: Vec<String> = self.ports[i]
            .iter()
            .map(|p| format!("\"/ip4/127.0.0.1/tcp/{p}\""))
            .collect();
        let psk = if self.psk {
            "psk_file = \"swarm.key\"\n"
        } else {
            ""
        };
        let announce = if self.announce {
            let a: Vec<String> = self.ports[i]
                .iter()
                .map(|p| format!("\"{}/tcp/{p}\"", self.host))
                .collect();
            format!("announce = [{}]\n", a.join(", "))
        } else {
            String::new()
        };
        let text = format!(
            "key_dir = \"keys{i}\"\nvns = {}\nlisten = [{}]\n{announce}{}peer_list = \"peers.toml\"\n{psk}degree = 2\nrounds = {}\n\
             metrics = \"metrics{i}.jsonl\"\n[learning]\ndataset = \"synthetic\"\nmodel = \"mlp:16\"\nnodes = {}\nindex = {i}\n\
             lr = 0.05\nlocal_epochs = 1\nseed = 5\nmax_test_samples = 200\n\
             [timing]\ncyclon_period_ms = 250\nshuffle_timeout_ms = 500\nsubstep_ms = 100\nexchange_timeout_ms = 5000\n\
             send_jitter_ms = 200\nwarmup_ms = {warmup_ms}\n{}",
            self.vns,
            listen.join(", "),
            self.top,
            self.rounds,
            self.ports.len(),
            self.timing,
        );
        std::fs::write(self.config_path(i), text).unwrap();
    }

    /// Starts node `i` from its config file.
    pub fn spawn(&self, i: usize) -> Child {
        node()
            .args(["run", "--config"])
            .arg(self.config_path(i))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Starts node `i` from its config file with `args` added, its log (standard error) written to
    /// [`ProcNet::log`].
    pub fn spawn_logged(&self, i: usize, args: &[&str]) -> Child {
        let log = std::fs::File::create(self.path().join(format!("node{i}.log"))).unwrap();
        node()
            .args(["run", "--config"])
            .arg(self.config_path(i))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// What node `i` started by [`ProcNet::spawn_logged`] logged.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path().join(format!("node{i}.log"))).unwrap_or_default()
    }

    /// The metrics lines node `i` wrote, one per round.
    pub fn metrics(&self, i: usize) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path().join(format!("metrics{i}.jsonl")))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Waits for every child to exit, killing those still running after `limit`: each one's exit status, `None`
/// for one killed.
pub fn wait_each(children: &mut [Child], limit: Duration) -> Vec<Option<std::process::ExitStatus>> {
    let start = Instant::now();
    children
        .iter_mut()
        .map(|c| {
            loop {
                if let Some(status) = c.try_wait().unwrap() {
                    break Some(status);
                }
                if start.elapsed() > limit {
                    let _ = c.kill();
                    let _ = c.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .collect()
}

/// Waits for every child to exit, killing those still running after `limit`. True when all exited
/// successfully in time.
pub fn wait_all(children: &mut [Child], limit: Duration) -> bool {
    let start = Instant::now();
    let mut ok = true;
    for c in children {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                ok &= status.success();
                break;
            }
            if start.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                ok = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    ok
}
