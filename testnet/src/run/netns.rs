//! `--netns` in procs mode: every node process and VN host in a network namespace of its own, so that peers
//! really connect from distinct source addresses (issue 13: the address-grouping attack measured on what a VN
//! sees, not only on what is announced). Linux only, and root (`ip netns add`).
//!
//! Layout, all of it created by the run and named after it (`stn<pid>-<n>-…`, so concurrent runs never meet):
//! one namespace `…-br` holding a bridge `br0`, and for process i a namespace `…-<i>` whose `eth0` is one end
//! of a veth pair, the other end (`p<i>`) enslaved to the bridge. Process i's address is
//! [`Netns::ip`]`(i)` = 10.77.(i / 250).(i % 250 + 1)/16: that prefix exists only on these interfaces, no
//! namespace has a default route, and the root namespace holds none of the interfaces (each pair is created
//! inside the bridge's namespace with its peer end placed straight into the process's), so nothing a process
//! sends can leave them — [`Netns::check_isolated`] verifies it with `ip route`.
//!
//! Deleted on drop (also when the run fails or unwinds); a run killed outright leaves its namespaces behind,
//! and the next run deletes those whose creating process is gone ([`sweep_stale`]).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

/// Namespace names start with this, then the creating process's pid.
const PREFIX: &str = "stn";
/// At most this many processes per run (addresses 10.77.0.1 …; a bound, not a limit of the scheme).
pub const MAX_PROCESSES: usize = 1000;

/// A run's namespaces; deleted on drop.
pub struct Netns {
    /// `stn<pid>-<n>`.
    run: String,
    /// Created so far (the bridge's first), for cleanup of a half-built layout too.
    created: Vec<String>,
    count: usize,
}

static RUNS: AtomicU32 = AtomicU32::new(0);

fn ip_cmd(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running `ip {}` (is iproute2 installed?)", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Netns {
    /// Creates `count` process namespaces and the bridge that joins them.
    pub fn create(count: usize) -> anyhow::Result<Self> {
        if count == 0 || count > MAX_PROCESSES {
            bail!("--netns: {count} processes (1..={MAX_PROCESSES})");
        }
        sweep_stale();
        let run = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        );
        let mut me = Self {
            run,
            created: Vec::new(),
            count,
        };
        me.build().with_context(|| {
            "--netns: creating network namespaces (needs root and `ip` from iproute2)".to_string()
        })?;
        Ok(me)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let br = self.bridge();
        ip_cmd(&["netns", "add", &br])?;
        self.created.push(br.clone());
        ip_cmd(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip_cmd(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..self.count {
            let ns = self.name(i);
            ip_cmd(&["netns", "add", &ns])?;
            self.created.push(ns.clone());
            let port = format!("p{i}");
            ip_cmd(&[
                "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip_cmd(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip_cmd(&["-n", &br, "link", "set", &port, "up"])?;
            let addr = format!("{}/16", self.ip(i));
            ip_cmd(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip_cmd(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip_cmd(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        self.check_isolated()
    }

    fn bridge(&self) -> String {
        format!("{}-br", self.run)
    }

    /// Process i's namespace.
    pub fn name(&self, i: usize) -> String {
        format!("{}-{i}", self.run)
    }

    /// Process i's address.
    pub fn ip(&self, i: usize) -> Ipv4Addr {
        ip(i)
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Fails unless every process namespace routes only 10.77.0.0/16 (on its `eth0`): no default route, no
    /// other prefix, so no packet can leave the run's namespaces.
    pub fn check_isolated(&self) -> anyhow::Result<()> {
        for i in 0..self.count {
            let ns = self.name(i);
            let v4 = ip_cmd(&["-n", &ns, "-4", "route", "show", "table", "all"])?;
            for line in v4.lines().filter(|l| !l.trim().is_empty()) {
                // The prefix itself, and the kernel's local/broadcast entries for the namespace's own
                // addresses (10.77.x.y on eth0, 127/8 on lo).
                let ok = line.starts_with("10.77.0.0/16 dev eth0 ")
                    || line.contains(" dev lo ")
                    || ((line.starts_with("local 10.77.") || line.starts_with("broadcast 10.77."))
                        && line.contains(" dev eth0 "));
                if !ok {
                    bail!("namespace {ns} has a route this run did not set up: {line}");
                }
            }
            // IPv6: link-local only (the kernel's fe80::/64 on eth0), never a default route.
            let v6 = ip_cmd(&["-n", &ns, "-6", "route", "show", "table", "all"])?;
            if let Some(line) = v6
                .lines()
                .find(|l| l.starts_with("default") || l.contains(" via "))
            {
                bail!("namespace {ns} has an IPv6 route out: {line}");
            }
        }
        Ok(())
    }

    /// `program` to be run inside process i's namespace (`ip netns exec`, which execs it: the child's pid is
    /// the program's).
    pub fn command(&self, i: usize, program: &std::path::Path) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("ip");
        c.arg("netns").arg("exec").arg(self.name(i)).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace destroys its interfaces, and with each veth end its peer; processes still inside
        // keep it alive until they exit (the run kills them first).
        for ns in self.created.iter().rev() {
            let _ = ip_cmd(&["netns", "del", ns]);
        }
    }
}

/// Process i's address: 10.77.(i / 250).(i % 250 + 1).
pub fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// Deletes namespaces of earlier runs whose process is gone (a run killed with SIGKILL cannot clean up).
pub fn sweep_stale() {
    let Ok(list) = ip_cmd(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip_cmd(&["netns", "del", name]);
        }
    }
}

/// Every namespace `ip netns list` shows.
pub fn list() -> Vec<String> {
    ip_cmd(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_and_inside_the_private_prefix() {
        let ips: std::collections::BTreeSet<Ipv4Addr> = (0..MAX_PROCESSES).map(ip).collect();
        assert_eq!(ips.len(), MAX_PROCESSES);
        assert!(
            ips.iter()
                .all(|a| a.octets()[..2] == [10, 77] && a.octets()[3] != 0 && a.octets()[3] != 255)
        );
        assert!(Netns::create(0).is_err());
        assert!(Netns::create(MAX_PROCESSES + 1).is_err());
    }

    /// Needs root and iproute2: `cargo test -p testnet netns -- --ignored`.
    #[test]
    #[ignore = "needs root: creates network namespaces"]
    fn namespaces_are_isolated_reach_each_other_and_are_deleted() {
        let names = {
            let ns = Netns::create(3).unwrap();
            let names = ns.created.clone();
            assert_eq!(
                names.len(),
                4,
                "a bridge namespace and three process namespaces"
            );
            assert!(names.iter().all(|n| list().contains(n)));
            // Only the private prefix routes: no default route out.
            let routes = ip_cmd(&["-n", &ns.name(1), "route"]).unwrap();
            assert_eq!(
                routes.trim(),
                "10.77.0.0/16 dev eth0 proto kernel scope link src 10.77.0.2"
            );
            ns.check_isolated().unwrap();
            // A TCP connection from namespace 0 to a listener in namespace 2 arrives from 10.77.0.1.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut server = ns.command(2, std::path::Path::new("python3"));
                server.args(["-c", "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('10.77.0.3',4999));s.listen();c,a=s.accept();print(a[0])"]);
                server.stdout(std::process::Stdio::piped()).kill_on_drop(true);
                let server = server.spawn().unwrap();
                let mut client = ns.command(0, std::path::Path::new("python3"));
                client.args(["-c", "import socket,time\nfor _ in range(50):\n  try:\n    socket.create_connection(('10.77.0.3',4999),timeout=1);break\n  except OSError: time.sleep(0.1)"]);
                assert!(client.status().await.unwrap().success());
                let out = tokio::time::timeout(std::time::Duration::from_secs(10), server.wait_with_output())
                    .await
                    .expect("the server answers within 10 s")
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "10.77.0.1");
            });
            names
        };
        let now = list();
        assert!(
            names.iter().all(|n| !now.contains(n)),
            "every namespace deleted on drop"
        );
    }
}
