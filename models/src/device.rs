//! Device choice: CUDA (feature `cuda`) or Metal (feature `metal`) when compiled in and present, else the CPU.
//! Both features are off by default, so a plain build needs no GPU toolchain.
//!
//! [`DeviceSpec`] is what an operator names (`device = "cuda:0"` in a node config, `--device` in testnet);
//! [`DeviceSpec::open`] turns it into a Candle [`Device`], falling back to the CPU with a warning when the
//! backend is not compiled in or the device does not start, so that one config runs on every machine of a
//! network, with or without a GPU.

use std::fmt;
use std::str::FromStr;

// Re-exported so that crates choosing a device need no Candle dependency of their own.
pub use candle_core::Device;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ModelsError;

/// The device a node trains and evaluates on: `cpu` (the default), `cuda[:N]` (NVIDIA GPU N, feature
/// `cuda`) or `metal[:N]` (Apple GPU N, feature `metal`). N defaults to 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    Cuda(usize),
    Metal(usize),
}

impl DeviceSpec {
    /// The Candle device; the CPU, with a warning naming why, when this one cannot be used.
    pub fn open(self) -> Device {
        let (device, fallback) = self.open_or_fallback();
        if let Some(why) = fallback {
            tracing::warn!("device {self}: {why}; training on the CPU instead");
        }
        device
    }

    /// The Candle device, or the CPU and why this one could not be used (the warning [`Self::open`] logs).
    pub fn open_or_fallback(self) -> (Device, Option<String>) {
        match self {
            DeviceSpec::Cpu => (cpu(), None),
            DeviceSpec::Cuda(n) if !cfg!(feature = "cuda") => (
                cpu(),
                Some(format!(
                    "CUDA device {n} asked for, but this build has no CUDA support (build with --features cuda)"
                )),
            ),
            DeviceSpec::Metal(n) if !cfg!(feature = "metal") => (
                cpu(),
                Some(format!(
                    "Metal device {n} asked for, but this build has no Metal support (build with --features metal)"
                )),
            ),
            DeviceSpec::Cuda(n) => match Device::new_cuda(n) {
                Ok(d) => (d, None),
                Err(e) => (
                    cpu(),
                    Some(format!("CUDA device {n} did not start: {}", first_line(&e))),
                ),
            },
            DeviceSpec::Metal(n) => match Device::new_metal(n) {
                Ok(d) => (d, None),
                Err(e) => (
                    cpu(),
                    Some(format!(
                        "Metal device {n} did not start: {}",
                        first_line(&e)
                    )),
                ),
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => write!(f, "cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceSpec::Metal(n) => write!(f, "metal:{n}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = ModelsError;

    fn from_str(s: &str) -> crate::Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let (name, ordinal) = match t.split_once(':') {
            Some((name, n)) => match n.trim().parse::<usize>() {
                Ok(n) => (name, n),
                Err(_) => {
                    return Err(ModelsError::Config(format!(
                        "device {s:?}: {n:?} is not a device number"
                    )));
                }
            },
            None => (t.as_str(), 0),
        };
        match name {
            "cpu" if ordinal == 0 => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(ordinal)),
            "metal" => Ok(DeviceSpec::Metal(ordinal)),
            _ => Err(ModelsError::Config(format!(
                "device {s:?}: expected cpu, cuda[:N] or metal[:N]"
            ))),
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A Candle error's first line: its message without the backtrace Candle attaches to device errors (dozens
/// of lines in a warning an operator reads).
fn first_line(e: &candle_core::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The CPU device.
pub fn cpu() -> Device {
    Device::Cpu
}

/// The best available device: the first CUDA GPU, else the first Metal GPU, else the CPU. Logs the choice and,
/// when a compiled-in GPU backend fails to start, why it was skipped.
pub fn best_device() -> Device {
    if let Some(d) = try_cuda() {
        tracing::info!("using CUDA device 0");
        return d;
    }
    if let Some(d) = try_metal() {
        tracing::info!("using Metal device 0");
        return d;
    }
    tracing::info!("using the CPU");
    cpu()
}

#[cfg(feature = "cuda")]
fn try_cuda() -> Option<Device> {
    if !candle_core::utils::cuda_is_available() {
        return None;
    }
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(
                "CUDA is compiled in but device 0 failed to start: {}",
                first_line(&e)
            );
            None
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn try_cuda() -> Option<Device> {
    None
}

#[cfg(feature = "metal")]
fn try_metal() -> Option<Device> {
    if !candle_core::utils::metal_is_available() {
        return None;
    }
    match Device::new_metal(0) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(
                "Metal is compiled in but device 0 failed to start: {}",
                first_line(&e)
            );
            None
        }
    }
}

#[cfg(not(feature = "metal"))]
fn try_metal() -> Option<Device> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_error_is_reported_without_its_backtrace() {
        // What Candle prints for a device error: the message, then its backtrace.
        let e = candle_core::Error::Msg(
            "no CUDA-capable device\n   0: bt\n      at src/error.rs:260".into(),
        );
        assert_eq!(first_line(&e), "no CUDA-capable device");
    }

    #[test]
    fn device_names_parse_and_print_back() {
        for (text, spec) in [
            ("cpu", DeviceSpec::Cpu),
            ("cuda", DeviceSpec::Cuda(0)),
            ("cuda:0", DeviceSpec::Cuda(0)),
            (" CUDA:3 ", DeviceSpec::Cuda(3)),
            ("metal", DeviceSpec::Metal(0)),
            ("metal:1", DeviceSpec::Metal(1)),
        ] {
            assert_eq!(text.parse::<DeviceSpec>().unwrap(), spec, "{text}");
            assert_eq!(spec.to_string().parse::<DeviceSpec>().unwrap(), spec);
        }
        for bad in ["", "gpu", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "tpu:0"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("device"), "{bad}: {e}");
        }
        assert_eq!(DeviceSpec::default(), DeviceSpec::Cpu);
    }

    /// On a build without the GPU features (CI's), a GPU asked for falls back to the CPU and says why.
    #[test]
    fn a_backend_not_compiled_in_falls_back_to_the_cpu_with_the_reason() {
        let (d, why) = DeviceSpec::Cpu.open_or_fallback();
        assert!(d.is_cpu() && why.is_none());
        if cfg!(not(feature = "cuda")) {
            let (d, why) = DeviceSpec::Cuda(1).open_or_fallback();
            assert!(d.is_cpu());
            let why = why.expect("a reason");
            assert!(
                why.contains("CUDA device 1") && why.contains("--features cuda"),
                "{why}"
            );
            assert!(DeviceSpec::Cuda(0).open().is_cpu());
        }
        if cfg!(not(feature = "metal")) {
            let (d, why) = DeviceSpec::Metal(0).open_or_fallback();
            assert!(d.is_cpu());
            assert!(why.expect("a reason").contains("--features metal"));
        }
    }

    /// With CUDA compiled in, a device number no machine has falls back too (the device does not start).
    #[test]
    fn a_missing_device_falls_back_to_the_cpu() {
        if cfg!(feature = "cuda") {
            let (d, why) = DeviceSpec::Cuda(999).open_or_fallback();
            assert!(d.is_cpu());
            assert!(why.expect("a reason").contains("did not start"));
        }
    }

    #[test]
    fn without_gpu_features_the_cpu_is_chosen() {
        if cfg!(not(any(feature = "cuda", feature = "metal"))) {
            assert!(best_device().is_cpu());
        }
        assert!(cpu().is_cpu());
    }
}
