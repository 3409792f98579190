//! A multi-layer perceptron with ReLU activations: the model for feature-vector tasks (synthetic data) and,
//! over a dense hashed bag-of-words, for Sent140 text classification (the input is just a `[V]` vector).

use candle_core::{Module, Tensor};
use candle_nn::{Linear, VarBuilder};

use super::layers::{WeightInit, linear};
use crate::{ModelsError, Result};

/// Shape of an [`Mlp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Number of input features (the product of the sample shape; inputs are flattened).
    pub input_dim: usize,
    /// Width of each hidden layer; empty gives multinomial logistic regression.
    pub hidden: Vec<usize>,
    /// Number of output classes (logits).
    pub num_classes: usize,
}

/// `input → [Linear → ReLU]* → Linear → logits`. Variables: `hidden.<i>.{weight,bias}`, `out.{weight,bias}`.
#[derive(Clone, Debug)]
pub struct Mlp {
    hidden: Vec<Linear>,
    out: Linear,
}

impl Mlp {
    pub fn new(cfg: &Config, vb: VarBuilder<'_>) -> Result<Self> {
        if cfg.input_dim == 0 || cfg.num_classes == 0 || cfg.hidden.contains(&0) {
            return Err(ModelsError::Config(format!(
                "MLP needs non-zero sizes, got {cfg:?}"
            )));
        }
        let mut hidden = Vec::with_capacity(cfg.hidden.len());
        let mut dim = cfg.input_dim;
        for (i, &width) in cfg.hidden.iter().enumerate() {
            hidden.push(linear(dim, width, WeightInit::Relu, vb.pp("hidden").pp(i))?);
            dim = width;
        }
        let out = linear(dim, cfg.num_classes, WeightInit::Head, vb.pp("out"))?;
        Ok(Self { hidden, out })
    }
}

impl Module for Mlp {
    /// `xs`: `[batch, ...sample_shape]` f32 → `[batch, num_classes]` logits.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = xs.flatten_from(1)?;
        for layer in &self.hidden {
            x = layer.forward(&x)?.relu()?;
        }
        self.out.forward(&x)
    }
}
