//! Layer constructors with explicit init hints, so the seeded initialiser ([`super::init`]) knows how each
//! tensor is meant to start. Candle's own `linear`/`conv2d` use Kaiming *normal* with the ReLU gain for every
//! layer, including the classifier head; here hidden layers use He uniform by fan-in and heads the PyTorch
//! default scale.

use candle_core::Result;
use candle_nn::{Conv2d, Conv2dConfig, Init, Linear, VarBuilder};

use super::init::{KAIMING_UNIFORM_RELU, fan_in_uniform};

/// How the weight of a layer starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WeightInit {
    /// He/Kaiming uniform by fan-in with the ReLU gain: for layers followed by a ReLU.
    Relu,
    /// Uniform ±1/sqrt(fan_in): for output layers (logits), PyTorch's default scale.
    Head,
    /// All zeros: the last conv of a residual branch, so every block starts as the identity (see resnet.rs).
    Zero,
}

impl WeightInit {
    fn hint(self, fan_in: usize) -> Init {
        match self {
            WeightInit::Relu => KAIMING_UNIFORM_RELU,
            WeightInit::Head => fan_in_uniform(fan_in),
            WeightInit::Zero => Init::Const(0.0),
        }
    }
}

/// How the bias of a layer starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BiasInit {
    /// Uniform ±1/sqrt(fan_in), PyTorch's default.
    FanIn,
    /// Zeros.
    Zero,
}

/// A fully connected layer `in_dim → out_dim` with bias; variables `weight` `[out, in]` and `bias` `[out]`.
pub(crate) fn linear(
    in_dim: usize,
    out_dim: usize,
    w: WeightInit,
    vb: VarBuilder<'_>,
) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", w.hint(in_dim))?;
    let bias = vb.get_with_hints(out_dim, "bias", fan_in_uniform(in_dim))?;
    Ok(Linear::new(weight, Some(bias)))
}

/// A square `k×k` convolution with bias; variables `weight` `[out, in, k, k]` and `bias` `[out]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d(
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    w: WeightInit,
    b: BiasInit,
    vb: VarBuilder<'_>,
) -> Result<Conv2d> {
    let fan_in = in_channels * kernel * kernel;
    let weight = vb.get_with_hints(
        (out_channels, in_channels, kernel, kernel),
        "weight",
        w.hint(fan_in),
    )?;
    let bias_hint = match b {
        BiasInit::FanIn => fan_in_uniform(fan_in),
        BiasInit::Zero => Init::Const(0.0),
    };
    let bias = vb.get_with_hints(out_channels, "bias", bias_hint)?;
    let cfg = Conv2dConfig {
        padding,
        stride,
        ..Default::default()
    };
    Ok(Conv2d::new(weight, Some(bias), cfg))
}

/// Output side length of a convolution or pooling window.
pub(crate) fn out_len(len: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    (len + 2 * padding)
        .checked_sub(kernel)
        .map(|v| v / stride + 1)
}
