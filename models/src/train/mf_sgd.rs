//! Exact mini-batch SGD for matrix factorisation on the CPU that touches only the embedding rows of the batch.
//!
//! Why: through Candle's autograd every MF step builds a dense gradient for both embeddings (an `index_add`
//! onto zeros), scales it and rewrites all parameters (206,680 on MovieLens), although a batch of 32 touches at
//! most 64 rows and every other row's gradient is zero, so its update is a no-op. Here both embeddings are
//! copied out of their `Var`s once per [`super::train_local`] call, each step reads and writes only its rows
//! of those host vectors, and they are copied back once at the end. Single-threaded on purpose: many nodes
//! train at once in one process.
//!
//! Exactness: for loss = mean over the B samples of (u·v + offset − r)², the gradient of a user row is the sum
//! over the batch's samples of that user of (2/B)·err·v, with the item rows as they were BEFORE the step (and
//! symmetrically for items); duplicates add up in batch order, as `index_add` does; each touched row becomes
//! row − lr·grad. [`step`] follows the autograd path's f32 operations one by one, so parameters agree with it
//! to rounding (only the order of long sums may differ: Candle sums 32 or more values in SIMD lanes), and the
//! shuffles and step counts are shared through [`super::run_batches`], so a node's training stays
//! reproducible from its seed. The tests in `train/tests.rs` compare the two paths.

use candle_core::{Tensor, Var};
use rand_chacha::ChaCha8Rng;

use super::{TrainConfig, TrainReport, run_batches};
use crate::data::{Dataset, Inputs, Targets};
use crate::nn::MfVars;
use crate::{ModelsError, Result};

/// Trains `mf` on `data` for `total_steps` (> 0) steps of `cfg`: [`super::train_local`] for matrix
/// factorisation on the CPU.
pub(super) fn train(
    mf: &MfVars<'_>,
    data: &Dataset,
    cfg: &TrainConfig,
    total_steps: usize,
    rng: &mut ChaCha8Rng,
) -> Result<TrainReport> {
    let (
        Inputs::Pairs {
            pairs,
            num_users,
            num_items,
        },
        Targets::Ratings(ratings),
    ) = (data.inputs(), data.targets())
    else {
        return Err(ModelsError::Config(
            "matrix factorisation trains on (user, item) pairs with ratings".into(),
        ));
    };
    let mut users = Table::read(mf.users)?;
    let mut items = Table::read(mf.items)?;
    // `TaskInfo::check` has matched the dataset to the model; this keeps a mismatch an error, not a panic.
    if users.rows() != *num_users || items.rows() != *num_items || users.factors != items.factors {
        return Err(ModelsError::Config(format!(
            "matrix factorisation embeddings ({} users, {} items) do not fit the data ({num_users} users, \
             {num_items} items)",
            users.rows(),
            items.rows()
        )));
    }
    // What Candle's `grad * lr` multiplies by.
    let lr = cfg.lr as f32;
    let result = run_batches(data.len(), cfg, total_steps, rng, |idx| {
        Ok(step(
            &mut users, &mut items, mf.offset, lr, pairs, ratings, idx,
        ))
    });
    // Written back even when training diverged, so the model is left as the autograd path leaves it.
    users.write(mf.users)?;
    items.write(mf.items)?;
    result
}

/// The squared error `(u·v + offset − r)²` of every sample of `data`, in order: [`super::evaluate`] and the
/// per-sample losses of matrix factorisation on the CPU. The same f32 operations as Candle's forward pass (a
/// sequential dot product below its SIMD width, then the offset, the difference and the square), without
/// building a batch of `index_select`ed rows per 128 samples: evaluated every round by every node, that path
/// was a tenth of a MovieLens run's CPU time.
pub(super) fn squared_errors(mf: &MfVars<'_>, data: &Dataset) -> Result<Vec<f32>> {
    let (Inputs::Pairs { pairs, .. }, Targets::Ratings(ratings)) = (data.inputs(), data.targets()) else {
        return Err(ModelsError::Config(
            "matrix factorisation evaluates on (user, item) pairs with ratings".into(),
        ));
    };
    let users = Table::read(mf.users)?;
    let items = Table::read(mf.items)?;
    let mut out = Vec::with_capacity(pairs.len());
    for (&[u, i], &r) in pairs.iter().zip(ratings) {
        // `TaskInfo::check` has matched the dataset to the model; this keeps a mismatch an error, not a panic.
        if u as usize >= users.rows() || i as usize >= items.rows() {
            return Err(ModelsError::Config(format!(
                "rating of user {u} for item {i} is outside the embeddings ({} users, {} items)",
                users.rows(),
                items.rows()
            )));
        }
        let err = dot(users.row(u), items.row(i)) + mf.offset - r;
        out.push(err * err);
    }
    Ok(out)
}

/// One SGD step on the samples `idx`; returns the batch's mean loss before the step. Each f32 operation is the
/// autograd path's, in its order (noted alongside).
fn step(
    users: &mut Table,
    items: &mut Table,
    offset: f32,
    lr: f32,
    pairs: &[[u32; 2]],
    ratings: &[f32],
    idx: &[usize],
) -> f32 {
    // `mean_all` is `sum_all / B`, an affine by 1/B (rounded to f32) forward and backward.
    let inv_b = (1.0 / idx.len() as f64) as f32;
    let mut sq_sum = 0.0f32;
    for &s in idx {
        let [u, i] = pairs[s];
        // Forward: `(u * v).sum(-1)` (sequential below Candle's SIMD width of 32), `affine(1, offset)`, `- r`.
        let dot = dot(users.row(u), items.row(i));
        let err = dot + offset - ratings[s];
        sq_sum += err * err;
        // Backward of `sqr`: `err * grad`, then `affine(2, 0)`; `grad` is 1/B from the mean.
        let g = err * inv_b * 2.0;
        // Backward of `u * v` and `index_select`: g·v into the user's row, g·u into the item's, both from
        // the rows before this step (no row changes until `apply`).
        users.accumulate(u, g, items.row(i));
        items.accumulate(i, g, users.row(u));
    }
    users.apply(lr);
    items.apply(lr);
    sq_sum * inv_b
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |acc, (x, y)| acc + x * y)
}

/// Marks a row without a gradient slot in [`Table::slot`].
const NO_SLOT: u32 = u32::MAX;

/// A host copy of one embedding `[rows, factors]`, with the gradient of the current step kept only for the rows
/// the step touched.
struct Table {
    factors: usize,
    values: Vec<f32>,
    /// Rows with a gradient this step, in first-touch order.
    touched: Vec<u32>,
    /// Per row: its index in `touched`, or [`NO_SLOT`]. A direct table (40 KB for MovieLens' items) rather than
    /// a hash map: the lookup is on the hot path.
    slot: Vec<u32>,
    /// `touched.len() × factors` gradient rows, in `touched` order.
    grad: Vec<f32>,
}

impl Table {
    /// Copies `var` (a contiguous f32 `[rows, factors]` variable) to the host.
    fn read(var: &Var) -> Result<Self> {
        let (rows, factors) = var.dims2()?;
        Ok(Table {
            factors,
            values: var.flatten_all()?.to_vec1::<f32>()?,
            touched: Vec::new(),
            slot: vec![NO_SLOT; rows],
            grad: Vec::new(),
        })
    }

    /// Copies the values back into `var`.
    fn write(self, var: &Var) -> Result<()> {
        Ok(var.set(&Tensor::from_vec(self.values, var.shape(), var.device())?)?)
    }

    fn rows(&self) -> usize {
        self.slot.len()
    }

    fn row(&self, r: u32) -> &[f32] {
        let start = r as usize * self.factors;
        &self.values[start..start + self.factors]
    }

    /// Adds `g · x` to row `r`'s gradient (starting from zero the first time the step touches `r`).
    fn accumulate(&mut self, r: u32, g: f32, x: &[f32]) {
        let f = self.factors;
        let mut k = self.slot[r as usize];
        if k == NO_SLOT {
            k = self.touched.len() as u32;
            self.slot[r as usize] = k;
            self.touched.push(r);
            self.grad.resize(self.grad.len() + f, 0.0);
        }
        let start = k as usize * f;
        for (acc, &xv) in self.grad[start..start + f].iter_mut().zip(x) {
            *acc += g * xv;
        }
    }

    /// The SGD update `row -= grad · lr` of every touched row; clears the gradient for the next step.
    fn apply(&mut self, lr: f32) {
        let f = self.factors;
        for (grad, &r) in self.grad.chunks_exact(f).zip(&self.touched) {
            let start = r as usize * f;
            for (p, &gv) in self.values[start..start + f].iter_mut().zip(grad) {
                *p -= gv * lr;
            }
            self.slot[r as usize] = NO_SLOT;
        }
        self.touched.clear();
        self.grad.clear();
    }
}
