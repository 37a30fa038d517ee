//! Warm-start tests: a widened (HyperCloning) or deepened student gives the donor's logits
//! and loss at init, a narrowed one starts below a fresh init's ln V, and shapes that
//! cannot be mapped are errors that name both shapes.

use super::export::to_gguf;
use super::tests::{rough_params, tokens};
use super::warm_start::warm_start;
use super::{Arch, ModelConfig, ModelSpec, TrainModel};
use crate::gguf::GgufFile;
use tinynn::optim::{AdamW, AdamWConfig};

fn cfg(c: usize, h: usize, hkv: usize, f: usize, l: usize, tied: bool) -> ModelConfig {
    ModelConfig::try_from(ModelSpec {
        arch: Arch::Llama,
        vocab: 19,
        d_model: c,
        n_head: h,
        n_kv_head: hkv,
        d_ff: f,
        n_layer: l,
        ctx: 8,
        norm_eps: 1e-5,
        rope_base: 100.0,
        depth_scale: false,
        tied,
        hybrid: None,
        head_dim: None,
        rope_freqs: None,
        ctx_train: None,
        inference_rounding: false,
        swa: None,
    })
    .expect("a valid config")
}

fn gguf(m: &TrainModel) -> GgufFile {
    let mut bytes = Vec::new();
    to_gguf(m, &[], "donor")
        .unwrap()
        .write_to(&mut bytes)
        .unwrap();
    GgufFile::from_bytes(bytes).unwrap()
}

/// A donor with rough weights (every path carries signal).
fn donor(c: &ModelConfig) -> TrainModel {
    let m0 = TrainModel::init(c.clone(), 2, 1);
    let p = rough_params(&m0, 2);
    TrainModel::from_params(c.clone(), 2, p).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The student from `d`'s GGUF gives d's last logits (several prefixes) and loss.
fn assert_same_function(d: &mut TrainModel, s_cfg: &ModelConfig) {
    let params = warm_start(&gguf(d), s_cfg, 5).unwrap();
    let mut s = TrainModel::from_params(s_cfg.clone(), 2, params).unwrap();
    let x = tokens(16, 19, 3);
    let y = tokens(16, 19, 4);
    for t in [1, 5, 8] {
        let want = d.logits_last(&x[..t]).to_vec();
        let got = s.logits_last(&x[..t]).to_vec();
        let diff = max_diff(&want, &got);
        assert!(diff < 1e-4, "{s_cfg:?}: logits differ by {diff} at t = {t}");
    }
    let (l0, l1) = (d.forward_loss(&x, &y, 2, 8), s.forward_loss(&x, &y, 2, 8));
    assert!((l0 - l1).abs() < 1e-4, "loss {l0} vs {l1}");
}

#[test]
fn a_widened_student_gives_the_donors_logits_at_init() {
    for tied in [true, false] {
        let mut d = donor(&cfg(16, 4, 2, 24, 2, tied));
        // 2x and 3x wider: heads, kv heads and neurons scale with the width
        assert_same_function(&mut d, &cfg(32, 8, 4, 48, 2, tied));
        assert_same_function(&mut d, &cfg(48, 12, 6, 72, 2, tied));
        // wider and deeper at once, and a larger MLP that is not a multiple
        assert_same_function(&mut d, &cfg(32, 8, 4, 40, 4, tied));
    }
    // a tied donor into an untied student
    let mut d = donor(&cfg(16, 4, 2, 24, 2, true));
    assert_same_function(&mut d, &cfg(32, 8, 4, 48, 2, false));
}

#[test]
fn a_deepened_student_gives_the_donors_logits_at_init() {
    for tied in [true, false] {
        let mut d = donor(&cfg(16, 4, 2, 24, 2, tied));
        assert_same_function(&mut d, &cfg(16, 4, 2, 24, 2, tied));
        assert_same_function(&mut d, &cfg(16, 4, 2, 24, 5, tied));
    }
}

#[test]
fn widened_copies_are_not_identical_so_training_can_split_them() {
    let d = donor(&cfg(16, 4, 2, 24, 2, true));
    let s_cfg = cfg(32, 8, 4, 48, 2, true);
    let p = warm_start(&gguf(&d), &s_cfg, 5).unwrap();
    let s = TrainModel::from_params(s_cfg, 2, p).unwrap();
    let info = s
        .params_info()
        .iter()
        .find(|i| i.name == "blk.0.attn_q.weight");
    let w = &s.params[info.unwrap().range.clone()]; // (8 D, 32)
    let (a, b) = (&w[..16], &w[16..32]); // one row's two copies of the input
    assert!(max_diff(a, b) > 1e-3, "the copies of a column got no noise");
}

/// A donor trained for a few steps on a repeating sequence (its loss well below ln V).
fn trained_donor(c: &ModelConfig) -> (TrainModel, Vec<u32>, Vec<u32>) {
    let mut m = TrainModel::init(c.clone(), 2, 1);
    let seq: Vec<u32> = (0..17).map(|i| (i * 7 % 19) as u32).collect();
    let (x, y): (Vec<u32>, Vec<u32>) = (0..2)
        .flat_map(|b| (0..8).map(move |t| (b * 8 + t, b * 8 + t + 1)))
        .map(|(i, j)| (seq[i], seq[j]))
        .unzip();
    let cfg = AdamWConfig {
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let mut opt = AdamW::new(m.params.len(), cfg);
    for _ in 0..60 {
        m.zero_grad();
        m.forward_backward(&x, &y, 2, 8);
        opt.step(&mut m.params, &m.grads, 1e-2, &[]);
    }
    (m, x, y)
}

#[test]
fn a_narrowed_student_starts_below_a_fresh_init() {
    let (mut d, x, y) = trained_donor(&cfg(32, 8, 4, 48, 2, true));
    let donor_loss = d.forward_loss(&x, &y, 2, 8);
    let ln_v = (19f32).ln();
    assert!(donor_loss < 0.5 * ln_v, "the donor trained: {donor_loss}");
    for s_cfg in [cfg(16, 4, 2, 24, 2, true), cfg(24, 6, 3, 32, 3, false)] {
        let p = warm_start(&gguf(&d), &s_cfg, 5).unwrap();
        let mut s = TrainModel::from_params(s_cfg.clone(), 2, p).unwrap();
        let loss = s.forward_loss(&x, &y, 2, 8);
        assert!(
            loss.is_finite() && loss < ln_v,
            "{s_cfg:?}: {loss} vs ln V {ln_v}"
        );
    }
}

#[test]
fn shapes_that_do_not_map_are_errors_naming_both() {
    let d = gguf(&donor(&cfg(16, 4, 2, 24, 2, true)));
    let mut other_vocab = cfg(16, 4, 2, 24, 2, true);
    other_vocab.vocab = 23;
    let cases = [
        (other_vocab, "vocab and head size"),
        (cfg(32, 4, 2, 24, 2, true), "vocab and head size"), // head size 8 vs 4
        (cfg(24, 6, 2, 24, 2, true), "multiple"),
        (cfg(16, 4, 2, 24, 1, true), "layers"),
    ];
    for (s, what) in cases {
        let e = warm_start(&d, &s, 5).unwrap_err().to_string();
        assert!(
            e.contains(what) && e.contains("donor (") && e.contains("student ("),
            "{e}"
        );
    }
    let untied = gguf(&donor(&cfg(16, 4, 2, 24, 2, false)));
    let e = warm_start(&untied, &cfg(16, 4, 2, 24, 2, true), 5).unwrap_err();
    assert!(e.to_string().contains("untied"), "{e}");
    let mut g = super::tests::cfg(Arch::Gpt2, false, true);
    g.vocab = 19;
    let e = warm_start(
        &gguf(&TrainModel::init(g, 2, 1)),
        &cfg(16, 4, 2, 24, 2, true),
        5,
    );
    let e = e.unwrap_err().to_string();
    assert!(e.contains("the donor") && e.contains("gpt2"), "{e}");
}
