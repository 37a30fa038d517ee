//! Every family toy runs also trains, on the same function: tiny random models of each
//! architecture (`common/synthetic.rs`: llama, llama with an output head, llama3 with
//! `rope_freqs`, qwen2 with q/k/v biases, qwen3 with q/k norms and its own head size, gpt2),
//! loaded as a full fine-tune's trainable model from their F32 GGUF, give the naive f32
//! reference's logits (1e-5 of the largest); as a LoRA run on a Q8_0 base they give the
//! inference engine's next-token losses on the same file (what `toy score` reports), so a
//! fine-tune starts from the model `toy serve` runs. With `inference_rounding` (K/V rounded to
//! f16 as the cache holds them, GPT-2's GELU as ggml's table) the training pass gives the
//! cached inference pass's logits within 1e-5 of the largest, on each family and the hybrid.

#[path = "common/hybrid.rs"]
mod hybrid;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use synthetic::{gguf, reference, weights, Spec, ALL};
use tinynn::quant::GgmlType;
use toy::gguf::GgufFile;
use toy::model::{Logits, Model};
use toy::train::{LoraSpec, TrainModel};

const TOKENS: [u32; 8] = [3, 17, 42, 0, 49, 8, 23, 5];

fn file(s: &Spec, ty: GgmlType) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(gguf(s, &weights(s), ty)).expect("synthetic gguf"))
}

/// Mean next-token NLL of TOKENS from all-position logits (T, V).
fn nll(logits: &[f32], v: usize) -> f64 {
    let t = TOKENS.len();
    let mut sum = 0.0;
    for (i, row) in logits.chunks_exact(v).take(t - 1).enumerate() {
        let m = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
        let lse = m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
        sum += lse - row[TOKENS[i + 1] as usize] as f64;
    }
    sum / (t - 1) as f64
}

#[test]
fn full_fine_tune_model_gives_the_reference_logits_on_every_family() {
    for s in ALL {
        let f = file(&s, GgmlType::F32);
        // a training context shorter than the base's (GPT-2 keeps its whole position table)
        let mut m = TrainModel::from_base(&f, TOKENS.len(), 1).expect(s.arch);
        let want = reference(&s, &weights(&s), &TOKENS, None);
        for len in [1, 5, TOKENS.len()] {
            let got = m.logits_last(&TOKENS[..len]).to_vec();
            let row = &reference(&s, &weights(&s), &TOKENS[..len], None)[(len - 1) * s.vocab..];
            let spread = row.iter().fold(0f32, |a, v| a.max(v.abs()));
            let err = got
                .iter()
                .zip(row)
                .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            assert!(
                err <= 1e-5 * spread.max(1.0) * 4.0,
                "{s:?} len {len}: training logits off the reference by {err} (max |logit| {spread})"
            );
        }
        assert_eq!(want.len(), TOKENS.len() * s.vocab);
        // exported, it is the base again: its context, its tensors (rope_freqs included)
        let w = toy::train::export::to_gguf(&m, &[], "x").unwrap();
        let mut bytes = Vec::new();
        w.write_to(&mut bytes).unwrap();
        let back = GgufFile::from_bytes(bytes).unwrap();
        let key = format!("{}.context_length", s.arch);
        assert_eq!(back.get_u64(&key), Some(s.ctx as u64), "{}", s.arch);
        for t in &f.tensors {
            let b = back
                .tensor(&t.name)
                .unwrap_or_else(|| panic!("{}: {}", s.arch, t.name));
            assert_eq!(b.dims, t.dims, "{}", t.name);
            assert_eq!(
                back.tensor_data(b),
                f.tensor_data(t),
                "{}: {}",
                s.arch,
                t.name
            );
        }
    }
}

#[test]
fn lora_run_starts_from_the_served_model_on_every_family() {
    for s in ALL {
        let f = file(&s, GgmlType::Q8_0);
        let spec = LoraSpec {
            targets: vec!["all-linear".into()],
            rank: 4,
            scale: 2.0,
            seed: 1,
            inference_rounding: false,
        };
        let mut m = TrainModel::lora_on_base(&f, s.ctx, 1, &spec, None).expect(s.arch);
        let t = TOKENS.len() - 1;
        let loss = m.forward_loss(&TOKENS[..t], &TOKENS[1..], 1, t) as f64;
        let model = Model::from_gguf(f.clone()).unwrap();
        let mut st = model.new_state(s.ctx, s.ctx);
        let logits = model.forward(&mut st, &TOKENS, Logits::All).unwrap();
        let want = nll(logits, s.vocab);
        // both run the same Q8_0 kernels; the KV cache is f16 on the inference side
        assert!(
            (loss - want).abs() <= 2e-3 * want.abs().max(1.0),
            "{}: LoRA step-1 loss {loss} vs inference NLL {want}",
            s.arch
        );
    }
}

/// Training against cached inference on the same F32 file, at 64 and 72 tokens (from 64
/// queries on, inference attends in f32 over its f16 cache): within 1e-5 of the largest
/// |logit| with inference's rounding (`on`); returns the largest difference relative to it.
fn check_inference_rounding(f: &Arc<GgufFile>, what: &str, on: bool) -> f32 {
    let ctx = 72;
    let mut cfg = toy::train::base_config(f, ctx).expect(what);
    cfg.inference_rounding = on;
    let v = cfg.vocab as u32;
    let toks: Vec<u32> = (0..ctx as u32).map(|i| (i * 7 + 3) % v).collect();
    let mut m = TrainModel::from_base_as(f, cfg, 1).expect(what);
    let model = Model::from_gguf(f.clone()).unwrap();
    let mut worst = 0f32;
    for len in [64, ctx] {
        let want = m.logits_last(&toks[..len]).to_vec();
        let mut st = model.new_state(ctx, ctx);
        let got = model.forward(&mut st, &toks[..len], Logits::Last).unwrap();
        let spread = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(
            spread > 0.1,
            "{what}: logits too flat to compare ({spread})"
        );
        let err = want
            .iter()
            .zip(got)
            .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        worst = worst.max(err / spread.max(1.0));
        assert!(
            !on || err <= 1e-5 * spread.max(1.0),
            "{what} len {len}: training logits off cached inference by {err} (max |logit| {spread})"
        );
    }
    eprintln!("{what} (rounding {on}): {worst:.1e} of max |logit|");
    worst
}

#[test]
fn training_with_inference_rounding_is_cached_inference_on_every_family() {
    let mut files: Vec<_> = ALL
        .into_iter()
        .map(|mut s| {
            s.ctx = 80;
            (file(&s, GgmlType::F32), s.arch)
        })
        .collect();
    let h = hybrid::tiny();
    let bytes = hybrid::gguf_with(&h, &hybrid::tensors(&h, 0x9e37_79b9), GgmlType::F32, &[]);
    files.push((Arc::new(GgufFile::from_bytes(bytes).unwrap()), "qwen35"));
    let mut off = 0f32;
    for (f, what) in &files {
        check_inference_rounding(f, what, true);
        off = off.max(check_inference_rounding(f, what, false));
    }
    // the rounding is what closes the gap: plain f32 training is further off
    assert!(
        off > 1e-5,
        "without the rounding already within 1e-5 ({off})"
    );
}
