//! Linear mode connectivity (Frankle, Dziugaite, Roy, Carbin 2020, "Linear Mode Connectivity
//! and the Lottery Ticket Hypothesis", arXiv 1912.05671): the loss of θ(α) = (1−α)·θA + α·θB
//! for two checkpoints of one shape, and the barrier, the largest rise of the loss above the
//! straight line between the end losses. Weights of any stored type are interpolated in f32;
//! the loss is llama-perplexity's (second half of each chunk, see [`super::perplexity`]).

use super::perplexity::perplexity;
use crate::gguf::{GgufError, GgufFile, GgufWriter};
use crate::model::{Model, ModelError};
use std::sync::Arc;
use tinynn::kernels::QMat;
use tinynn::quant::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum LmcError {
    #[error("the checkpoints differ: {0}")]
    Mismatch(String),
    #[error("alpha {0} is not a finite number")]
    Alpha(f64),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct LmcPoint {
    pub alpha: f64,
    /// Mean negative log-likelihood per token.
    pub loss: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Lmc {
    pub points: Vec<LmcPoint>,
    /// max over α of loss(α) − ((1−α)·loss(0) + α·loss(1)), with the α where it is reached
    /// (the end losses are those at the smallest and largest α given).
    pub barrier: f64,
    pub barrier_alpha: f64,
}

/// The first difference of architecture or tensor shapes between `a` and `b`, as an error.
pub fn check_same_shape(a: &GgufFile, b: &GgufFile) -> Result<(), LmcError> {
    let arch = |f: &GgufFile| f.get_str("general.architecture").map(str::to_string);
    if arch(a) != arch(b) {
        return Err(LmcError::Mismatch(format!(
            "architecture {:?} against {:?}",
            arch(a),
            arch(b)
        )));
    }
    for (i, ta) in a.tensors.iter().enumerate() {
        let Some(tb) = b.tensor(&ta.name) else {
            return Err(LmcError::Mismatch(format!(
                "tensor {} (number {i}) is only in the first",
                ta.name
            )));
        };
        if ta.dims != tb.dims {
            return Err(LmcError::Mismatch(format!(
                "tensor {}: dims {:?} against {:?}",
                ta.name, ta.dims, tb.dims
            )));
        }
    }
    if let Some(tb) = b.tensors.iter().find(|t| a.tensor(&t.name).is_none()) {
        return Err(LmcError::Mismatch(format!(
            "tensor {} is only in the second",
            tb.name
        )));
    }
    Ok(())
}

/// Every tensor of `f` dequantized to f32, in file order.
fn dequantized(f: &GgufFile) -> Result<Vec<Vec<f32>>, LmcError> {
    f.tensors
        .iter()
        .map(|t| {
            let cols = t.dims.first().copied().unwrap_or(1) as usize;
            let rows = t.dims.iter().skip(1).product::<u64>() as usize;
            let q = QMat::new(t.ty, rows, cols, f.tensor_data(t))
                .map_err(|e| LmcError::Mismatch(format!("tensor {}: {e}", t.name)))?;
            let mut out = vec![0f32; rows * cols];
            for (r, row) in out.chunks_exact_mut(cols.max(1)).enumerate() {
                q.dequantize_row(r, row);
            }
            Ok(out)
        })
        .collect()
}

/// The two checkpoints' weights in f32, ready to interpolate.
pub struct Endpoints {
    a: Arc<GgufFile>,
    wa: Vec<Vec<f32>>,
    /// B's tensors in A's order.
    wb: Vec<Vec<f32>>,
}

impl Endpoints {
    pub fn new(a: Arc<GgufFile>, b: &GgufFile) -> Result<Self, LmcError> {
        check_same_shape(&a, b)?;
        let wa = dequantized(&a)?;
        let mut by_name = dequantized(b)?
            .into_iter()
            .zip(&b.tensors)
            .map(|(w, t)| (t.name.clone(), w))
            .collect::<std::collections::HashMap<_, _>>();
        let wb = a
            .tensors
            .iter()
            .map(|t| by_name.remove(&t.name).unwrap_or_default())
            .collect();
        Ok(Self { a, wa, wb })
    }

    /// The f32 model θ(α) = (1−α)·θA + α·θB, with A's metadata (tokenizer, template).
    pub fn at(&self, alpha: f64) -> Result<Model, LmcError> {
        Ok(Model::from_gguf(Arc::new(self.file_at(alpha)?))?)
    }

    /// [`Self::at`] as a GGUF file.
    pub fn file_at(&self, alpha: f64) -> Result<GgufFile, LmcError> {
        if !alpha.is_finite() {
            return Err(LmcError::Alpha(alpha));
        }
        let mut w = GgufWriter::new();
        for (k, v) in &self.a.metadata {
            w.add_metadata(k.clone(), v.clone());
        }
        w.add_metadata("general.file_type", crate::gguf::Value::U32(0));
        let (s, t) = ((1.0 - alpha) as f32, alpha as f32);
        for ((info, xa), xb) in self.a.tensors.iter().zip(&self.wa).zip(&self.wb) {
            let mut bytes = Vec::with_capacity(4 * xa.len());
            for (x, y) in xa.iter().zip(xb) {
                bytes.extend_from_slice(&(s * x + t * y).to_le_bytes());
            }
            w.add_tensor(info.name.clone(), info.dims.clone(), GgmlType::F32, bytes)?;
        }
        let mut out = Vec::new();
        w.write_to(&mut out)?;
        Ok(GgufFile::from_bytes(out)?)
    }
}

/// The loss along the line at each of `alphas` (sorted here), on `tokens` in chunks of
/// `ctx` (`bos` as [`super::perplexity::perplexity`] takes it); `progress(done, total,
/// alpha, loss)` after each point.
pub fn lmc(
    ends: &Endpoints,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    alphas: &[f64],
    mut progress: impl FnMut(usize, usize, f64, f64),
) -> Result<Lmc, LmcError> {
    let mut alphas = alphas.to_vec();
    if let Some(bad) = alphas.iter().find(|a| !a.is_finite()) {
        return Err(LmcError::Alpha(*bad));
    }
    alphas.sort_by(f64::total_cmp);
    alphas.dedup();
    let mut points = Vec::with_capacity(alphas.len());
    for (i, &alpha) in alphas.iter().enumerate() {
        let model = ends.at(alpha)?;
        let loss = perplexity(&model, tokens, ctx, bos, |_, _, _| {})?.ppl.ln();
        progress(i + 1, alphas.len(), alpha, loss);
        points.push(LmcPoint { alpha, loss });
    }
    let (barrier, barrier_alpha) = barrier(&points);
    Ok(Lmc {
        points,
        barrier,
        barrier_alpha,
    })
}

/// The barrier of a curve sorted by α: the largest loss above the chord between its ends.
pub fn barrier(points: &[LmcPoint]) -> (f64, f64) {
    let (Some(p0), Some(p1)) = (points.first(), points.last()) else {
        return (0.0, 0.0);
    };
    let span = p1.alpha - p0.alpha;
    points
        .iter()
        .map(|p| {
            let f = if span > 0.0 {
                (p.alpha - p0.alpha) / span
            } else {
                0.0
            };
            (p.loss - ((1.0 - f) * p0.loss + f * p1.loss), p.alpha)
        })
        .fold(
            (0.0, p0.alpha),
            |best, x| if x.0 > best.0 { x } else { best },
        )
}
