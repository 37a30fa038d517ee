//! Data-parallel ranks (`crate::ranks`) at the model's level, on threads that talk through
//! memory: two ranks give one process's loss and gradient bit for bit (each rank runs one of
//! its two shards; the shards' gradients are summed once a step on both sides), over several
//! micro-batches and for every family; three ranks agree within float rounding.

use super::tests::{cfg, rough_params, tokens};
use super::tests_hybrid::hybrid_cfg;
use super::{Arch, ModelConfig, TrainModel};
use crate::ranks::{local_world, Ranks};

const B: usize = 6;
const ACCUM: usize = 3;

/// A step's mean loss (per micro-batch) and gradient, as a task runs it.
fn step(c: &ModelConfig, ranks: Ranks) -> (Vec<f32>, Vec<f32>) {
    let mut m = TrainModel::init(c.clone(), B, 7);
    m.params = rough_params(&m, 3);
    m.set_ranks(ranks);
    m.defer_grad_sum();
    m.zero_grad();
    let t = c.ctx;
    let mut losses = Vec::new();
    for micro in 0..ACCUM {
        let x = tokens(B * t, c.vocab, 10 + micro as u64);
        let y = tokens(B * t, c.vocab, 20 + micro as u64);
        losses.push(m.forward_backward_scaled(&x, &y, B, t, 1.0 / ACCUM as f32));
    }
    // and a validation pass, which the ranks split too
    let x = tokens(B * t, c.vocab, 30);
    losses.push(m.forward_loss(&x, &x, B, t));
    m.finish_grads();
    (losses, m.grads.clone())
}

fn on_ranks(c: &ModelConfig, n: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = local_world(n)
            .into_iter()
            .map(|r| s.spawn(move || step(c, r)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("a rank")).collect()
    })
}

fn configs() -> Vec<(&'static str, ModelConfig)> {
    vec![
        ("llama", cfg(Arch::Llama, false, true)),
        ("gpt2", cfg(Arch::Gpt2, false, false)),
        ("qwen35 hybrid", hybrid_cfg(false, true)),
    ]
}

#[test]
fn two_ranks_are_one_process_bit_for_bit() {
    for (name, c) in configs() {
        let (loss1, grad1) = step(&c, Ranks::default());
        for (r, (loss, grad)) in on_ranks(&c, 2).into_iter().enumerate() {
            let same =
                |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same(&loss, &loss1),
                "{name} rank {r}: losses {loss:?} vs {loss1:?}"
            );
            assert!(same(&grad, &grad1), "{name} rank {r}: gradients differ");
        }
    }
}

#[test]
fn three_ranks_agree_within_rounding() {
    let (_, c) = &configs()[0];
    let (loss1, grad1) = step(c, Ranks::default());
    let scale = grad1.iter().fold(0f32, |m, g| m.max(g.abs()));
    let all = on_ranks(c, 3);
    for (loss, grad) in &all {
        assert_eq!(grad, &all[0].1, "every rank holds the same sum");
        for (a, b) in loss.iter().zip(&loss1) {
            assert!((a - b).abs() <= 1e-5 * b.abs(), "{a} vs {b}");
        }
        for (a, b) in grad.iter().zip(&grad1) {
            assert!((a - b).abs() <= 1e-5 * scale, "{a} vs {b}");
        }
    }
}
