//! Attention on the GPU: the device's half of `layers::attention` (FlashAttention, Dao et al.
//! 2022, with grouped-query heads), the same shapes and arguments as [`Attention`]'s
//! `forward_packed` / `backward_packed`, run by `kernels/attention.cu`.
//!
//! qkv (B*T, S) -> out (B*T, H*D), lse (B, H, T); the backward overwrites dqkv (B*T, S) and
//! uses a (B, H, T) scratch for the rows' `dout . out`.

use super::runtime::{Gpu, GpuError};
use super::{Source, SOURCES};
use crate::layers::attention::Attention;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

/// Query rows per block: one warp each.
const WARPS: u32 = 4;

/// The kernels' `Shape` (attention.cu), field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Shape {
    t: i32,
    h: i32,
    hkv: i32,
    d: i32,
    causal: i32,
    window: i32,
    scale: f32,
}

// SAFETY: plain #[repr(C)] data, laid out as the kernels' struct
unsafe impl DeviceRepr for Shape {}

fn source() -> &'static Source {
    SOURCES
        .iter()
        .find(|s| s.name == "attention.cu")
        .expect("attention.cu is listed")
}

fn shape(a: &Attention, t: usize) -> Shape {
    Shape {
        t: t as i32,
        h: a.n_head as i32,
        hkv: a.n_kv_head as i32,
        d: a.head_dim as i32,
        causal: a.causal as i32,
        window: a.window.filter(|_| a.causal).unwrap_or(0) as i32,
        scale: 1.0 / (a.head_dim as f32).sqrt(),
    }
}

/// One warp per (row, head) over `heads` heads of `b` sequences of `t` rows.
fn grid(b: usize, heads: usize, t: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((t as u32).div_ceil(WARPS), heads as u32, b as u32),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn check(a: &Attention, pos: Option<&CudaSlice<i32>>, b: usize, t: usize) -> Result<(), GpuError> {
    let bad = |why: String| Err(GpuError::Shape(why));
    if !a.causal && pos.is_some() {
        return bad("attention: packed samples (pos) need the causal mask on the GPU".into());
    }
    if pos.is_some_and(|p| p.len() < b * t) {
        return bad(format!(
            "attention: pos has fewer than B*T = {} rows",
            b * t
        ));
    }
    Ok(())
}

/// qkv (B*T, S) -> out (B*T, H*D), saving lse (B, H, T).
#[allow(clippy::too_many_arguments)]
pub fn forward(
    gpu: &Gpu,
    a: &Attention,
    qkv: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
    lse: &mut CudaSlice<f32>,
    b: usize,
    t: usize,
    pos: Option<&CudaSlice<i32>>,
) -> Result<(), GpuError> {
    check(a, pos, b, t)?;
    let f = gpu.function(source(), "attention_forward")?;
    let s = shape(a, t);
    let null = 0u64;
    let mut l = gpu.stream.launch_builder(&f);
    l.arg(qkv).arg(out).arg(lse);
    match pos {
        Some(p) => l.arg(p),
        None => l.arg(&null),
    };
    l.arg(&s);
    // SAFETY: the buffers hold B*T rows of the shapes above (the caller's, as on the CPU)
    unsafe { l.launch(grid(b, a.n_head, t)) }.map_err(|e| gpu.driver(e))?;
    Ok(())
}

/// From dout (B*T, H*D): dqkv (B*T, S) overwritten with the gradient of qkv; `di` is scratch
/// of B*H*T.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    gpu: &Gpu,
    a: &Attention,
    (dout, qkv, out, lse): (
        &CudaSlice<f32>,
        &CudaSlice<f32>,
        &CudaSlice<f32>,
        &CudaSlice<f32>,
    ),
    di: &mut CudaSlice<f32>,
    dqkv: &mut CudaSlice<f32>,
    b: usize,
    t: usize,
    pos: Option<&CudaSlice<i32>>,
) -> Result<(), GpuError> {
    check(a, pos, b, t)?;
    let s = shape(a, t);
    let null = 0u64;
    let f = gpu.function(source(), "attention_backward_di")?;
    let mut l = gpu.stream.launch_builder(&f);
    l.arg(dout).arg(out).arg(&mut *di).arg(&s);
    // SAFETY: as in forward
    unsafe { l.launch(grid(b, a.n_head, t)) }.map_err(|e| gpu.driver(e))?;
    for (name, heads) in [
        ("attention_backward_dq", a.n_head),
        ("attention_backward_dkv", a.n_kv_head),
    ] {
        let f = gpu.function(source(), name)?;
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(dout).arg(qkv).arg(lse).arg(&*di).arg(&mut *dqkv);
        match pos {
            Some(p) => l.arg(p),
            None => l.arg(&null),
        };
        l.arg(&s);
        // SAFETY: as in forward; dq writes the query columns, dkv the key and value columns
        unsafe { l.launch(grid(b, heads, t)) }.map_err(|e| gpu.driver(e))?;
    }
    Ok(())
}
