//! Using a trained ViT: its accuracy on a labelled split (top-1, top-5, per class, the
//! confusion matrix) and the classes of image files (top-k with probabilities).

use super::batch::{batch, BatchSpec};
use super::checkpoint::VitCheckpoint;
use super::vit::{Vit, VitActs};
use crate::images::ImageSet;
use rayon::prelude::*;
use std::path::Path;
use tinynn::layers::serial;

/// Logits (N, K) of every image of `set`, in batches of about 4096 tokens (the forward keeps
/// what a backward would need: ViT-Tiny's 197 tokens a image take 29 MB each). Each batch
/// runs whole on one thread (`serial`), the batches side by side.
pub fn logits(vit: &Vit, p: &[f32], set: &ImageSet, spec: &BatchSpec) -> Vec<f32> {
    let per_batch = (4096 / vit.cfg.tokens()).clamp(1, 256);
    let idx: Vec<usize> = (0..set.len()).collect();
    let parts: Vec<Vec<f32>> = idx
        .par_chunks(per_batch)
        .map_init(VitActs::default, |a, chunk| {
            let (x, _) = batch(set, chunk, spec, None);
            serial(|| vit.forward(p, &x, chunk.len(), a));
            a.logits.clone()
        })
        .collect();
    parts.concat()
}

/// Classes by decreasing logit.
fn ranked(row: &[f32]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    idx
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub images: usize,
    pub top1: f64,
    pub top5: f64,
    /// (class, accuracy, images) per class.
    pub per_class: Vec<(String, f64, usize)>,
    /// confusion[true][predicted] counts.
    pub confusion: Vec<Vec<usize>>,
}

/// The accuracy report of `ck` on `set`.
pub fn report(ck: &VitCheckpoint, set: &ImageSet) -> Report {
    let vit = Vit::new(ck.cfg.clone());
    let k = ck.cfg.classes;
    let z = logits(&vit, &ck.params, set, &ck.batch_spec());
    let mut confusion = vec![vec![0usize; k]; k];
    let (mut top1, mut top5) = (0usize, 0usize);
    for (row, &label) in z.chunks_exact(k).zip(&set.labels) {
        let r = ranked(row);
        confusion[label as usize][r[0]] += 1;
        top1 += usize::from(r[0] == label as usize);
        top5 += usize::from(r.iter().take(5).any(|&c| c == label as usize));
    }
    let n = set.len().max(1) as f64;
    let per_class = (0..k)
        .map(|c| {
            let total: usize = confusion[c].iter().sum();
            let name = ck.classes.get(c).cloned().unwrap_or_else(|| c.to_string());
            (name, confusion[c][c] as f64 / total.max(1) as f64, total)
        })
        .collect();
    Report {
        images: set.len(),
        top1: top1 as f64 / n,
        top5: top5 as f64 / n,
        per_class,
        confusion,
    }
}

/// The top `k` (class, probability) of an image file.
pub fn classify(ck: &VitCheckpoint, path: &Path, k: usize) -> Result<Vec<(String, f32)>, String> {
    let img =
        image::open(path).map_err(|e| format!("{}: cannot read the image: {e}", path.display()))?;
    let s = ck.cfg.image as u32;
    let img = img.resize_exact(s, s, image::imageops::FilterType::Triangle);
    let pixels = if ck.cfg.channels == 1 {
        img.to_luma8().into_raw()
    } else {
        img.to_rgb8().into_raw()
    };
    let set = ImageSet {
        h: s as usize,
        w: s as usize,
        c: ck.cfg.channels,
        classes: ck.classes.clone(),
        pixels,
        labels: vec![0],
    };
    let vit = Vit::new(ck.cfg.clone());
    let z = logits(&vit, &ck.params, &set, &ck.batch_spec());
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = z.iter().map(|v| (v - m).exp()).sum();
    Ok(ranked(&z)
        .into_iter()
        .take(k)
        .map(|c| {
            (
                ck.classes.get(c).cloned().unwrap_or_else(|| c.to_string()),
                (z[c] - m).exp() / sum,
            )
        })
        .collect())
}
