//! [`Scalar`]: the float type a scheme works in. Models travel as `f32` on the wire; the figures of the papers
//! (exact noise cancellation to 1e-12, PDMM errors to 1e-15) need `f64`. Every function that touches model
//! values is generic over both; noise is always drawn in `f64` and rounded once.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Mul, Sub};

/// `f32` or `f64`.
pub trait Scalar:
    Copy
    + Default
    + Debug
    + PartialOrd
    + Send
    + Sync
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + AddAssign
    + 'static
{
    /// Rounds an `f64` to this type.
    fn from_f64(x: f64) -> Self;
    /// Widens (or keeps) this value as an `f64`.
    fn to_f64(self) -> f64;
    /// Whether the value is neither NaN nor infinite.
    fn is_finite_value(self) -> bool {
        self.to_f64().is_finite()
    }
}

impl Scalar for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Scalar for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
}
