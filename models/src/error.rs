//! The one error type of the `models` crate.

use std::path::PathBuf;

/// Everything that can go wrong in the learning core. Data errors name the file, where in it, and what was
/// wrong; aggregation errors name the chunk and the problem, and leave the accumulator usable.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// An error from Candle (shape mismatch, device failure, ...).
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),

    /// A file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A data file is present but its content is wrong. `location` is e.g. "line 17" or "byte offset 16".
    #[error("{}: {location}: {message}", path.display())]
    Data {
        path: PathBuf,
        location: String,
        message: String,
    },

    /// A configuration value (model, dataset, partition, training) is impossible.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// Local training met a non-finite loss: the model is left as the failing step left it (non-finite
    /// values possible). A node recovers from it by restoring the parameters it had before training
    /// (`node::learner::Learner::train`); a configuration (learning rate) or a poisoned model causes it.
    #[error("training diverged at step {step}: loss is {loss} (learning rate {lr} too high?)")]
    Diverged { step: usize, loss: f64, lr: f64 },

    /// A flat parameter vector of the wrong length was given to a model.
    #[error("parameter vector has length {got}, the model has {expected} parameters")]
    ParamLength { expected: usize, got: usize },

    /// A chunk index outside `0..k`.
    #[error("unknown chunk index {index}: there are {k} chunks")]
    UnknownChunk { index: usize, k: usize },

    /// A chunk whose value count does not match the size of its index set.
    #[error("chunk {index} has {got} values, expected {expected}")]
    ChunkLength {
        index: usize,
        expected: usize,
        got: usize,
    },

    /// A chunk carrying NaN or an infinity.
    #[error("chunk {index} holds a non-finite value ({value}) at position {position}")]
    NonFinite {
        index: usize,
        position: usize,
        value: f32,
    },
}
