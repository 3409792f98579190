//! Churn over real libp2p on 127.0.0.1 (issue 15): a node stopped mid-run, then started again from its
//! checkpoint with `resume`, as `node run --resume` does after a crash.
//!
//! - While it is away, the others never wait out the exchange deadline for it: its connections close, it
//!   cannot be dialled again, and their VNs stop waiting for its chunks (`VnInput::PeerGone`) — also in the
//!   overlays negotiated before it left.
//! - Back from its checkpoint, it resumes after the last round it saved, asks its peers which round they are
//!   at (catch-up probes), starts at the network's round instead of its own, and within two rounds is no
//!   further behind the others than one round, receiving copies; it and the others finish every round, and
//!   none of the others skips a round (it does not pull them).
//!
//! Assertions are about round numbers and counts, not timing, except the deadline bound (an exchange that
//! waited for the gone node would last the whole 5 s deadline; an ordinary one lasts well under a second
//! even on two loaded cores). The whole test is bounded by `LIMIT`.

use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::engine::RoundMetrics;
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, NodeHandle, Timing};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(300);
const NODES: usize = 4;
const K: usize = 2;
const ROUNDS: u64 = 24;
/// Node 3 is stopped once it reported this round, and restarted once another node reported `AWAY` rounds
/// more: it comes back well beyond what its VNs accept (`MAX_FUTURE_ROUNDS` = 2).
const STOP_AFTER: u64 = 2;
const AWAY: u64 = 5;
const VICTIM: usize = NODES - 1;

fn learning() -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![16] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            // Rounds of about a second, as in results/churn-procs: longer than the warm-up, so that "in step"
            // means something while the restarted node starts.
            work: LocalWork::Epochs(30),
            clip: None,
        },
        seed: 3,
        max_test_samples: Some(200),
    }
}

/// Every VN on the list; only node 0's with addresses (the bootstrap entries), as in procs mode.
fn peer_list(ids: &[Vec<PeerId>], boot: &[(PeerId, Multiaddr)]) -> PeerList {
    PeerList::from_entries(ids.iter().flatten().map(|p| {
        let addr = boot.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone());
        (*p, addr)
    }))
}

/// Round reports of every node, in the order they were seen (polled every 10 ms).
#[derive(Default)]
struct Log {
    rounds: Vec<(usize, RoundMetrics)>,
}

impl Log {
    fn poll(&mut self, events: &mut [mpsc::Receiver<NodeEvent>]) {
        for (i, rx) in events.iter_mut().enumerate() {
            while let Ok(e) = rx.try_recv() {
                if let NodeEvent::RoundFinished(m) = e {
                    self.rounds.push((i, m));
                }
            }
        }
    }

    /// The newest round any node but `but` reported among the first `upto` reports.
    fn others_newest(&self, but: usize, upto: usize) -> Option<u64> {
        self.rounds[..upto]
            .iter()
            .filter(|(i, _)| *i != but)
            .map(|(_, m)| m.round.get())
            .max()
    }

    /// Polls until `done` holds, within `LIMIT`.
    async fn until(
        &mut self,
        events: &mut [mpsc::Receiver<NodeEvent>],
        what: &str,
        done: impl Fn(&Self) -> bool,
    ) {
        let wait = async {
            loop {
                self.poll(events);
                if done(self) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .unwrap_or_else(|_| panic!("{what}: not within {LIMIT:?}"));
    }
}

async fn start(
    keys: Vec<Keypair>,
    index: usize,
    peers: PeerList,
    checkpoints: Option<std::path::PathBuf>,
    listen: Option<Vec<Multiaddr>>,
    resume: bool,
) -> (NodeHandle, mpsc::Receiver<NodeEvent>) {
    let lc = learning();
    let (split, parts) = lc.load().unwrap();
    let learner = lc.learners(&split, &parts, [index]).unwrap().remove(0);
    let mut b = NodeBuilder::new(keys, lc, index)
        .learner(learner)
        .peers(peers)
        .degree(2)
        .rounds(ROUNDS)
        .timing(Timing::loopback())
        .checkpoint_dir(checkpoints)
        .resume(resume);
    if let Some(l) = listen {
        b = b.listen(l);
    }
    b.spawn().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_not_waited_for_and_rejoins_from_its_checkpoint_within_two_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<Keypair>> = (0..NODES)
        .map(|_| (0..K).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<Vec<PeerId>> = keys
        .iter()
        .map(|ks| ks.iter().map(|k| k.public().to_peer_id()).collect())
        .collect();
    let mut handles = Vec::new();
    let mut events = Vec::new();
    let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
    for (i, ks) in keys.iter().enumerate() {
        let checkpoints = (i == VICTIM).then(|| dir.path().join("node-3"));
        let (h, ev) = start(
            ks.clone(),
            i,
            peer_list(&ids, &boot),
            checkpoints,
            None,
            false,
        )
        .await;
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
    let victim_addrs: Vec<Multiaddr> = handles[VICTIM]
        .addresses()
        .iter()
        .map(|a| a.addr.clone())
        .collect();

    let mut log = Log::default();
    log.until(&mut events, "the victim's round", |l| {
        l.rounds
            .iter()
            .any(|(i, m)| *i == VICTIM && m.round.get() >= STOP_AFTER)
    })
    .await;
    handles[VICTIM].stop();
    tokio::time::timeout(LIMIT, handles[VICTIM].wait())
        .await
        .expect("stopped in time");
    log.poll(&mut events);
    let stopped_at = log.rounds.len();
    let saved = log
        .rounds
        .iter()
        .filter(|(i, _)| *i == VICTIM)
        .map(|(_, m)| m.round.get())
        .max()
        .expect("the victim reported rounds");
    log.until(&mut events, "the others moving on", |l| {
        l.others_newest(VICTIM, l.rounds.len())
            .is_some_and(|r| r >= saved + AWAY)
    })
    .await;
    let restarted_at = log.rounds.len();
    let network_at_restart = log.others_newest(VICTIM, restarted_at).unwrap();

    let (h, ev) = start(
        keys[VICTIM].clone(),
        VICTIM,
        peer_list(&ids, &boot),
        Some(dir.path().join("node-3")),
        Some(victim_addrs),
        true,
    )
    .await;
    handles[VICTIM] = h;
    events[VICTIM] = ev;
    // Polled on until every node finished, so that the log keeps the order in which rounds were reported.
    let all = handles.clone();
    log.until(&mut events, "every node finishing", move |_| {
        all.iter().all(|h| h.status().finished)
    })
    .await;
    for (i, h) in handles.iter().enumerate() {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .unwrap_or_else(|_| panic!("node {i} finished in time"));
        assert_eq!(s.error, None, "node {i}");
        assert!(s.finished, "node {i}");
    }
    log.poll(&mut events);

    // The others: every round, none skipped (nobody pulled them forward), and none waited out the deadline
    // for the stopped node while it was away.
    let deadline = Timing::loopback().exchange_timeout_ms as f64 / 1000.0;
    for i in (0..NODES).filter(|&i| i != VICTIM) {
        let mine: Vec<&RoundMetrics> = log
            .rounds
            .iter()
            .filter(|(j, _)| *j == i)
            .map(|(_, m)| m)
            .collect();
        let rounds: Vec<u64> = mine.iter().map(|m| m.round.get()).collect();
        assert_eq!(rounds, (0..ROUNDS).collect::<Vec<_>>(), "node {i}");
        assert!(mine.iter().all(|m| m.skipped_rounds == 0), "node {i}");
        for (_, m) in log.rounds[stopped_at..restarted_at]
            .iter()
            .filter(|(j, _)| *j == i)
        {
            assert!(
                m.exchange_secs < deadline - 0.5,
                "node {i} round {} waited {:.2} s for its exchange (deadline {deadline} s): it waited for the \
                 stopped node",
                m.round,
                m.exchange_secs
            );
        }
    }

    // The victim: resumed right after its checkpoint, at the network's round rather than its own, in step
    // within two rounds, and on to the last round.
    let back: Vec<(usize, &RoundMetrics)> = log.rounds[restarted_at..]
        .iter()
        .enumerate()
        .filter(|(_, (i, _))| *i == VICTIM)
        .map(|(at, (_, m))| (restarted_at + at, m))
        .collect();
    let rounds: Vec<u64> = back.iter().map(|(_, m)| m.round.get()).collect();
    // What the victim did after its restart (shown with --nocapture): its round, the others' newest then,
    // its neighbours over both VNs and the copies it received.
    eprintln!(
        "victim after the restart (round, others' newest, neighbours, copies, round s): {:?}",
        back.iter()
            .map(|(at, m)| (
                m.round.get(),
                log.others_newest(VICTIM, *at),
                m.neighbours,
                m.copies_received,
                (m.round_secs * 100.0).round() / 100.0
            ))
            .collect::<Vec<_>>()
    );
    let first = back.first().expect("rounds after the restart").1;
    assert!(first.resumed, "{first:?}");
    assert!(
        first.round.get() >= network_at_restart,
        "started at round {} while the others had reported {network_at_restart}: it did not catch up at once \
         (rounds after the restart: {rounds:?})",
        first.round
    );
    assert!(
        first.skipped_rounds > 0 && first.round.get() - first.skipped_rounds <= saved + 2,
        "it resumes after its checkpoint (of round {saved}, or of the next if it was stopped between saving it          and reporting it) and skips to the network's round: {first:?}"
    );
    assert_eq!(rounds.last(), Some(&(ROUNDS - 1)), "{rounds:?}");
    // In step: no further behind the others' newest reported round than one (the round they are finishing
    // while it reports), with copies. (Not asserted: how far ahead it may run. A node that lands ahead of
    // the others finds the overlays of its first rounds frozen at the others and pairs with its own VNs,
    // whose rounds end at once; measured here it ran up to 7 rounds ahead by the end. See
    // results/churn-procs/README.md.)
    let in_step = back.iter().take(2).any(|(at, m)| {
        let others = log.others_newest(VICTIM, *at).unwrap();
        m.copies_received > 0 && others <= m.round.get() + 1
    });
    assert!(
        in_step,
        "not in step with the others within two rounds of its restart (its round, the others' newest, \
         copies, round s): {:?}",
        back.iter()
            .take(8)
            .map(|(at, m)| (
                m.round.get(),
                log.others_newest(VICTIM, *at),
                m.copies_received,
                m.round_secs
            ))
            .collect::<Vec<_>>()
    );
}
