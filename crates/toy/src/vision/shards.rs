//! One training step of the ViT split over two batch shards (data parallelism inside the step,
//! as the language-model trainer's `train/model.rs` does): each half of the batch runs its
//! forward and backward on one thread inside `tinynn::layers::serial`, so the small products
//! of a narrow ViT run whole on one core instead of meeting at a barrier after every layer.
//! The loss is taken over the whole batch between the two passes, and the second shard's
//! gradient is added into the first's in a fixed order: the result does not depend on the
//! number of threads.

use super::vit::{smoothed_loss, Vit, VitActs};
use crate::train::add_and_clear;
use tinynn::layers::serial;

/// The two shards' activations and the second shard's gradient buffer.
#[derive(Default)]
pub struct ShardedStep {
    acts: [VitActs; 2],
    grads2: Vec<f32>,
}

impl ShardedStep {
    /// Forward and backward of `images` (B, H, W, Ch) with `labels` (B): the gradient of the
    /// mean smoothed loss is ADDED into `grads`; returns the loss and the logits (B, K).
    pub fn run(
        &mut self,
        vit: &Vit,
        p: &[f32],
        images: &[f32],
        labels: &[u16],
        eps: f32,
        grads: &mut [f32],
    ) -> f32 {
        let b = labels.len();
        let k = vit.cfg.classes;
        let per_image = images.len() / b.max(1);
        // the first shard takes the odd image when B is odd; B = 1 runs as one shard
        let b0 = b.div_ceil(2);
        let (x0, x1) = images.split_at(b0 * per_image);
        let [a0, a1] = &mut self.acts;
        rayon::join(
            || serial(|| vit.forward(p, x0, b0, a0)),
            || {
                if b > b0 {
                    serial(|| vit.forward(p, x1, b - b0, a1))
                }
            },
        );
        let mut dl = a0.logits[..b0 * k].to_vec();
        if b > b0 {
            dl.extend_from_slice(&a1.logits[..(b - b0) * k]);
        }
        let loss = smoothed_loss(&mut dl, labels, k, eps);
        if !loss.is_finite() {
            return loss;
        }
        let (d0, d1) = dl.split_at(b0 * k);
        self.grads2.resize(grads.len(), 0.0);
        let g2 = &mut self.grads2;
        let (a0, a1) = (&self.acts[0], &self.acts[1]);
        rayon::join(
            || serial(|| vit.backward(p, a0, d0, grads, b0)),
            || {
                if b > b0 {
                    serial(|| vit.backward(p, a1, d1, g2, b - b0))
                }
            },
        );
        if b > b0 {
            add_and_clear(grads, &mut self.grads2);
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::vit::{init, VitConfig};

    fn cfg() -> VitConfig {
        VitConfig {
            image: 8,
            patch: 4,
            channels: 1,
            classes: 3,
            width: 8,
            depth: 2,
            heads: 2,
            mlp: 16,
            pool: Default::default(),
        }
    }

    /// The sharded step's loss and gradient are those of the whole batch in one pass (to
    /// rounding), for an even and an odd batch, and the same on one thread as on two.
    #[test]
    fn shards_give_the_whole_batch_gradient_on_any_thread_count() {
        let vit = Vit::new(cfg());
        let p = init(&vit.cfg, 1);
        for b in [4usize, 5] {
            let x: Vec<f32> = (0..b * 64)
                .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
                .collect();
            let y: Vec<u16> = (0..b).map(|i| (i % 3) as u16).collect();
            let mut whole = vec![0.0; p.len()];
            let mut a = VitActs::default();
            vit.forward(&p, &x, b, &mut a);
            let mut dl = a.logits.clone();
            let want = smoothed_loss(&mut dl, &y, 3, 0.1);
            vit.backward(&p, &a, &dl, &mut whole, b);
            let run = || {
                let mut g = vec![0.0; p.len()];
                let loss = ShardedStep::default().run(&vit, &p, &x, &y, 0.1, &mut g);
                (loss, g)
            };
            let (loss, g) = run();
            assert!((loss - want).abs() < 1e-6, "b = {b}: loss {loss} vs {want}");
            for (i, (u, v)) in g.iter().zip(&whole).enumerate() {
                assert!(
                    (u - v).abs() < 1e-5 + 1e-4 * v.abs(),
                    "b = {b}: grad {i}: {u} vs {v}"
                );
            }
            let one = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            assert!(one.install(run) == (loss, g), "b = {b}: one thread differs");
        }
    }
}
