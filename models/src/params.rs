//! The flat parameter vector θ ∈ ℝ^d of a [`Model`]: every variable flattened row-major and concatenated in
//! NAME-SORTED order (Candle's `VarMap` is a `HashMap`, so any other order would differ between processes;
//! DESIGN.md §3.6). Chunking and aggregation work on this vector.
//!
//! Both directions cost one copy per tensor: on the CPU the variable's storage is read or written in place
//! (through a Candle in-place op for writes); on other devices a host tensor is uploaded and `Var::set` copies
//! it on the device. At d ≈ 11.2M (ResNet-18) that is a few tens of milliseconds, not per-element work.

use candle_core::{CpuStorage, InplaceOp1, Layout, Storage, Tensor};

use crate::nn::Model;
use crate::{ModelsError, Result};

impl Model {
    /// d, the number of trainable parameters (known as soon as the model is built).
    pub fn num_params(&self) -> usize {
        self.num_params
    }

    /// `(name, numel)` of every variable, in flat order: entries `[offset, offset + numel)` of the flat vector
    /// belong to that variable, `offset` being the sum of the sizes before it.
    pub fn param_layout(&self) -> Vec<(String, usize)> {
        self.vars
            .iter()
            .map(|(name, var)| (name.clone(), var.elem_count()))
            .collect()
    }

    /// A copy of all parameters as one flat vector of length [`Model::num_params`].
    pub fn flat_params(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.num_params);
        for (_, var) in &self.vars {
            let t = var.as_tensor();
            {
                let (storage, layout) = t.storage_and_layout();
                if let (Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) =
                    (&*storage, layout.contiguous_offsets())
                {
                    out.extend_from_slice(&data[start..end]);
                    continue;
                }
            }
            // Other devices or layouts: download through Candle (variables are always contiguous f32 here).
            out.extend(t.flatten_all()?.to_vec1::<f32>()?);
        }
        debug_assert_eq!(out.len(), self.num_params);
        Ok(out)
    }

    /// Writes all parameters into `out` (length [`Model::num_params`], else [`ModelsError::ParamLength`]).
    /// Reusing one buffer across rounds avoids allocating (and page-faulting) d floats every time, which at
    /// ResNet-18 size costs more than the copy itself.
    pub fn write_flat_params(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.num_params {
            return Err(ModelsError::ParamLength {
                expected: self.num_params,
                got: out.len(),
            });
        }
        let mut offset = 0;
        for (_, var) in &self.vars {
            let n = var.elem_count();
            let dst = &mut out[offset..offset + n];
            offset += n;
            let t = var.as_tensor();
            {
                let (storage, layout) = t.storage_and_layout();
                if let (Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) =
                    (&*storage, layout.contiguous_offsets())
                {
                    dst.copy_from_slice(&data[start..end]);
                    continue;
                }
            }
            dst.copy_from_slice(&t.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(())
    }

    /// Overwrites all parameters from a flat vector in [`Model::flat_params`] order. A vector of the wrong
    /// length is a [`ModelsError::ParamLength`] and leaves the model untouched.
    pub fn set_flat_params(&mut self, values: &[f32]) -> Result<()> {
        if values.len() != self.num_params {
            return Err(ModelsError::ParamLength {
                expected: self.num_params,
                got: values.len(),
            });
        }
        let mut offset = 0;
        for (_, var) in &self.vars {
            let n = var.elem_count();
            let src = &values[offset..offset + n];
            offset += n;
            if var.device().is_cpu() {
                var.as_tensor().inplace_op1(&CopyFrom(src))?;
            } else {
                var.set(&Tensor::from_slice(src, var.shape(), var.device())?)?;
            }
        }
        Ok(())
    }
}

/// In-place op that copies a host slice into a contiguous CPU f32 tensor.
struct CopyFrom<'a>(&'a [f32]);

impl InplaceOp1 for CopyFrom<'_> {
    fn name(&self) -> &'static str {
        "copy-from-slice"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("copy-from-slice: variable is not f32")
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("copy-from-slice: variable is not contiguous")
        };
        if end - start != self.0.len() {
            candle_core::bail!(
                "copy-from-slice: {} values for a tensor of {}",
                self.0.len(),
                end - start
            )
        }
        data[start..end].copy_from_slice(self.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{ModelSpec, TaskInfo};
    use candle_core::Device;

    fn small() -> Model {
        let info = TaskInfo::Classification {
            sample_shape: vec![6],
            num_classes: 3,
        };
        Model::new(&ModelSpec::Mlp { hidden: vec![5] }, &info, 1, &Device::Cpu).unwrap()
    }

    #[test]
    fn layout_is_name_sorted_and_sums_to_d() {
        let m = small();
        let layout = m.param_layout();
        let names: Vec<&str> = layout.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["hidden.0.bias", "hidden.0.weight", "out.bias", "out.weight"]
        );
        assert_eq!(
            layout.iter().map(|(_, n)| n).collect::<Vec<_>>(),
            [&5, &30, &3, &15]
        );
        assert_eq!(m.num_params(), 53);
        assert_eq!(m.flat_params().unwrap().len(), 53);
    }

    #[test]
    fn flat_round_trip_and_layout_order() {
        let mut m = small();
        let values: Vec<f32> = (0..m.num_params()).map(|i| i as f32 * 0.5 - 3.0).collect();
        m.set_flat_params(&values).unwrap();
        assert_eq!(m.flat_params().unwrap(), values);
        let mut buf = vec![0.0; m.num_params()];
        m.write_flat_params(&mut buf).unwrap();
        assert_eq!(buf, values);
        assert!(matches!(
            m.write_flat_params(&mut buf[1..]),
            Err(ModelsError::ParamLength {
                expected: 53,
                got: 52
            })
        ));
        // The flat vector really is the variables in name order: "hidden.0.bias" is first.
        let bias = m.vars[0].1.as_tensor().to_vec1::<f32>().unwrap();
        assert_eq!(bias, &values[..5]);
        // And the network uses the written values: the output bias is what we set.
        let out_bias = m.vars[2].1.as_tensor().to_vec1::<f32>().unwrap();
        assert_eq!(out_bias, &values[35..38]);
    }

    #[test]
    fn wrong_length_is_an_error_and_changes_nothing() {
        let mut m = small();
        let before = m.flat_params().unwrap();
        for len in [0, 52, 54] {
            match m.set_flat_params(&vec![1.0; len]) {
                Err(ModelsError::ParamLength { expected, got }) => {
                    assert_eq!((expected, got), (53, len))
                }
                other => panic!("expected ParamLength, got {other:?}"),
            }
        }
        assert_eq!(m.flat_params().unwrap(), before);
    }

    #[test]
    fn set_params_changes_forward_output() {
        let mut m = small();
        let x = Tensor::ones((2, 6), candle_core::DType::F32, &Device::Cpu).unwrap();
        m.set_flat_params(&vec![0.0; m.num_params()]).unwrap();
        let y = m.forward(&x).unwrap().to_vec2::<f32>().unwrap();
        assert!(y.iter().flatten().all(|&v| v == 0.0));
    }
}
