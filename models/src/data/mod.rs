//! Datasets: the shared [`Dataset`] type, loaders, generators and partitioning across nodes.

mod dataset;

pub use dataset::{Dataset, Inputs, Split, Targets};
