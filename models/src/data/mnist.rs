//! MNIST (or any dataset in the same IDX files, e.g. Fashion-MNIST) from its four uncompressed files.
//!
//! IDX format: a big-endian header, then raw bytes. Images (`*-images-idx3-ubyte`): magic 2051
//! (`0x00000803`: unsigned bytes, 3 dimensions), count, rows, columns, then `count × rows × columns` pixels.
//! Labels (`*-labels-idx1-ubyte`): magic 2049 (`0x00000801`), count, then `count` label bytes (0-9).
//!
//! Every header value is checked against the actual file length **before** anything is allocated from it
//! (a header is input, not a promise), and a file must end exactly where its header says. Inputs are
//! `[1, rows, cols]` (28×28 for MNIST) scaled to [0, 1]; train and test must share the image size.

use std::path::{Path, PathBuf};

use super::{Dataset, Inputs, Split, Targets, read_file_limited};
use crate::{ModelsError, Result};

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IMAGES_MAGIC: u32 = 2051;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const LABELS_MAGIC: u32 = 2049;
/// Largest accepted image side: MNIST is 28, and anything beyond this is not an MNIST-like file.
pub const MAX_SIDE: usize = 1024;
/// Largest accepted file (1 GiB; the MNIST training images are 47 MB), checked before reading.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// The training and test file names, as distributed at http://yann.lecun.com/exdb/mnist/.
pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
pub const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
pub const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

const SOURCE_HINT: &str = "MNIST is distributed as four gzip files (train-images-idx3-ubyte.gz, ...), e.g. \
                           from https://github.com/cvdfoundation/mnist or http://yann.lecun.com/exdb/mnist/; \
                           gunzip them into this directory";

/// Loads the four IDX files from `dir`.
pub fn load(dir: &Path) -> Result<Split> {
    let train = load_pair(&dir.join(TRAIN_IMAGES), &dir.join(TRAIN_LABELS))?;
    let test = load_pair(&dir.join(TEST_IMAGES), &dir.join(TEST_LABELS))?;
    if train.sample_shape() != test.sample_shape() {
        return Err(ModelsError::Data {
            path: dir.join(TEST_IMAGES),
            location: "byte offset 8".into(),
            message: format!(
                "test images are {:?} but training images are {:?}",
                test.sample_shape(),
                train.sample_shape()
            ),
        });
    }
    Ok(Split { train, test })
}

fn read(path: &Path) -> Result<Vec<u8>> {
    if !path.is_file() {
        let gz = PathBuf::from(format!("{}.gz", path.display()));
        let what = if gz.is_file() {
            format!("only the compressed {} is present: gunzip it", gz.display())
        } else {
            format!("MNIST file missing; {SOURCE_HINT}")
        };
        return Err(ModelsError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, what),
        });
    }
    read_file_limited(path, MAX_FILE_BYTES)
}

fn err(path: &Path, offset: usize, message: String) -> ModelsError {
    ModelsError::Data {
        path: path.to_path_buf(),
        location: format!("byte offset {offset}"),
        message,
    }
}

/// The big-endian u32 at `offset`, or an error if the file is too short to hold it.
fn be_u32(path: &Path, bytes: &[u8], offset: usize, what: &str) -> Result<u32> {
    let b = bytes.get(offset..offset + 4).ok_or_else(|| {
        err(
            path,
            bytes.len(),
            format!("file ends inside the IDX header (needs the {what} at byte offset {offset})"),
        )
    })?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Checks the magic and count of an IDX header and that exactly `count × item_bytes` bytes follow it; `dims`
/// are the per-item dimensions after the count (rows, columns for images). Returns (count, dims).
fn header(path: &Path, bytes: &[u8], magic: u32, ndims: usize) -> Result<(usize, Vec<usize>)> {
    let found = be_u32(path, bytes, 0, "magic number")?;
    if found != magic {
        return Err(err(
            path,
            0,
            format!(
                "magic number {found} (0x{found:08x}), expected {magic} (0x{magic:08x}): not an IDX file of this kind"
            ),
        ));
    }
    let count = be_u32(path, bytes, 4, "item count")? as usize;
    let mut dims = Vec::with_capacity(ndims);
    for i in 0..ndims {
        let offset = 8 + 4 * i;
        let v = be_u32(path, bytes, offset, "dimension")? as usize;
        if v == 0 || v > MAX_SIDE {
            return Err(err(
                path,
                offset,
                format!("dimension {v} outside 1..={MAX_SIDE}"),
            ));
        }
        dims.push(v);
    }
    let start = 8 + 4 * ndims;
    let item: usize = dims.iter().product();
    // u32 × (≤ 2^20) fits u64, and usize is 64-bit wherever a 1 GiB file can be read; stay checked anyway.
    let expected = count.checked_mul(item);
    let have = bytes.len() - start;
    if expected != Some(have) {
        return Err(err(
            path,
            start,
            format!(
                "header says {count} items of {item} bytes, but {have} bytes follow the {start}-byte header"
            ),
        ));
    }
    Ok((count, dims))
}

fn load_pair(images_path: &Path, labels_path: &Path) -> Result<Dataset> {
    let images = read(images_path)?;
    let labels = read(labels_path)?;
    let (n_images, dims) = header(images_path, &images, IMAGES_MAGIC, 2)?;
    let (n_labels, _) = header(labels_path, &labels, LABELS_MAGIC, 0)?;
    if n_images != n_labels {
        return Err(err(
            labels_path,
            4,
            format!(
                "{n_labels} labels but {} holds {n_images} images",
                images_path.display()
            ),
        ));
    }
    let label_bytes = &labels[8..];
    if let Some(i) = label_bytes.iter().position(|&l| l > 9) {
        return Err(err(
            labels_path,
            8 + i,
            format!(
                "label {} of item {i} is not a digit class (0-9)",
                label_bytes[i]
            ),
        ));
    }
    Dataset::new(
        Inputs::Dense {
            values: images[16..].iter().map(|&p| f32::from(p) / 255.0).collect(),
            sample_shape: vec![1, dims[0], dims[1]],
        },
        Targets::Classes {
            labels: label_bytes.iter().map(|&l| u32::from(l)).collect(),
            num_classes: 10,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx_images(count: u32, rows: u32, cols: u32, pixels: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [IMAGES_MAGIC, count, rows, cols] {
            b.extend(v.to_be_bytes());
        }
        b.extend((0..pixels).map(|i| (i * 7 % 256) as u8));
        b
    }

    fn idx_labels(labels: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(LABELS_MAGIC.to_be_bytes());
        b.extend((labels.len() as u32).to_be_bytes());
        b.extend(labels);
        b
    }

    fn write_all(dir: &Path) {
        std::fs::write(dir.join(TRAIN_IMAGES), idx_images(3, 28, 28, 3 * 784)).unwrap();
        std::fs::write(dir.join(TRAIN_LABELS), idx_labels(&[5, 0, 9])).unwrap();
        std::fs::write(dir.join(TEST_IMAGES), idx_images(1, 28, 28, 784)).unwrap();
        std::fs::write(dir.join(TEST_LABELS), idx_labels(&[4])).unwrap();
    }

    #[test]
    fn small_idx_files() {
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path());
        let s = load(dir.path()).unwrap();
        assert_eq!(s.train.labels().unwrap(), &[5, 0, 9]);
        assert_eq!(s.test.labels().unwrap(), &[4]);
        assert_eq!(s.train.sample_shape().unwrap(), &[1, 28, 28]);
        let Inputs::Dense { values, .. } = s.train.inputs() else {
            panic!()
        };
        assert_eq!(values.len(), 3 * 784);
        assert_eq!(values[1], 7.0 / 255.0);
        assert_eq!(
            values[784 + 2],
            f32::from(((784 + 2) * 7 % 256) as u8) / 255.0
        );
    }

    #[test]
    fn corrupt_files_name_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let images = d.join(TRAIN_IMAGES);
        let labels = d.join(TRAIN_LABELS);
        let check = |needle: &[&str]| {
            let msg = load(d).unwrap_err().to_string();
            for n in needle {
                assert!(msg.contains(n), "missing {n:?} in {msg}");
            }
        };

        write_all(d);
        let mut bad = idx_images(3, 28, 28, 3 * 784);
        bad[3] = 0x01; // magic 2049: a labels file where images are expected
        std::fs::write(&images, &bad).unwrap();
        check(&[TRAIN_IMAGES, "byte offset 0", "magic number 2049"]);

        // Header promises 3 images, file holds 2.5: checked before allocating anything.
        std::fs::write(&images, idx_images(3, 28, 28, 2 * 784 + 392)).unwrap();
        check(&[
            TRAIN_IMAGES,
            "byte offset 16",
            "3 items of 784 bytes",
            "1960 bytes follow",
        ]);

        // A huge count with a tiny file is an error, not a huge allocation.
        std::fs::write(&images, idx_images(u32::MAX, 1024, 1024, 10)).unwrap();
        check(&[TRAIN_IMAGES, "byte offset 16"]);

        std::fs::write(&images, idx_images(3, 0, 28, 0)).unwrap();
        check(&[TRAIN_IMAGES, "byte offset 8", "dimension 0"]);

        std::fs::write(&images, &idx_images(3, 28, 28, 0)[..10]).unwrap();
        check(&[TRAIN_IMAGES, "byte offset 10", "inside the IDX header"]);

        std::fs::write(&images, idx_images(3, 28, 28, 3 * 784)).unwrap();
        std::fs::write(&labels, idx_labels(&[1, 2])).unwrap();
        check(&[TRAIN_LABELS, "byte offset 4", "2 labels", "3 images"]);

        std::fs::write(&labels, idx_labels(&[1, 2, 12])).unwrap();
        check(&[TRAIN_LABELS, "byte offset 10", "label 12"]);

        std::fs::write(&labels, idx_labels(&[1, 2, 3])).unwrap();
        std::fs::write(d.join(TEST_IMAGES), idx_images(1, 14, 14, 196)).unwrap();
        check(&[TEST_IMAGES, "[1, 14, 14]"]);

        std::fs::remove_file(d.join(TEST_LABELS)).unwrap();
        std::fs::write(d.join(format!("{TEST_LABELS}.gz")), b"gz").unwrap();
        check(&[TEST_LABELS, "gunzip"]);

        let msg = load(&d.join("none")).unwrap_err().to_string();
        assert!(msg.contains(TRAIN_IMAGES) && msg.contains("mnist"), "{msg}");
    }
}
