//! Image quality metrics and image grids for the gradient-inversion attack.
//!
//! - [`psnr`] and [`ssim`] compare images with values in `[0, 1]`; [`to_unit_range`] maps a reconstruction and
//!   its true image there **by the true image's range** (min → 0, max → 1, reconstruction clamped), so the
//!   metric does not depend on how the dataset standardised its inputs, and a reconstruction is never helped
//!   by being rescaled on its own.
//! - [`ssim`] is the standard one (Wang, Bovik, Sheikh, Simoncelli 2004): an 11×11 Gaussian window with
//!   σ = 1.5, constants C1 = (0.01·L)², C2 = (0.03·L)² with dynamic range L = 1, the mean of the SSIM map over
//!   the window positions that fit inside the image ("valid"), computed per channel and averaged over
//!   channels. Images smaller than 11 pixels on a side use the largest odd window that fits, σ scaled with
//!   it.
//! - [`write_png_grid`] writes images side by side as an 8-bit PNG. The encoder is a few lines here (zlib
//!   "stored" blocks, no compression, CRC-32 and Adler-32): an image grid is a few hundred KB at most, and a
//!   node's library crate should not pull an image codec and its compression stack in for a diagnostic.

use std::path::Path;

use crate::{ModelsError, Result};

/// Peak signal-to-noise ratio in dB of `b` against `a`, both in `[0, 1]` (peak 1): `10·log10(1 / MSE)`.
/// Identical images give `+∞`. Errors on different lengths, empty images or a NaN.
pub fn psnr(a: &[f32], b: &[f32]) -> Result<f64> {
    check_pair(a, b)?;
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as f64 - y as f64;
            d * d
        })
        .sum::<f64>()
        / a.len() as f64;
    Ok(if mse == 0.0 {
        f64::INFINITY
    } else {
        -10.0 * mse.log10()
    })
}

/// Mean SSIM of two `[channels, height, width]` images in `[0, 1]` (see the module documentation for the
/// exact definition). 1 for identical images.
pub fn ssim(a: &[f32], b: &[f32], shape: [usize; 3]) -> Result<f64> {
    check_pair(a, b)?;
    let [c, h, w] = shape;
    if c * h * w != a.len() {
        return Err(ModelsError::Config(format!(
            "SSIM: shape {shape:?} does not match {} values",
            a.len()
        )));
    }
    // Window: 11 (σ 1.5) or the largest odd size that fits, σ scaled in proportion.
    let size = 11.min(h.min(w));
    let size = if size % 2 == 0 { size - 1 } else { size };
    let sigma = 1.5 * size as f64 / 11.0;
    let half = (size / 2) as f64;
    let mut kernel: Vec<f64> = (0..size)
        .map(|i| (-((i as f64 - half).powi(2)) / (2.0 * sigma * sigma)).exp())
        .collect();
    let ks: f64 = kernel.iter().sum();
    kernel.iter_mut().for_each(|v| *v /= ks);
    const C1: f64 = 0.01 * 0.01;
    const C2: f64 = 0.03 * 0.03;
    let (oh, ow) = (h - size + 1, w - size + 1);
    let mut total = 0.0;
    for ch in 0..c {
        let pa = &a[ch * h * w..(ch + 1) * h * w];
        let pb = &b[ch * h * w..(ch + 1) * h * w];
        let to64 = |p: &[f32]| p.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        let (xa, xb) = (to64(pa), to64(pb));
        let prod = |f: &dyn Fn(usize) -> f64| (0..h * w).map(f).collect::<Vec<f64>>();
        let aa = prod(&|i| xa[i] * xa[i]);
        let bb = prod(&|i| xb[i] * xb[i]);
        let ab = prod(&|i| xa[i] * xb[i]);
        let [mu_a, mu_b, s_aa, s_bb, s_ab] =
            [&xa, &xb, &aa, &bb, &ab].map(|p| filter_valid(p, h, w, &kernel));
        let mut sum = 0.0;
        for i in 0..oh * ow {
            let (ma, mb) = (mu_a[i], mu_b[i]);
            let va = s_aa[i] - ma * ma;
            let vb = s_bb[i] - mb * mb;
            let cov = s_ab[i] - ma * mb;
            sum += ((2.0 * ma * mb + C1) * (2.0 * cov + C2))
                / ((ma * ma + mb * mb + C1) * (va + vb + C2));
        }
        total += sum / (oh * ow) as f64;
    }
    Ok(total / c as f64)
}

/// Separable "valid" filtering of an `h × w` plane with a normalised 1-D kernel.
fn filter_valid(p: &[f64], h: usize, w: usize, k: &[f64]) -> Vec<f64> {
    let n = k.len();
    let ow = w - n + 1;
    let oh = h - n + 1;
    let mut rows = vec![0.0; h * ow];
    for y in 0..h {
        for x in 0..ow {
            rows[y * ow + x] = (0..n).map(|t| k[t] * p[y * w + x + t]).sum();
        }
    }
    let mut out = vec![0.0; oh * ow];
    for y in 0..oh {
        for x in 0..ow {
            out[y * ow + x] = (0..n).map(|t| k[t] * rows[(y + t) * ow + x]).sum();
        }
    }
    out
}

fn check_pair(a: &[f32], b: &[f32]) -> Result<()> {
    if a.len() != b.len() || a.is_empty() {
        return Err(ModelsError::Config(format!(
            "image comparison needs two non-empty images of one size, got {} and {} values",
            a.len(),
            b.len()
        )));
    }
    if a.iter().chain(b).any(|v| v.is_nan()) {
        return Err(ModelsError::Config(
            "image comparison: a value is NaN".into(),
        ));
    }
    Ok(())
}

/// Maps `truth` and `recon` to `[0, 1]` by the range of `truth` (its min → 0, its max → 1) and clamps the
/// reconstruction. A constant true image maps to 0.5 everywhere (with a unit range around it).
pub fn to_unit_range(truth: &[f32], recon: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let lo = truth.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = truth.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (lo, scale) = if hi > lo {
        (lo, 1.0 / (hi - lo))
    } else {
        (lo - 0.5, 1.0)
    };
    let map = |v: f32| ((v - lo) * scale).clamp(0.0, 1.0);
    (
        truth.iter().map(|&v| map(v)).collect(),
        recon.iter().map(|&v| map(v)).collect(),
    )
}

/// Maps one image to `[0, 1]` by its own range (for display of a true image or a reconstruction alone).
pub fn normalize_unit(img: &[f32]) -> Vec<f32> {
    to_unit_range(img, img).0
}

/// Pixels of padding between and around the images of a grid.
const GRID_PAD: usize = 2;

/// Writes `images` (each `[channels, height, width]` with values in `[0, 1]`, clamped; 1 channel = grey,
/// 3 = RGB) as a PNG grid of `cols` columns, rows filled left to right, on a mid-grey background, every pixel
/// drawn as a `scale × scale` block (32×32 images are hard to see at scale 1).
pub fn write_png_grid(
    path: &Path,
    images: &[Vec<f32>],
    shape: [usize; 3],
    cols: usize,
    scale: usize,
) -> Result<()> {
    let [c, h, w] = shape;
    if !(c == 1 || c == 3) || h == 0 || w == 0 || cols == 0 || scale == 0 || images.is_empty() {
        return Err(ModelsError::Config(format!(
            "image grid: need 1 or 3 channels, non-zero sizes, at least one image and one column; got shape \
             {shape:?}, {} images, {cols} columns",
            images.len()
        )));
    }
    if let Some(i) = images.iter().position(|im| im.len() != c * h * w) {
        return Err(ModelsError::Config(format!(
            "image grid: image {i} has {} values, shape {shape:?} needs {}",
            images[i].len(),
            c * h * w
        )));
    }
    let cols = cols.min(images.len());
    let rows = images.len().div_ceil(cols);
    let (h, w, sh, sw) = (h * scale, w * scale, h, w);
    let gw = cols * (w + GRID_PAD) + GRID_PAD;
    let gh = rows * (h + GRID_PAD) + GRID_PAD;
    let mut rgb = vec![128u8; gw * gh * 3];
    for (n, im) in images.iter().enumerate() {
        let (x0, y0) = (
            GRID_PAD + (n % cols) * (w + GRID_PAD),
            GRID_PAD + (n / cols) * (h + GRID_PAD),
        );
        for y in 0..h {
            for x in 0..w {
                for ch in 0..3 {
                    let v = im[(ch % c) * sh * sw + (y / scale) * sw + x / scale];
                    let v = if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) };
                    rgb[((y0 + y) * gw + x0 + x) * 3 + ch] = (v * 255.0).round() as u8;
                }
            }
        }
    }
    let png = encode_png_rgb(&rgb, gw, gh);
    std::fs::write(path, png).map_err(|source| ModelsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// An 8-bit RGB PNG of `width × height` pixels (`rgb` row-major, 3 bytes per pixel), with filter 0 on every
/// scan line and zlib "stored" (uncompressed) deflate blocks.
fn encode_png_rgb(rgb: &[u8], width: usize, height: usize) -> Vec<u8> {
    let mut raw = Vec::with_capacity(height * (1 + width * 3));
    for row in rgb.chunks(width * 3) {
        raw.push(0); // filter type: none
        raw.extend_from_slice(row);
    }
    let mut z = vec![0x78, 0x01]; // zlib header: deflate, 32 KiB window, no dictionary, check bits ok
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len())); // BFINAL, BTYPE = 00 (stored)
        let len = block.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());

    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(width as u32).to_be_bytes());
    ihdr.extend_from_slice(&(height as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", &z);
    png_chunk(&mut out, b"IEND", &[]);
    out
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as PNG chunks need.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + byte as u32) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psnr_known_values() {
        let a = vec![0.0f32; 100];
        assert_eq!(psnr(&a, &a).unwrap(), f64::INFINITY);
        // MSE 0.01 → 20 dB.
        let b = vec![0.1f32; 100];
        assert!((psnr(&a, &b).unwrap() - 20.0).abs() < 1e-5);
        assert!(psnr(&a, &b[..99]).is_err());
    }

    #[test]
    fn ssim_identity_and_ordering() {
        let shape = [3, 16, 16];
        let n = 3 * 16 * 16;
        let img: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 / 100.0 + (i % 16) as f32 / 32.0) / 1.5)
            .collect();
        assert!((ssim(&img, &img, shape).unwrap() - 1.0).abs() < 1e-9);
        let slightly: Vec<f32> = img
            .iter()
            .enumerate()
            .map(|(i, v)| v + 0.02 * ((i % 3) as f32 - 1.0))
            .collect();
        let flat = vec![0.5f32; n];
        let s1 = ssim(&img, &slightly, shape).unwrap();
        let s2 = ssim(&img, &flat, shape).unwrap();
        assert!(s1 > 0.8 && s1 < 1.0, "{s1}");
        assert!(s2 < 0.1, "{s2}");
        // Symmetric.
        assert!((s1 - ssim(&slightly, &img, shape).unwrap()).abs() < 1e-12);
        // Small images use a smaller window.
        let small = vec![0.3f32; 5 * 5];
        assert!((ssim(&small, &small, [1, 5, 5]).unwrap() - 1.0).abs() < 1e-9);
        assert!(ssim(&img, &img, [3, 16, 15]).is_err());
    }

    #[test]
    fn unit_range_uses_the_truths_range() {
        let (t, r) = to_unit_range(&[-2.0, 0.0, 2.0], &[-4.0, 1.0, 2.0]);
        assert_eq!(t, vec![0.0, 0.5, 1.0]);
        assert_eq!(r, vec![0.0, 0.75, 1.0]);
    }

    #[test]
    fn png_is_well_formed() {
        // Known CRC-32 and Adler-32 check values.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.png");
        let imgs: Vec<Vec<f32>> = (0..5).map(|i| vec![i as f32 / 4.0; 3 * 4 * 6]).collect();
        write_png_grid(&path, &imgs, [3, 4, 6], 3, 1).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&bytes[12..16], b"IHDR");
        // 3 columns × (6 + 2) + 2 = 26 wide, 2 rows × (4 + 2) + 2 = 14 high.
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 26);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), 14);
        assert_eq!(&bytes[bytes.len() - 8..bytes.len() - 4], b"IEND");
        assert!(write_png_grid(&path, &imgs, [2, 4, 6], 3, 1).is_err());
        // Scale 2: 3 × (12 + 2) + 2 = 44 wide.
        write_png_grid(&path, &imgs, [3, 4, 6], 3, 2).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 44);
    }
}
