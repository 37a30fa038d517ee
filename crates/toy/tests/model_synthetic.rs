//! The forward pass of every architecture on tiny random models built in memory, against a
//! naive f32 reference (`common/synthetic.rs`); prefill against decode; typed errors.
//! No real model is needed, so these run everywhere.

#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::{gguf, load, model, reference, weights, Bug, Spec, Tensors, ALL, GPT2, LLAMA};
use synthetic::{GEMMA3, LLAMA3, LLAMA_OUTPUT, QWEN2, QWEN3};
use tinynn::quant::GgmlType;
use toy::model::{Logits, ModelError};

const TOKENS: [u32; 10] = [3, 17, 42, 0, 49, 8, 8, 23, 31, 5];

/// Max |logit difference| allowed against the reference, relative to the largest |logit|.
/// The engine rounds the KV cache and queries to f16 and accumulates values in f16 (as
/// llama.cpp does); that alone moves these logits by about 1e-3, and each planted bug in
/// `reference_tolerance_catches_planted_bugs` by more than 0.3.
const REF_TOL: f32 = 5e-3;

/// max |a - b| / max |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}

fn engine_logits(s: &Spec, ty: GgmlType) -> Vec<f32> {
    let m = model(s, ty);
    let mut state = m.new_state(s.ctx, s.ctx);
    m.forward(&mut state, &TOKENS, Logits::All)
        .unwrap()
        .to_vec()
}

#[test]
fn every_arch_matches_naive_reference() {
    for s in ALL {
        let want = reference(&s, &weights(&s), &TOKENS, None);
        let d = rel_diff(&engine_logits(&s, GgmlType::F32), &want);
        eprintln!("{}: relative diff {d:.2e}", s.arch);
        assert!(d <= REF_TOL, "{s:?}: logits differ by {d} > {REF_TOL}");
    }
}

/// The tolerance above is tight enough to see each of these mistakes: the same reference
/// with one planted bug must miss the engine by ten times REF_TOL.
#[test]
fn reference_tolerance_catches_planted_bugs() {
    let cases = [
        (LLAMA, Bug::SwapRopeMode),
        (QWEN2, Bug::SwapRopeMode),
        (QWEN2, Bug::DropBias),
        (GPT2, Bug::DropBias),
        (LLAMA, Bug::KvHeadModulo),
        (QWEN3, Bug::NoQkNorm),
        (LLAMA3, Bug::NoRopeFreqs),
        (QWEN2, Bug::DefaultBase),
        (GEMMA3, Bug::NoWindow),
        (GEMMA3, Bug::NoPostNorm),
        (GEMMA3, Bug::NoEmbdScale),
        (GEMMA3, Bug::DefaultBase),
        (GEMMA3, Bug::NoQkNorm),
        (GEMMA3, Bug::OneBase),
    ];
    for (s, bug) in cases {
        let got = engine_logits(&s, GgmlType::F32);
        let d = rel_diff(&got, &reference(&s, &weights(&s), &TOKENS, Some(bug)));
        eprintln!("{} {bug:?}: relative diff {d:.2e}", s.arch);
        assert!(d > 10.0 * REF_TOL, "{} {bug:?} went unnoticed: {d}", s.arch);
    }
}

#[test]
fn prefill_equals_token_by_token_and_chunked_decode() {
    for s in ALL {
        let m = model(&s, GgmlType::F32);
        let mut st = m.new_state(s.ctx, s.ctx);
        let all = m.forward(&mut st, &TOKENS, Logits::All).unwrap().to_vec();
        let last = &all[(TOKENS.len() - 1) * s.vocab..];
        let mut st = m.new_state(s.ctx, s.ctx);
        let batched = m.forward(&mut st, &TOKENS, Logits::Last).unwrap().to_vec();
        // Last takes the head's matvec, All its gemm: equal up to f32 summation order.
        let d = rel_diff(&batched, last);
        assert!(
            d <= 1e-6,
            "{}: Logits::Last is not the last row of All: {d}",
            s.arch
        );
        let mut st = m.new_state(s.ctx, s.ctx);
        for &t in &TOKENS {
            m.forward(&mut st, &[t], Logits::Last).unwrap();
        }
        // Decode multiplies by matvec, prefill by gemm: f32 sums in another order, which can
        // flip an f16 rounding of the cache (1e-4 seen here). With matvec for both the two
        // are bit-identical; a real decode bug (position, cache slot) costs 1e-1.
        let d = rel_diff(&st.logits, &batched);
        eprintln!("{}: one by one {d:.2e}", s.arch);
        assert!(d <= 5e-4, "{}: one token at a time differs by {d}", s.arch);
        assert_eq!(st.pos(), TOKENS.len());
        let mut st = m.new_state(s.ctx, 3);
        let chunked = m.forward(&mut st, &TOKENS, Logits::All).unwrap();
        let d = rel_diff(chunked, &all);
        eprintln!("{}: chunked {d:.2e}", s.arch);
        assert!(d <= 1e-4, "{}: batches of 3 differ by {d}", s.arch);
    }
}

#[test]
fn quantized_llama_stays_close_to_f32() {
    let f32_logits = engine_logits(&LLAMA_OUTPUT, GgmlType::F32);
    for (ty, tol) in [
        (GgmlType::Q8_0, 0.06),
        (GgmlType::Q4_1, 0.5),
        (GgmlType::Q4_0, 0.5),
        (GgmlType::Q5_0, 0.3),
        (GgmlType::Q5_1, 0.3),
    ] {
        let q = engine_logits(&LLAMA_OUTPUT, ty);
        let d = rel_diff(&q, &f32_logits);
        eprintln!("{ty}: vs f32 {d:.2e}");
        assert!(d > 0.0 && d <= tol, "{ty}: logits differ from f32 by {d}");
        // On the weights as the quantized file holds them, only activation rounding is left.
        let w = weights(&LLAMA_OUTPUT).dequantized(ty);
        let d = rel_diff(&q, &reference(&LLAMA_OUTPUT, &w, &TOKENS, None));
        eprintln!("{ty}: vs dequantized reference {d:.2e}");
        assert!(d <= 0.05, "{ty}: logits differ from the reference by {d}");
    }
}

fn load_err(s: &Spec, edit: impl FnOnce(&mut Tensors)) -> ModelError {
    let mut w = weights(s);
    edit(&mut w);
    match load(gguf(s, &w, GgmlType::F32)) {
        Ok(_) => panic!("{}: edited model loaded", s.arch),
        Err(e) => e,
    }
}

#[test]
fn bad_input_gives_typed_errors_not_panics() {
    let m = model(&LLAMA, GgmlType::F32);
    let mut st = m.new_state(7, 7);
    let e = m.forward(&mut st, &TOKENS, Logits::Last).unwrap_err();
    assert!(
        matches!(e, ModelError::ContextOverflow { n: 10, ctx: 7, .. }),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("10") && msg.contains('7'), "{msg}");
    m.forward(&mut st, &TOKENS[..5], Logits::Last).unwrap();
    let e = m.forward(&mut st, &TOKENS[..4], Logits::Last).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::ContextOverflow {
                pos: 5,
                n: 4,
                ctx: 7
            }
        ),
        "{e}"
    );
    let e = m.forward(&mut st, &[50], Logits::Last).unwrap_err();
    assert!(
        matches!(e, ModelError::BadToken { id: 50, vocab: 50 }),
        "{e}"
    );
    let e = m.forward(&mut st, &[], Logits::Last).unwrap_err();
    assert!(matches!(e, ModelError::Empty), "{e}");
    assert_eq!(st.pos(), 5, "failed calls leave the state alone");

    let e = load_err(&LLAMA, |w| w.0.retain(|t| t.0 != "blk.1.ffn_down.weight"));
    assert!(
        matches!(&e, ModelError::MissingTensor(n) if n == "blk.1.ffn_down.weight"),
        "{e}"
    );
    assert!(e.to_string().contains("blk.1.ffn_down.weight"), "{e}");
    let e = load_err(&GPT2, |w| w.0.retain(|t| t.0 != "position_embd.weight"));
    assert!(
        matches!(&e, ModelError::MissingTensor(n) if n == "position_embd.weight"),
        "{e}"
    );
    let e = load_err(&LLAMA, |w| {
        let t =
            w.0.iter_mut()
                .find(|t| t.0 == "blk.0.attn_k.weight")
                .unwrap();
        t.1 = vec![32, 8];
        t.2.truncate(32 * 8);
    });
    assert!(matches!(&e, ModelError::BadShape { name, .. } if name == "blk.0.attn_k.weight"));
    let e = load_err(&QWEN3, |w| {
        let t =
            w.0.iter_mut()
                .find(|t| t.0 == "blk.0.attn_q_norm.weight")
                .unwrap();
        t.1 = vec![8];
        t.2.truncate(8);
    });
    assert!(matches!(&e, ModelError::BadShape { name, .. } if name.ends_with("q_norm.weight")));

    let mamba = Spec {
        arch: "mamba",
        ..LLAMA
    };
    let e = load(gguf(&mamba, &weights(&LLAMA), GgmlType::F32))
        .err()
        .unwrap();
    assert!(matches!(e, ModelError::UnsupportedArch { .. }), "{e}");
    let msg = e.to_string();
    for name in ["mamba", "llama", "qwen2", "qwen3", "gpt2"] {
        assert!(msg.contains(name), "{msg}");
    }
}

#[test]
fn gpt2_state_is_capped_at_trained_context() {
    let m = model(&GPT2, GgmlType::F32);
    let mut st = m.new_state(1000, 1000);
    assert_eq!(st.cache.ctx, GPT2.ctx);
    assert!(st.n_batch <= GPT2.ctx);
    let long: Vec<u32> = (0..GPT2.ctx as u32 + 1).collect();
    let e = m.forward(&mut st, &long, Logits::Last).unwrap_err();
    assert!(
        matches!(e, ModelError::ContextOverflow { ctx: 16, .. }),
        "{e}"
    );
    m.forward(&mut st, &long[..GPT2.ctx], Logits::Last).unwrap();
}

/// Every matrix a kernel repacks goes into the model's one arena (2 MiB pages for all of
/// them), and the arena is sized exactly: nothing is left over to take memory.
#[test]
fn repacked_matrices_fill_one_exact_arena() {
    use toy::gguf::GgufFile;
    use toy::model::weights::Loader;
    use toy::model::{body::Body, Config};
    for s in [LLAMA, GPT2] {
        for ty in [GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0] {
            let f = GgufFile::from_bytes(gguf(&s, &weights(&s), ty)).unwrap();
            let cfg = Config::from_gguf(&f).unwrap();
            let want: usize = f
                .tensors
                .iter()
                .filter(|t| t.dims.len() == 2)
                .filter_map(|t| {
                    let (rows, cols) = (t.dims[1] as usize, t.dims[0] as usize);
                    tinynn::kernels::repack::Packed::bytes_for(t.ty, rows, cols)
                })
                .map(tinynn::kernels::arena::padded)
                .sum();
            if ty == GgmlType::F16 && tinynn::kernels::repack_f16::has_f16_kernel() {
                assert!(want > 0, "F16 matrices are repacked on this CPU");
            }
            let l = Loader::new(&f);
            drop(Body::load(&l, &cfg).unwrap());
            assert_eq!(l.packed_bytes(), (want, want), "{} {ty}", s.arch);
        }
    }
}
