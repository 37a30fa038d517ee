//! ViT (Dosovitskiy et al. 2021; timm's `VisionTransformer` with a class token): the image
//! cut into P x P patches, each a row of P*P*Ch pixels projected to width C (the strided
//! convolution as a matmul over unfolded patches), a learned CLS token first and learned
//! positions added, pre-LN encoder blocks (`tinynn::layers::encoder`), a final LayerNorm of
//! the CLS row (or, with `pool = "mean"`, of the patch rows' mean: timm's `global_pool='avg'`
//! with `fc_norm`, as Beyer et al. 2022 "Better plain ViT baselines") and a linear head.
//! Forward and backward side by side.
//!
//! Shapes: images (B, H, W, Ch) f32; patches (B*N, P*P*Ch), N = (H/P)(W/P); tokens (B*T, C),
//! T = N + 1; logits (B, K).

use tinynn::layers::encoder::{EncoderActs, EncoderBlock};
use tinynn::layers::layernorm::LayerNorm;
use tinynn::layers::linear::Linear;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VitConfig {
    /// Square images of this side, and patches of this side.
    pub image: usize,
    pub patch: usize,
    pub channels: usize,
    pub classes: usize,
    pub width: usize,
    pub depth: usize,
    pub heads: usize,
    pub mlp: usize,
    /// What the head reads: the CLS row (default) or the mean of the patch rows.
    #[serde(default)]
    pub pool: Pool,
}

/// The row the final LayerNorm and the head read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    #[default]
    Cls,
    /// The mean over the patch tokens (the CLS row excluded).
    Mean,
}

impl Pool {
    pub fn name(self) -> &'static str {
        match self {
            Pool::Cls => "cls",
            Pool::Mean => "mean",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cls" => Some(Pool::Cls),
            "mean" => Some(Pool::Mean),
            _ => None,
        }
    }
}

impl VitConfig {
    pub fn patches(&self) -> usize {
        (self.image / self.patch).pow(2)
    }

    pub fn tokens(&self) -> usize {
        self.patches() + 1
    }

    pub fn patch_dim(&self) -> usize {
        self.patch * self.patch * self.channels
    }

    pub fn block(&self) -> EncoderBlock {
        EncoderBlock::new(self.width, self.heads, self.mlp)
    }

    /// (name, size) of every parameter in the flat vector, in order (GGUF names `vit.*`).
    pub fn layout(&self) -> Vec<(String, usize)> {
        let (c, k) = (self.width, self.classes);
        let mut v = vec![
            ("patch.weight".to_string(), c * self.patch_dim()),
            ("patch.bias".into(), c),
            ("cls".into(), c),
            ("pos".into(), self.tokens() * c),
        ];
        let blk = self.block();
        for l in 0..self.depth {
            for (name, n) in EncoderBlock::PARAMS.iter().zip(blk.shapes()) {
                v.push((format!("blk.{l}.{name}"), n));
            }
        }
        v.extend([
            ("norm.weight".into(), c),
            ("norm.bias".into(), c),
            ("head.weight".into(), k * c),
            ("head.bias".into(), k),
        ]);
        v
    }

    pub fn n_params(&self) -> usize {
        self.layout().iter().map(|x| x.1).sum()
    }

    pub fn check(&self) -> Result<(), String> {
        if self.patch == 0 || !self.image.is_multiple_of(self.patch) {
            return Err(format!(
                "patch {} must divide image {}",
                self.patch, self.image
            ));
        }
        if self.heads == 0 || !self.width.is_multiple_of(self.heads) {
            return Err(format!(
                "{} heads must divide width {}",
                self.heads, self.width
            ));
        }
        if self.channels == 0 || self.classes < 2 || self.depth == 0 || self.mlp == 0 {
            return Err("channels, depth and mlp must be at least 1, classes at least 2".into());
        }
        Ok(())
    }
}

/// Offsets of the named parts of the flat parameter vector.
struct Parts {
    patch_w: usize,
    patch_b: usize,
    cls: usize,
    pos: usize,
    blocks: usize,
    norm_w: usize,
    norm_b: usize,
    head_w: usize,
    head_b: usize,
    block_len: usize,
}

impl Parts {
    fn new(cfg: &VitConfig) -> Self {
        let (c, k, t) = (cfg.width, cfg.classes, cfg.tokens());
        let patch_w = 0;
        let patch_b = patch_w + c * cfg.patch_dim();
        let cls = patch_b + c;
        let pos = cls + c;
        let blocks = pos + t * c;
        let block_len = cfg.block().n_params();
        let norm_w = blocks + cfg.depth * block_len;
        let norm_b = norm_w + c;
        let head_w = norm_b + c;
        let head_b = head_w + k * c;
        Self {
            patch_w,
            patch_b,
            cls,
            pos,
            blocks,
            norm_w,
            norm_b,
            head_w,
            head_b,
            block_len,
        }
    }
}

/// timm's initialisation, from a seeded generator: weights N(0, 0.02) (truncated at 2
/// sigma), biases 0, LayerNorms 1 and 0, CLS and positions N(0, 0.02).
pub fn init(cfg: &VitConfig, seed: u64) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut normal = move || loop {
        // Box-Muller, truncated at 2 sigma
        let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        if z.abs() <= 2.0 {
            return (0.02 * z) as f32;
        }
    };
    let mut p = Vec::with_capacity(cfg.n_params());
    for (name, n) in cfg.layout() {
        let fill: Box<dyn FnMut() -> f32> = if name.ends_with(".bias") {
            Box::new(|| 0.0)
        } else if name.contains("ln") || name.starts_with("norm") {
            Box::new(|| 1.0)
        } else {
            Box::new(&mut normal)
        };
        p.extend(std::iter::repeat_with(fill).take(n));
    }
    p
}

/// What a forward keeps for the backward.
#[derive(Default)]
pub struct VitActs {
    patches: Vec<f32>,
    blocks: Vec<EncoderActs>,
    cls_in: Vec<f32>,
    cls_out: Vec<f32>,
    mean: Vec<f32>,
    rstd: Vec<f32>,
    pub logits: Vec<f32>,
}

/// Images (B, H, W, Ch) -> rows of patches (B*N, P*P*Ch), each row (dy, dx, ch) in order.
fn unfold(cfg: &VitConfig, images: &[f32], b: usize, out: &mut Vec<f32>) {
    let (s, p, ch) = (cfg.image, cfg.patch, cfg.channels);
    let g = s / p;
    out.clear();
    out.reserve(b * cfg.patches() * cfg.patch_dim());
    for bi in 0..b {
        let img = &images[bi * s * s * ch..(bi + 1) * s * s * ch];
        for py in 0..g {
            for px in 0..g {
                for dy in 0..p {
                    let row = (py * p + dy) * s + px * p;
                    out.extend_from_slice(&img[row * ch..(row + p) * ch]);
                }
            }
        }
    }
}

/// Tokens (B, T, C) -> the rows the head reads (B, C): row 0, or the mean of rows 1..T.
fn pool_rows(pool: Pool, x: &[f32], b: usize, t: usize, c: usize, out: &mut Vec<f32>) {
    out.clear();
    for img in x[..b * t * c].chunks_exact(t * c) {
        match pool {
            Pool::Cls => out.extend_from_slice(&img[..c]),
            Pool::Mean => {
                let at = out.len();
                out.resize(at + c, 0.0);
                for row in img[c..].chunks_exact(c) {
                    out[at..].iter_mut().zip(row).for_each(|(o, v)| *o += v);
                }
                let inv = 1.0 / (t - 1) as f32;
                out[at..].iter_mut().for_each(|o| *o *= inv);
            }
        }
    }
}

/// The backward of [`pool_rows`]: `d` (B, C) into `dx` (B, T, C), which holds zeros.
fn pool_rows_backward(pool: Pool, d: &[f32], b: usize, t: usize, c: usize, dx: &mut [f32]) {
    for (img, g) in dx[..b * t * c]
        .chunks_exact_mut(t * c)
        .zip(d.chunks_exact(c))
    {
        match pool {
            Pool::Cls => img[..c].copy_from_slice(g),
            Pool::Mean => {
                let inv = 1.0 / (t - 1) as f32;
                for row in img[c..].chunks_exact_mut(c) {
                    row.iter_mut().zip(g).for_each(|(o, v)| *o = v * inv);
                }
            }
        }
    }
}

pub struct Vit {
    pub cfg: VitConfig,
}

impl Vit {
    pub fn new(cfg: VitConfig) -> Self {
        Self { cfg }
    }

    /// Logits (B, K) of `images` (B, H, W, Ch) into `a.logits`.
    pub fn forward(&self, p: &[f32], images: &[f32], b: usize, a: &mut VitActs) {
        let cfg = &self.cfg;
        let (c, t, n, k) = (cfg.width, cfg.tokens(), cfg.patches(), cfg.classes);
        let o = Parts::new(cfg);
        unfold(cfg, images, b, &mut a.patches);
        // (B*N, P*P*Ch) -> (B*N, C), then (B, T, C) with CLS first and positions added
        let mut emb = vec![0.0; b * n * c];
        Linear::new(cfg.patch_dim(), c).forward(
            &a.patches,
            &p[o.patch_w..o.patch_b],
            Some(&p[o.patch_b..o.cls]),
            &mut emb,
            b * n,
            false,
        );
        let mut x = vec![0.0; b * t * c];
        let pos = &p[o.pos..o.blocks];
        for bi in 0..b {
            let img = &mut x[bi * t * c..(bi + 1) * t * c];
            img[..c].copy_from_slice(&p[o.cls..o.pos]);
            img[c..].copy_from_slice(&emb[bi * n * c..(bi + 1) * n * c]);
            img.iter_mut().zip(pos).for_each(|(v, q)| *v += q);
        }
        let blk = cfg.block();
        a.blocks.resize_with(cfg.depth, EncoderActs::default);
        // each block keeps its input in its acts; two buffers carry the stream
        let mut y = vec![0.0; b * t * c];
        for l in 0..cfg.depth {
            let bp = &p[o.blocks + l * o.block_len..o.blocks + (l + 1) * o.block_len];
            blk.forward(bp, &x, &mut y, &mut a.blocks[l], b, t);
            std::mem::swap(&mut x, &mut y);
        }
        // the CLS rows (or the patch rows' means): LayerNorm, head
        pool_rows(cfg.pool, &x, b, t, c, &mut a.cls_in);
        a.cls_out.resize(b * c, 0.0);
        a.mean.resize(b, 0.0);
        a.rstd.resize(b, 0.0);
        LayerNorm::new(c, 1e-6).forward(
            &a.cls_in,
            &p[o.norm_w..o.norm_b],
            &p[o.norm_b..o.head_w],
            1.0,
            &mut a.cls_out,
            &mut a.mean,
            &mut a.rstd,
            b,
        );
        a.logits.resize(b * k, 0.0);
        Linear::new(c, k).forward(
            &a.cls_out,
            &p[o.head_w..o.head_b],
            Some(&p[o.head_b..]),
            &mut a.logits,
            b,
            false,
        );
    }

    /// From `dlogits` (B, K): the parameters' gradient added into `dp`.
    pub fn backward(&self, p: &[f32], a: &VitActs, dlogits: &[f32], dp: &mut [f32], b: usize) {
        let cfg = &self.cfg;
        let (c, t, n, k) = (cfg.width, cfg.tokens(), cfg.patches(), cfg.classes);
        let o = Parts::new(cfg);
        let mut dcls = vec![0.0; b * c];
        {
            let (head, rest) = dp[o.head_w..].split_at_mut(k * c);
            Linear::new(c, k).backward(
                dlogits,
                &a.cls_out,
                &p[o.head_w..o.head_b],
                Some(&mut dcls),
                false,
                head,
                Some(rest),
                b,
            );
        }
        let mut dcls_in = vec![0.0; b * c];
        {
            let (nw, nb) = dp[o.norm_w..o.head_w].split_at_mut(c);
            LayerNorm::new(c, 1e-6).backward(
                &dcls,
                &a.cls_in,
                &p[o.norm_w..o.norm_b],
                1.0,
                &a.mean,
                &a.rstd,
                &mut dcls_in,
                nw,
                nb,
                b,
            );
        }
        let mut dx = vec![0.0; b * t * c];
        pool_rows_backward(cfg.pool, &dcls_in, b, t, c, &mut dx);
        let blk = cfg.block();
        let mut dxin = vec![0.0; b * t * c];
        for l in (0..cfg.depth).rev() {
            let range = o.blocks + l * o.block_len..o.blocks + (l + 1) * o.block_len;
            blk.backward(
                &p[range.clone()],
                &a.blocks[l],
                &dx,
                &mut dxin,
                &mut dp[range],
                b,
                t,
            );
            std::mem::swap(&mut dx, &mut dxin);
        }
        // positions and CLS: summed over the batch; patch rows into the projection
        let mut demb = vec![0.0; b * n * c];
        for bi in 0..b {
            let img = &dx[bi * t * c..(bi + 1) * t * c];
            dp[o.pos..o.blocks]
                .iter_mut()
                .zip(img)
                .for_each(|(d, g)| *d += g);
            dp[o.cls..o.pos]
                .iter_mut()
                .zip(&img[..c])
                .for_each(|(d, g)| *d += g);
            demb[bi * n * c..(bi + 1) * n * c].copy_from_slice(&img[c..]);
        }
        let (pw, pb) = dp[o.patch_w..o.cls].split_at_mut(c * cfg.patch_dim());
        Linear::new(cfg.patch_dim(), c).backward(
            &demb,
            &a.patches,
            &p[o.patch_w..o.patch_b],
            None,
            false,
            pw,
            Some(pb),
            b * n,
        );
    }
}

/// Mean cross-entropy of `logits` (B, K) against `labels` with label smoothing `eps` (the
/// target puts 1 - eps on the label and eps / K on every class); `logits` becomes the
/// gradient of the mean loss.
pub fn smoothed_loss(logits: &mut [f32], labels: &[u16], k: usize, eps: f32) -> f32 {
    let b = labels.len();
    let mut probs = vec![eps / k as f32; b * k];
    for (i, &l) in labels.iter().enumerate() {
        probs[i * k + l as usize] += 1.0 - eps;
    }
    let mut losses = vec![0.0; b];
    tinynn::layers::cross_entropy::cross_entropy_soft(
        logits,
        &probs,
        &mut losses,
        k,
        Some(1.0 / b as f32),
    );
    losses.iter().sum::<f32>() / b as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> VitConfig {
        VitConfig {
            image: 4,
            patch: 2,
            channels: 2,
            classes: 3,
            width: 8,
            depth: 2,
            heads: 2,
            mlp: 12,
            pool: Pool::Cls,
        }
    }

    fn data(n: usize, seed: u64) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n).map(|_| r.random::<f32>() * 2.0 - 1.0).collect()
    }

    fn loss(vit: &Vit, p: &[f32], x: &[f32], labels: &[u16]) -> f64 {
        let mut a = VitActs::default();
        vit.forward(p, x, labels.len(), &mut a);
        smoothed_loss(&mut a.logits, labels, vit.cfg.classes, 0.1) as f64
    }

    /// Finite differences of the smoothed loss against every parameter: patch embedding,
    /// CLS and positions, the blocks (non-causal attention), the final norm and the head.
    #[test]
    fn vit_gradients_match_finite_differences_and_reach_every_parameter() {
        for pool in [Pool::Cls, Pool::Mean] {
            gradients_match(VitConfig { pool, ..tiny() });
        }
    }

    fn gradients_match(cfg: VitConfig) {
        let vit = Vit::new(cfg.clone());
        // larger weights than the init so every path carries signal
        let p: Vec<f32> = init(&cfg, 1)
            .iter()
            .zip(data(cfg.n_params(), 2))
            .map(|(a, b)| a + 0.3 * b)
            .collect();
        let b = 3;
        let x = data(b * 4 * 4 * 2, 3);
        let labels = [0u16, 2, 1];
        let mut a = VitActs::default();
        vit.forward(&p, &x, b, &mut a);
        let mut dl = a.logits.clone();
        smoothed_loss(&mut dl, &labels, 3, 0.1);
        let mut dp = vec![0.0; p.len()];
        vit.backward(&p, &a, &dl, &mut dp, b);
        let scale = dp.iter().map(|g| g.abs()).fold(0.0, f32::max) as f64;
        let mut off = 0;
        for (name, n) in cfg.layout() {
            assert!(
                dp[off..off + n].iter().any(|g| *g != 0.0),
                "{name} got no gradient"
            );
            // a few entries of each tensor by central differences
            for i in (off..off + n).step_by((n / 5).max(1)) {
                let (mut hi, mut lo) = (p.clone(), p.clone());
                hi[i] += 1e-2;
                lo[i] -= 1e-2;
                let num = (loss(&vit, &hi, &x, &labels) - loss(&vit, &lo, &x, &labels)) / 2e-2;
                let err = (num - dp[i] as f64).abs() / scale;
                assert!(
                    err < 5e-3,
                    "{name}[{}] ({:?}): {} vs {num} (err {err:.1e})",
                    i - off,
                    cfg.pool,
                    dp[i]
                );
            }
            off += n;
        }
    }

    #[test]
    fn mean_pooling_averages_the_patch_rows_only() {
        // two images of T = 3 tokens, C = 2: row 0 is CLS
        let x = [9.0, 9.0, 1.0, 2.0, 3.0, 6.0, -9.0, -9.0, 0.0, 0.0, 4.0, 2.0];
        let mut out = Vec::new();
        pool_rows(Pool::Mean, &x, 2, 3, 2, &mut out);
        assert_eq!(out, [2.0, 4.0, 2.0, 1.0]);
        pool_rows(Pool::Cls, &x, 2, 3, 2, &mut out);
        assert_eq!(out, [9.0, 9.0, -9.0, -9.0]);
        let mut dx = vec![0.0; 12];
        pool_rows_backward(Pool::Mean, &[2.0, 4.0, 6.0, 8.0], 2, 3, 2, &mut dx);
        assert_eq!(
            dx,
            [0.0, 0.0, 1.0, 2.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 3.0, 4.0]
        );
    }

    #[test]
    fn patches_unfold_row_by_row_and_channels_last() {
        let cfg = VitConfig {
            image: 4,
            patch: 2,
            channels: 1,
            ..tiny()
        };
        let img: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let mut out = Vec::new();
        unfold(&cfg, &img, 1, &mut out);
        // patch (0, 1) is pixels (0,2) (0,3) (1,2) (1,3)
        assert_eq!(&out[4..8], &[2.0, 3.0, 6.0, 7.0]);
        assert_eq!(&out[12..16], &[10.0, 11.0, 14.0, 15.0]);
    }
}
