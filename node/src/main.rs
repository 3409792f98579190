//! The `node` binary: `node keygen` makes a node's virtual-node identities, `node peer-list` merges the nodes'
//! identities into the network's peer list, `node run` runs a node from its config file, `node vn` hosts
//! virtual nodes of nodes running elsewhere, `node psk` makes a pre-shared key for a closed network, `node kit`
//! writes a whole network's setup from one file describing its hosts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use node::NodeEvent;
use node::config::NodeConfig;
use node::console::Console;

/// Round lines waiting for a slow standard output (one per round: minutes of rounds).
const STDOUT_LINES: usize = 1024;
/// Log lines waiting for a slow standard error (a burst of warnings).
const STDERR_LINES: usize = 8192;
/// How long an exiting process waits for what it printed to be written (a stalled reader does not hold it).
const EXIT_FLUSH: Duration = Duration::from_secs(5);

/// What the process prints: never through `println!`/`eprintln!`, which panic on a closed pipe and block on
/// a stalled one (`node::console`).
struct Out {
    stdout: Console,
    stderr: Console,
}

#[derive(Parser)]
#[command(
    name = "node",
    version,
    about = "A Shatter node: privacy-preserving decentralized learning over libp2p"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate the keys of K virtual nodes into DIR and print their PeerIds, one per line, for the peer list.
    Keygen {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 8)]
        vns: usize,
    },
    /// Run a node (a real node and its virtual nodes) from a TOML config.
    Run {
        #[arg(long)]
        config: PathBuf,
        /// Continue from the last checkpoint in the config's `checkpoints` directory (after a crash or a
        /// stop): at most the round in progress is lost, and the node catches up with the network's round.
        /// Without a checkpoint there, the run starts at round 0.
        #[arg(long)]
        resume: bool,
        /// Never stop for want of peers (as `isolation_timeout_s = 0`): a node that reaches nobody still
        /// warns every round it spends alone, and waits. Without it, it stops with an error once it has
        /// reached no peer outside itself for the config's `isolation_timeout_s` (default 60).
        #[arg(long)]
        wait_for_peers: bool,
    },
    /// Host virtual nodes of real nodes running elsewhere (their configs' `[hosted]` entries name this host),
    /// so that a VN's address says nothing about its real node. Runs until interrupted.
    Vn {
        #[arg(long)]
        config: PathBuf,
    },
    /// Merge PeerId files (what `keygen` prints, one per node; a line may add an address, making the entry a
    /// bootstrap peer) into the network's peer list, in PeerId order so that it does not say which VNs
    /// belong to one node. Writes TOML to --out, or to standard output.
    PeerList {
        /// The nodes' PeerId files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write a new pre-shared key (swarm.key format) for a private network to FILE.
    Psk {
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a whole network's setup from one file describing its hosts (schema: docs/operator-guide.md,
    /// "A network from one file"): one folder per node and VN host (keys, config, peer list, pre-shared
    /// key), compose.yaml, a Dockerfile, systemd units and a README saying what to copy where. Keys already
    /// in DIR are kept; configs are rewritten.
    Kit {
        /// The HOSTS file (TOML).
        hosts: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    // First, before any thread or socket: Candle's matmul thread count, fixed for the process.
    let reexec = models::threads::reexec_with_matmul_threads();
    let out = Out {
        stdout: Console::stdout(STDOUT_LINES),
        stderr: Console::stderr(STDERR_LINES),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // request-response warns once per stream it drops at its cap: a peer opening streams in a
                // loop would write the log. The node's own refusal events are rate-limited instead.
                .unwrap_or_else(|_| "info,libp2p=warn,libp2p_request_response=error".into()),
        )
        .with_writer(out.stderr.clone())
        .init();
    if let Err(e) = reexec {
        tracing::warn!(%e, "could not restart with RAYON_NUM_THREADS set: matmuls will read /proc/cpuinfo each time");
    }
    let code = match run(Cli::parse(), &out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            out.stderr.line(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    };
    let dropped = out.stdout.lines_dropped();
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "lines not printed: standard output was closed, failing or too slow"
        );
    }
    out.stdout.flush(EXIT_FLUSH);
    out.stderr.flush(EXIT_FLUSH);
    code
}

fn run(cli: Cli, out: &Out) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Keygen { dir, vns } => {
            for k in node::keys::generate(&dir, vns)? {
                out.stdout.line(&k.public().to_peer_id().to_string());
            }
            out.stderr.line(&format!(
                "wrote {vns} keys to {}; add the PeerIds above to the network's peer list",
                dir.display()
            ));
            Ok(())
        }
        Cmd::PeerList {
            files,
            out: out_file,
        } => {
            let texts = files
                .into_iter()
                .map(|f| {
                    let t = std::fs::read_to_string(&f)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
                    Ok((f, t))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let list = node::peers::PeerList::from_id_files(&texts)?;
            match out_file {
                Some(path) => {
                    std::fs::write(&path, list.to_toml())
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                    out.stderr.line(&format!(
                        "wrote {} peers to {}, in PeerId order; give the same file to every node",
                        list.len(),
                        path.display()
                    ));
                }
                None => {
                    for l in list.to_toml().lines() {
                        out.stdout.line(l);
                    }
                }
            }
            Ok(())
        }
        Cmd::Vn { config } => {
            let host = node::host_config::load(&config)?;
            node::limits::raise_open_files_limit();
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(async move {
                let (stop_tx, stop) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        tracing::warn!("interrupted: stopping the hosted VNs");
                        let _ = stop_tx.send(true);
                    }
                });
                host.run(stop, None).await?;
                Ok(())
            })
        }
        Cmd::Kit { hosts, out: dir } => {
            let kit = node::kit::build(&hosts, &dir)?;
            out.stderr.line(&format!(
                "wrote {} node folders and {} VN host folders to {} ({} keys made, {} kept); read {}",
                kit.node_configs.len(),
                kit.host_configs.len(),
                dir.display(),
                kit.keys_made,
                kit.keys_kept,
                dir.join("README.md").display()
            ));
            Ok(())
        }
        Cmd::Psk { out: path } => {
            node::psk::generate(&path)?;
            out.stderr.line(&format!(
                "wrote a pre-shared key to {}; give it to every node of the network (psk_file)",
                path.display()
            ));
            Ok(())
        }
        Cmd::Run {
            config,
            resume,
            wait_for_peers,
        } => {
            // The log's first line: its timestamp is when the process began (start-up phases follow).
            tracing::info!(resume, "start-up: process running");
            let cfg = NodeConfig::load(&config)?;
            let limit = node::limits::raise_open_files_limit();
            // Peers of other nodes run elsewhere: one descriptor per connection.
            let need = node::limits::open_files_needed(cfg.vns as u64, u64::MAX, false);
            if let Some(limit) = limit.filter(|l| *l < need) {
                tracing::warn!(
                    limit,
                    need,
                    "the open-files limit may be too low for this many VNs in a large network (ulimit -n)"
                );
            }
            if resume && cfg.checkpoints.is_none() {
                anyhow::bail!(
                    "--resume needs `checkpoints = \"DIR\"` in {}",
                    config.display()
                );
            }
            let mut builder = cfg.builder()?.resume(resume);
            if wait_for_peers {
                builder = builder.isolation_timeout(None);
            }
            let registry = node::telemetry::SharedRegistry::default();
            if cfg.metrics_addr.is_some() {
                builder = builder.telemetry(node::telemetry::Telemetry::new(registry.clone()));
            }
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(async move {
                // Bound before the node starts: a taken port stops it with the address in the error.
                let _endpoint = match cfg.metrics_addr {
                    Some(addr) => Some(node::telemetry::serve(addr, registry).await?),
                    None => None,
                };
                let (handle, mut events) = builder.spawn().await?;
                for a in handle.addresses() {
                    tracing::info!(peer = %a.peer, addr = %a.addr, "virtual node listening");
                }
                let stopper = handle.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        tracing::warn!("interrupted: stopping");
                        stopper.stop();
                    }
                });
                while let Some(ev) = events.recv().await {
                    match ev {
                        NodeEvent::RoundFinished(m) => out.stdout.line(&serde_json::to_string(&m)?),
                        NodeEvent::PeerRefused { vn, peer, reason } => {
                            tracing::warn!(vn, %peer, %reason, "peer refused")
                        }
                        NodeEvent::ConnectionFailed { vn, error } => {
                            tracing::debug!(vn, %error, "connection failed")
                        }
                        NodeEvent::VnLost { vn, reason } => {
                            tracing::error!(vn, %reason, "virtual node lost; going on without it")
                        }
                        NodeEvent::Error(e) => tracing::error!(%e, "node error"),
                        // Logged where it happened; the metrics lines count it too.
                        NodeEvent::WriteFailed { .. } => {}
                        NodeEvent::Finished => break,
                    }
                }
                let status = handle.wait().await;
                match status.error {
                    Some(e) => anyhow::bail!(e),
                    None => Ok(()),
                }
            })
        }
    }
}
