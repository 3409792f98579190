//! A LeNet-5-style CNN (LeCun et al. 1998) for small images `C×H×W`: conv5×5(6) → pool → conv5×5(16) → pool →
//! 120 → 84 → classes. Modernised as is usual: ReLU instead of tanh and max instead of average pooling. The
//! first convolution pads by 2, so MNIST's 28×28 gets the 32×32 geometry of the original and CIFAR's 32×32
//! keeps one more row and column (16×6×6 features into the first dense layer instead of 16×5×5).

use candle_core::{Module, Tensor};
use candle_nn::{Conv2d, Linear, VarBuilder};

use super::layers::{BiasInit, WeightInit, conv2d, linear, out_len};
use crate::{ModelsError, Result};

/// Input geometry and classes of a [`LeNet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub in_channels: usize,
    pub height: usize,
    pub width: usize,
    pub num_classes: usize,
}

impl Config {
    /// Side lengths after the second pooling, or `None` when the image is too small (below 12×12).
    fn feature_side(&self) -> Option<(usize, usize)> {
        let side = |len: usize| -> Option<usize> {
            let c1 = out_len(len, 5, 1, 2)?;
            let p1 = out_len(c1, 2, 2, 0)?;
            let c2 = out_len(p1, 5, 1, 0)?;
            let p2 = out_len(c2, 2, 2, 0)?;
            (p2 > 0).then_some(p2)
        };
        Some((side(self.height)?, side(self.width)?))
    }
}

/// Variables: `conv1`, `conv2`, `fc1`, `fc2`, `fc3` (each `.weight`, `.bias`).
#[derive(Clone, Debug)]
pub struct LeNet {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
}

impl LeNet {
    pub fn new(cfg: &Config, vb: VarBuilder<'_>) -> Result<Self> {
        if cfg.in_channels == 0 || cfg.num_classes == 0 {
            return Err(ModelsError::Config(format!(
                "LeNet needs channels and classes, got {cfg:?}"
            )));
        }
        let (h, w) = cfg.feature_side().ok_or_else(|| {
            ModelsError::Config(format!(
                "LeNet needs images of at least 12x12, got {}x{}",
                cfg.height, cfg.width
            ))
        })?;
        let conv1 = conv2d(
            cfg.in_channels,
            6,
            5,
            1,
            2,
            WeightInit::Relu,
            BiasInit::FanIn,
            vb.pp("conv1"),
        )?;
        let conv2 = conv2d(
            6,
            16,
            5,
            1,
            0,
            WeightInit::Relu,
            BiasInit::FanIn,
            vb.pp("conv2"),
        )?;
        let fc1 = linear(16 * h * w, 120, WeightInit::Relu, vb.pp("fc1"))?;
        let fc2 = linear(120, 84, WeightInit::Relu, vb.pp("fc2"))?;
        let fc3 = linear(84, cfg.num_classes, WeightInit::Head, vb.pp("fc3"))?;
        Ok(Self {
            conv1,
            conv2,
            fc1,
            fc2,
            fc3,
        })
    }
}

impl Module for LeNet {
    /// `xs`: `[batch, C, H, W]` f32 → `[batch, num_classes]` logits.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.conv1.forward(xs)?.relu()?.max_pool2d(2)?;
        let x = self.conv2.forward(&x)?.relu()?.max_pool2d(2)?;
        let x = x.flatten_from(1)?;
        let x = self.fc1.forward(&x)?.relu()?;
        let x = self.fc2.forward(&x)?.relu()?;
        self.fc3.forward(&x)
    }
}
