//! `--capture` (procs mode): packet captures for the timing attack on packet times (`crate::packets`), TCP
//! headers only, microsecond timestamps. With `--netns` a `tcpdump` on each observer's interface inside its
//! namespace writes `capture.pcap` beside the process's arrival log: the observer's own host's view, only that
//! process's traffic. On loopback one `tcpdump` on `lo`, filtered to the run's VN ports, writes
//! `capture-lo.pcap` in the deployment's directory; each observer then takes from it the packets sent to its
//! own VNs (what its host would have captured). tcpdump's own report (packets captured, dropped by the kernel)
//! goes to a `.log` file beside the capture.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use super::netns::Netns;

/// How long tcpdump may take to start capturing.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long it may take to exit once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes kept of each packet: Ethernet, IPv4 and TCP headers with options.
const SNAP_LEN: &str = "128";
/// A bound on the packets one capture writes.
const MAX_PACKETS: &str = "5000000";
/// The kernel's capture buffer, KiB: on a loaded machine tcpdump runs behind, and packets that overflow the
/// buffer are lost.
const BUFFER_KIB: &str = "32768";
/// Before stopping, wait until the file has not grown for this long (tcpdump catching up on its buffer)…
const DRAIN_QUIET: Duration = Duration::from_millis(500);
/// …but no longer than this.
const DRAIN_MAX: Duration = Duration::from_secs(15);

/// A running capture; killed if dropped unstopped.
pub struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

/// Starts `tcpdump` on `eth0` in process `p`'s namespace, writing to `out`, and waits until it captures.
pub async fn start(ns: &Netns, p: usize, out: &Path) -> anyhow::Result<Capture> {
    let cmd = ns.command(p, Path::new("tcpdump"));
    spawn(cmd, "eth0", "tcp".into(), out, &ns.name(p)).await
}

/// Starts `tcpdump` on `lo` for the TCP packets to or from `ports` (the run's VN listen ports: every
/// connection between VNs has one at an end), writing to `out`, and waits until it captures.
pub async fn start_loopback(ports: &[u16], out: &Path) -> anyhow::Result<Capture> {
    if ports.is_empty() {
        bail!("no ports to capture");
    }
    let filter = format!(
        "tcp and ({})",
        ports
            .iter()
            .map(|p| format!("port {p}"))
            .collect::<Vec<_>>()
            .join(" or ")
    );
    let cmd = tokio::process::Command::new("tcpdump");
    spawn(cmd, "lo", filter, out, "the host (loopback)").await
}

/// Starts `tcpdump` as `cmd` on `interface` with `filter`, writing to `out`; `place` names where, for errors.
async fn spawn(
    mut cmd: tokio::process::Command,
    interface: &str,
    filter: String,
    out: &Path,
    place: &str,
) -> anyhow::Result<Capture> {
    cmd.args([
        "-i",
        interface,
        "-n",
        "-U",
        "-s",
        SNAP_LEN,
        "-B",
        BUFFER_KIB,
        "-c",
        MAX_PACKETS,
        "-Z",
        "root",
        "-w",
    ])
    .arg(out)
    .arg(filter)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .context("starting tcpdump for --capture (install it: apt-get install -y tcpdump)")?;
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let started = tokio::time::timeout(START_TIMEOUT, async {
        let mut said = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            if l.contains("listening on") {
                return Ok(());
            }
            said.push(l);
        }
        Err(said.join("\n"))
    })
    .await;
    match started {
        Ok(Ok(())) => {}
        Ok(Err(said)) => bail!("tcpdump in {place} exited before capturing: {said}"),
        Err(_) => bail!("tcpdump in {place} did not start within {START_TIMEOUT:?}"),
    }
    // Keep reading its stderr: it reports the packet counts on exit.
    let log = out.with_extension("log");
    tokio::spawn(async move {
        let mut text = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            text += &l;
            text.push('\n');
        }
        let _ = std::fs::write(log, text);
    });
    Ok(Capture {
        child,
        file: out.to_path_buf(),
    })
}

/// Packets tcpdump said the kernel dropped (from `capture.log`; `None` if it did not say).
pub fn dropped(pcap: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(pcap.with_extension("log")).ok()?;
    let line = text.lines().find(|l| l.contains("dropped by kernel"))?;
    line.split_whitespace().next()?.parse().ok()
}

impl Capture {
    /// Stops the capture (SIGINT: tcpdump flushes and exits) and waits for it, killing it if it lingers.
    pub async fn stop(mut self) {
        // The traffic is over: let tcpdump write out what its buffer still holds (the file stops growing).
        let size = |f: &Path| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        let (mut last, mut waited) = (size(&self.file), Duration::ZERO);
        while waited < DRAIN_MAX {
            tokio::time::sleep(DRAIN_QUIET).await;
            waited += DRAIN_QUIET;
            let now = size(&self.file);
            if now == last {
                break;
            }
            last = now;
        }
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-INT")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}
