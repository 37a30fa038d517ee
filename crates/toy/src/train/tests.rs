//! Whole-model tests: finite-difference gradients, every tensor receives a gradient, loss at
//! init, a falling loss, bit-for-bit determinism.

use super::{Arch, ModelConfig, ModelSpec, TrainModel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tinynn::layers::cross_entropy::IGNORE;
use tinynn::optim::{AdamW, AdamWConfig};

pub(super) fn cfg(arch: Arch, depth_scale: bool, tied: bool) -> ModelConfig {
    ModelConfig::try_from(ModelSpec {
        arch,
        vocab: 13,
        d_model: 16,
        n_head: 4,
        n_kv_head: if arch.is_gpt2() { 4 } else { 2 },
        d_ff: 24,
        n_layer: 2,
        ctx: 6,
        norm_eps: 1e-5,
        rope_base: 100.0,
        depth_scale,
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

pub(super) fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..vocab as u32)).collect()
}

/// Parameters far from init (matrices ~N(0, 0.3), norm weights around 1, biases ~0.2), so
/// every path carries a sizeable signal.
pub(super) fn rough_params(m: &TrainModel, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut p = m.params.clone();
    for info in m.params_info() {
        let is_norm_w = info.name.contains("norm.weight");
        for x in &mut p[info.range.clone()] {
            let u: f32 = rng.random_range(-1.0..1.0);
            *x = if is_norm_w { 1.0 + 0.3 * u } else { 0.5 * u };
        }
    }
    p
}

/// The RoPE families beside plain llama, small: qwen2 (q/k/v biases, neox RoPE), qwen3
/// (per-head q/k norm, neox RoPE, a head size of its own: 4 heads of 6 against C = 16) and
/// llama3 (`rope_freqs` divisors on the 2 pairs of a head of 4) and gemma3.
pub(super) fn families() -> Vec<ModelConfig> {
    let q2 = cfg(Arch::Qwen2, false, true);
    let mut q3 = cfg(Arch::Qwen3, true, false);
    (q3.head_dim, q3.rope_dim) = (6, 6);
    let mut l3 = cfg(Arch::Llama, false, false);
    l3.rope_freqs = Some(vec![1.0, 6.0]);
    // gemma3: post-norms, GeGLU, embeddings times sqrt(C), and a window of 3 positions (of
    // 6) on its first layer, which turns by its own RoPE base
    let mut g3 = cfg(Arch::Gemma3, false, true);
    g3.swa = Some(crate::model::Swa {
        window: 3,
        layers: vec![true, false],
        rope_base: 10000.0,
    });
    vec![q2, q3, l3, g3]
}

pub(super) fn variants() -> Vec<ModelConfig> {
    let mut v = Vec::new();
    for ds in [false, true] {
        v.push(cfg(Arch::Llama, ds, true));
        v.push(cfg(Arch::Llama, ds, false));
        v.push(cfg(Arch::Gpt2, ds, true));
    }
    v
}

#[test]
fn whole_model_gradients_match_finite_differences() {
    // batch 2 runs two shards of one sequence; batch 3 fits b = 2 in one shard
    let mut cases: Vec<(ModelConfig, usize)> = variants().into_iter().map(|c| (c, 2)).collect();
    cases.push((cfg(Arch::Llama, true, false), 3));
    cases.push((cfg(Arch::Gpt2, false, true), 3));
    for (c, batch) in cases {
        let what = format!("{:?} ds={} tied={}", c.arch, c.depth_scale, c.tied);
        check_sampled_gradients(&c, batch, 5, 1e-2, false, &what);
    }
    for c in families() {
        let what = format!(
            "{:?} head_dim={:?} freqs={:?}",
            c.arch, c.head_dim, c.rope_freqs
        );
        check_sampled_gradients(&c, 2, 5, 1e-2, false, &what);
    }
    // targets with gaps: the head runs on the rows with a target only
    for c in [cfg(Arch::Llama, false, true), cfg(Arch::Gpt2, false, false)] {
        let what = format!("{:?} tied={} masked", c.arch, c.tied);
        check_sampled_gradients(&c, 2, 5, 1e-2, true, &what);
    }
}

/// Checks the gradient of 4 random elements of every tensor of a model of `c` at rough
/// weights against central differences of step `eps` (error within 3% of the tensor's
/// largest gradient), on 2 sequences of `t` tokens (`masked`: every other target ignored).
/// Returns the names of the tensors.
pub(super) fn check_sampled_gradients(
    c: &ModelConfig,
    batch: usize,
    t: usize,
    eps: f32,
    masked: bool,
    what: &str,
) -> Vec<String> {
    let base = TrainModel::init(c.clone(), batch, 1);
    let params = rough_params(&base, 2);
    let mut m = TrainModel::from_params(c.clone(), batch, params.clone()).unwrap();
    let b = 2;
    let (x, mut y) = (tokens(b * t, c.vocab, 3), tokens(b * t, c.vocab, 4));
    if masked {
        y.iter_mut().step_by(2).for_each(|v| *v = IGNORE);
    }
    m.zero_grad();
    m.forward_backward(&x, &y, b, t);
    let grads = m.grads.clone();
    let mut rng = StdRng::seed_from_u64(5);
    let infos: Vec<(String, std::ops::Range<usize>)> = m
        .params_info()
        .iter()
        .map(|i| (i.name.clone(), i.range.clone()))
        .collect();
    for (name, range) in &infos {
        let gmax = grads[range.clone()]
            .iter()
            .fold(0f32, |a, g| a.max(g.abs()));
        for _ in 0..4 {
            let i = rng.random_range(range.clone());
            let mut loss_at = |v: f32| {
                m.params[i] = v;
                m.forward_loss(&x, &y, b, t) as f64
            };
            let (hi, lo) = (params[i] + eps, params[i] - eps);
            let num = (loss_at(hi) - loss_at(lo)) / (hi as f64 - lo as f64);
            m.params[i] = params[i];
            let err = (num - grads[i] as f64).abs();
            assert!(
                err <= 0.03 * gmax as f64 + 2e-4,
                "{what} t={t}: {name}[{i}] analytic {} vs numeric {num} (tensor max {gmax})",
                grads[i]
            );
        }
    }
    infos.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn every_parameter_tensor_receives_a_gradient() {
    for c in variants().into_iter().chain(families()) {
        assert_every_tensor_gets_a_gradient(&c);
    }
}

/// One step of a model of `c` from its real init: every tensor's gradient is finite and
/// somewhere nonzero.
pub(super) fn assert_every_tensor_gets_a_gradient(c: &ModelConfig) {
    let mut m = TrainModel::init(c.clone(), 2, 7);
    let (x, y) = (tokens(12, c.vocab, 8), tokens(12, c.vocab, 9));
    m.zero_grad();
    m.forward_backward(&x, &y, 2, 6);
    for info in m.params_info() {
        let g = &m.grads[info.range.clone()];
        assert!(
            g.iter().all(|v| v.is_finite()),
            "{}: non-finite gradient",
            info.name
        );
        let nz = g.iter().filter(|v| **v != 0.0).count();
        assert!(
            nz > 0,
            "{:?} ds={} tied={}: {} got no gradient",
            c.arch,
            c.depth_scale,
            c.tied,
            info.name
        );
    }
}

fn tiny(arch: Arch) -> ModelConfig {
    ModelConfig::try_from(ModelSpec {
        arch,
        vocab: 627,
        d_model: 64,
        n_head: 4,
        n_kv_head: 4,
        d_ff: 128,
        n_layer: 2,
        ctx: 32,
        norm_eps: 1e-5,
        rope_base: 10000.0,
        depth_scale: false,
        tied: true,
        hybrid: None,
        head_dim: None,
        rope_freqs: None,
        ctx_train: None,
        inference_rounding: false,
        swa: None,
    })
    .expect("a valid config")
}

#[test]
fn loss_at_init_is_ln_vocab_and_falls_under_adamw() {
    for arch in [Arch::Llama, Arch::Gpt2] {
        let c = tiny(arch);
        let mut m = TrainModel::init(c.clone(), 4, 11);
        let (b, t) = (4, 32);
        let (x, y) = (tokens(b * t, c.vocab, 12), tokens(b * t, c.vocab, 13));
        let l0 = m.forward_loss(&x, &y, b, t);
        assert!(
            (l0 - (c.vocab as f32).ln()).abs() < 0.05,
            "{arch:?}: init loss {l0} vs ln V {}",
            (c.vocab as f32).ln()
        );
        let mut opt = AdamW::new(m.params.len(), AdamWConfig::default());
        let decay = m.decay_ranges();
        let mut last = l0;
        for _ in 0..30 {
            m.zero_grad();
            last = m.forward_backward(&x, &y, b, t);
            opt.step(&mut m.params, &m.grads, 3e-3, &decay);
        }
        assert!(
            last < l0 - 1.0,
            "{arch:?}: loss {l0} -> {last} after 30 steps on one batch"
        );
    }
}

fn run_steps(c: &ModelConfig, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let mut m = TrainModel::init(c.clone(), 4, 21);
    let mut opt = AdamW::new(m.params.len(), AdamWConfig::default());
    let decay = m.decay_ranges();
    let mut losses = Vec::new();
    for s in 0..steps {
        let (x, y) = (
            tokens(4 * 32, c.vocab, 100 + s as u64),
            tokens(4 * 32, c.vocab, 200 + s as u64),
        );
        m.zero_grad();
        if s % 2 == 0 {
            // the whole batch (split over both shards of a tiny model)
            losses.push(m.forward_backward(&x, &y, 4, 32));
        } else {
            // two micro-batches of 2 sequences: gradient accumulation
            losses.push(m.forward_backward_scaled(&x[..64], &y[..64], 2, 32, 0.5));
            losses.push(m.forward_backward_scaled(&x[64..], &y[64..], 2, 32, 0.5));
        }
        tinynn::optim::clip_grad_norm(&mut m.grads, 1.0);
        opt.step(&mut m.params, &m.grads, 1e-3, &decay);
    }
    (m.params, losses)
}

#[test]
fn training_is_bit_for_bit_deterministic() {
    for arch in [Arch::Llama, Arch::Gpt2] {
        let c = tiny(arch);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (p1, l1) = pool.install(|| run_steps(&c, 3));
        let (p2, l2) = pool.install(|| run_steps(&c, 3));
        assert_eq!(l1, l2, "{arch:?}: losses differ between identical runs");
        assert!(p1 == p2, "{arch:?}: params differ between identical runs");
        // and on one thread and on four (where the shards' layers split their work among the
        // threads): the work splits depend on the shapes, never on the thread count
        for threads in [1, 4] {
            let other = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (p3, l3) = other.install(|| run_steps(&c, 3));
            assert_eq!(
                l1, l3,
                "{arch:?}: losses differ between 2 and {threads} threads"
            );
            assert!(
                p1 == p3,
                "{arch:?}: params differ between 2 and {threads} threads"
            );
        }
        // init is the seed's alone
        let a = TrainModel::init(c.clone(), 1, 5);
        let b = pool.install(|| TrainModel::init(c.clone(), 3, 5));
        assert!(a.params == b.params);
        assert!(TrainModel::init(c.clone(), 1, 6).params != a.params);
    }
}

#[test]
fn from_params_checks_the_length_and_the_layout_is_gguf_shaped() {
    let c = tiny(Arch::Llama);
    let m = TrainModel::init(c.clone(), 1, 0);
    let err = TrainModel::from_params(c.clone(), 1, vec![0.0; 5])
        .err()
        .expect("wrong length must fail");
    assert!(
        err.to_string().contains(&m.params.len().to_string()),
        "{err}"
    );
    let names: Vec<&str> = m.params_info().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "token_embd.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight"
        ]
    );
    assert!(!names.contains(&"output.weight"), "tied");
    let q = &m.params_info()[2];
    assert_eq!(q.dims, vec![64, 64]);
    assert!(q.decay && !m.params_info()[0].decay && !m.params_info()[1].decay);
    let total: usize = m.params_info().iter().map(|i| i.range.len()).sum();
    assert_eq!(total, m.params.len());
    let mut bad = c.clone();
    bad.n_head = 5;
    assert!(TrainModel::try_init(bad, 1, 0).is_err());
    // batches are checked with errors that say what was wrong
    let ok = vec![1u32; 32];
    assert!(m.check_batch(&ok, &ok, 1, 32).is_ok());
    let e = m.check_batch(&ok, &ok, 2, 16).unwrap_err().to_string();
    assert!(e.contains("expected 1..=1"), "{e}");
    let mut big = ok.clone();
    big[3] = 627;
    let e = m.check_batch(&ok, &big, 1, 32).unwrap_err().to_string();
    assert!(e.contains("token 627 in targets"), "{e}");
    assert!(m.check_batch(&ok[..31], &ok, 1, 32).is_err());
}

#[test]
fn packed_rows_train_each_sample_as_if_alone() {
    // three samples of 3, 4 and 5 tokens: packed into one row of 12, or one to a row of 5
    let mut c = cfg(Arch::Llama, false, false);
    c.ctx = 12;
    let lens = [3usize, 4, 5];
    let toks = tokens(12, c.vocab, 3);
    let mut m = TrainModel::init(c.clone(), 3, 1);
    m.params = rough_params(&m, 2);
    let p = m.params.clone();
    // targets: the next token inside a sample, none across a sample's end
    let (mut x, mut y, mut pos) = (vec![], vec![], vec![]);
    let (mut xs, mut ys) = (vec![0u32; 15], vec![IGNORE; 15]);
    let mut at = 0;
    for (r, &l) in lens.iter().enumerate() {
        for i in 0..l {
            let next = if i + 1 < l { toks[at + i + 1] } else { IGNORE };
            x.push(toks[at + i]);
            y.push(next);
            pos.push(i as u32);
            (xs[r * 5 + i], ys[r * 5 + i]) = (toks[at + i], next);
        }
        at += l;
    }
    m.zero_grad();
    let packed = m.forward_backward_packed(&x, &y, &pos, (1, 12), 1.0);
    let g_packed = m.grads.clone();
    let mut alone = TrainModel::from_params(c, 3, p).unwrap();
    alone.zero_grad();
    let apart = alone.forward_backward(&xs, &ys, 3, 5);
    assert!((packed - apart).abs() < 1e-5, "{packed} vs {apart}");
    let scale = g_packed.iter().fold(0f32, |a, g| a.max(g.abs()));
    for (i, (a, b)) in g_packed.iter().zip(&alone.grads).enumerate() {
        assert!((a - b).abs() <= 1e-5 * scale, "grad {i}: {a} vs {b}");
    }
    // without the positions, the samples would see each other
    m.zero_grad();
    let unpacked = m.forward_backward(&x, &y, 1, 12);
    assert!((unpacked - apart).abs() > 1e-4, "{unpacked} vs {apart}");
}

#[test]
fn packing_is_refused_where_state_or_positions_would_cross_samples() {
    let m = TrainModel::init(cfg(Arch::Gpt2, false, true), 1, 0);
    let err = m.check_packing().unwrap_err().to_string();
    assert!(err.contains("Llama"), "{err}");
}
