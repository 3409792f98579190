//! Datasets: the shared [`Dataset`] type, loaders, generators, and partitioning across nodes.
//!
//! - `dataset.rs`: [`Dataset`], [`Inputs`], [`Targets`], [`Split`].
//! - `synthetic.rs`: seeded Gaussian-mixture and image-pattern classification tasks (the default: a fresh
//!   machine needs no download).
//! - `movielens.rs`, `sent140.rs`, `cifar10.rs`, `mnist.rs`: loaders for the real datasets' standard files.
//!   Every loader error names the file and where in it (line, byte offset, JSON path) the problem is.
//! - `partition.rs`: [`Partition`] and [`partition()`], assigning training samples to nodes.
//! - this file: [`DatasetSpec`], the config-file / command-line description of a dataset, and file reading
//!   shared by the loaders.

pub mod cifar10;
mod dataset;
pub mod mnist;
pub mod movielens;
pub mod partition;
pub mod sent140;
pub mod synthetic;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use dataset::{Dataset, Inputs, Split, Targets};
pub use partition::{Partition, partition};
pub use synthetic::SyntheticConfig;

use crate::{ModelsError, Result};

/// Where the real datasets live relative to the repository root (DESIGN.md, Section 6), used when a text form
/// names a dataset without a directory.
pub const DEFAULT_DATA_ROOT: &str = "../shared/data";

/// Largest file a loader reads whole when it has no tighter bound of its own (the MovieLens ratings are
/// 2.4 MB, the LEAF Sent140 test file 1.5 MB): a wrong path must not exhaust memory.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Which dataset to use, as written in a config file or on a command line.
///
/// Text form ([`FromStr`]): `synthetic` (the [`SyntheticConfig::default`] vectors), `synthetic-images`
/// (`SyntheticConfig::images(3, 32, 10)`, a CIFAR-10 stand-in), `synthetic-images-small`
/// (`SyntheticConfig::images(1, 16, 10)`: the same kind of task at 1/12 of the pixels, for CNN runs that must
/// fit a few CPU cores), and `movielens`, `sent140`, `cifar10`, `mnist`,
/// each optionally followed by `:<dir>`; without a directory they are looked up under
/// [`DEFAULT_DATA_ROOT`] (`movielens/ml-latest-small`, `sent140`, `cifar10`, `mnist`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetSpec {
    /// A generated task; see [`synthetic`].
    Synthetic(SyntheticConfig),
    /// MovieLens ml-latest-small; see [`movielens`].
    #[serde(rename = "movielens")]
    MovieLens { dir: PathBuf },
    /// Sent140 (LEAF); see [`sent140`].
    Sent140 {
        dir: PathBuf,
        #[serde(default = "default_vocab_size")]
        vocab_size: usize,
    },
    /// CIFAR-10 binary batches; see [`cifar10`]. `normalize` standardises each channel.
    Cifar10 {
        dir: PathBuf,
        #[serde(default)]
        normalize: bool,
    },
    /// MNIST IDX files; see [`mnist`].
    Mnist { dir: PathBuf },
}

fn default_vocab_size() -> usize {
    sent140::DEFAULT_VOCAB_SIZE
}

impl DatasetSpec {
    /// The CIFAR-10 stand-in of the text form `synthetic-images`.
    pub fn synthetic_images() -> Self {
        DatasetSpec::Synthetic(SyntheticConfig::images(3, 32, 10))
    }

    /// The smaller stand-in of the text form `synthetic-images-small`: 1×16×16 images, 10 classes.
    pub fn synthetic_images_small() -> Self {
        DatasetSpec::Synthetic(SyntheticConfig::images(1, 16, 10))
    }

    /// Loads (or generates) the train/test split. `seed` drives synthetic generation and the MovieLens
    /// per-user split; the other datasets come with a fixed split and ignore it.
    pub fn load(&self, seed: u64) -> Result<Split> {
        match self {
            DatasetSpec::Synthetic(cfg) => synthetic::generate(cfg, seed),
            DatasetSpec::MovieLens { dir } => movielens::load(dir, seed),
            DatasetSpec::Sent140 { dir, vocab_size } => sent140::load(dir, *vocab_size),
            DatasetSpec::Cifar10 {
                dir,
                normalize: false,
            } => cifar10::load(dir),
            DatasetSpec::Cifar10 {
                dir,
                normalize: true,
            } => cifar10::load_normalized(dir),
            DatasetSpec::Mnist { dir } => mnist::load(dir),
        }
    }

    /// Short name for CLIs and reports: `synthetic`, `movielens`, `sent140`, `cifar10` or `mnist`.
    pub fn name(&self) -> &'static str {
        match self {
            DatasetSpec::Synthetic(_) => "synthetic",
            DatasetSpec::MovieLens { .. } => "movielens",
            DatasetSpec::Sent140 { .. } => "sent140",
            DatasetSpec::Cifar10 { .. } => "cifar10",
            DatasetSpec::Mnist { .. } => "mnist",
        }
    }
}

impl Default for DatasetSpec {
    fn default() -> Self {
        DatasetSpec::Synthetic(SyntheticConfig::default())
    }
}

impl fmt::Display for DatasetSpec {
    /// The text form where one exists; custom synthetic configurations are summarised.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatasetSpec::Synthetic(c) if *c == SyntheticConfig::default() => {
                f.write_str("synthetic")
            }
            DatasetSpec::Synthetic(c) if *c == SyntheticConfig::images(3, 32, 10) => {
                f.write_str("synthetic-images")
            }
            DatasetSpec::Synthetic(c) if *c == SyntheticConfig::images(1, 16, 10) => {
                f.write_str("synthetic-images-small")
            }
            DatasetSpec::Synthetic(c) => write!(
                f,
                "synthetic(custom: {} classes of {:?}, {} train / {} test)",
                c.num_classes, c.sample_shape, c.train_samples, c.test_samples
            ),
            DatasetSpec::Sent140 { dir, vocab_size }
                if *vocab_size != sent140::DEFAULT_VOCAB_SIZE =>
            {
                write!(f, "sent140:{} (vocabulary {vocab_size})", dir.display())
            }
            DatasetSpec::MovieLens { dir }
            | DatasetSpec::Sent140 { dir, .. }
            | DatasetSpec::Cifar10 { dir, .. }
            | DatasetSpec::Mnist { dir } => write!(f, "{}:{}", self.name(), dir.display()),
        }
    }
}

impl FromStr for DatasetSpec {
    type Err = ModelsError;

    fn from_str(s: &str) -> Result<Self> {
        let (name, dir) = match s.split_once(':') {
            Some((n, d)) if !d.is_empty() => (n, Some(PathBuf::from(d))),
            Some((n, _)) => (n, None),
            None => (s, None),
        };
        let root = Path::new(DEFAULT_DATA_ROOT);
        let dir_or = |default: &str| dir.clone().unwrap_or_else(|| root.join(default));
        match name {
            "synthetic" if dir.is_none() => Ok(DatasetSpec::default()),
            "synthetic-images" if dir.is_none() => Ok(DatasetSpec::synthetic_images()),
            "synthetic-images-small" if dir.is_none() => Ok(DatasetSpec::synthetic_images_small()),
            "movielens" => Ok(DatasetSpec::MovieLens {
                dir: dir_or("movielens/ml-latest-small"),
            }),
            "sent140" => Ok(DatasetSpec::Sent140 {
                dir: dir_or("sent140"),
                vocab_size: sent140::DEFAULT_VOCAB_SIZE,
            }),
            "cifar10" => Ok(DatasetSpec::Cifar10 {
                dir: dir_or("cifar10"),
                normalize: false,
            }),
            "mnist" => Ok(DatasetSpec::Mnist {
                dir: dir_or("mnist"),
            }),
            _ => Err(ModelsError::Config(format!(
                "unknown dataset {s:?}: expected synthetic, synthetic-images, synthetic-images-small, movielens[:<dir>], \
                 sent140[:<dir>], cifar10[:<dir>] or mnist[:<dir>]"
            ))),
        }
    }
}

/// Reads a whole file, refusing files over [`MAX_FILE_BYTES`].
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    read_file_limited(path, MAX_FILE_BYTES)
}

/// Reads a whole file, refusing (before reading) one longer than `max` bytes.
pub(crate) fn read_file_limited(path: &Path, max: u64) -> Result<Vec<u8>> {
    let io = |source| ModelsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len > max {
        return Err(ModelsError::Data {
            path: path.to_path_buf(),
            location: "file size".into(),
            message: format!("{len} bytes, more than the {max} this loader accepts"),
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // `take` also bounds a file that grows while we read it.
    file.take(max).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The shared real datasets (`<repo>/../shared/data`), or `None` with a note when they are absent.
    pub(crate) fn shared_data() -> Option<PathBuf> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
        if p.is_dir() {
            Some(p)
        } else {
            eprintln!("note: {} is absent; skipping a real-data test", p.display());
            None
        }
    }

    #[test]
    fn text_forms() {
        assert_eq!(
            "synthetic".parse::<DatasetSpec>().unwrap(),
            DatasetSpec::default()
        );
        assert_eq!(
            "synthetic-images".parse::<DatasetSpec>().unwrap(),
            DatasetSpec::synthetic_images()
        );
        assert_eq!(
            "movielens:/d/ml".parse::<DatasetSpec>().unwrap(),
            DatasetSpec::MovieLens {
                dir: "/d/ml".into()
            }
        );
        assert_eq!(
            "movielens".parse::<DatasetSpec>().unwrap(),
            DatasetSpec::MovieLens {
                dir: "../shared/data/movielens/ml-latest-small".into()
            }
        );
        assert_eq!(
            "cifar10:x".parse::<DatasetSpec>().unwrap(),
            DatasetSpec::Cifar10 {
                dir: "x".into(),
                normalize: false
            }
        );
        for s in [
            "mnist:m",
            "sent140:s",
            "movielens:/a/b",
            "synthetic",
            "synthetic-images",
            "synthetic-images-small",
        ] {
            let spec: DatasetSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(spec.to_string().parse::<DatasetSpec>().unwrap(), spec);
        }
        for bad in ["", "imagenet", "synthetic:x", "Mnist"] {
            assert!(bad.parse::<DatasetSpec>().is_err(), "{bad}");
        }
        assert_eq!("sent140".parse::<DatasetSpec>().unwrap().name(), "sent140");
    }

    #[test]
    fn serde_forms() {
        let spec: DatasetSpec =
            serde_json::from_str(r#"{"sent140": {"dir": "data/sent140"}}"#).unwrap();
        assert_eq!(
            spec,
            DatasetSpec::Sent140 {
                dir: "data/sent140".into(),
                vocab_size: sent140::DEFAULT_VOCAB_SIZE
            }
        );
        let spec: DatasetSpec =
            serde_json::from_str(r#"{"synthetic": {"train_samples": 10}}"#).unwrap();
        assert_eq!(
            spec,
            DatasetSpec::Synthetic(SyntheticConfig {
                train_samples: 10,
                ..Default::default()
            })
        );
        for spec in [
            DatasetSpec::default(),
            DatasetSpec::MovieLens { dir: "m".into() },
            DatasetSpec::Cifar10 {
                dir: "c".into(),
                normalize: true,
            },
            DatasetSpec::Mnist { dir: "n".into() },
        ] {
            let json = serde_json::to_string(&spec).unwrap();
            assert_eq!(
                serde_json::from_str::<DatasetSpec>(&json).unwrap(),
                spec,
                "{json}"
            );
        }
        assert!(
            serde_json::to_string(&DatasetSpec::MovieLens { dir: "m".into() })
                .unwrap()
                .contains("movielens")
        );
    }

    #[test]
    fn spec_loads_synthetic_and_reports_missing_data() {
        let spec = DatasetSpec::Synthetic(SyntheticConfig {
            train_samples: 30,
            test_samples: 10,
            ..Default::default()
        });
        let s = spec.load(1).unwrap();
        assert_eq!((s.train.len(), s.test.len()), (30, 10));
        let err = DatasetSpec::Mnist {
            dir: "/nonexistent/mnist".into(),
        }
        .load(0)
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/mnist"), "{err}");
    }

    #[test]
    fn read_file_refuses_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, [0u8; 100]).unwrap();
        assert_eq!(read_file_limited(&p, 100).unwrap().len(), 100);
        let err = read_file_limited(&p, 99).unwrap_err().to_string();
        assert!(
            err.contains("file size") && err.contains("100 bytes"),
            "{err}"
        );
    }
}
