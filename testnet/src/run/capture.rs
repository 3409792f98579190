//! `--capture` (procs mode, with `--netns`): a `tcpdump` on each observer's interface inside its namespace,
//! writing the TCP packets it sees (headers only, microsecond timestamps) to `capture.pcap` beside the
//! process's arrival log, for the timing attack on packet arrival times (`crate::packets`). The capture is the
//! observer's own host's view: it runs in the observer's namespace and sees only that process's traffic.
//! tcpdump's own report (packets captured, dropped by the kernel) goes to `capture.log` beside it.

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
    let mut cmd = ns.command(p, Path::new("tcpdump"));
    cmd.args([
        "-i",
        "eth0",
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
    .arg("tcp")
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
        Ok(Err(said)) => bail!("tcpdump in {} exited before capturing: {said}", ns.name(p)),
        Err(_) => bail!(
            "tcpdump in {} did not start within {START_TIMEOUT:?}",
            ns.name(p)
        ),
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
