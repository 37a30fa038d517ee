//! Weights as views into the memory-mapped GGUF: a `Weight` is a validated byte range plus
//! its type and shape, so the model never holds an f32 copy of a matrix. Small vectors
//! (norm weights, biases) are decoded to f32 at load.

use super::tensors::BlockTable;
use super::ModelError;
use crate::gguf::GgufFile;
use std::ops::Range;
use std::sync::Arc;
use tinynn::kernels::arena::{padded, PackArena};
use tinynn::kernels::repack::Packed;
use tinynn::kernels::QMat;
use tinynn::quant::{can_dequantize, can_quantize, dequantize, GgmlType};

/// A matrix of `rows` (N) rows of `cols` (K) elements, stored in the file as GGUF dims [K, N].
#[derive(Clone, Debug)]
pub struct Weight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    range: Range<usize>,
    /// The matrix in `ty` when the loader requantized it (`Loader::recast`): the kernels read
    /// these bytes, not `range`'s.
    own: Option<Arc<[u8]>>,
    /// Q4_0 / Q4_1 weights repacked for the interleaved-row kernel, where the CPU has it (shared by
    /// clones, e.g. a tied head).
    packed: Option<Arc<Packed>>,
}

/// What layers load from: the file, and one arena that all of its repacked matrices share
/// (so that every matrix streams from 2 MiB pages; see `tinynn::kernels::arena`).
pub struct Loader<'f> {
    file: &'f GgufFile,
    arena: PackArena,
    /// Bytes the model no longer reads from the file (see `release`).
    released: std::cell::RefCell<Vec<Range<usize>>>,
    /// Matrices to hold in another weight type than the file's (see `recast`).
    recast: Option<Recast>,
}

impl<'f> Loader<'f> {
    /// An arena sized for every matrix of `file` that a kernel will repack.
    pub fn new(file: &'f GgufFile) -> Self {
        let bytes = file
            .tensors
            .iter()
            .filter(|t| t.dims.len() == 2)
            .filter_map(|t| Packed::bytes_for(t.ty, t.dims[1] as usize, t.dims[0] as usize))
            .map(padded)
            .sum();
        Self {
            file,
            arena: PackArena::new(bytes),
            released: Default::default(),
            recast: None,
        }
    }

    /// Hold the matrices `which` picks requantized to `ty` (from their dequantized values)
    /// instead of in the file's type: how a draft model reads fewer bytes a token.
    pub fn recast(mut self, ty: GgmlType, which: fn(&str, GgmlType) -> bool) -> Self {
        self.recast = Some(Recast { ty, which });
        self
    }

    /// Let the pages of `range` go now that the model holds its own copy of them. The loader
    /// lets them go once more when it is dropped: reading the next tensor maps the pages
    /// around it (the kernel's fault-around), neighbours' released pages included.
    fn release(&self, range: Range<usize>) {
        self.file.release(range.clone());
        self.released.borrow_mut().push(range);
    }
}

/// See [`Loader::recast`].
struct Recast {
    ty: GgmlType,
    which: fn(&str, GgmlType) -> bool,
}

impl Drop for Loader<'_> {
    fn drop(&mut self) {
        for r in self.released.get_mut().drain(..) {
            self.file.release(r);
        }
    }
}

impl Loader<'_> {
    /// Bytes of the arena in use, and its size: equal once a whole model has loaded, when
    /// every repacked matrix went into the one region.
    pub fn packed_bytes(&self) -> (usize, usize) {
        (self.arena.used(), self.arena.capacity())
    }
}

impl std::ops::Deref for Loader<'_> {
    type Target = GgufFile;
    fn deref(&self) -> &GgufFile {
        self.file
    }
}

fn byte_range(f: &GgufFile, data: &[u8]) -> Range<usize> {
    let start = data.as_ptr() as usize - f.bytes().as_ptr() as usize;
    start..start + data.len()
}

impl Weight {
    /// Load `name` and check it is a (rows, cols) matrix.
    pub fn load(f: &Loader, name: &str, cols: usize, rows: usize) -> Result<Self, ModelError> {
        let t = f
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let want = [cols as u64, rows as u64];
        let dims: Vec<u64> = t
            .dims
            .iter()
            .copied()
            .chain(std::iter::repeat(1))
            .take(t.dims.len().max(2))
            .collect();
        if dims.len() != 2 || dims[..] != want[..] {
            return Err(ModelError::BadShape {
                name: name.into(),
                expected: want.to_vec(),
                got: t.dims.clone(),
            });
        }
        let data = f.tensor_data(t);
        let bad = |source| ModelError::Weight {
            name: name.into(),
            source,
        };
        let q = QMat::new(t.ty, rows, cols, data).map_err(bad)?;
        let range = byte_range(f, data);
        let to = (f.recast.as_ref())
            .filter(|r| r.ty != t.ty && r.ty.row_bytes(cols as u64).is_some())
            .filter(|r| (r.which)(name, t.ty))
            .map(|r| r.ty);
        let own = match to {
            Some(ty) => Some(requantize(&q, ty).map_err(|why| ModelError::Requantize {
                name: name.into(),
                why,
            })?),
            None => None,
        };
        let ty = to.unwrap_or(t.ty);
        let q = match &own {
            Some(b) => QMat::new(ty, rows, cols, b).map_err(bad)?,
            None => q,
        };
        let packed = Packed::new_in(&q, Some(&f.arena)).map(Arc::new);
        if packed.is_some() || own.is_some() {
            // the kernels and embedding lookups read the repacked or requantized copy
            f.release(range.clone());
        }
        Ok(Self {
            name: name.into(),
            ty,
            rows,
            cols,
            range,
            own,
            packed,
        })
    }

    /// The kernel's view of this matrix inside `file` (the bytes it was loaded from).
    pub fn qmat<'a>(&'a self, file: &'a [u8]) -> QMat<'a> {
        QMat {
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            data: self.own.as_deref().unwrap_or(&file[self.range.clone()]),
            packed: self.packed.as_deref(),
        }
    }
}

/// `w`'s values in type `ty` (`toy quantize`'s conversion).
fn requantize(w: &QMat, ty: GgmlType) -> Result<Arc<[u8]>, String> {
    if !can_quantize(ty) || ty.row_bytes(w.cols as u64).is_none() {
        return Err(format!("cannot requantize a row of {} to {ty}", w.cols));
    }
    let out = crate::quantize::convert(w.ty, ty, w.data, w.rows * w.cols, w.cols, None);
    Ok(out.map_err(|e| e.to_string())?.into())
}

/// Decode a whole tensor of `len` elements to f32 (norm weights, biases, small tables).
pub fn load_f32(f: &Loader, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    load_f32_opt(f, name, len)?.ok_or_else(|| ModelError::MissingTensor(name.into()))
}

/// As `load_f32`, but `None` when the tensor is absent.
pub fn load_f32_opt(f: &Loader, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
    let Some(t) = f.tensor(name) else {
        return Ok(None);
    };
    if t.n_elements() != len as u64 {
        return Err(ModelError::BadShape {
            name: name.into(),
            expected: vec![len as u64],
            got: t.dims.clone(),
        });
    }
    if !can_dequantize(t.ty) {
        return Err(ModelError::NotFloat {
            name: name.into(),
            ty: t.ty,
        });
    }
    let mut out = vec![0f32; len];
    let data = f.tensor_data(t);
    dequantize(t.ty, data, &mut out).map_err(|_| ModelError::NotFloat {
        name: name.into(),
        ty: t.ty,
    })?;
    // the model keeps this f32 copy; the mapped bytes need not stay in memory
    f.release(byte_range(f, data));
    Ok(Some(out))
}

/// A linear layer `y = x W^T + b`.
#[derive(Clone, Debug)]
pub struct Linear {
    pub w: Weight,
    pub b: Option<Vec<f32>>,
}

impl Linear {
    /// Load `{prefix}.weight` as (n_out, n_in) and `{prefix}.bias` (n_out) if present.
    pub fn load(f: &Loader, prefix: &str, n_in: usize, n_out: usize) -> Result<Self, ModelError> {
        let w = Weight::load(f, &format!("{prefix}.weight"), n_in, n_out)?;
        let b = load_f32_opt(f, &format!("{prefix}.bias"), n_out)?;
        Ok(Self { w, b })
    }

    /// x (T, K) -> y (T, N).
    pub fn forward(&self, file: &[u8], x: &[f32], t: usize, y: &mut [f32]) {
        super::activations::record(&self.w.name, &x[..t * self.w.cols], self.w.cols);
        tinynn::kernels::qmatmul::matmul(&self.w.qmat(file), x, t, y);
        self.add_bias(y);
    }

    fn add_bias(&self, y: &mut [f32]) {
        if let Some(b) = &self.b {
            for row in y.chunks_exact_mut(b.len()) {
                row.iter_mut().zip(b).for_each(|(v, bi)| *v += bi);
            }
        }
    }

    /// Several layers on the same input (fused q/k/v, gate/up): x (T, K) -> ys[i] (T, N_i).
    pub fn forward_many(
        layers: &[&Linear],
        file: &[u8],
        x: &[f32],
        t: usize,
        ys: &mut [&mut [f32]],
    ) {
        for l in layers {
            super::activations::record(&l.w.name, &x[..t * l.w.cols], l.w.cols);
        }
        let ws: Vec<QMat> = layers.iter().map(|l| l.w.qmat(file)).collect();
        tinynn::kernels::qmatmul::matmul_many(&ws, x, t, ys);
        for (l, y) in layers.iter().zip(ys.iter_mut()) {
            l.add_bias(y);
        }
    }
}

/// `token_embd.weight` (V, C) and the output head: `output.weight`, or the embedding itself
/// when the two are tied.
pub fn embedding_and_head(f: &Loader, cfg: &super::Config) -> Result<(Weight, Weight), ModelError> {
    let token_embd = Weight::load(f, "token_embd.weight", cfg.d_model, cfg.vocab)?;
    let output = match f.tensor("output.weight") {
        Some(_) => Weight::load(f, "output.weight", cfg.d_model, cfg.vocab)?,
        None => token_embd.clone(),
    };
    Ok((token_embd, output))
}

/// A block's tensors loaded by their names and dims in the family's table.
impl BlockTable {
    /// Product part `part` (`attn_q`) in the table's shape, with its bias: required where the
    /// family has one, else taken when the file has one (as llama.cpp's optional biases).
    pub fn linear(&self, f: &Loader, part: &str) -> Result<Linear, ModelError> {
        let (cols, rows) = self.matrix(part);
        let name = self.full_name(part);
        let w = Weight::load(f, &format!("{name}.weight"), cols, rows)?;
        let b = match self.has(&format!("{part}.bias")) {
            true => Some(load_f32(f, &format!("{name}.bias"), rows)?),
            false => load_f32_opt(f, &format!("{name}.bias"), rows)?,
        };
        Ok(Linear { w, b })
    }

    /// Small tensor `name` (`attn_norm.weight`, the GDN conv) of the table's dims, as f32.
    pub fn vector(&self, f: &Loader, name: &str) -> Result<Vec<f32>, ModelError> {
        load_exact(f, &self.full_name(name), &self.get(name).dims)
    }

    /// Vector `name` where the family has it.
    pub fn vector_opt(&self, f: &Loader, name: &str) -> Result<Option<Vec<f32>>, ModelError> {
        match self.has(name) {
            true => self.vector(f, name).map(Some),
            false => Ok(None),
        }
    }
}

/// Tensor `name` as f32, its dims exactly `dims` (GGUF order; trailing 1s aside).
pub fn load_exact(f: &Loader, name: &str, dims: &[u64]) -> Result<Vec<f32>, ModelError> {
    let t = f
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let mut got: Vec<u64> = t.dims.clone();
    while got.len() > dims.len() && got.last() == Some(&1) {
        got.pop();
    }
    if got != dims {
        return Err(ModelError::BadShape {
            name: name.into(),
            expected: dims.to_vec(),
            got: t.dims.clone(),
        });
    }
    load_f32(f, name, dims.iter().product::<u64>() as usize)
}
