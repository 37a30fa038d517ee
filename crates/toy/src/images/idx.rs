//! IDX files (yann.lecun.com/exdb/mnist): a magic of two zero bytes, a type byte (0x08:
//! unsigned byte) and a dimension count, the dimensions as big-endian u32, then the data.
//! Files ending in `.gz` are gunzipped as they are read.

use super::{ImageError, ImageSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A u8 IDX array: its dimensions and data.
#[derive(Debug)]
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Read `path` (gunzipped when it ends in `.gz`).
pub fn read(path: &Path) -> Result<Idx, ImageError> {
    let raw = std::fs::read(path).map_err(io(path))?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| ImageError::BadIdx {
                path: path.to_path_buf(),
                why: format!("gzip: {e}"),
            })?;
        out
    } else {
        raw
    };
    parse(path, &bytes)
}

/// Parse IDX bytes read from `path` (named in errors).
pub fn parse(path: &Path, b: &[u8]) -> Result<Idx, ImageError> {
    let bad = |why: String| ImageError::BadIdx {
        path: path.to_path_buf(),
        why,
    };
    if b.len() < 4 || b[0] != 0 || b[1] != 0 {
        return Err(bad("expected the magic 00 00 <type> <dims>".into()));
    }
    if b[2] != 0x08 {
        return Err(bad(format!(
            "element type 0x{:02x}; only unsigned bytes (0x08) are supported",
            b[2]
        )));
    }
    let nd = b[3] as usize;
    if nd == 0 || b.len() < 4 + 4 * nd {
        return Err(bad(format!("{nd} dimensions, header cut short")));
    }
    let dims: Vec<usize> = (0..nd)
        .map(|i| u32::from_be_bytes(b[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize)
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
    let data = &b[4 + 4 * nd..];
    if data.len() < expected {
        return Err(ImageError::Truncated {
            path: path.to_path_buf(),
            expected,
            got: data.len(),
        });
    }
    Ok(Idx {
        dims,
        data: data[..expected].to_vec(),
    })
}

/// Images (N, H, W) and labels (N) from a pair of IDX files, grey (one channel).
pub fn load_pair(
    images: &Path,
    labels: &Path,
    classes: Vec<String>,
) -> Result<ImageSet, ImageError> {
    let im = read(images)?;
    let lb = read(labels)?;
    if im.dims.len() != 3 {
        return Err(ImageError::BadIdx {
            path: images.to_path_buf(),
            why: format!("images need 3 dimensions (N, H, W), got {:?}", im.dims),
        });
    }
    if lb.dims.len() != 1 {
        return Err(ImageError::BadIdx {
            path: labels.to_path_buf(),
            why: format!("labels need 1 dimension, got {:?}", lb.dims),
        });
    }
    if im.dims[0] != lb.dims[0] {
        return Err(ImageError::CountMismatch {
            images: images.to_path_buf(),
            labels: labels.to_path_buf(),
            n_images: im.dims[0],
            n_labels: lb.dims[0],
        });
    }
    let n_classes = lb.data.iter().map(|&l| l as usize + 1).max().unwrap_or(0);
    let classes = if classes.len() >= n_classes {
        classes
    } else {
        (0..n_classes).map(|i| i.to_string()).collect()
    };
    Ok(ImageSet {
        h: im.dims[1],
        w: im.dims[2],
        c: 1,
        classes,
        pixels: im.data,
        labels: lb.data.iter().map(|&l| l as u16).collect(),
    })
}

/// The `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` pair in `dir`
/// (`prefix` "train" or "t10k"), when both are there.
pub fn find_pair(dir: &Path, prefix: &str) -> Option<(PathBuf, PathBuf)> {
    let pick = |stem: &str| {
        [format!("{stem}.gz"), stem.to_string()]
            .into_iter()
            .map(|n| dir.join(n))
            .find(|p| p.exists())
    };
    Some((
        pick(&format!("{prefix}-images-idx3-ubyte"))?,
        pick(&format!("{prefix}-labels-idx1-ubyte"))?,
    ))
}
