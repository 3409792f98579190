//! A node's disk failing under it, over real libp2p on 127.0.0.1 (issue 45), with test doubles of the file
//! layer (`node::disk`) instead of a full filesystem, so that it runs without root:
//!
//! - Node 0's disk is full for its first rounds (`FullDisk`): every checkpoint and metrics write fails. It
//!   keeps training to its last round, reports each failure as an event and in its metrics lines
//!   (`unsaved_checkpoints`, `metrics_write_failures`), and once space returns writes again: every round's
//!   line ends up in the file, whole and in round order, and its last checkpoint is its last round's.
//! - Node 1's disk records what was durable when (`Journal`): at each checkpoint's commit, the synced part
//!   of its metrics file already holds the line of every earlier round — a power loss that drops every
//!   unsynced write loses no completed round before the checkpoint a restart resumes from.
//!
//! On a real full filesystem (root needed): `sudo mount -t tmpfs -o size=64k tmpfs /mnt/full`, point a
//! node's `metrics` and `checkpoints` there, fill it with `dd if=/dev/zero of=/mnt/full/fill`, run, then
//! `rm /mnt/full/fill` mid-run: the same events and counters, and writing resumes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::disk::{Disk, FullDisk, OsDisk};
use node::events::DurableFile;
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, Timing};

const LIMIT: Duration = Duration::from_secs(120);
const NODES: usize = 2;
const K: usize = 2;
const ROUNDS: u64 = 6;
/// Node 0's disk has room again once it reported this round.
const FULL_UNTIL: u64 = 1;

fn learning() -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![8] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Steps(5),
            clip: None,
        },
        seed: 7,
        max_test_samples: Some(100),
    }
}

/// The OS's filesystem, recording at each metrics sync the file's length (what survives a power loss),
/// and at each commit of `checkpoint.json` its round and the metrics length durable by then.
#[derive(Debug, Default)]
struct Journal {
    synced_len: Mutex<u64>,
    commits: Mutex<Vec<(u64, u64)>>,
}

impl Disk for Journal {
    fn replace(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        OsDisk.replace(path, bytes)?;
        if path.file_name().is_some_and(|n| n == "checkpoint.json") {
            let meta: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            let round = meta["round"].as_u64().unwrap();
            let durable = *self.synced_len.lock().unwrap();
            self.commits.lock().unwrap().push((round, durable));
        }
        Ok(())
    }

    fn append(&self, file: &std::fs::File, bytes: &[u8]) -> std::io::Result<usize> {
        OsDisk.append(file, bytes)
    }

    fn sync(&self, file: &std::fs::File) -> std::io::Result<()> {
        OsDisk.sync(file)?;
        *self.synced_len.lock().unwrap() = file.metadata()?.len();
        Ok(())
    }
}

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

fn latest_checkpoint_round(dir: &Path) -> u64 {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("checkpoint.json")).unwrap()).unwrap();
    meta["round"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_costs_no_round_and_a_power_loss_no_line_before_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(FullDisk::default());
    full.set_full(true);
    let journal = Arc::new(Journal::default());
    let disks: [Arc<dyn Disk>; NODES] = [full.clone(), journal.clone()];
    let metrics = |i: usize| dir.path().join(format!("metrics{i}.jsonl"));
    let checkpoints = |i: usize| dir.path().join(format!("ck{i}"));

    let keys: Vec<Vec<Keypair>> = (0..NODES)
        .map(|_| (0..K).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<PeerId> = keys
        .iter()
        .flatten()
        .map(|k| k.public().to_peer_id())
        .collect();
    let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
    let (mut handles, mut events) = (Vec::new(), Vec::new());
    for (i, ks) in keys.into_iter().enumerate() {
        let lc = learning();
        let (split, parts) = lc.load().unwrap();
        let learner = lc.learners(&split, &parts, [i]).unwrap().remove(0);
        let peers = PeerList::from_entries(ids.iter().map(|p| {
            (
                *p,
                boot.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone()),
            )
        }));
        let (h, ev) = NodeBuilder::new(ks, lc, i)
            .learner(learner)
            .peers(peers)
            .degree(2)
            .rounds(ROUNDS)
            .timing(Timing::loopback())
            .metrics_file(Some(metrics(i)))
            .checkpoint_dir(Some(checkpoints(i)))
            .disk(disks[i].clone())
            .spawn()
            .await
            .unwrap();
        if i == 0 {
            boot = h
                .addresses()
                .iter()
                .map(|a| (a.peer, a.addr.clone()))
                .collect();
        }
        handles.push(h);
        events.push(ev);
    }

    let mut rx1 = events.pop().unwrap();
    let mut rx0 = events.pop().unwrap();
    let mut failed: Vec<(DurableFile, PathBuf)> = Vec::new();
    let mut reported = Vec::new();
    let node0 = async {
        while let Some(e) = rx0.recv().await {
            match e {
                NodeEvent::RoundFinished(m) => {
                    if m.round.get() >= FULL_UNTIL {
                        full.set_full(false);
                    }
                    reported.push(m);
                }
                NodeEvent::WriteFailed { file, path, .. } => failed.push((file, path)),
                NodeEvent::Finished => break,
                _ => {}
            }
        }
    };
    let node1 = async { while rx1.recv().await.is_some() {} };
    tokio::time::timeout(LIMIT, futures::future::join(node0, node1))
        .await
        .expect("both nodes finished in time");
    for h in &handles {
        let status = h.wait().await;
        assert_eq!(status.error, None, "the node did not stop on its disk");
        assert_eq!(status.rounds_completed, ROUNDS);
    }

    // Node 0: every failure reported, counted, and written late once the disk took it.
    assert!(full.refused() > 0);
    for kind in [DurableFile::Checkpoint, DurableFile::Metrics] {
        assert!(
            failed.iter().any(|(f, _)| *f == kind),
            "{kind:?} failure reported: {failed:?}"
        );
    }
    assert_eq!(
        reported[0].unsaved_checkpoints, 1,
        "round 0's checkpoint failed"
    );
    let file = lines(&std::fs::read_to_string(metrics(0)).unwrap());
    let rounds: Vec<u64> = file.iter().map(|l| l["round"].as_u64().unwrap()).collect();
    assert_eq!(
        rounds,
        (0..ROUNDS).collect::<Vec<_>>(),
        "every round's line, in order"
    );
    assert_eq!(file[0]["unsaved_checkpoints"], 1);
    assert!(file[1]["metrics_write_failures"].as_u64().unwrap() >= 1);
    let last = file.last().unwrap();
    assert!(last.get("unsaved_checkpoints").is_none(), "{last}");
    assert!(last.get("metrics_lines_lost").is_none(), "{last}");
    assert_eq!(latest_checkpoint_round(&checkpoints(0)), ROUNDS - 1);

    // Node 1: at every commit, the durable part of the metrics file has every earlier round's line.
    let text = std::fs::read_to_string(metrics(1)).unwrap();
    let commits = journal.commits.lock().unwrap().clone();
    assert_eq!(commits.len() as u64, ROUNDS);
    for (round, durable) in commits {
        let durable_rounds: Vec<u64> = lines(&text[..durable as usize])
            .iter()
            .map(|l| l["round"].as_u64().unwrap())
            .collect();
        assert_eq!(
            durable_rounds,
            (0..round).collect::<Vec<_>>(),
            "after a power loss at round {round}'s checkpoint"
        );
    }
}
