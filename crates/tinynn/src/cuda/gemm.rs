//! Matrix products on cuBLASLt (NVIDIA's cuBLASLt API, `cublasLtMatmul`), in the layout of
//! tinynn's `Linear`: row-major x (N, I), a weight W (O, I), y (N, O). Two precisions, as
//! `train.precision` names them: `F32` multiplies f32 in f32 without TF32
//! (`CUBLAS_COMPUTE_32F`, for parity with the CPU), `Bf16` takes bf16 inputs and accumulates
//! and writes f32 (`CUBLAS_COMPUTE_32F`, f32 output: gradients add up in f32).
//!
//! Deterministic: one algorithm per shape, chosen by cuBLASLt's heuristic the first time the
//! shape is seen and kept, and only reduction schemes that do not add in place (no split-K
//! partial sums racing in the output), so a product repeats bit for bit on one device.

use super::runtime::Gpu;
use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// What a product's inputs are: f32, or bf16 as its 16 bits (`u16`, as the cast kernels
/// write them).
pub trait Operand: cudarc::driver::DeviceRepr {
    const PRECISION: Precision;
}

impl Operand for f32 {
    const PRECISION: Precision = Precision::F32;
}

impl Operand for u16 {
    const PRECISION: Precision = Precision::Bf16;
}

/// The arithmetic of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 inputs and output, f32 arithmetic, no TF32.
    F32,
    /// bf16 inputs (as their 16 bits), f32 accumulation and output.
    Bf16,
}

impl Precision {
    fn input_type(self) -> sys::cudaDataType {
        match self {
            Precision::F32 => sys::cudaDataType_t::CUDA_R_32F,
            Precision::Bf16 => sys::cudaDataType_t::CUDA_R_16BF,
        }
    }
}

/// One product in BLAS's column-major terms: C (m, n) = alpha op(A) op(B) + beta C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    precision: Precision,
    trans_a: bool,
    trans_b: bool,
    m: u64,
    n: u64,
    k: u64,
    lda: i64,
    ldb: i64,
    ldc: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum GemmError {
    #[error("cuBLASLt: {0:?}")]
    Cublas(#[from] CublasError),
    #[error("cuBLASLt has no algorithm for {0}")]
    NoAlgorithm(String),
    #[error("cuBLASLt workspace of {bytes} bytes: {source}")]
    Workspace {
        bytes: usize,
        source: cudarc::driver::DriverError,
    },
    #[error("{what}: {got} elements, the product needs {need}")]
    Size {
        what: &'static str,
        got: usize,
        need: usize,
    },
}

/// A cuBLASLt handle on a GPU's stream, its workspace and the plan kept for each shape.
pub struct Gemm<'g> {
    gpu: &'g Gpu,
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    plans: Mutex<HashMap<Shape, Plan>>,
}

/// One shape's descriptor, matrix layouts and algorithm: made the first time the shape is
/// seen and kept (a training step repeats the same few dozen shapes every step).
struct Plan {
    desc: Desc,
    layouts: Layouts,
    algo: sys::cublasLtMatmulAlgo_t,
}

/// Workspace: NVIDIA's advice, 32 MiB on Hopper, 4 MiB before.
fn workspace_bytes(gpu: &Gpu) -> usize {
    match gpu.arch.trim_start_matches("compute_").parse::<u32>() {
        Ok(cc) if cc >= 90 => 32 << 20,
        _ => 4 << 20,
    }
}

struct Layouts([sys::cublasLtMatrixLayout_t; 3]);

impl Drop for Layouts {
    fn drop(&mut self) {
        for l in self.0 {
            // SAFETY: created by create_matrix_layout below and dropped once
            unsafe { lt::destroy_matrix_layout(l) }.ok();
        }
    }
}

struct Desc(sys::cublasLtMatmulDesc_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by create_matmul_desc below and dropped once
        unsafe { lt::destroy_matmul_desc(self.0) }.ok();
    }
}

impl<'g> Gemm<'g> {
    pub fn new(gpu: &'g Gpu) -> Result<Self, GemmError> {
        let bytes = workspace_bytes(gpu);
        let workspace = gpu
            .stream
            .alloc_zeros::<u8>(bytes)
            .map_err(|source| GemmError::Workspace { bytes, source })?;
        Ok(Self {
            gpu,
            handle: lt::create_handle()?,
            workspace,
            plans: Mutex::new(HashMap::new()),
        })
    }

    fn describe(&self, s: &Shape) -> Result<(Desc, Layouts), GemmError> {
        let desc = Desc(lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType_t::CUDA_R_32F,
        )?);
        for (attr, t) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                s.trans_a,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                s.trans_b,
            ),
        ] {
            // cublasOperation_t as an int32: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            let op = t as i32;
            // SAFETY: a live descriptor and an attribute of the operation's size
            unsafe {
                lt::set_matmul_desc_attribute(
                    desc.0,
                    attr,
                    &op as *const _ as *const c_void,
                    std::mem::size_of_val(&op),
                )?
            };
        }
        let (ar, ac) = if s.trans_a { (s.k, s.m) } else { (s.m, s.k) };
        let (br, bc) = if s.trans_b { (s.n, s.k) } else { (s.k, s.n) };
        let input = s.precision.input_type();
        let a = lt::create_matrix_layout(input, ar, ac, s.lda)?;
        let b = lt::create_matrix_layout(input, br, bc, s.ldb)?;
        let c = lt::create_matrix_layout(sys::cudaDataType_t::CUDA_R_32F, s.m, s.n, s.ldc)?;
        Ok((desc, Layouts([a, b, c])))
    }

    /// The algorithm cuBLASLt's heuristic picks for `s` (asked once per shape, by [`Self::plan`]).
    fn heuristic(
        &self,
        s: &Shape,
        desc: &Desc,
        l: &Layouts,
    ) -> Result<sys::cublasLtMatmulAlgo_t, GemmError> {
        let pref = lt::create_matmul_pref()?;
        let size = self.workspace.len();
        // no in-place reduction: split-K partial sums would add up in the output in any order
        let schemes = sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32
            | sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE as u32;
        // SAFETY: a live preference and attributes of their documented sizes
        let found = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &size as *const _ as *const c_void,
                std::mem::size_of_val(&size),
            )
            .and_then(|_| {
                lt::set_matmul_pref_attribute(
                    pref,
                    sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                    &schemes as *const _ as *const c_void,
                    std::mem::size_of_val(&schemes),
                )
            })
            .and_then(|_| {
                lt::get_matmul_algo_heuristic(self.handle, desc.0, l.0[0], l.0[1], l.0[2], l.0[2], pref)
            })
        };
        // SAFETY: created above, dropped once
        unsafe { lt::destroy_matmul_pref(pref) }.ok();
        let algo = found
            .map_err(|e| match e.0 {
                sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED => {
                    GemmError::NoAlgorithm(format!("{s:?}"))
                }
                _ => GemmError::Cublas(e),
            })?
            .algo;
        Ok(algo)
    }

    /// A new plan for `s`.
    fn plan(&self, s: &Shape) -> Result<Plan, GemmError> {
        let (desc, layouts) = self.describe(s)?;
        let algo = self.heuristic(s, &desc, &layouts)?;
        Ok(Plan {
            desc,
            layouts,
            algo,
        })
    }

    /// C (m, n) = alpha op(A) op(B) + beta C, column-major as BLAS; A and B f32 or bf16 bits,
    /// C f32.
    #[allow(clippy::too_many_arguments)]
    fn run<T: Operand>(
        &self,
        (trans_a, trans_b): (bool, bool),
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        beta: f32,
        c: &mut CudaSlice<f32>,
    ) -> Result<(), GemmError> {
        for (what, got, need) in [
            ("A", a.len(), m * k),
            ("B", b.len(), k * n),
            ("C", c.len(), m * n),
        ] {
            if got < need {
                return Err(GemmError::Size { what, got, need });
            }
        }
        let s = Shape {
            precision: T::PRECISION,
            trans_a,
            trans_b,
            m: m as u64,
            n: n as u64,
            k: k as u64,
            lda: if trans_a { k } else { m } as i64,
            ldb: if trans_b { n } else { k } as i64,
            ldc: m as i64,
        };
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let plan = match plans.entry(s) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.plan(&s)?),
        };
        let (desc, layouts, algo) = (&plan.desc, &plan.layouts, plan.algo);
        let stream = &self.gpu.stream;
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pc, _rc) = c.device_ptr_mut(stream);
        let (pw, _rw) = self.workspace.device_ptr(stream);
        // SAFETY: the layouts describe the buffers, whose sizes were checked above; one stream
        unsafe {
            lt::matmul(
                self.handle,
                desc.0,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                pa as *const c_void,
                layouts.0[0],
                pb as *const c_void,
                layouts.0[1],
                pc as *const c_void,
                layouts.0[2],
                pc as *mut c_void,
                layouts.0[2],
                &algo,
                pw as *mut c_void,
                self.workspace.len(),
                stream.cu_stream() as *mut _,
            )?;
        }
        Ok(())
    }

    /// `Linear`'s forward: y (N, O) = x (N, I) W^T, W (O, I), all row-major.
    /// (Row-major y is column-major y^T = W x^T: A = W read transposed, B = x.)
    pub fn forward<T: Operand>(
        &self,
        x: &CudaSlice<T>,
        w: &CudaSlice<T>,
        y: &mut CudaSlice<f32>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<(), GemmError> {
        self.run((true, false), (o, n, i), 1.0, w, x, 0.0, y)
    }

    /// `Linear`'s input gradient: dx (N, I) = dy (N, O) W (O, I), overwriting dx.
    pub fn backward_x<T: Operand>(
        &self,
        dy: &CudaSlice<T>,
        w: &CudaSlice<T>,
        dx: &mut CudaSlice<f32>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<(), GemmError> {
        // column-major dx^T (I, N) = W^T (I, O) dy^T (O, N): W as stored is W^T column-major
        self.run((false, false), (i, n, o), 1.0, w, dy, 0.0, dx)
    }

    /// `Linear`'s weight gradient: dW (O, I) += dy^T (O, N) x (N, I).
    pub fn backward_w<T: Operand>(
        &self,
        dy: &CudaSlice<T>,
        x: &CudaSlice<T>,
        dw: &mut CudaSlice<f32>,
        (n, i, o): (usize, usize, usize),
    ) -> Result<(), GemmError> {
        // column-major dW^T (I, O) = x^T (I, N) dy (N, O): x as stored is x^T, dy read transposed
        self.run((false, true), (i, o, n), 1.0, x, dy, 1.0, dw)
    }
}

impl Drop for Gemm<'_> {
    fn drop(&mut self) {
        // SAFETY: created in new, dropped once
        unsafe { lt::destroy_handle(self.handle) }.ok();
    }
}
