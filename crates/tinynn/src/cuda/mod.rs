//! The CUDA device (issue 39, first part): GPUs as the driver lists them, and toy's kernels,
//! CUDA C sources compiled by NVRTC at first use for the device's architecture and cached on
//! disk by source hash and architecture. Everything is loaded at run time through cudarc
//! (`dynamic-loading`): absence of the driver or of NVRTC is an error, never a panic.
//!
//! The kernels (`kernels/*.cu`) are the device's half of tinynn's layers: each is written
//! against the CPU layer it mirrors (named in its file) and checked against it where a GPU
//! exists; where none does, `scripts/cuda-kernels.sh` checks every source compiles with the
//! NVRTC of PyPI's `nvidia-cuda-nvrtc` wheel.

use crate::device::{GpuInfo, NoGpu};
use cudarc::driver::{sys as drv, CudaContext};
use cudarc::nvrtc::{self, CompileError, CompileOptions, Ptx};
use std::path::PathBuf;

pub mod attention;
pub mod gemm;
mod runtime;
pub mod weights;
pub use runtime::{Gpu, GpuError};

/// Every GPU the driver sees, or why there is none.
pub fn list() -> Result<Vec<GpuInfo>, NoGpu> {
    // cudarc's loader panics where libcuda is missing: ask first
    if !unsafe { drv::is_culib_present() } {
        return Err(NoGpu::NoDriver);
    }
    let n = match CudaContext::device_count() {
        Ok(n) => n,
        Err(e) if e.0 == drv::CUresult::CUDA_ERROR_NO_DEVICE => return Err(NoGpu::NoDevice),
        Err(e) => return Err(NoGpu::Driver(e.to_string())),
    };
    (0..n.max(0) as usize)
        .map(|index| {
            let ctx = CudaContext::new(index).map_err(|e| NoGpu::Driver(e.to_string()))?;
            let err = |e: cudarc::driver::DriverError| NoGpu::Driver(e.to_string());
            Ok(GpuInfo {
                index,
                name: ctx.name().map_err(err)?,
                memory_bytes: ctx.total_mem().map_err(err)? as u64,
                compute_capability: ctx.compute_capability().map_err(err)?,
            })
        })
        .collect()
}

/// One kernel source: its file name and text.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    pub name: &'static str,
    pub text: &'static str,
}

/// `Source`s from file names in `kernels/`.
macro_rules! sources {
    ($($name:literal),* $(,)?) => {
        [$(Source { name: $name, text: include_str!(concat!("kernels/", $name)) }),*]
    };
}

/// toy's CUDA kernel sources, in `kernels/`.
pub const SOURCES: [Source; 10] = sources![
    "adamw.cu",
    "rmsnorm.cu",
    "cross_entropy.cu",
    "elementwise.cu",
    "rope.cu",
    "embedding.cu",
    "layernorm.cu",
    "act.cu",
    "attention.cu",
    "dequant.cu",
];

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("NVRTC (libnvrtc.so) was not found: install CUDA or PyPI's nvidia-cuda-nvrtc and put its lib folder on LD_LIBRARY_PATH")]
    NoNvrtc,
    #[error("kernel {name} does not compile for {arch}:\n{log}")]
    Compile {
        name: &'static str,
        arch: String,
        log: String,
    },
    #[error("kernel cache {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `compute_XY` (virtual, PTX only) for a compute capability.
pub fn arch_for(cc: (i32, i32)) -> String {
    format!("compute_{}{}", cc.0, cc.1)
}

/// 64-bit FNV-1a of the source and the architecture: the cache key.
fn key(src: &str, arch: &str) -> u64 {
    let bytes = src.bytes().chain([0]).chain(arch.bytes());
    bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Where compiled kernels are kept: `TOY_KERNEL_CACHE`, else `~/.cache/toy/kernels`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TOY_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache/toy/kernels")
}

/// NVRTC's PTX for `src` on `arch` (`compute_90`), without the cache.
pub fn compile(src: &Source, arch: &str) -> Result<Ptx, KernelError> {
    if !unsafe { nvrtc::sys::is_culib_present() } {
        return Err(KernelError::NoNvrtc);
    }
    // `arch` must live as long as the options; NVRTC copies it, so leaking a few bytes per
    // distinct architecture is the whole cost
    let arch_static: &'static str = Box::leak(arch.to_string().into_boxed_str());
    let opts = CompileOptions {
        arch: Some(arch_static),
        // IEEE division and square roots, no flush to zero: the CPU layers' arithmetic
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        fmad: Some(false),
        name: Some(src.name.to_string()),
        ..Default::default()
    };
    nvrtc::compile_ptx_with_opts(src.text, opts).map_err(|e| KernelError::Compile {
        name: src.name,
        arch: arch.to_string(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other:?}"),
        },
    })
}

/// [`compile`] through the disk cache in [`cache_dir`].
pub fn compile_cached(src: &Source, arch: &str) -> Result<Ptx, KernelError> {
    compile_cached_in(&cache_dir(), src, arch)
}

/// [`compile`] through a cache in `dir` (written atomically: a temp name, then renamed).
pub fn compile_cached_in(
    dir: &std::path::Path,
    src: &Source,
    arch: &str,
) -> Result<Ptx, KernelError> {
    let path = dir.join(format!("{:016x}-{arch}.ptx", key(src.text, arch)));
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok(Ptx::from_src(text));
    }
    let ptx = compile(src, arch)?;
    let cache = |source| KernelError::Cache {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(cache)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, ptx.to_src()).map_err(cache)?;
    std::fs::rename(&tmp, &path).map_err(cache)?;
    Ok(ptx)
}

#[cfg(test)]
mod layer_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod weight_tests;
