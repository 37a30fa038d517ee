//! Image classification data: IDX files (the MNIST format, LeCun et al.; gzipped or not) and
//! image folders (one subfolder per class, PNG or JPEG through the `image` crate) read into
//! one [`ImageSet`] of u8 pixels and labels, and written as compact shards with a validation
//! split (`shard.rs`). Fashion-MNIST (Xiao et al. 2017) comes from Debian's
//! `dataset-fashion-mnist` at [`FASHION_MNIST_DIR`].

pub mod folder;
pub mod idx;
pub mod shard;

use std::path::PathBuf;

/// Where Debian's `dataset-fashion-mnist` puts the data.
pub const FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST's class names, by label.
pub const FASHION_MNIST_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an IDX file: {why}")]
    BadIdx { path: PathBuf, why: String },
    #[error(
        "{path}: truncated: the header promises {expected} bytes of data, the file holds {got}"
    )]
    Truncated {
        path: PathBuf,
        expected: usize,
        got: usize,
    },
    #[error("{images} holds {n_images} images but {labels} holds {n_labels} labels")]
    CountMismatch {
        images: PathBuf,
        labels: PathBuf,
        n_images: usize,
        n_labels: usize,
    },
    #[error("{path}: cannot read the image: {why}")]
    BadImage { path: PathBuf, why: String },
    #[error("{0}")]
    Layout(String),
    #[error("{path}: bad shard: {why}")]
    BadShard { path: PathBuf, why: String },
}

/// Images of one size, `c` channels, u8 pixels (N, H, W, C) and a label per image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageSet {
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub classes: Vec<String>,
    pub pixels: Vec<u8>,
    pub labels: Vec<u16>,
}

impl ImageSet {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Pixels of image `i`, (H, W, C).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.h * self.w * self.c;
        &self.pixels[i * n..(i + 1) * n]
    }

    /// The images at `idx`, in that order.
    pub fn select(&self, idx: &[usize]) -> ImageSet {
        let mut out = ImageSet {
            h: self.h,
            w: self.w,
            c: self.c,
            classes: self.classes.clone(),
            ..Default::default()
        };
        for &i in idx {
            out.pixels.extend_from_slice(self.image(i));
            out.labels.push(self.labels[i]);
        }
        out
    }

    /// A seeded split: `fraction` of the images (at least one when there are two or more)
    /// for validation, the rest for training, each in its original order.
    pub fn split(&self, fraction: f64, seed: u64) -> (ImageSet, ImageSet) {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let n = self.len();
        let mut idx: Vec<usize> = (0..n).collect();
        idx.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        let k =
            ((n as f64 * fraction).round() as usize).clamp(usize::from(fraction > 0.0 && n > 1), n);
        let (mut val, mut train) = (idx[..k].to_vec(), idx[k..].to_vec());
        val.sort_unstable();
        train.sort_unstable();
        (self.select(&train), self.select(&val))
    }

    /// Images per class, by label.
    pub fn counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.classes.len()];
        for &l in &self.labels {
            if let Some(x) = c.get_mut(l as usize) {
                *x += 1;
            }
        }
        c
    }
}
