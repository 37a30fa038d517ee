//! Which tensors make B drift from A (the seed's `ToyDriftGrad`). With D(θ) = mean over
//! positions of KL(p_A ‖ p_θ), D(θA) = 0 and D(θB) is the drift. D's gradient vanishes at θA
//! (its minimum), so the first-order share of tensor k is taken at the midpoint:
//! `⟨∂D/∂θ_k at (θA + θB)/2, θB,k − θA,k⟩`, which sums to the drift exactly when D is
//! quadratic along the line (the midpoint rule; close for small changes). For the top
//! entries the exact drift of A with only that tensor taken from B is measured too.
//! The gradient is the trainer's backward (`TrainModel::forward_backward_soft`, the
//! gradient of a cross-entropy against p_A), so the bases it takes are the trainer's.

use super::drift::{drift, DriftError};
use super::lmc::{check_same_shape, Endpoints, LmcError};
use crate::gguf::{GgufError, GgufFile, GgufWriter};
use crate::model::{Logits, Model, ModelError};
use crate::train::{TrainError, TrainModel};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum DriftGradError {
    #[error(transparent)]
    Shape(#[from] LmcError),
    #[error(transparent)]
    Drift(#[from] DriftError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("the drift gradient runs the trainer's backward: {0}")]
    Train(#[from] TrainError),
    #[error("{0} tokens do not fill one chunk of {1}")]
    Short(usize, usize),
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct TensorDrift {
    pub name: String,
    /// Its first-order share of the drift.
    pub first_order: f64,
    /// The drift of A with only this tensor from B (for the top entries).
    pub swapped: Option<f64>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct DriftGrad {
    /// Mean KL(A‖B) per position.
    pub drift: f64,
    /// The sum of every tensor's first-order share.
    pub first_order_sum: f64,
    /// Ranked by |first_order|, largest first.
    pub tensors: Vec<TensorDrift>,
}

/// Softmax of each row of `logits` (N, V) into `out`; rows `keep` refuses become zeros.
fn softmax_rows(logits: &[f32], v: usize, out: &mut [f32], keep: impl Fn(usize) -> bool) {
    for (i, (z, p)) in logits
        .chunks_exact(v)
        .zip(out.chunks_exact_mut(v))
        .enumerate()
    {
        if !keep(i) {
            p.fill(0.0);
            continue;
        }
        let m = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let s: f64 = z.iter().map(|&x| ((x - m) as f64).exp()).sum();
        for (q, &x) in p.iter_mut().zip(z) {
            *q = (((x - m) as f64).exp() / s) as f32;
        }
    }
}

/// A with the tensor `name` taken from B.
fn swapped(a: &GgufFile, b: &GgufFile, name: &str) -> Result<Model, DriftGradError> {
    let mut w = GgufWriter::new();
    for (k, v) in &a.metadata {
        w.add_metadata(k.clone(), v.clone());
    }
    for t in &a.tensors {
        let src = if t.name == name { b } else { a };
        let ts = src.tensor(&t.name).expect("same tensors, checked");
        w.add_tensor(t.name.clone(), ts.dims.clone(), ts.ty, src.tensor_data(ts))?;
    }
    let mut out = Vec::new();
    w.write_to(&mut out)?;
    Ok(Model::from_gguf(Arc::new(GgufFile::from_bytes(out)?))?)
}

/// The drift of B from A on `tokens` in chunks of `ctx`, split among tensors; the exact
/// swap is measured for the `swaps` largest. `progress(what)` names each stage.
pub fn drift_grad(
    a: &Arc<GgufFile>,
    b: &Arc<GgufFile>,
    tokens: &[u32],
    ctx: usize,
    swaps: usize,
    mut progress: impl FnMut(&str),
) -> Result<DriftGrad, DriftGradError> {
    check_same_shape(a, b)?;
    let chunks = tokens.len() / ctx.max(2);
    if ctx < 2 || chunks == 0 {
        return Err(DriftGradError::Short(tokens.len(), ctx));
    }
    let (ma, mb) = (Model::from_gguf(a.clone())?, Model::from_gguf(b.clone())?);
    let total = drift(&ma, &mb, tokens, ctx, 0, |_, _| {})?.mean_kl;
    progress("the gradient at the midpoint");
    let mid = Endpoints::new(a.clone(), b)?.file_at(0.5)?;
    let mut m = TrainModel::from_base(&mid, ctx, 1)?;
    drop(mid);
    let v = m.cfg.vocab;
    let mut st = ma.new_state(ctx, ctx);
    let mut probs = vec![0f32; ctx * v];
    m.zero_grad();
    for c in 0..chunks {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        st.reset();
        let la = ma.forward(&mut st, chunk, Logits::All)?;
        // the positions `drift` counts: all but each chunk's last
        softmax_rows(la, v, &mut probs, |i| i + 1 < ctx);
        let scale = ctx as f32 / ((ctx - 1) * chunks) as f32;
        m.forward_backward_soft(chunk, &probs, (1, ctx), scale);
    }
    progress("the change of each tensor");
    let pa = TrainModel::from_base(a, ctx, 1)?.params;
    let pb = TrainModel::from_base(b, ctx, 1)?.params;
    let mut tensors: Vec<TensorDrift> = m
        .params_info()
        .iter()
        .map(|i| {
            let r = i.range.clone();
            let fo = m.grads[r.clone()]
                .iter()
                .zip(&pb[r.clone()])
                .zip(&pa[r])
                .map(|((g, xb), xa)| *g as f64 * (*xb as f64 - *xa as f64))
                .sum();
            TensorDrift {
                name: i.name.clone(),
                first_order: fo,
                swapped: None,
            }
        })
        .collect();
    tensors.sort_by(|x, y| y.first_order.abs().total_cmp(&x.first_order.abs()));
    let first_order_sum = tensors.iter().map(|t| t.first_order).sum();
    for t in tensors.iter_mut().take(swaps) {
        progress(&format!("swapping {}", t.name));
        let ms = swapped(a, b, &t.name)?;
        t.swapped = Some(drift(&ma, &ms, tokens, ctx, 0, |_, _| {})?.mean_kl);
    }
    Ok(DriftGrad {
        drift: total,
        first_order_sum,
        tensors,
    })
}
