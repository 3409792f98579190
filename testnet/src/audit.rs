//! `--audit`: every real node acts as an honest-but-curious attacker on the chunks its virtual nodes receive
//! (Shatter, PETS 2025, §6). For up to `--audit-chunks` accepted chunk copies per round, the attacker fills
//! the coordinates it does not hold with its own model of the round's start (`models::privacy` completion),
//! then runs the loss-based membership inference against the true sender's training set and the
//! linkability attack over every other node's training set.
//!
//! What the attacker reads depends on the algorithm ([`Reading`]): a chunk of the run's static partition
//! (Shatter, EL, D-PSGD, chunking-only, GHP); a chunk of the round's own random partition, recomputed from
//! the run seed as every node does (sparsify-random), completed like any chunk with the attacker's model of
//! the round's start (the paper §2.1: "completes the vector with the aggregated model updates from the
//! previous round"); the coordinates a top-k frame names (sparsify-topk), completed the same way; or each
//! noisy gossip message of the round's ten exchanges (Muffliato: whole models).
//! Besides the arg-min LA per chunk, the round's chunks of each attacker are linked jointly by assignment
//! (`models::privacy::link_by_assignment`: at most one chunk per index per real node and exchange, which is
//! what the protocol lets a node send). Each sender's chunk is attacked once per exchange: the copies that
//! reach several of the attacker's VNs are the same chunk.
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
use models::data::Inputs;
use models::data::{Dataset, Split};
use models::nn::{ModelSpec, TaskInfo};
use models::privacy::{
    AuditConfig, AuditSummary, AuditTarget, Auditor, FcLayer, HeldGradient, ItemTable,
    infer_rated_items, invert_fc, la_truth_index, link_by_assignment, median, nonmembers_for, psnr,
    ssim, summarize, to_unit_range,
};
use node::algo::{AlgoSpec, OneChunk};
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
    /// `--audit-la-samples`: training samples of each candidate the LA scores (its cost: (n − 1) × this
    /// forward passes per chunk).
    pub la_samples: usize,
}

impl AuditSettings {
    /// Rounds 0, every, 2·every, … and always the last one; with `every` ≥ the run's rounds, the last one
    /// only (the trained model, the paper's figures, without paying for an audit of the initial model).
    pub fn audits(&self, round: u64, rounds: u64) -> bool {
        round + 1 == rounds || (self.every < rounds && round.is_multiple_of(self.every))
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

/// How the attacker reads what arrives, from the algorithm the run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Exchanges per round: a frame's number is `round · steps + step` (Muffliato: 10).
    pub steps: u64,
    /// `Some(seed)`: a chunk index points into the round's own partition drawn from the run seed
    /// (sparsify-random), not into the static one.
    pub per_round_cut: Option<u64>,
    /// Frames name their own coordinates (sparsify-topk: indices, then values; `node::algo::decode_sparse`).
    pub sparse_frames: bool,
    /// A node sends one chunk per index per exchange through k VNs (Shatter, GHP with k > 1): the chunk
    /// index labels the assignment's slots. Otherwise a node sends one payload per exchange.
    pub index_slots: bool,
}

impl Reading {
    /// What `algo` sends over a partition of `chunks` chunks in a run seeded `seed`.
    pub fn of(algo: &AlgoSpec, chunks: usize, seed: u64) -> Self {
        Self {
            steps: u64::from(algo.steps().max(1)),
            per_round_cut: matches!(algo, AlgoSpec::SparsifyRandom { .. }).then_some(seed),
            sparse_frames: matches!(algo, AlgoSpec::SparsifyTopk { .. }),
            index_slots: algo.uses_vns() && chunks > 1,
        }
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
    reading: Reading,
    /// The run's learning rate (GIA: the pseudo-gradient is (θ₀ − θ₁) / η).
    lr: f32,
    /// With `--algo pdmm`: (θ, ρ), to turn its Δz frames into the models a neighbour recovers from them.
    pdmm: Option<(f64, f64)>,
}

impl AuditPlan {
    /// `None` without `--audit` (`settings` is `None`). `learning` is the run's (seed, model); `rounds` its
    /// length; `algo` what the nodes run over `partition`.
    pub fn new(
        settings: Option<AuditSettings>,
        rounds: u64,
        learning: &LearningConfig,
        data: &Arc<AuditData>,
        split: &Split,
        partition: Arc<ChunkPartition>,
        algo: &AlgoSpec,
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
            reading: Reading::of(algo, partition.k(), learning.seed),
            partition,
            lr: learning.train.lr as f32,
            // PDMM's frames are dual increments, which the audit first turns into the sender's model as the
            // receiving neighbour can ([`crate::pdmm_view`]).
            pdmm: match algo {
                AlgoSpec::Pdmm(p) => Some((p.theta, p.rho)),
                _ => None,
            },
        }))
    }

    fn worker(&self) -> anyhow::Result<Worker> {
        let auditor = Auditor::new(
            &self.spec,
            &self.info,
            self.partition.clone(),
            AuditConfig {
                la_max_per_candidate: self.settings.la_samples,
                ..AuditConfig::default()
            },
            &models::device::best_device(),
        )
        .context("building the audit model")?;
        let probe =
            models::nn::Model::new(&self.spec, &self.info, 0, &models::device::best_device()).ok();
        // Matrix factorisation: which items the victim's users rated (image inversion does not apply).
        let items = probe.as_ref().and_then(|m| item_table(m, &self.info));
        // GIA only where the first layer sees the raw input (an MLP): the analytic FC inversion.
        let gia = probe
            .as_ref()
            .and_then(|m| FcLayer::first_of(m).ok())
            .map(|layer| Gia {
                layer,
                lr: self.lr,
                shape: match self.data.train.first().and_then(|t| t.sample_shape()) {
                    Some(&[c, h, w]) => Some([c, h, w]),
                    _ => None,
                },
            });
        Ok(Worker {
            auditor,
            gia,
            items,
            partition: self.partition.clone(),
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
            reading: self.reading,
            partition: self.partition.clone(),
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
    /// The exchange it came in (`round · steps + step`; the round itself for one-step algorithms).
    pub exchange: u64,
    pub attacker: usize,
    /// The true sender (ground truth).
    pub victim: usize,
    pub chunk: usize,
    pub mia_auc: f64,
    pub la_correct: bool,
    /// The assignment LA named the true sender (set when the report is made: it needs the whole round).
    pub la_assignment_correct: bool,
    /// The assignment's slot label (the chunk index where a node sends one chunk per index, else 0).
    #[serde(skip)]
    pub label: usize,
    /// The true sender's position among the LA candidates.
    #[serde(skip)]
    pub truth: usize,
    /// The completed model's mean loss per LA candidate (the assignment's costs).
    #[serde(skip)]
    pub mean_losses: Vec<f64>,
    /// GIA (MLP models only): PSNR and SSIM of the analytic FC inversion against the victim's best-matching
    /// training sample, and the share of input features it recovered.
    pub gia: Option<GiaScore>,
    /// Rated-items inference (matrix factorisation only).
    pub items: Option<ItemsScore>,
}

/// One chunk's rated-items inference (`models::privacy::items`): the ROC-AUC with which the item rows the
/// chunk shows moving name the victim's rated items, against the victim's own round start (ground truth,
/// the strongest attacker) and against the attacker's own round start (what an attacker holds), and the
/// share of the victim's rated items found exactly (a held coordinate moved, victim's start).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ItemsScore {
    pub auc_victim_start: f64,
    pub auc_own_start: f64,
    pub found: f64,
}

/// The item embedding of a matrix-factorisation model, `None` for any other model.
fn item_table(model: &models::nn::Model, info: &TaskInfo) -> Option<ItemTable> {
    let TaskInfo::Rating { num_items, .. } = *info else {
        return None;
    };
    let mut offset = 0;
    for (name, n) in model.param_layout() {
        if name == models::nn::mf::ITEMS && num_items > 0 && n % num_items == 0 {
            return Some(ItemTable {
                range: offset..offset + n,
                factors: n / num_items,
            });
        }
        offset += n;
    }
    None
}

/// The item ids a node's training ratings name, sorted, once each.
fn rated_items(train: &Dataset) -> Vec<u32> {
    let Inputs::Pairs { pairs, .. } = train.inputs() else {
        return Vec::new();
    };
    let mut items: Vec<u32> = pairs.iter().map(|p| p[1]).collect();
    items.sort_unstable();
    items.dedup();
    items
}

/// One chunk's gradient inversion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GiaScore {
    pub psnr: f64,
    /// `None` for inputs that are not images (C × H × W).
    pub ssim: Option<f64>,
    pub coverage: f64,
}

/// The gradient inversion a worker runs on each chunk of an MLP run.
struct Gia {
    layer: FcLayer,
    lr: f32,
    shape: Option<[usize; 3]>,
}

/// Victim samples a reconstruction is compared with (the best match counts): bounds the cost per chunk.
const GIA_MAX_TRUTHS: usize = 8192;

impl Gia {
    /// Inverts the pseudo-gradient `(θ₀ − θ₁) / η` held on `indices` (θ₀: the victim's own round-start
    /// model, ground truth the harness has, the strongest attacker; θ₁: the received values) and scores the
    /// reconstruction against the victim's best-matching training sample.
    fn score(
        &self,
        victim_start: &[f32],
        indices: &[u32],
        values: &[f32],
        victim_train: &Dataset,
    ) -> models::Result<GiaScore> {
        let held = HeldGradient::from_coordinates(victim_start, indices, values, self.lr)?;
        let rec = invert_fc(&self.layer, &held)?;
        let recon = rec.filled();
        let Inputs::Dense {
            values: pixels,
            sample_shape,
        } = victim_train.inputs()
        else {
            return Err(models::ModelsError::Config("GIA needs dense inputs".into()));
        };
        let n: usize = sample_shape.iter().product();
        let mut best: Option<(f64, &[f32])> = None;
        for truth in pixels.chunks_exact(n.max(1)).take(GIA_MAX_TRUTHS) {
            let (t, r) = to_unit_range(truth, &recon);
            let p = psnr(&t, &r)?;
            if best.is_none_or(|(b, _)| p > b) {
                best = Some((p, truth));
            }
        }
        let (p, truth) = best.ok_or_else(|| {
            models::ModelsError::Config("GIA: the victim has no training sample".into())
        })?;
        let ssim = match self.shape {
            Some(shape) => {
                let (t, r) = to_unit_range(truth, &recon);
                Some(ssim(&t, &r, shape)?)
            }
            None => None,
        };
        Ok(GiaScore {
            psnr: p,
            ssim,
            coverage: rec.coverage(),
        })
    }
}

/// What a chunk's values are the coordinates of.
enum Coordinates {
    /// Chunk `chunk` of the run's static partition.
    Static,
    /// Chunk `chunk` of this round's own partition (sparsify-random).
    Cut(Arc<ChunkPartition>),
    /// The coordinates the frame named (sparsify-topk).
    Named(Vec<u32>),
}

/// A chunk to attack, with the attacker's completion base.
struct Job {
    round: u64,
    exchange: u64,
    attacker: usize,
    victim: usize,
    chunk: usize,
    label: usize,
    coordinates: Coordinates,
    values: Vec<f32>,
    base: Arc<Vec<f32>>,
    /// The victim's own model at the start of the round (GIA's θ₀), when the harness saw it.
    victim_start: Option<Arc<Vec<f32>>>,
}

struct Worker {
    auditor: Auditor,
    gia: Option<Gia>,
    items: Option<ItemTable>,
    partition: Arc<ChunkPartition>,
    data: Arc<AuditData>,
    seed: u64,
    records: Vec<ChunkRecord>,
    errors: Vec<String>,
}

impl Worker {
    fn attack(&mut self, job: Job) {
        let data = self.data.clone();
        let candidates: Vec<&Dataset> = (0..data.train.len())
            .filter(|&i| i != job.attacker)
            .map(|i| &data.train[i])
            .collect();
        let target = AuditTarget {
            victim_train: &data.train[job.victim],
            nonmembers: &data.nonmembers[job.victim],
            candidates: &candidates,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(attack_seed(
            self.seed,
            job.exchange,
            job.attacker,
            job.chunk ^ (job.victim << 16),
        ));
        let Some(truth) = la_truth_index(job.attacker, job.victim) else {
            return;
        };
        let audited = match &job.coordinates {
            Coordinates::Static => {
                self.auditor
                    .audit_chunk(&job.base, job.chunk, &job.values, &target, &mut rng)
            }
            Coordinates::Cut(cut) => cut.check_chunk(job.chunk).and_then(|()| {
                self.auditor.audit_coordinates(
                    &job.base,
                    job.chunk,
                    cut.indices(job.chunk),
                    &job.values,
                    &target,
                    &mut rng,
                )
            }),
            Coordinates::Named(indices) => self.auditor.audit_coordinates(
                &job.base,
                job.chunk,
                indices,
                &job.values,
                &target,
                &mut rng,
            ),
        };
        let gia = match (&self.gia, &job.victim_start, &audited) {
            (Some(g), Some(start), Ok(_)) => {
                let indices = match &job.coordinates {
                    Coordinates::Static => self.partition.indices(job.chunk),
                    Coordinates::Cut(cut) => cut.indices(job.chunk),
                    Coordinates::Named(ix) => ix,
                };
                Some(g.score(start, indices, &job.values, &data.train[job.victim]))
            }
            _ => None,
        };
        let gia = match gia {
            Some(Err(e)) => {
                self.note_error(&job, &e);
                None
            }
            Some(Ok(g)) => Some(g),
            None => None,
        };
        let items = match (&self.items, &job.victim_start, &audited) {
            (Some(table), Some(start), Ok(_)) => {
                let indices = match &job.coordinates {
                    Coordinates::Static => self.partition.indices(job.chunk),
                    Coordinates::Cut(cut) => cut.indices(job.chunk),
                    Coordinates::Named(ix) => ix,
                };
                let rated = rated_items(&data.train[job.victim]);
                let score = |reference: &[f32]| {
                    infer_rated_items(reference, indices, &job.values, table, &rated)
                };
                match (score(start), score(&job.base)) {
                    (Ok(v), Ok(o)) => Some(ItemsScore {
                        auc_victim_start: v.auc,
                        auc_own_start: o.auc,
                        found: v.found,
                    }),
                    (Err(e), _) | (_, Err(e)) => {
                        self.note_error(&job, &e);
                        None
                    }
                }
            }
            _ => None,
        };
        match audited {
            Ok(a) => self.records.push(ChunkRecord {
                round: job.round,
                exchange: job.exchange,
                attacker: job.attacker,
                victim: job.victim,
                chunk: job.chunk,
                mia_auc: a.mia.auc,
                la_correct: truth == a.la.prediction,
                la_assignment_correct: false,
                label: job.label,
                truth,
                mean_losses: a.la.mean_losses,
                gia,
                items,
            }),
            Err(e) => self.note_error(&job, &e),
        }
    }

    fn note_error(&mut self, job: &Job, e: &models::ModelsError) {
        // Keep the first few: one bad model usually fails every attack the same way.
        if self.errors.len() < 8 {
            self.errors.push(format!(
                "round {} node {} chunk {}: {e}",
                job.round, job.attacker, job.chunk
            ));
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
    /// Senders already attacked per (attacker, exchange), as (real node, chunk index): one sending VN
    /// sends one chunk per exchange, so this is the sending VN, which the attacker sees anyway.
    attacked: HashMap<(usize, u64), Vec<(usize, usize)>>,
    /// Sparsification's partitions of the rounds being audited, by round.
    cuts: BTreeMap<u64, Arc<ChunkPartition>>,
    /// Chunks not attacked, by reason.
    skipped: BTreeMap<&'static str, u64>,
}

/// The [`Observer`] that turns received chunks into attacks. `I` is the VN identity the driver uses
/// (`u32` in the simulator, `PeerId` in process).
pub struct AuditObserver<I> {
    settings: AuditSettings,
    rounds: u64,
    reading: Reading,
    partition: Arc<ChunkPartition>,
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
        let steps = self.reading.steps;
        st.attacked
            .retain(|&(n, e), _| n != node || e / steps >= round);
        // Cuts of rounds no node is in any more: every node started a later one.
        let oldest = st.base.values().map(|(r, _)| *r).min().unwrap_or(round);
        st.cuts.retain(|&r, _| r >= oldest);
    }

    fn chunk_received(&self, node: usize, _vn: usize, from: &I, frame: &ChunkFrame) {
        let exchange = frame.round.get();
        let round = exchange / self.reading.steps;
        // PDMM (one exchange per round): every frame updates the replayed duals (audited round or not); the
        // attack reads the model the receiver recovers, not the frame.
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
            let chunk = frame.chunk.get();
            let attacked = st.attacked.entry((node, exchange)).or_default();
            if attacked.contains(&(victim, chunk)) {
                skip(&mut st, "a copy of a chunk already attacked");
                return;
            }
            attacked.push((victim, chunk));
            st.taken.insert((node, round), taken + 1);
            let mut values = None;
            let coordinates = match self.reading.per_round_cut {
                _ if self.reading.sparse_frames => {
                    match node::algo::decode_sparse(&frame.values, self.partition.d()) {
                        Ok((indices, v)) => {
                            values = Some(v.to_vec());
                            Coordinates::Named(indices)
                        }
                        Err(_) => {
                            skip(&mut st, "a top-k frame that does not decode");
                            return;
                        }
                    }
                }
                None => Coordinates::Static,
                Some(seed) => Coordinates::Cut(
                    st.cuts
                        .entry(round)
                        .or_insert_with(|| {
                            Arc::new(OneChunk::round_partition(
                                &self.partition,
                                seed,
                                Round(round),
                            ))
                        })
                        .clone(),
                ),
            };
            Job {
                round,
                exchange,
                attacker: node,
                victim,
                chunk,
                label: if self.reading.index_slots { chunk } else { 0 },
                coordinates,
                values: recovered.or(values).unwrap_or_else(|| frame.values.clone()),
                base,
                victim_start: st
                    .base
                    .get(&victim)
                    .filter(|(r, _)| *r == round)
                    .map(|(_, b)| b.clone()),
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
    /// Gradient inversion of the round's chunks (MLP runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gia: Option<GiaSummary>,
    /// Rated-items inference on the round's chunks (matrix factorisation only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<ItemsSummary>,
}

/// Rated-items inference over a set of chunks: means of [`ItemsScore`]'s figures.
#[derive(Debug, Clone, Serialize)]
pub struct ItemsSummary {
    pub chunks: usize,
    pub auc_victim_start_mean: f64,
    pub auc_own_start_mean: f64,
    pub found_mean: f64,
}

impl ItemsSummary {
    fn of(rs: &[&ChunkRecord]) -> Option<Self> {
        let scores: Vec<ItemsScore> = rs.iter().filter_map(|r| r.items).collect();
        if scores.is_empty() {
            return None;
        }
        let mean =
            |f: fn(&ItemsScore) -> f64| scores.iter().map(f).sum::<f64>() / scores.len() as f64;
        Some(Self {
            chunks: scores.len(),
            auc_victim_start_mean: mean(|s| s.auc_victim_start),
            auc_own_start_mean: mean(|s| s.auc_own_start),
            found_mean: mean(|s| s.found),
        })
    }
}

/// Gradient inversion over a set of chunks: PSNR (dB) and SSIM against the victim's best-matching training
/// sample, and the share of input features recovered.
#[derive(Debug, Clone, Serialize)]
pub struct GiaSummary {
    pub chunks: usize,
    pub psnr_mean: f64,
    pub psnr_median: f64,
    /// `None` when the inputs are not images.
    pub ssim_mean: Option<f64>,
    pub coverage_mean: f64,
}

impl GiaSummary {
    fn of(rs: &[&ChunkRecord]) -> Option<Self> {
        let scores: Vec<GiaScore> = rs.iter().filter_map(|r| r.gia).collect();
        if scores.is_empty() {
            return None;
        }
        let n = scores.len() as f64;
        let psnrs: Vec<f64> = scores.iter().map(|g| g.psnr).collect();
        let ssims: Vec<f64> = scores.iter().filter_map(|g| g.ssim).collect();
        Some(Self {
            chunks: scores.len(),
            psnr_mean: psnrs.iter().sum::<f64>() / n,
            psnr_median: median(&psnrs).unwrap_or(f64::NAN),
            ssim_mean: (!ssims.is_empty()).then(|| ssims.iter().sum::<f64>() / ssims.len() as f64),
            coverage_mean: scores.iter().map(|g| g.coverage).sum::<f64>() / n,
        })
    }
}

/// What `summary.json` carries under `audit`.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub chunks_per_rn: usize,
    pub every: u64,
    /// Over every attacked chunk of the run.
    pub overall: AuditSummary,
    /// Gradient inversion over every attacked chunk (MLP runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gia: Option<GiaSummary>,
    /// Rated-items inference over every attacked chunk (matrix factorisation only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<ItemsSummary>,
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
        mut records: Vec<ChunkRecord>,
        skipped: BTreeMap<&'static str, u64>,
        mut errors: Vec<String>,
    ) -> Self {
        if let Err(e) = link_jointly(&mut records) {
            errors.push(format!("assignment LA: {e}"));
        }
        let sum = |rs: &[&ChunkRecord]| {
            let aucs: Vec<f64> = rs.iter().map(|r| r.mia_auc).collect();
            // summarize takes (predicted, true) pairs: a correct guess is a matching pair.
            let la: Vec<(usize, usize)> =
                rs.iter().map(|r| (usize::from(!r.la_correct), 0)).collect();
            let la_assignment: Vec<(usize, usize)> = rs
                .iter()
                .map(|r| (usize::from(!r.la_assignment_correct), 0))
                .collect();
            summarize(&aucs, &la, &la_assignment, nodes)
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
                gia: GiaSummary::of(rs),
                items: ItemsSummary::of(rs),
            })
            .collect();
        let all: Vec<&ChunkRecord> = records.iter().collect();
        Self {
            chunks_per_rn: settings.chunks,
            every: settings.every,
            overall: sum(&all),
            gia: GiaSummary::of(&all),
            items: ItemsSummary::of(&all),
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

    /// The attacks of `attacker` in `round`: (chunks, mean AUC, arg-min LA success, assignment LA
    /// success), for metrics.jsonl.
    pub fn attacker_round(&self, attacker: usize, round: u64) -> Option<(usize, f64, f64, f64)> {
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
            rs.iter().filter(|r| r.la_assignment_correct).count() as f64 / n,
        ))
    }
}

/// The assignment LA: each attacker's chunks of one exchange matched jointly to the candidates, at most one
/// per slot label per candidate; marks each record's `la_assignment_correct`.
fn link_jointly(records: &mut [ChunkRecord]) -> models::Result<()> {
    let mut groups: BTreeMap<(usize, u64), Vec<usize>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        groups.entry((r.attacker, r.exchange)).or_default().push(i);
    }
    for members in groups.values() {
        let losses: Vec<Vec<f64>> = members
            .iter()
            .map(|&i| records[i].mean_losses.clone())
            .collect();
        let labels: Vec<usize> = members.iter().map(|&i| records[i].label).collect();
        let named = link_by_assignment(&losses, &labels, 1)?;
        for (&i, n) in members.iter().zip(named) {
            records[i].la_assignment_correct = n == records[i].truth;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audited_rounds_include_the_last() {
        let a = AuditSettings {
            chunks: 8,
            every: 5,
            la_samples: 200,
        };
        let audited: Vec<u64> = (0..12).filter(|&r| a.audits(r, 12)).collect();
        assert_eq!(audited, vec![0, 5, 10, 11]);
        let only_last: Vec<u64> = (0..5).filter(|&r| a.audits(r, 5)).collect();
        assert_eq!(only_last, vec![4]);
    }

    #[test]
    fn attack_seeds_differ_by_coordinate() {
        let s = attack_seed(1, 2, 3, 4);
        assert_ne!(s, attack_seed(1, 2, 3, 5));
        assert_ne!(s, attack_seed(1, 2, 4, 3));
        assert_ne!(s, attack_seed(2, 2, 3, 4));
        assert_eq!(s, attack_seed(1, 2, 3, 4));
    }

    /// A record of 3 nodes (2 LA candidates) whose arg-min is right iff `ok`.
    fn rec(round: u64, attacker: usize, victim: usize, auc: f64, ok: bool) -> ChunkRecord {
        let truth = la_truth_index(attacker, victim).unwrap();
        let mut mean_losses = vec![1.0, 1.0];
        mean_losses[if ok { truth } else { 1 - truth }] = 0.5;
        ChunkRecord {
            round,
            exchange: round,
            attacker,
            victim,
            chunk: 0,
            mia_auc: auc,
            la_correct: ok,
            la_assignment_correct: false,
            label: 0,
            truth,
            mean_losses,
            gia: None,
            items: None,
        }
    }

    /// Two chunks of one exchange from nodes 1 and 2 both fit node 1's data best: arg-min names node 1 twice
    /// (one right); a node sends one payload per exchange, so the assignment gives node 1 the better fit and
    /// node 2 the other (both right). In another exchange the same two are independent.
    #[test]
    fn the_assignment_links_an_exchanges_chunks_jointly() {
        let mut a = rec(0, 0, 1, 0.5, true);
        a.mean_losses = vec![0.2, 0.9];
        let mut b = rec(0, 0, 2, 0.5, false);
        b.mean_losses = vec![0.4, 0.6];
        let mut c = b.clone();
        c.exchange = 1;
        let settings = AuditSettings {
            chunks: 8,
            every: 1,
            la_samples: 200,
        };
        let r = AuditReport::new(settings, 3, vec![a, b, c], BTreeMap::new(), Vec::new());
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let correct: Vec<(bool, bool)> = r
            .records
            .iter()
            .map(|r| (r.la_correct, r.la_assignment_correct))
            .collect();
        assert_eq!(correct, vec![(true, true), (false, true), (false, false)]);
        assert!((r.overall.la_success - 1.0 / 3.0).abs() < 1e-12);
        assert!((r.overall.la_assignment_success - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn readings_follow_the_algorithm() {
        let r = Reading::of(&AlgoSpec::Muffliato { sigma: 0.1 }, 1, 7);
        assert_eq!((r.steps, r.per_round_cut, r.index_slots), (10, None, false));
        let r = Reading::of(&AlgoSpec::SparsifyRandom { fraction: 0.25 }, 4, 7);
        assert_eq!(
            (r.steps, r.per_round_cut, r.index_slots),
            (1, Some(7), false)
        );
        assert!(Reading::of(&AlgoSpec::SparsifyTopk { fraction: 0.25 }, 1, 7).sparse_frames);
        let r = Reading::of(&AlgoSpec::Shatter, 8, 7);
        assert_eq!((r.steps, r.per_round_cut, r.index_slots), (1, None, true));
        assert!(!Reading::of(&AlgoSpec::Chunking { chunks: 4 }, 4, 7).index_slots);
        assert!(!Reading::of(&AlgoSpec::Shatter, 1, 7).index_slots);
    }

    #[test]
    fn report_aggregates_rounds_victims_and_attackers() {
        let settings = AuditSettings {
            chunks: 2,
            every: 1,
            la_samples: 200,
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
        assert_eq!(r.attacker_round(0, 0), Some((1, 0.9, 1.0, 1.0)));
        assert_eq!(r.attacker_round(2, 0), None);
    }
}
