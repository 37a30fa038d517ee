//! Two models compared on one token stream (`toy::eval::{lmc, drift}`), on tiny synthetic
//! llama models: the line between a checkpoint and itself is flat with zero barrier, its ends
//! are the two models' own losses, a mismatch names the tensor; drift of a model against
//! itself is zero everywhere, and a perturbed copy drifts where it was changed.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use synthetic::{gguf, load, weights, Rng, Tensors, LLAMA};
use tinynn::quant::GgmlType;
use toy::eval::drift::drift;
use toy::eval::lmc::{barrier, lmc, Endpoints, LmcError, LmcPoint};
use toy::eval::perplexity::perplexity;
use toy::gguf::GgufFile;

fn file(t: &Tensors, ty: GgmlType) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(gguf(&LLAMA, t, ty)).unwrap())
}

/// The synthetic weights with every matrix moved by up to `by` (relative).
fn perturbed(by: f32) -> Tensors {
    let mut t = weights(&LLAMA);
    let mut r = Rng(7);
    for (_, _, data) in t.0.iter_mut().filter(|x| x.1.len() == 2) {
        for v in data.iter_mut() {
            *v *= 1.0 + by * r.next();
        }
    }
    t
}

fn tokens(n: usize) -> Vec<u32> {
    let mut r = Rng(3);
    (0..n)
        .map(|_| ((r.next() + 1.0) * 0.5 * (LLAMA.vocab - 1) as f32) as u32)
        .collect()
}

#[test]
fn the_line_from_a_checkpoint_to_itself_is_flat_and_its_ends_are_the_models_losses() {
    let ids = tokens(4 * LLAMA.ctx);
    let (a, b) = (
        file(&weights(&LLAMA), GgmlType::Q8_0),
        file(&perturbed(0.5), GgmlType::F32),
    );
    let same = Endpoints::new(a.clone(), &a).unwrap();
    let r = lmc(
        &same,
        &ids,
        LLAMA.ctx,
        None,
        &[1.0, 0.0, 0.5, 0.25],
        |_, _, _, _| {},
    )
    .unwrap();
    assert_eq!(r.points.len(), 4);
    assert!(
        r.points.windows(2).all(|w| w[0].alpha < w[1].alpha),
        "sorted by alpha"
    );
    for p in &r.points {
        assert!((p.loss - r.points[0].loss).abs() < 1e-9, "{:?}", r.points);
    }
    assert!(r.barrier.abs() < 1e-9, "barrier {}", r.barrier);

    let ends = Endpoints::new(a.clone(), &b).unwrap();
    let r = lmc(
        &ends,
        &ids,
        LLAMA.ctx,
        None,
        &[0.0, 0.5, 1.0],
        |_, _, _, _| {},
    )
    .unwrap();
    // the ends are A (dequantized to f32) and B exactly
    let own = |t: &Tensors| {
        let m = load(gguf(&LLAMA, t, GgmlType::F32)).unwrap();
        perplexity(&m, &ids, LLAMA.ctx, None, |_, _, _| {})
            .unwrap()
            .ppl
            .ln()
    };
    let a32 = weights(&LLAMA).dequantized(GgmlType::Q8_0);
    assert!((r.points[0].loss - own(&a32)).abs() < 1e-6);
    assert!((r.points[2].loss - own(&perturbed(0.5))).abs() < 1e-6);
    assert_ne!(r.points[0].loss, r.points[2].loss);
}

#[test]
fn the_barrier_is_the_largest_rise_above_the_chord() {
    let pts = |l: &[f64]| -> Vec<LmcPoint> {
        l.iter()
            .enumerate()
            .map(|(i, &loss)| LmcPoint {
                alpha: i as f64 / (l.len() - 1) as f64,
                loss,
            })
            .collect()
    };
    // chord from 1 to 3: at alpha 0.5 it is 2, the curve 4.5
    assert_eq!(barrier(&pts(&[1.0, 4.5, 3.0])), (2.5, 0.5));
    // below the chord everywhere: no barrier
    assert_eq!(barrier(&pts(&[1.0, 1.5, 3.0])).0, 0.0);
}

#[test]
fn checkpoints_of_other_shapes_are_errors_naming_the_tensor() {
    let a = file(&weights(&LLAMA), GgmlType::F32);
    let mut t = weights(&LLAMA);
    let blk =
        t.0.iter_mut()
            .find(|x| x.0 == "blk.1.ffn_up.weight")
            .unwrap();
    blk.1[1] -= 1;
    blk.2.truncate((blk.1[0] * blk.1[1]) as usize);
    // the file is sound GGUF; the comparison names the tensor
    let b = GgufFile::from_bytes(gguf(&LLAMA, &t, GgmlType::F32)).unwrap();
    let err = Endpoints::new(a.clone(), &b).err().unwrap();
    assert!(matches!(err, LmcError::Mismatch(_)));
    assert!(err.to_string().contains("blk.1.ffn_up.weight"), "{err}");
    let mut t = weights(&LLAMA);
    t.0.retain(|x| x.0 != "output_norm.weight");
    let b = GgufFile::from_bytes(gguf(&LLAMA, &t, GgmlType::F32)).unwrap();
    let err = Endpoints::new(a, &b).err().unwrap().to_string();
    assert!(
        err.contains("output_norm.weight") && err.contains("only in the first"),
        "{err}"
    );
}

#[test]
fn a_model_does_not_drift_from_itself_and_a_perturbed_copy_does() {
    let ids = tokens(3 * LLAMA.ctx);
    let m = load(gguf(&LLAMA, &weights(&LLAMA), GgmlType::Q4_1)).unwrap();
    let same = load(gguf(&LLAMA, &weights(&LLAMA), GgmlType::Q4_1)).unwrap();
    let r = drift(&m, &same, &ids, LLAMA.ctx, 5, |_, _| {}).unwrap();
    assert_eq!(r.positions, 3 * (LLAMA.ctx - 1));
    assert_eq!((r.mean_kl, r.max_kl, r.top1_agree), (0.0, 0.0, 1.0));
    let other = load(gguf(&LLAMA, &perturbed(0.8), GgmlType::Q4_1)).unwrap();
    let r = drift(&m, &other, &ids, LLAMA.ctx, 5, |_, _| {}).unwrap();
    assert!(r.mean_kl > 1e-4 && r.top1_agree < 1.0, "{r:?}");
    assert_eq!(r.worst.len(), 5);
    assert!(r.worst.windows(2).all(|w| w[0].kl >= w[1].kl));
    assert_eq!(r.worst[0].kl, r.max_kl);
    let w = &r.worst[0];
    assert_eq!(w.next, ids[w.index], "the token that follows in the text");
    assert_eq!(r.histogram.iter().map(|b| b.1).sum::<usize>(), r.positions);
    assert!(r.median_kl <= r.p99_kl && r.p99_kl <= r.max_kl);
}

#[test]
fn the_first_order_shares_of_a_small_drift_sum_to_it_and_the_largest_swap_is_measured() {
    use toy::eval::drift_grad::drift_grad;
    let ids = tokens(2 * LLAMA.ctx);
    let a = file(&weights(&LLAMA), GgmlType::F32);
    let b = file(&perturbed(0.05), GgmlType::F32);
    let r = drift_grad(&a, &b, &ids, LLAMA.ctx, 2, |_| {}).unwrap();
    assert!(r.drift > 1e-6, "the perturbation drifts: {}", r.drift);
    let rel = (r.first_order_sum - r.drift).abs() / r.drift;
    assert!(
        rel < 0.1,
        "first order {} vs drift {} ({rel})",
        r.first_order_sum,
        r.drift
    );
    assert!(r
        .tensors
        .windows(2)
        .all(|w| w[0].first_order.abs() >= w[1].first_order.abs()));
    assert!(r.tensors[0].swapped.is_some() && r.tensors[1].swapped.is_some());
    assert!(r.tensors[2].swapped.is_none());
    // swapping in the tensor that matters most drifts, by about its share
    let top = &r.tensors[0];
    let s = top.swapped.unwrap();
    assert!(
        s > 0.0 && (s - top.first_order).abs() < 0.5 * top.first_order.abs(),
        "{top:?}"
    );
    // vectors were not perturbed: no share
    let norm = r
        .tensors
        .iter()
        .find(|t| t.name == "output_norm.weight")
        .unwrap();
    assert_eq!(norm.first_order, 0.0);
    // against itself, nothing
    let same = drift_grad(&a, &a, &ids, LLAMA.ctx, 1, |_| {}).unwrap();
    assert_eq!(same.drift, 0.0);
    assert!(same.tensors.iter().all(|t| t.first_order.abs() < 1e-9));
}

/// `toy eval drift --grad` on every family: the trainer's backward takes each base the
/// inference engine runs, so the first-order shares add up to the drift there too.
#[test]
fn drift_grad_runs_on_every_family() {
    use toy::eval::drift_grad::drift_grad;
    for s in synthetic::ALL {
        let f = |t: &Tensors| Arc::new(GgufFile::from_bytes(gguf(&s, t, GgmlType::F32)).unwrap());
        let mut moved = weights(&s);
        let mut r = Rng(9);
        for (_, _, data) in moved.0.iter_mut().filter(|x| x.1.len() == 2) {
            data.iter_mut().for_each(|v| *v *= 1.0 + 0.05 * r.next());
        }
        let ids: Vec<u32> = tokens(2 * s.ctx)
            .iter()
            .map(|t| t % s.vocab as u32)
            .collect();
        let r = drift_grad(&f(&weights(&s)), &f(&moved), &ids, s.ctx, 1, |_| {})
            .unwrap_or_else(|e| panic!("{}: {e}", s.arch));
        let rel = (r.first_order_sum - r.drift).abs() / r.drift;
        assert!(
            r.drift > 1e-6 && rel < 0.15,
            "{}: first order {} vs drift {}",
            s.arch,
            r.first_order_sum,
            r.drift
        );
    }
}
