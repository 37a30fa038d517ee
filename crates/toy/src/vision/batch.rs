//! Batches of an [`ImageSet`] for the ViT: u8 pixels resized (bilinear) to the model's side,
//! grey replicated to its channels, normalised per channel, and, when training, augmented
//! as torchvision's `RandomCrop(padding)` and `RandomHorizontalFlip` do. The draws come from
//! a generator seeded by (seed, step, image), so a resumed run sees the same batches.

use crate::images::ImageSet;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchSpec {
    /// Side and channels the model takes.
    pub size: usize,
    pub channels: usize,
    /// Per-channel mean and standard deviation of pixels in [0, 1].
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    /// Random crop after zero padding of this many pixels (0: none), random flips.
    pub crop_pad: usize,
    pub flip: bool,
}

/// One image as f32 (size, size, channels), augmented with `rng` when given.
fn image(
    set: &ImageSet,
    i: usize,
    s: &BatchSpec,
    rng: Option<&mut rand::rngs::StdRng>,
    out: &mut Vec<f32>,
) {
    let (h, w, c, n) = (set.h, set.w, set.c, s.size);
    let src = set.image(i);
    let (mut oy, mut ox, mut flip) = (0isize, 0isize, false);
    if let Some(r) = rng {
        if s.crop_pad > 0 {
            let p = s.crop_pad as i64;
            oy = r.random_range(-p..=p) as isize;
            ox = r.random_range(-p..=p) as isize;
        }
        flip = s.flip && r.random::<bool>();
    }
    // bilinear sample of channel ch at output pixel (y, x), zero outside (the padding); at
    // the stored size the sample is the pixel itself
    let same = n == h && n == w;
    let sample = |y: usize, x: usize, ch: usize| -> f32 {
        let (yy, xx) = (y as isize + oy, x as isize + ox);
        if yy < 0 || xx < 0 || yy >= n as isize || xx >= n as isize {
            return 0.0;
        }
        let xx = if flip { n as isize - 1 - xx } else { xx };
        if same {
            return src[(yy as usize * w + xx as usize) * c + ch.min(c - 1)] as f32 / 255.0;
        }
        let fy = ((yy as f32 + 0.5) * h as f32 / n as f32 - 0.5).clamp(0.0, (h - 1) as f32);
        let fx = ((xx as f32 + 0.5) * w as f32 / n as f32 - 0.5).clamp(0.0, (w - 1) as f32);
        let (y0, x0) = (fy as usize, fx as usize);
        let (y1, x1) = ((y0 + 1).min(h - 1), (x0 + 1).min(w - 1));
        let (ty, tx) = (fy - y0 as f32, fx - x0 as f32);
        let sc = ch.min(c - 1);
        let at = |y: usize, x: usize| src[(y * w + x) * c + sc] as f32 / 255.0;
        let top = at(y0, x0) * (1.0 - tx) + at(y0, x1) * tx;
        let bot = at(y1, x0) * (1.0 - tx) + at(y1, x1) * tx;
        top * (1.0 - ty) + bot * ty
    };
    for y in 0..n {
        for x in 0..n {
            for ch in 0..s.channels {
                out.push((sample(y, x, ch) - s.mean[ch]) / s.std[ch]);
            }
        }
    }
}

/// Images `idx` of `set` as (B, size, size, channels) f32 and their labels; `augment` is
/// Some((seed, step)) when training.
pub fn batch(
    set: &ImageSet,
    idx: &[usize],
    s: &BatchSpec,
    augment: Option<(u64, u64)>,
) -> (Vec<f32>, Vec<u16>) {
    let mut out = Vec::with_capacity(idx.len() * s.size * s.size * s.channels);
    for &i in idx {
        let mut rng = augment.map(|(seed, step)| {
            rand::rngs::StdRng::seed_from_u64(
                seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
            )
        });
        image(set, i, s, rng.as_mut(), &mut out);
    }
    (out, idx.iter().map(|&i| set.labels[i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> ImageSet {
        ImageSet {
            h: 2,
            w: 2,
            c: 1,
            classes: vec!["a".into(), "b".into()],
            pixels: vec![0, 255, 255, 0, 51, 51, 51, 51],
            labels: vec![1, 0],
        }
    }

    #[test]
    fn batches_replicate_normalise_and_augment_reproducibly() {
        let s = BatchSpec {
            size: 2,
            channels: 3,
            mean: vec![0.5; 3],
            std: vec![0.5; 3],
            crop_pad: 0,
            flip: false,
        };
        let (x, y) = batch(&set(), &[0, 1], &s, None);
        assert_eq!(y, [1, 0]);
        assert_eq!(x.len(), 2 * 4 * 3);
        // pixel (0, 1) of image 0 is 255 -> (1 - 0.5) / 0.5 = 1 in all three channels
        assert_eq!(&x[3..6], &[1.0, 1.0, 1.0]);
        assert!((x[12] - (0.2 - 0.5) / 0.5).abs() < 1e-6);
        let aug = BatchSpec {
            crop_pad: 1,
            flip: true,
            ..s
        };
        let a1 = batch(&set(), &[0, 1], &aug, Some((7, 3))).0;
        assert_eq!(a1, batch(&set(), &[0, 1], &aug, Some((7, 3))).0, "seeded");
        let differs = (0..20).any(|step| batch(&set(), &[0], &aug, Some((7, step))).0 != x[..12]);
        assert!(differs, "augmentation never changed the image");
        // upscaling keeps the range
        let up = BatchSpec {
            size: 8,
            channels: 1,
            mean: vec![0.0],
            std: vec![1.0],
            crop_pad: 0,
            flip: false,
        };
        let (x, _) = batch(&set(), &[1], &up, None);
        assert!(x.iter().all(|v| (v - 0.2).abs() < 1e-6));
    }
}
