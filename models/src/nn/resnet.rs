//! Residual networks (He et al. 2016) WITHOUT normalisation layers, CIFAR-style (3×3 stem, no max-pool).
//!
//! The paper trains ResNet-18 on CIFAR-10 (~11.2M parameters). Batch norm keeps running statistics that are not
//! parameters and behave badly when models are averaged across nodes with different data, so, as is common in
//! decentralised learning, there is none. Without BN a deep residual stack must start close to the identity to
//! train: we ZERO-INITIALISE the last convolution (weight and bias) of every residual branch, the rule of
//! "zero-init residual" (Goyal et al. 2017) and of Fixup (Zhang et al. 2019, without its scalar multipliers and
//! biases). At initialisation each block is `relu(shortcut(x))`; the branch's first convolution is He-initialised
//! and learns as soon as the last one moves off zero. Convolutions carry (zero-initialised) biases, which BN
//! would otherwise provide.
//!
//! ResNet-18 and ResNet-8 are the same code with different [`Config`]s: ResNet-18 is four stages of two basic
//! blocks (64-128-256-512 channels), ResNet-8 three stages of one block (16-32-64), ~78k parameters, which trains
//! at a useful speed on two CPU cores.

use candle_core::{Module, Tensor};
use candle_nn::{Conv2d, Linear, VarBuilder};

use super::layers::{BiasInit, WeightInit, conv2d, linear};
use crate::{ModelsError, Result};

/// One stage: `blocks` basic blocks of `width` channels. Every stage but the first halves the resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    pub width: usize,
    pub blocks: usize,
}

/// Shape of a [`ResNet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub in_channels: usize,
    pub num_classes: usize,
    /// Channels of the 3×3 stem convolution.
    pub stem_width: usize,
    pub stages: Vec<Stage>,
}

impl Config {
    /// ResNet-18 (CIFAR variant): stem 64, stages 2×64, 2×128, 2×256, 2×512. The paper's CIFAR-10 model.
    pub fn resnet18(in_channels: usize, num_classes: usize) -> Self {
        Self {
            in_channels,
            num_classes,
            stem_width: 64,
            stages: [64, 128, 256, 512]
                .into_iter()
                .map(|width| Stage { width, blocks: 2 })
                .collect(),
        }
    }

    /// ResNet-8 (the 6n+2 CIFAR family with n=1): stem 16, stages 1×16, 1×32, 1×64.
    pub fn resnet8(in_channels: usize, num_classes: usize) -> Self {
        Self {
            in_channels,
            num_classes,
            stem_width: 16,
            stages: [16, 32, 64]
                .into_iter()
                .map(|width| Stage { width, blocks: 1 })
                .collect(),
        }
    }

    /// Smallest input side that still leaves at least one pixel after the last downsampling.
    pub fn min_side(&self) -> usize {
        1 << self.stages.len().saturating_sub(1)
    }
}

/// A basic block: `relu(conv2(relu(conv1(x))) + shortcut(x))`, shortcut a 1×1 projection when the shape changes.
#[derive(Clone, Debug)]
struct BasicBlock {
    conv1: Conv2d,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
}

impl BasicBlock {
    fn new(in_c: usize, out_c: usize, stride: usize, vb: VarBuilder<'_>) -> Result<Self> {
        let conv1 = conv2d(
            in_c,
            out_c,
            3,
            stride,
            1,
            WeightInit::Relu,
            BiasInit::Zero,
            vb.pp("conv1"),
        )?;
        // Zero: the block starts as the identity (see the module comment).
        let conv2 = conv2d(
            out_c,
            out_c,
            3,
            1,
            1,
            WeightInit::Zero,
            BiasInit::Zero,
            vb.pp("conv2"),
        )?;
        let shortcut = if stride != 1 || in_c != out_c {
            Some(conv2d(
                in_c,
                out_c,
                1,
                stride,
                0,
                WeightInit::Relu,
                BiasInit::Zero,
                vb.pp("shortcut"),
            )?)
        } else {
            None
        };
        Ok(Self {
            conv1,
            conv2,
            shortcut,
        })
    }
}

impl Module for BasicBlock {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let branch = self.conv2.forward(&self.conv1.forward(xs)?.relu()?)?;
        let skip = match &self.shortcut {
            Some(s) => s.forward(xs)?,
            None => xs.clone(),
        };
        (branch + skip)?.relu()
    }
}

/// Variables: `stem`, `stages.<s>.<b>.{conv1,conv2,shortcut}`, `head` (each `.weight`, `.bias`).
#[derive(Clone, Debug)]
pub struct ResNet {
    stem: Conv2d,
    blocks: Vec<BasicBlock>,
    head: Linear,
}

impl ResNet {
    pub fn new(cfg: &Config, vb: VarBuilder<'_>) -> Result<Self> {
        if cfg.in_channels == 0
            || cfg.num_classes == 0
            || cfg.stem_width == 0
            || cfg.stages.is_empty()
            || cfg.stages.iter().any(|s| s.width == 0 || s.blocks == 0)
        {
            return Err(ModelsError::Config(format!(
                "ResNet needs non-zero channels, classes and at least one non-empty stage, got {cfg:?}"
            )));
        }
        let stem = conv2d(
            cfg.in_channels,
            cfg.stem_width,
            3,
            1,
            1,
            WeightInit::Relu,
            BiasInit::Zero,
            vb.pp("stem"),
        )?;
        let mut blocks = Vec::new();
        let mut in_c = cfg.stem_width;
        for (s, stage) in cfg.stages.iter().enumerate() {
            for b in 0..stage.blocks {
                let stride = if s > 0 && b == 0 { 2 } else { 1 };
                blocks.push(BasicBlock::new(
                    in_c,
                    stage.width,
                    stride,
                    vb.pp("stages").pp(s).pp(b),
                )?);
                in_c = stage.width;
            }
        }
        let head = linear(in_c, cfg.num_classes, WeightInit::Head, vb.pp("head"))?;
        Ok(Self { stem, blocks, head })
    }
}

impl Module for ResNet {
    /// `xs`: `[batch, C, H, W]` f32 → `[batch, num_classes]` logits. Global average pooling makes the network
    /// independent of the input side (at least [`Config::min_side`]).
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.stem.forward(xs)?.relu()?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        let x = x.mean((2, 3))?;
        self.head.forward(&x)
    }
}
