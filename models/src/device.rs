//! Device choice: CUDA (feature `cuda`) or Metal (feature `metal`) when compiled in and present, else the CPU.
//! Both features are off by default, so a plain build needs no GPU toolchain.

use candle_core::Device;

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
            tracing::warn!("CUDA is compiled in but device 0 failed to start: {e}");
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
            tracing::warn!("Metal is compiled in but device 0 failed to start: {e}");
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
    fn without_gpu_features_the_cpu_is_chosen() {
        if cfg!(not(any(feature = "cuda", feature = "metal"))) {
            assert!(best_device().is_cpu());
        }
        assert!(cpu().is_cpu());
    }
}
