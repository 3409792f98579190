//! Checkpoints of one real node (issue 15): after every round, everything a restarted node needs to go on
//! from the next round (`node run --resume`), written so that a crash at any instant leaves the previous
//! checkpoint or the new one, never a mix.
//!
//! A checkpoint directory holds:
//! - `model-rNNNNNN.safetensors`: the model after round N (the aggregated model the round's metrics
//!   evaluated), one tensor per variable with its shape, readable by any safetensors tool;
//! - `checkpoint.json`: human-readable metadata naming that model file — the round, the node, the run's
//!   seed and algorithm, the training RNG's exact position, the divergence count, the round's metrics line
//!   and each VN's Cyclon view.
//!
//! Writing order (the commit protocol): the model file is written to a temporary name, fsynced, renamed and
//! the directory fsynced; then `checkpoint.json` the same way; then older model files are removed.
//! `checkpoint.json` is the commit point: until its rename, the previous checkpoint (and its model file, which
//! is only removed after) is what a restart sees. Both files are created mode 0600 (`private_file.rs`): the
//! model is the node's private one. A save removes only files of the names it writes (`model-rNNNNNN.safetensors`
//! and their `.tmp`s, `checkpoint.json.tmp`); anything else in the directory is left alone.
//!
//! Reading is bounded and refuses what a careless or hostile directory can hold: a model path that is not a
//! plain file name in the directory (absolute, `..`), a file that is not a regular one (`/dev/zero`), a
//! `checkpoint.json` over [`MAX_CHECKPOINT_JSON`] or a model file over its expected size, a malformed RNG
//! seed — each a [`NodeError::File`] naming the file and field.
//!
//! What is not saved, and why a resumed run is still deterministic where it can be:
//! - the optimiser: local training is plain SGD, rebuilt every round (`models::train`), so it has no state;
//! - the algorithm's own RNG (Muffliato, GHP noise, `chunking:K`'s chunk choice): re-derived from the run seed
//!   and the node index, as at the start; Shatter and EL keep no state between rounds;
//! - the VNs' RNGs and the dropout schedule: re-derived from the run seed and the VN key (dropout: the node
//!   index), as at the start. The network itself (which peers answer, when) is not reproducible anyway.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use protocol::Round;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::disk::{Disk, OsDisk};
use crate::engine::RoundMetrics;
use crate::learner::Learner;
use crate::{NodeError, Result, VnAddr};
use protocol::control::ViewEntry;

/// The metadata file's name in a checkpoint directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// The most `checkpoint.json` may take: its views hold k VNs × a view of tens of entries (~150 bytes each).
pub const MAX_CHECKPOINT_JSON: u64 = 16 << 20;

/// What a model file may take beyond its 4 bytes per parameter: the safetensors header (names, shapes).
const MODEL_HEADER_SLACK: u64 = 16 << 20;

/// Version of the checkpoint layout; a checkpoint of another version is refused, not misread.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// The exact position of a ChaCha8 stream: seed, stream and word position (`rand_chacha`'s own accessors),
/// so the restored generator continues where the saved one stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    /// The 32-byte seed, in hex.
    pub seed: String,
    pub stream: u64,
    /// The word position (a 68-bit number), in decimal: JSON numbers do not hold it.
    pub word_pos: String,
}

impl RngState {
    pub fn of(rng: &ChaCha8Rng) -> Self {
        Self {
            seed: rng.get_seed().iter().map(|b| format!("{b:02x}")).collect(),
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos().to_string(),
        }
    }

    pub fn restore(&self) -> Result<ChaCha8Rng> {
        let bad = |what: &str| NodeError::Config(format!("checkpoint: bad RNG {what}"));
        // Bytes, not chars: a multibyte character must be refused, not sliced through.
        let hex = self.seed.as_bytes();
        if hex.len() != 64 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad("seed (64 hex digits expected)"));
        }
        let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
        let mut seed = [0u8; 32];
        for (b, pair) in seed.iter_mut().zip(hex.chunks_exact(2)) {
            *b = digit(pair[0]) << 4 | digit(pair[1]);
        }
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos.parse().map_err(|_| bad("word position"))?);
        Ok(rng)
    }
}

/// One entry of a VN's Cyclon view as saved: the peer, its dial address, the entry's age.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedEntry {
    pub peer: String,
    pub addr: String,
    pub age: u32,
}

/// Each VN's latest Cyclon view (`[s]` is VN s's), published by the VN tasks after each exchange and read
/// by the RN task when it checkpoints.
pub type ViewBoard = std::sync::Arc<std::sync::Mutex<Vec<Vec<ViewEntry<VnAddr>>>>>;

impl SavedEntry {
    pub fn of(e: &ViewEntry<VnAddr>) -> Self {
        Self {
            peer: e.id.peer.to_string(),
            addr: e.id.addr.to_string(),
            age: e.age,
        }
    }

    /// The entry back; `None` when the file's strings do not parse (a hand-edited or damaged checkpoint:
    /// the entry is dropped, bootstrap peers fill the view instead).
    pub fn restore(&self) -> Option<ViewEntry<VnAddr>> {
        Some(ViewEntry {
            id: VnAddr::new(self.peer.parse().ok()?, self.addr.parse().ok()?),
            age: self.age,
        })
    }
}

/// `checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: u32,
    /// The node's index in the learning config.
    pub node: usize,
    pub seed: u64,
    pub algorithm: String,
    /// Rounds of the whole run.
    pub rounds: u64,
    /// The last round completed: a resumed run begins at `round + 1`.
    pub round: Round,
    /// The model file, relative to the checkpoint directory.
    pub model_file: String,
    pub num_params: usize,
    /// The local-training RNG after the round.
    pub train_rng: RngState,
    /// Local trainings that diverged so far.
    pub diverged: u64,
    /// The round's metrics line, so that a restart can write it if the crash came between the checkpoint
    /// and the line (each completed round gets exactly one line; see `runtime::metrics_file`).
    pub metrics: RoundMetrics,
    /// Each VN's Cyclon view (`views[s]` is VN s's), restored on resume so the node rejoins through the peers
    /// it knew. Empty when the views were not known.
    #[serde(default)]
    pub views: Vec<Vec<SavedEntry>>,
    /// Metrics lines of earlier rounds that were not durably in the metrics file when this checkpoint was
    /// committed (the disk refused them or their sync). A node resuming from here may lack them, so its
    /// first line counts them in `metrics_lines_lost`. Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metrics_lines_unsaved: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What identifies the run a checkpoint must belong to (checked on resume).
#[derive(Debug, Clone, PartialEq)]
pub struct RunIdentity {
    pub node: usize,
    pub seed: u64,
    pub algorithm: String,
    pub rounds: u64,
    pub num_params: usize,
}

impl CheckpointMeta {
    /// Refuses a checkpoint of another run, node or layout.
    pub fn check(&self, run: &RunIdentity) -> Result<()> {
        let mismatch = |what: &str, saved: String, now: String| {
            Err(NodeError::Config(format!(
                "checkpoint is of another run: {what} {saved} there, {now} here"
            )))
        };
        if self.format != CHECKPOINT_FORMAT {
            return mismatch(
                "format",
                self.format.to_string(),
                CHECKPOINT_FORMAT.to_string(),
            );
        }
        if self.node != run.node {
            return mismatch("node", self.node.to_string(), run.node.to_string());
        }
        if self.seed != run.seed {
            return mismatch("seed", self.seed.to_string(), run.seed.to_string());
        }
        if self.algorithm != run.algorithm {
            return mismatch("algorithm", self.algorithm.clone(), run.algorithm.clone());
        }
        if self.rounds != run.rounds {
            return mismatch("rounds", self.rounds.to_string(), run.rounds.to_string());
        }
        if self.num_params != run.num_params {
            return mismatch(
                "parameter count",
                self.num_params.to_string(),
                run.num_params.to_string(),
            );
        }
        Ok(())
    }
}

/// A node's checkpoint directory.
#[derive(Debug, Clone)]
pub struct CheckpointDir {
    dir: PathBuf,
    disk: Arc<dyn Disk>,
}

impl CheckpointDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            disk: Arc::new(OsDisk),
        }
    }

    /// Writes through `disk` instead of the OS's filesystem (a test double that fails on demand).
    pub fn with_disk(mut self, disk: Arc<dyn Disk>) -> Self {
        self.disk = disk;
        self
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Saves the learner's model and RNG after `run`'s round `metrics.round`, atomically (see the module
    /// docs). `views` are the VNs' Cyclon views, if known; `metrics_lines_unsaved` the metrics lines of
    /// earlier rounds not durably written (see [`CheckpointMeta::metrics_lines_unsaved`]).
    pub fn save(
        &self,
        run: &RunIdentity,
        learner: &Learner,
        metrics: &RoundMetrics,
        views: Vec<Vec<SavedEntry>>,
        metrics_lines_unsaved: u64,
    ) -> Result<CheckpointMeta> {
        std::fs::create_dir_all(&self.dir).map_err(|e| NodeError::io(&self.dir, e))?;
        let round = metrics.round;
        let model_file = model_file_name(round);
        let bytes = model_safetensors(learner, run, round)?;
        let model_path = self.dir.join(&model_file);
        self.disk
            .replace(&model_path, &bytes)
            .map_err(|e| NodeError::io(&model_path, e))?;
        let meta = CheckpointMeta {
            format: CHECKPOINT_FORMAT,
            node: run.node,
            seed: run.seed,
            algorithm: run.algorithm.clone(),
            rounds: run.rounds,
            round,
            model_file: model_file.clone(),
            num_params: run.num_params,
            train_rng: RngState::of(&learner.rng),
            diverged: learner.diverged,
            metrics: metrics.clone(),
            views,
            metrics_lines_unsaved,
        };
        let json = serde_json::to_vec_pretty(&meta).expect("checkpoint metadata serialises");
        let meta_path = self.dir.join(CHECKPOINT_FILE);
        self.disk
            .replace(&meta_path, &json)
            .map_err(|e| NodeError::io(&meta_path, e))?;
        // Committed: model files of earlier checkpoints (and temporaries of interrupted saves) are garbage —
        // only those: a directory shared with other files (or set to a wrong one) loses nothing else.
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let model = name.strip_suffix(".tmp").unwrap_or(&name);
                let stale_model = is_model_file_name(model) && name != model_file;
                if stale_model || name == format!("{CHECKPOINT_FILE}.tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(meta)
    }

    /// The last committed checkpoint's metadata, or `None` when the directory holds none.
    pub fn latest(&self) -> Result<Option<CheckpointMeta>> {
        let path = self.dir.join(CHECKPOINT_FILE);
        let text = match read_bounded(&path, MAX_CHECKPOINT_JSON) {
            Err(NodeError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            r => r?,
        };
        let meta: CheckpointMeta = serde_json::from_slice(&text)
            .map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))?;
        if !is_plain_name(&meta.model_file) {
            return Err(NodeError::file(
                &path,
                "model_file",
                format!(
                    "{:?} is not a file name in the checkpoint directory (no directories, no ..)",
                    meta.model_file
                ),
            ));
        }
        meta.train_rng
            .restore()
            .map_err(|e| NodeError::file(&path, "train_rng", e))?;
        Ok(Some(meta))
    }

    /// Loads `meta`'s model and RNG into `learner` (after [`CheckpointMeta::check`]).
    pub fn restore(&self, meta: &CheckpointMeta, learner: &mut Learner) -> Result<()> {
        if !is_plain_name(&meta.model_file) {
            return Err(NodeError::file(
                &self.dir.join(CHECKPOINT_FILE),
                "model_file",
                format!("{:?} is not a file name", meta.model_file),
            ));
        }
        let path = self.dir.join(&meta.model_file);
        let limit = 4 * learner.model.num_params() as u64 + MODEL_HEADER_SLACK;
        let bytes = read_bounded(&path, limit)?;
        let bad = |e: String| NodeError::Config(format!("{}: {e}", path.display()));
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let mut flat = Vec::with_capacity(learner.model.num_params());
        for (name, n) in learner.model.param_layout() {
            let t = st.tensor(&name).map_err(|e| bad(format!("{name}: {e}")))?;
            if t.dtype() != safetensors::Dtype::F32 || t.data().len() != 4 * n {
                return Err(bad(format!(
                    "{name}: {:?} of shape {:?}, expected {n} f32",
                    t.dtype(),
                    t.shape()
                )));
            }
            flat.extend(
                t.data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        learner.model.set_flat_params(&flat)?;
        learner.rng = meta.train_rng.restore()?;
        learner.diverged = meta.diverged;
        Ok(())
    }
}

/// The model as safetensors bytes: one tensor per variable, with its shape, in the flat order.
fn model_safetensors(learner: &Learner, run: &RunIdentity, round: Round) -> Result<Vec<u8>> {
    let flat = learner.model.flat_params()?;
    let shapes: std::collections::HashMap<String, Vec<usize>> = learner
        .model
        .varmap()
        .data()
        .lock()
        .map(|vars| {
            vars.iter()
                .map(|(name, var)| (name.clone(), var.dims().to_vec()))
                .collect()
        })
        .unwrap_or_default();
    let mut tensors = Vec::new();
    let mut offset = 0;
    for (name, n) in learner.model.param_layout() {
        let bytes: Vec<u8> = flat[offset..offset + n]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        offset += n;
        let shape = shapes
            .get(&name)
            .filter(|s| s.iter().product::<usize>() == n)
            .cloned()
            .unwrap_or_else(|| vec![n]);
        tensors.push((name, shape, bytes));
    }
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| NodeError::Config(format!("checkpoint tensor: {e}")))?;
    let info = std::collections::HashMap::from([
        ("round".to_string(), round.get().to_string()),
        ("node".to_string(), run.node.to_string()),
        ("algorithm".to_string(), run.algorithm.clone()),
    ]);
    safetensors::serialize(views, Some(info))
        .map_err(|e| NodeError::Config(format!("checkpoint serialisation: {e}")))
}

/// The model file of round `round`'s checkpoint.
fn model_file_name(round: Round) -> String {
    format!("model-r{:06}.safetensors", round.get())
}

/// Whether `name` is a model file name a save writes (`model-r` + digits + `.safetensors`).
fn is_model_file_name(name: &str) -> bool {
    name.strip_prefix("model-r")
        .and_then(|r| r.strip_suffix(".safetensors"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` names a file in the directory itself: one normal component (not absolute, no `..`).
fn is_plain_name(name: &str) -> bool {
    let mut parts = Path::new(name).components();
    matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(_)), None)
    )
}

/// Reads a regular file of at most `limit` bytes; anything else (a device, a FIFO, a larger file) is
/// refused before it is read whole.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let io = |e| NodeError::io(path, e);
    let f = std::fs::File::open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(NodeError::file(path, "file", "not a regular file"));
    }
    let mut bytes = Vec::new();
    f.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(NodeError::file(
            path,
            "size",
            format!("larger than the {limit} bytes a checkpoint file may take"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learner::LearningConfig;
    use models::data::DatasetSpec;
    use models::data::partition::Partition;
    use models::nn::ModelSpec;
    use models::train::{LocalWork, TrainConfig};

    fn learner() -> Learner {
        let lc = LearningConfig {
            dataset: DatasetSpec::default(),
            model: Some(ModelSpec::Mlp { hidden: vec![8] }),
            partition: Partition::Iid,
            nodes: 2,
            train: TrainConfig {
                lr: 0.05,
                batch_size: 16,
                work: LocalWork::Steps(5),
                clip: None,
            },
            seed: 3,
            max_test_samples: Some(50),
        };
        let (split, parts) = lc.load().unwrap();
        lc.learners(&split, &parts, [1]).unwrap().remove(0)
    }

    fn run(l: &Learner) -> RunIdentity {
        RunIdentity {
            node: 1,
            seed: 3,
            algorithm: "el".into(),
            rounds: 10,
            num_params: l.model.num_params(),
        }
    }

    /// A node that trains, checkpoints, trains again — and one restored from the checkpoint that trains
    /// once — end with the same model: the checkpoint carries the model and the training RNG's position.
    #[test]
    fn a_restored_learner_continues_exactly_where_the_saved_one_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let ck = CheckpointDir::new(dir.path().join("ck"));
        assert!(
            ck.latest().unwrap().is_none(),
            "an empty directory has none"
        );
        let mut a = learner();
        let id = run(&a);
        a.train().unwrap();
        let m = RoundMetrics {
            round: Round(4),
            test_metric: 0.5,
            ..RoundMetrics::default()
        };
        ck.save(
            &id,
            &a,
            &m,
            vec![vec![SavedEntry {
                peer: "p".into(),
                addr: "/ip4/127.0.0.1/tcp/1".into(),
                age: 3,
            }]],
            0,
        )
        .unwrap();
        let saved = a.model.flat_params().unwrap();
        let next_a = a.train().unwrap().params;

        let mut b = learner();
        assert_ne!(b.model.flat_params().unwrap(), saved);
        let meta = ck.latest().unwrap().expect("saved");
        meta.check(&id).unwrap();
        assert_eq!(meta.round, Round(4));
        assert_eq!(meta.metrics, m, "the round's metrics line travels with it");
        assert_eq!(meta.views[0][0].age, 3);
        ck.restore(&meta, &mut b).unwrap();
        assert_eq!(b.model.flat_params().unwrap(), saved);
        assert_eq!(
            b.train().unwrap().params,
            next_a,
            "same shuffle, same steps"
        );

        // A second save replaces the first; only the committed model file stays.
        let m5 = RoundMetrics {
            round: Round(5),
            ..m
        };
        ck.save(&id, &b, &m5, Vec::new(), 0).unwrap();
        let files: Vec<String> = std::fs::read_dir(ck.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files.contains(&"model-r000005.safetensors".to_string()));
        // Another run's checkpoint is refused.
        let other = RunIdentity {
            seed: 4,
            ..id.clone()
        };
        assert!(ck.latest().unwrap().unwrap().check(&other).is_err());
    }

    /// An interrupted save (its temporaries written, no rename of the metadata) leaves the last committed
    /// checkpoint readable and pointing at a model file that is still there.
    #[test]
    fn an_interrupted_save_leaves_the_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let ck = CheckpointDir::new(dir.path());
        let a = learner();
        let id = run(&a);
        let m = RoundMetrics {
            round: Round(2),
            ..RoundMetrics::default()
        };
        ck.save(&id, &a, &m, Vec::new(), 0).unwrap();
        // The crash: the next round's model written and renamed, the metadata only as a temporary.
        std::fs::write(dir.path().join("model-r000003.safetensors"), b"partial").unwrap();
        std::fs::write(dir.path().join("checkpoint.json.tmp"), b"{\"trunc").unwrap();
        let meta = ck.latest().unwrap().unwrap();
        assert_eq!(meta.round, Round(2));
        let mut b = learner();
        ck.restore(&meta, &mut b).unwrap();
        assert_eq!(
            b.model.flat_params().unwrap(),
            a.model.flat_params().unwrap()
        );
    }

    fn saved(dir: &Path) -> (CheckpointDir, Learner, RunIdentity) {
        let ck = CheckpointDir::new(dir);
        let a = learner();
        let id = run(&a);
        let m = RoundMetrics {
            round: Round(2),
            ..RoundMetrics::default()
        };
        ck.save(&id, &a, &m, Vec::new(), 0).unwrap();
        (ck, a, id)
    }

    /// Rewrites `checkpoint.json` with `edit` applied to its JSON.
    fn tamper(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let p = dir.join(CHECKPOINT_FILE);
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    }

    fn field_of(e: NodeError) -> String {
        match e {
            NodeError::File { field, .. } => field,
            other => panic!("not a typed file error: {other}"),
        }
    }

    /// A careless or hostile `checkpoint.json`: its model path may not leave the directory, its seed may
    /// not be multibyte (this sliced through a char and panicked), and no file is read past its bound.
    #[test]
    fn a_hostile_checkpoint_directory_gives_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (ck, _, _) = saved(dir.path());
        let secret = dir.path().join("secret.safetensors");
        std::fs::write(&secret, b"not yours").unwrap();
        for bad in [
            secret.to_string_lossy().into_owned(),
            "/dev/zero".to_string(),
            "../secret.safetensors".to_string(),
            "sub/../../x".to_string(),
        ] {
            tamper(dir.path(), |v| v["model_file"] = bad.clone().into());
            let e = ck.latest().unwrap_err();
            assert_eq!(field_of(e), "model_file", "{bad}");
        }
        tamper(dir.path(), |v| {
            v["model_file"] = "model-r000002.safetensors".into()
        });
        let meta = ck.latest().unwrap().unwrap();
        // restore() checks again: a meta built by hand cannot point outside either.
        let mut l = learner();
        let outside = CheckpointMeta {
            model_file: "/dev/zero".into(),
            ..meta.clone()
        };
        assert_eq!(
            field_of(ck.restore(&outside, &mut l).unwrap_err()),
            "model_file"
        );

        // 64 bytes, but a two-byte "é" straddles the first hex pair's end.
        tamper(dir.path(), |v| {
            v["train_rng"]["seed"] = format!("aé{}", "0".repeat(61)).into()
        });
        assert_eq!(field_of(ck.latest().unwrap_err()), "train_rng");
        tamper(dir.path(), |v| {
            v["train_rng"]["seed"] = "0".repeat(64).into()
        });

        // A model file that is not a regular file, or larger than the model can be.
        let model = dir.path().join("model-r000002.safetensors");
        std::fs::remove_file(&model).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/dev/zero", &model).unwrap();
            assert_eq!(field_of(ck.restore(&meta, &mut l).unwrap_err()), "file");
            std::fs::remove_file(&model).unwrap();
        }
        let f = std::fs::File::create(&model).unwrap();
        f.set_len(4 * l.model.num_params() as u64 + MODEL_HEADER_SLACK + 1)
            .unwrap();
        assert_eq!(field_of(ck.restore(&meta, &mut l).unwrap_err()), "size");

        // A huge checkpoint.json (sparse: nothing is written, and nothing must be read whole).
        let f = std::fs::File::create(dir.path().join(CHECKPOINT_FILE)).unwrap();
        f.set_len(MAX_CHECKPOINT_JSON + 1).unwrap();
        assert_eq!(field_of(ck.latest().unwrap_err()), "size");
    }

    /// A save removes the previous checkpoint's model and its own temporaries, nothing else; its files
    /// are the owner's only (the model is the node's private one).
    #[test]
    fn saves_touch_only_their_own_files_and_make_them_private() {
        let dir = tempfile::tempdir().unwrap();
        let others = [
            "notes.tmp",
            "model-readme.txt",
            "model-r000001.safetensors.bak",
            "model-rX.safetensors",
        ];
        for o in others {
            std::fs::write(dir.path().join(o), b"user's").unwrap();
        }
        std::fs::write(dir.path().join("model-r000001.safetensors.tmp"), b"ours").unwrap();
        let (ck, a, id) = saved(dir.path());
        let m = RoundMetrics {
            round: Round(3),
            ..RoundMetrics::default()
        };
        ck.save(&id, &a, &m, Vec::new(), 0).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut want: Vec<String> = others.iter().map(|s| s.to_string()).collect();
        want.extend([CHECKPOINT_FILE.into(), "model-r000003.safetensors".into()]);
        want.sort();
        assert_eq!(files, want);
        #[cfg(unix)]
        for f in [CHECKPOINT_FILE, "model-r000003.safetensors"] {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }

    /// On a full disk a save fails with the file named and leaves the previous checkpoint whole; when
    /// space returns the next save succeeds.
    #[test]
    fn a_save_on_a_full_disk_fails_cleanly_and_the_next_one_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(crate::disk::FullDisk::default());
        let (ck, a, id) = saved(dir.path());
        let ck = ck.with_disk(disk.clone());
        disk.set_full(true);
        let m = |r| RoundMetrics {
            round: Round(r),
            ..RoundMetrics::default()
        };
        let e = ck.save(&id, &a, &m(3), Vec::new(), 0).unwrap_err();
        assert!(e.to_string().contains("model-r000003"), "{e}");
        assert_eq!(ck.latest().unwrap().unwrap().round, Round(2));
        disk.set_full(false);
        ck.save(&id, &a, &m(4), Vec::new(), 0).unwrap();
        assert_eq!(ck.latest().unwrap().unwrap().round, Round(4));
    }
}
