//! Privacy attacks against decentralized learning, as Shatter (PETS 2025, §2.1 and §6) and its reference
//! implementation define them, to audit a run: what an honest-but-curious node learns from the chunks its
//! virtual nodes receive.
//!
//! - `completion.rs`: [`complete`] a received chunk into a full model (the attacker's own previous model, or
//!   zeros, outside the chunk; §2.1).
//! - `auc.rs`: exact ROC-AUC by the rank statistic (Mann-Whitney U, midranks for ties): [`roc_auc`].
//! - `mia.rs`: loss-based membership inference on balanced, seeded, capped member / non-member sets
//!   ([`loss_mia`]); the choice of non-members ([`nonmembers_for`]).
//! - `linkability.rs`: the linkability attack ([`link`]): which node's data the completed model fits best.
//! - `assignment.rs`: the stronger LA by assignment ([`link_by_assignment`]): a round's chunks matched to
//!   candidates jointly (Hungarian method), at most one chunk per index (≤ k) per real node.
//! - `gia.rs`: gradient inversion of a leading fully connected layer from the pseudo-gradient restricted to
//!   the coordinates a chunk holds ([`invert_fc`]).
//! - `dlg.rs`: optimisation-based gradient matching (DLG) on the held coordinates ([`dlg_invert`]); needs
//!   Candle's second-order mode (see there).
//! - `image.rs`: PSNR, SSIM and PNG image grids for GIA reconstructions.
//! - `items.rs`: for matrix factorisation, where image inversion does not apply: which items a sender's users
//!   rated, from the item rows a chunk shows moving ([`infer_rated_items`]).
//! - `audit.rs`: [`Auditor::audit_chunk`], the per-chunk audit the testnet `--audit` harness runs, and
//!   [`summarize`] for per-round metrics.
//!
//! Second-order gradients (DLG): Candle 0.11's `Tensor::backward` detaches every intermediate gradient
//! (`backprop.rs`: "second order derivatives ... are out of scope at the moment") unless the process starts
//! with `CANDLE_GRAD_DO_NOT_DETACH` set; then they work. See `dlg.rs`.

pub mod assignment;
pub mod auc;
pub mod audit;
pub mod completion;
pub mod dlg;
pub mod gia;
pub mod image;
pub mod items;
pub mod linkability;
pub mod mia;

pub use assignment::link_by_assignment;
pub use auc::roc_auc;
pub use audit::{
    AuditConfig, AuditSummary, AuditTarget, Auditor, ChunkAudit, la_truth_index, median, summarize,
};
pub use completion::{Fill, complete, complete_at_into, complete_into};
pub use dlg::{DlgConfig, DlgResult, dlg_invert, second_order_enabled};
pub use gia::{
    FcLayer, HeldGradient, Reconstruction, fc_row_candidates, invert_fc, pseudo_gradient,
};
pub use image::{normalize_unit, psnr, ssim, to_unit_range, write_png_grid};
pub use items::{ItemInference, ItemTable, infer_rated_items};
pub use linkability::{LinkResult, link, link_from_losses, success_rate};
pub use mia::{MiaConfig, MiaResult, loss_mia, mia_from_losses, nonmembers_for};
