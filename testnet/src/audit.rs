//! `--audit`: every real node acts as an honest-but-curious attacker on the chunks its virtual nodes receive
//! (Shatter, PETS 2025, §6). For up to `--audit-chunks` accepted chunk copies per round, the attacker fills
//! the coordinates it does not hold with its own model of the round's start (`models::privacy` completion),
//! then runs the loss-based membership inference against the true sender's training set and the
//! linkability attack over every other node's training set.
//!
//! Ground truth stays out of the nodes: a node's [`node::observe::Observer`] hook reports which neighbour
//! VN identity sent a chunk (what the receiving VN sees anyway); only this harness, which numbered the
//! simulator's VNs or generated every in-process node's keys, maps that identity to its real node.
//!
//! Where the work happens: in `sim` mode inline, on the simulator's thread, so results are deterministic for
//! a seed; in `inproc` mode on one dedicated thread fed by a channel, so the nodes' tasks never wait for an
//! attack. Every attack draws from its own RNG seeded by (seed, round, attacker, chunk).

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use anyhow::Context;
use models::chunking::ChunkPartition;
use models::data::{Dataset, Split};
use models::nn::{ModelSpec, TaskInfo};
use models::privacy::{
    AuditConfig, AuditSummary, AuditTarget, Auditor, la_truth_index, nonmembers_for, summarize,
};
use node::observe::Observer;
use protocol::{ChunkFrame, Round};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use node::learner::LearningConfig;

/// `--audit-chunks` and `--audit-every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditSettings {
    pub chunks: usize,
    pub every: u64,
}

impl AuditSettings {
    /// Rounds 0, every, 2·every, … and always the last one.
    pub fn audits(&self, round: u64, rounds: u64) -> bool {
        round.is_multiple_of(self.every) || round + 1 == rounds
    }
}

/// The victims' data as only the harness knows it: each real node's training set and its non-member pool.
pub struct AuditData {
    train: Vec<Dataset>,
    nonmembers: Vec<Dataset>,
}

impl AuditData {
    /// From the split and the per-node index lists the learners were built from.
    pub fn new(split: &Split, parts: &[Vec<usize>]) -> Self {
        let train: Vec<Dataset> = parts.iter().map(|p| split.train.subset(p)).collect();
        let nonmembers = train
            .iter()
            .map(|t| nonmembers_for(t, &split.test))
            .collect();
        Self { train, nonmembers }
    }
}

/// Everything needed to audit one setting of a run.
pub struct AuditPlan {
    settings: AuditSettings,
    rounds: u64,
    seed: u64,
    data: Arc<AuditData>,
    spec: ModelSpec,
    info: TaskInfo,
    partition: Arc<ChunkPartition>,
    /// With `--algo pdmm`: (θ, ρ), to turn its Δz frames into the models a neighbour recovers from them.
    pdmm: Option<(f64, f64)>,
}

impl AuditPlan {
    /// The run's algorithm: PDMM's frames are dual increments, which the audit first turns into the sender's
    /// model as the receiving neighbour can ([`crate::pdmm_view`]).
    pub fn with_algorithm(mut self, algo: node::algo::AlgoSpec) -> Self {
        if let node::algo::AlgoSpec::Pdmm(p) = algo {
            self.pdmm = Some((p.theta, p.rho));
        }
        self
    }

    /// `None` without `--audit` (`settings` is `None`). `learning` is the run's (seed, model); `rounds` its
    /// length.
    pub fn new(
        settings: Option<AuditSettings>,
        rounds: u64,
        learning: &LearningConfig,
        data: &Arc<AuditData>,
        split: &Split,
        partition: Arc<ChunkPartition>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(settings) = settings else {
            return Ok(None);
        };
        let info = TaskInfo::of(&split.train)?;
        Ok(Some(Self {
            settings,
            rounds,
            seed: learning.seed,
            data: data.clone(),
            spec: learning.model_spec(&info),
            info,
            partition,
            pdmm: None,
        }))
    }

    fn worker(&self) -> anyhow::Result<Worker> {
        let auditor = Auditor::new(
            &self.spec,
            &self.info,
            self.partition.clone(),
            AuditConfig::default(),
            &models::device::best_device(),
        )
        .context("building the audit model")?;
        Ok(Worker {
            auditor,
            data: self.data.clone(),
            seed: self.seed,
            records: Vec::new(),
            errors: Vec::new(),
        })
    }

    fn observer<I>(
        &self,
        owner: impl Fn(&I) -> Option<usize> + Send + Sync + 'static,
        sink: Sink,
    ) -> AuditObserver<I> {
        AuditObserver {
            settings: self.settings,
            rounds: self.rounds,
            nodes: self.data.train.len(),
            owner: Box::new(owner),
            state: Mutex::new(State::default()),
            sink,
            pdmm: self
                .pdmm
                .map(|(theta, rho)| Mutex::new(crate::pdmm_view::PdmmView::new(theta, rho))),
        }
    }

    /// Attacks run inside the observer's calls (the simulator: deterministic order).
    pub fn inline<I>(
        &self,
        owner: impl Fn(&I) -> Option<usize> + Send + Sync + 'static,
    ) -> anyhow::Result<AuditObserver<I>> {
        Ok(self.observer(
            owner,
            Sink::Inline(Mutex::new(Some(Box::new(self.worker()?)))),
        ))
    }

    /// Attacks run on a thread of their own (the libp2p runtime: nodes never wait for them).
    pub fn threaded<I>(
        &self,
        owner: impl Fn(&I) -> Option<usize> + Send + Sync + 'static,
    ) -> anyhow::Result<AuditObserver<I>> {
        let mut worker = self.worker()?;
        // Bounded (DESIGN: bound everything): a few audited rounds of work in flight. Chunks that find it full
        // are skipped and counted rather than making the node's tasks wait.
        let bound = AUDIT_QUEUE_ROUNDS * self.data.train.len() * self.settings.chunks;
        let (tx, rx) = mpsc::sync_channel::<Job>(bound);
        let thread = std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || {
                for job in rx {
                    worker.attack(job);
                }
                worker
            })
            .context("starting the audit thread")?;
        Ok(self.observer(owner, Sink::Thread(Mutex::new(Some((tx, thread))))))
    }
}

/// Audited rounds of attacks the inproc worker's queue holds.
const AUDIT_QUEUE_ROUNDS: usize = 4;

/// One attacked chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkRecord {
    pub round: u64,
    pub attacker: usize,
    /// The true sender (ground truth).
    pub victim: usize,
    pub chunk: usize,
    pub mia_auc: f64,
    pub la_correct: bool,
}

/// A chunk to attack, with the attacker's completion base.
struct Job {
    round: u64,
    attacker: usize,
    victim: usize,
    chunk: usize,
    values: Vec<f32>,
    base: Arc<Vec<f32>>,
}

struct Worker {
    auditor: Auditor,
    data: Arc<AuditData>,
    seed: u64,
    records: Vec<ChunkRecord>,
    errors: Vec<String>,
}

impl Worker {
    fn attack(&mut self, job: Job) {
        let data = &self.data;
        let candidates: Vec<&Dataset> = (0..data.train.len())
            .filter(|&i| i != job.attacker)
            .map(|i| &data.train[i])
            .collect();
        let target = AuditTarget {
            victim_train: &data.train[job.victim],
            nonmembers: &data.nonmembers[job.victim],
            candidates: &candidates,
        };
        let mut rng =
            ChaCha8Rng::seed_from_u64(attack_seed(self.seed, job.round, job.attacker, job.chunk));
        match self
            .auditor
            .audit_chunk(&job.base, job.chunk, &job.values, &target, &mut rng)
        {
            Ok(a) => self.records.push(ChunkRecord {
                round: job.round,
                attacker: job.attacker,
                victim: job.victim,
                chunk: job.chunk,
                mia_auc: a.mia.auc,
                la_correct: la_truth_index(job.attacker, job.victim) == Some(a.la.prediction),
            }),
            Err(e) => {
                // Keep the first few: one bad model usually fails every attack the same way.
                if self.errors.len() < 8 {
                    self.errors.push(format!(
                        "round {} node {} chunk {}: {e}",
                        job.round, job.attacker, job.chunk
                    ));
                }
            }
        }
    }
}

/// SplitMix64-style mixing of the attack's coordinates into one seed.
fn attack_seed(seed: u64, round: u64, attacker: usize, chunk: usize) -> u64 {
    let mut h = seed ^ 0xa0d1_7000_0000_0000;
    for v in [round, attacker as u64, chunk as u64] {
        h = (h ^ v).wrapping_add(0x9E37_79B9_7F4A_7C15);
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 31;
    }
    h
}

/// The harness's map from a VN identity to the real node that owns it.
type Owner<I> = Box<dyn Fn(&I) -> Option<usize> + Send + Sync>;

enum Sink {
    Inline(Mutex<Option<Box<Worker>>>),
    Thread(Mutex<Option<(mpsc::SyncSender<Job>, JoinHandle<Worker>)>>),
}

#[derive(Default)]
struct State {
    /// Each attacker's model at the start of the round it is in (the completion base).
    base: HashMap<usize, (u64, Arc<Vec<f32>>)>,
    /// Chunks taken per (attacker, round).
    taken: HashMap<(usize, u64), usize>,
    /// Chunks not attacked, by reason.
    skipped: BTreeMap<&'static str, u64>,
}

/// The [`Observer`] that turns received chunks into attacks. `I` is the VN identity the driver uses
/// (`u32` in the simulator, `PeerId` in process).
pub struct AuditObserver<I> {
    settings: AuditSettings,
    rounds: u64,
    nodes: usize,
    owner: Owner<I>,
    state: Mutex<State>,
    sink: Sink,
    /// PDMM runs: every edge's duals, replayed to recover the models behind the frames.
    pdmm: Option<Mutex<crate::pdmm_view::PdmmView>>,
}

impl<I> AuditObserver<I> {
    /// Waits for the attacks still queued and returns the results. Chunks that arrive afterwards are ignored.
    pub fn finish(&self) -> AuditReport {
        let worker = match &self.sink {
            Sink::Inline(w) => w
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .map(|w| *w),
            Sink::Thread(t) => t
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .and_then(|(tx, thread)| {
                    drop(tx);
                    thread.join().ok()
                }),
        };
        let (records, mut errors) = worker.map_or_else(
            || (Vec::new(), vec!["the audit worker was lost".to_string()]),
            |w| (w.records, w.errors),
        );
        if records.is_empty() && errors.is_empty() {
            errors.push("no chunk was attacked".into());
        }
        let skipped = std::mem::take(
            &mut self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .skipped,
        );
        AuditReport::new(self.settings, self.nodes, records, skipped, errors)
    }
}

impl<I: Send + Sync> Observer<I> for AuditObserver<I> {
    fn wants_params(&self, _node: usize, round: Round) -> bool {
        self.settings.audits(round.get(), self.rounds)
    }

    fn round_start(&self, node: usize, round: Round, params: &[f32]) {
        let round = round.get();
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.base.insert(node, (round, Arc::new(params.to_vec())));
        // Chunks of earlier rounds can no longer be attacked by this node (no base): forget their counts.
        st.taken.retain(|&(n, r), _| n != node || r >= round);
    }

    fn chunk_received(&self, node: usize, _vn: usize, from: &I, frame: &ChunkFrame) {
        let round = frame.round.get();
        // PDMM: every frame updates the replayed duals (audited round or not); the attack reads the model
        // the receiver recovers, not the frame.
        let recovered = match &self.pdmm {
            Some(view) => {
                let Some(sender) = (self.owner)(from) else {
                    return;
                };
                let mut view = view.lock().unwrap_or_else(PoisonError::into_inner);
                match view.observe(node, sender, round, &frame.values) {
                    Some(w) => Some(w),
                    None => return,
                }
            }
            None => None,
        };
        if !self.settings.audits(round, self.rounds) {
            return;
        }
        let job = {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let taken = st.taken.get(&(node, round)).copied().unwrap_or(0);
            if taken >= self.settings.chunks {
                return;
            }
            let skip = |st: &mut State, why: &'static str| *st.skipped.entry(why).or_default() += 1;
            let Some(victim) = (self.owner)(from).filter(|&v| v < self.nodes) else {
                skip(&mut st, "sender not in this network");
                return;
            };
            if victim == node {
                skip(&mut st, "from a sibling virtual node");
                return;
            }
            let Some(base) = st
                .base
                .get(&node)
                .filter(|(r, _)| *r == round)
                .map(|(_, b)| b.clone())
            else {
                skip(&mut st, "arrived before the attacker's round started");
                return;
            };
            st.taken.insert((node, round), taken + 1);
            Job {
                round,
                attacker: node,
                victim,
                chunk: frame.chunk.get(),
                values: recovered.unwrap_or_else(|| frame.values.clone()),
                base,
            }
        };
        match &self.sink {
            Sink::Inline(w) => {
                if let Some(w) = w.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                    w.attack(job);
                }
            }
            Sink::Thread(t) => {
                if let Some((tx, _)) = t.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
                    && tx.try_send(job).is_err()
                {
                    let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    *st.skipped.entry("audit queue full").or_default() += 1;
                }
            }
        }
    }
}

/// Audit figures of one audited round.
#[derive(Debug, Clone, Serialize)]
pub struct RoundAudit {
    pub round: u64,
    #[serde(flatten)]
    pub summary: AuditSummary,
}

/// What `summary.json` carries under `audit`.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub chunks_per_rn: usize,
    pub every: u64,
    /// Over every attacked chunk of the run.
    pub overall: AuditSummary,
    /// The last audited round (the trained model: the paper's figures).
    pub last: Option<RoundAudit>,
    pub rounds: Vec<RoundAudit>,
    /// Mean MIA AUC per victim over the chunks attacked of it (`null`: never attacked).
    pub per_victim_auc: Vec<Option<f64>>,
    pub skipped: BTreeMap<&'static str, u64>,
    pub errors: Vec<String>,
    #[serde(skip)]
    pub records: Vec<ChunkRecord>,
}

impl AuditReport {
    fn new(
        settings: AuditSettings,
        nodes: usize,
        records: Vec<ChunkRecord>,
        skipped: BTreeMap<&'static str, u64>,
        errors: Vec<String>,
    ) -> Self {
        let sum = |rs: &[&ChunkRecord]| {
            let aucs: Vec<f64> = rs.iter().map(|r| r.mia_auc).collect();
            // summarize takes (predicted, true) pairs: a correct guess is a matching pair.
            let la: Vec<(usize, usize)> =
                rs.iter().map(|r| (usize::from(!r.la_correct), 0)).collect();
            summarize(&aucs, &la, nodes)
        };
        let mut by_round: BTreeMap<u64, Vec<&ChunkRecord>> = BTreeMap::new();
        let mut by_victim: Vec<Vec<f64>> = vec![Vec::new(); nodes];
        for r in &records {
            by_round.entry(r.round).or_default().push(r);
            by_victim[r.victim].push(r.mia_auc);
        }
        let rounds: Vec<RoundAudit> = by_round
            .iter()
            .map(|(&round, rs)| RoundAudit {
                round,
                summary: sum(rs),
            })
            .collect();
        let all: Vec<&ChunkRecord> = records.iter().collect();
        Self {
            chunks_per_rn: settings.chunks,
            every: settings.every,
            overall: sum(&all),
            last: rounds.last().cloned(),
            rounds,
            per_victim_auc: by_victim
                .iter()
                .map(|a| (!a.is_empty()).then(|| a.iter().sum::<f64>() / a.len() as f64))
                .collect(),
            skipped,
            errors,
            records,
        }
    }

    /// The attacks of `attacker` in `round`: (chunks, mean AUC, LA success), for metrics.jsonl.
    pub fn attacker_round(&self, attacker: usize, round: u64) -> Option<(usize, f64, f64)> {
        let rs: Vec<&ChunkRecord> = self
            .records
            .iter()
            .filter(|r| r.attacker == attacker && r.round == round)
            .collect();
        if rs.is_empty() {
            return None;
        }
        let n = rs.len() as f64;
        Some((
            rs.len(),
            rs.iter().map(|r| r.mia_auc).sum::<f64>() / n,
            rs.iter().filter(|r| r.la_correct).count() as f64 / n,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audited_rounds_include_the_last() {
        let a = AuditSettings {
            chunks: 8,
            every: 5,
        };
        let audited: Vec<u64> = (0..12).filter(|&r| a.audits(r, 12)).collect();
        assert_eq!(audited, vec![0, 5, 10, 11]);
    }

    #[test]
    fn attack_seeds_differ_by_coordinate() {
        let s = attack_seed(1, 2, 3, 4);
        assert_ne!(s, attack_seed(1, 2, 3, 5));
        assert_ne!(s, attack_seed(1, 2, 4, 3));
        assert_ne!(s, attack_seed(2, 2, 3, 4));
        assert_eq!(s, attack_seed(1, 2, 3, 4));
    }

    #[test]
    fn report_aggregates_rounds_victims_and_attackers() {
        let rec = |round, attacker, victim, auc, ok| ChunkRecord {
            round,
            attacker,
            victim,
            chunk: 0,
            mia_auc: auc,
            la_correct: ok,
        };
        let settings = AuditSettings {
            chunks: 2,
            every: 1,
        };
        let r = AuditReport::new(
            settings,
            3,
            vec![
                rec(0, 0, 1, 0.9, true),
                rec(0, 1, 2, 0.7, false),
                rec(1, 0, 2, 0.5, false),
            ],
            BTreeMap::new(),
            Vec::new(),
        );
        assert_eq!(r.rounds.len(), 2);
        assert_eq!(r.rounds[0].summary.chunks, 2);
        assert!((r.rounds[0].summary.mia_auc_mean - 0.8).abs() < 1e-12);
        assert_eq!(r.rounds[0].summary.la_success, 0.5);
        assert_eq!(r.last.as_ref().map(|l| l.round), Some(1));
        assert_eq!(r.overall.chunks, 3);
        assert!((r.overall.la_success - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(r.overall.la_chance, 0.5);
        assert_eq!(r.per_victim_auc[0], None);
        assert_eq!(r.per_victim_auc[1], Some(0.9));
        assert!((r.per_victim_auc[2].unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(r.attacker_round(0, 0), Some((1, 0.9, 1.0)));
        assert_eq!(r.attacker_round(2, 0), None);
    }
}
