//! CIFAR-10 in its binary distribution (`cifar-10-binary.tar.gz` from https://www.cs.toronto.edu/~kriz/cifar.html),
//! the paper's image task (Shatter, PETS 2025, evaluation: ResNet-18).
//!
//! Files: `data_batch_1.bin` .. `data_batch_5.bin` (train) and `test_batch.bin` (test), each a sequence of
//! 3,073-byte records: one label byte (0-9) then 3,072 pixel bytes, channel-major (1,024 red, 1,024 green,
//! 1,024 blue, each row-major 32×32), which is exactly the `[3, 32, 32]` layout of our dense inputs. Pixels are
//! scaled to [0, 1]; [`load_normalized`] additionally standardises each channel with the usual CIFAR-10
//! training-set mean and standard deviation.
//!
//! **Subsets.** `test_batch.bin` and at least one training batch are required. Missing training batches are
//! tolerated (a quicker download or a smoke test may use only `data_batch_1.bin`) and reported with a
//! `tracing` warning naming them. Any whole number of records per file is accepted, so tests can use tiny
//! files; a file that ends inside a record is an error naming the byte offset of that record.

use std::path::{Path, PathBuf};

use super::{Dataset, Inputs, Split, Targets, read_file_limited};
use crate::{ModelsError, Result};

/// Bytes per record: label + 3 × 32 × 32 pixels.
pub const RECORD_BYTES: usize = 1 + PIXELS;
const PIXELS: usize = 3 * 32 * 32;
/// Largest accepted batch file: 10× the 10,000 records of a real batch, so a wrong file is not read whole.
pub const MAX_FILE_BYTES: u64 = 100_000 * RECORD_BYTES as u64;
/// The training batch files, in the order their records are concatenated.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
/// The test batch file.
pub const TEST_FILE: &str = "test_batch.bin";
/// Per-channel mean of the CIFAR-10 training set, pixels in [0, 1].
pub const CHANNEL_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
/// Per-channel standard deviation of the CIFAR-10 training set, pixels in [0, 1].
pub const CHANNEL_STD: [f32; 3] = [0.2470, 0.2435, 0.2616];

const SOURCE_HINT: &str = "download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html \
                           and extract it (pass the cifar-10-batches-bin directory)";

/// Loads train and test sets from `dir` (the `cifar-10-batches-bin` directory or its parent), pixels in [0, 1].
pub fn load(dir: &Path) -> Result<Split> {
    let dir = resolve(dir)?;
    let mut train_paths = Vec::new();
    let mut missing = Vec::new();
    for f in TRAIN_FILES {
        let p = dir.join(f);
        if p.is_file() {
            train_paths.push(p);
        } else {
            missing.push(f);
        }
    }
    if train_paths.is_empty() {
        return Err(not_found(
            dir.join(TRAIN_FILES[0]),
            "no CIFAR-10 training batch (data_batch_N.bin) here",
        ));
    }
    if !missing.is_empty() {
        tracing::warn!(
            dir = %dir.display(),
            ?missing,
            "CIFAR-10: loading a subset of the training batches"
        );
    }
    let test_path = dir.join(TEST_FILE);
    if !test_path.is_file() {
        return Err(not_found(test_path, "CIFAR-10 test batch missing"));
    }
    Ok(Split {
        train: read_batches(&train_paths)?,
        test: read_batches(&[test_path])?,
    })
}

/// Like [`load`], then standardises each channel: `(x - CHANNEL_MEAN[c]) / CHANNEL_STD[c]`.
pub fn load_normalized(dir: &Path) -> Result<Split> {
    let split = load(dir)?;
    Ok(Split {
        train: normalize(split.train)?,
        test: normalize(split.test)?,
    })
}

fn normalize(d: Dataset) -> Result<Dataset> {
    let (inputs, targets, users) = d.into_parts();
    let Inputs::Dense {
        mut values,
        sample_shape,
    } = inputs
    else {
        unreachable!("CIFAR-10 inputs are dense")
    };
    for sample in values.chunks_exact_mut(PIXELS) {
        for (c, plane) in sample.chunks_exact_mut(32 * 32).enumerate() {
            plane
                .iter_mut()
                .for_each(|v| *v = (*v - CHANNEL_MEAN[c]) / CHANNEL_STD[c]);
        }
    }
    Dataset::new(
        Inputs::Dense {
            values,
            sample_shape,
        },
        targets,
        users,
    )
}

fn resolve(dir: &Path) -> Result<PathBuf> {
    let nested = dir.join("cifar-10-batches-bin");
    if !dir.join(TEST_FILE).is_file() && nested.is_dir() {
        return Ok(nested);
    }
    if !dir.is_dir() {
        return Err(not_found(dir.to_path_buf(), "CIFAR-10 directory not found"));
    }
    Ok(dir.to_path_buf())
}

fn not_found(path: PathBuf, what: &str) -> ModelsError {
    ModelsError::Io {
        path,
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{what}; {SOURCE_HINT}"),
        ),
    }
}

fn read_batches(paths: &[PathBuf]) -> Result<Dataset> {
    let mut values = Vec::new();
    let mut labels = Vec::new();
    for path in paths {
        let bytes = read_file_limited(path, MAX_FILE_BYTES)?;
        let whole = bytes.len() / RECORD_BYTES * RECORD_BYTES;
        if whole != bytes.len() {
            return Err(ModelsError::Data {
                path: path.clone(),
                location: format!("byte offset {whole}"),
                message: format!(
                    "truncated record {}: the file ends {} bytes into a {RECORD_BYTES}-byte record",
                    whole / RECORD_BYTES,
                    bytes.len() - whole
                ),
            });
        }
        if bytes.is_empty() {
            return Err(ModelsError::Data {
                path: path.clone(),
                location: "byte offset 0".into(),
                message: "empty batch file".into(),
            });
        }
        values.reserve(bytes.len() / RECORD_BYTES * PIXELS);
        for (r, record) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
            let label = record[0];
            if label > 9 {
                return Err(ModelsError::Data {
                    path: path.clone(),
                    location: format!("byte offset {}", r * RECORD_BYTES),
                    message: format!("label {label} of record {r} is not a CIFAR-10 class (0-9)"),
                });
            }
            labels.push(u32::from(label));
            values.extend(record[1..].iter().map(|&p| f32::from(p) / 255.0));
        }
    }
    Dataset::new(
        Inputs::Dense {
            values,
            sample_shape: vec![3, 32, 32],
        },
        Targets::Classes {
            labels,
            num_classes: 10,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(label: u8, seed: u8) -> Vec<u8> {
        let mut r = vec![label];
        r.extend((0..PIXELS).map(|i| (i as u8).wrapping_mul(seed)));
        r
    }

    fn write(dir: &Path, name: &str, records: &[(u8, u8)]) {
        let bytes: Vec<u8> = records.iter().flat_map(|&(l, s)| record(l, s)).collect();
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    #[test]
    fn small_batches_load_in_order_with_subset_of_train_files() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "data_batch_1.bin", &[(3, 1), (9, 2)]);
        write(dir.path(), "data_batch_3.bin", &[(0, 3)]);
        write(dir.path(), TEST_FILE, &[(7, 5)]);
        let s = load(dir.path()).unwrap();
        assert_eq!(s.train.labels().unwrap(), &[3, 9, 0]);
        assert_eq!(s.test.labels().unwrap(), &[7]);
        assert_eq!(s.train.sample_shape().unwrap(), &[3, 32, 32]);
        let Inputs::Dense { values, .. } = s.train.inputs() else {
            panic!()
        };
        // Record 1 (seed 2): pixel i = (2i mod 256) / 255, channel-major as in the file.
        let r1 = &values[PIXELS..2 * PIXELS];
        for i in [0, 1, 100, 1024, 3071] {
            assert_eq!(r1[i], f32::from((i as u8).wrapping_mul(2)) / 255.0);
        }
        assert!(values.iter().all(|v| (0.0..=1.0).contains(v)));

        let n = load_normalized(dir.path()).unwrap();
        let Inputs::Dense { values: nv, .. } = n.train.inputs() else {
            panic!()
        };
        let c = 2;
        let i = c * 1024 + 5;
        assert!((nv[i] - (values[i] - CHANNEL_MEAN[c]) / CHANNEL_STD[c]).abs() < 1e-6);

        // Parent directory of cifar-10-batches-bin is accepted too.
        let parent = tempfile::tempdir().unwrap();
        let nested = parent.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&nested).unwrap();
        write(&nested, "data_batch_1.bin", &[(1, 1)]);
        write(&nested, TEST_FILE, &[(2, 1)]);
        assert_eq!(load(parent.path()).unwrap().train.labels().unwrap(), &[1]);
    }

    #[test]
    fn truncated_bad_label_and_missing_files_are_located() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), TEST_FILE, &[(7, 5)]);
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("data_batch_1.bin") && err.contains("cs.toronto.edu"),
            "{err}"
        );

        let mut bytes = record(1, 1);
        bytes.extend(&record(2, 1)[..100]);
        std::fs::write(dir.path().join("data_batch_1.bin"), &bytes).unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("data_batch_1.bin")
                && err.contains("byte offset 3073")
                && err.contains("truncated record 1"),
            "{err}"
        );

        write(dir.path(), "data_batch_1.bin", &[(1, 1), (1, 1), (10, 1)]);
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("byte offset 6146") && err.contains("label 10"),
            "{err}"
        );

        write(dir.path(), "data_batch_1.bin", &[(1, 1)]);
        std::fs::remove_file(dir.path().join(TEST_FILE)).unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("test_batch.bin"), "{err}");

        let err = load(&dir.path().join("absent")).unwrap_err().to_string();
        assert!(err.contains("absent") && err.contains("cifar"), "{err}");
    }
}
