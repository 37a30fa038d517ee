//! A GGUF weight matrix on the device as stored (its blocks uploaded unchanged), decoded by
//! `kernels/dequant.cu`: whole to f32, or inside a product y (N, rows) = x (N, cols) W^T.
//! The types with a device decoder are [`DEVICE_TYPES`]; any other is refused with its name
//! and the conversion that gives one.

use super::runtime::{Gpu, GpuError};
use super::{Source, SOURCES};
use crate::quant::GgmlType;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

/// The weight types the device decodes.
pub const DEVICE_TYPES: [GgmlType; 10] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Rows per block of the product: one warp each.
const WARPS: u32 = 4;

pub struct DeviceWeights {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    data: CudaSlice<u8>,
}

fn source() -> &'static Source {
    SOURCES
        .iter()
        .find(|s| s.name == "dequant.cu")
        .expect("dequant.cu is listed")
}

/// Whether `len` bytes can be a (rows, cols) matrix of `ty` on the device.
pub fn check(
    name: &str,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    len: usize,
) -> Result<(), GpuError> {
    if !DEVICE_TYPES.contains(&ty) {
        return Err(GpuError::Shape(format!(
                "{name}: weight type {} has no GPU kernel (the GPU takes {}); convert the file, e.g. `toy quantize IN OUT --type Q8_0`",
                ty.name(),
                DEVICE_TYPES.map(|t| t.name()).join(", ")
            )));
    }
    let need = ty.row_bytes(cols as u64).map(|r| r as usize * rows);
    if need != Some(len) {
        return Err(GpuError::Shape(format!(
            "{name}: {} bytes for a ({rows}, {cols}) {} matrix, which needs {}",
            len,
            ty.name(),
            need.map_or("whole blocks per row".to_string(), |n| format!("{n}")),
        )));
    }
    Ok(())
}

impl DeviceWeights {
    /// Uploads `bytes`, a (rows, cols) matrix of type `ty` as GGUF stores it.
    pub fn upload(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        (rows, cols): (usize, usize),
        bytes: &[u8],
    ) -> Result<Self, GpuError> {
        check(name, ty, (rows, cols), bytes.len())?;
        let data = gpu.stream.clone_htod(bytes).map_err(|e| gpu.driver(e))?;
        Ok(Self {
            ty,
            rows,
            cols,
            data,
        })
    }

    fn kernel(&self, gpu: &Gpu, what: &str) -> Result<cudarc::driver::CudaFunction, GpuError> {
        gpu.function(
            source(),
            &format!("{what}_{}", self.ty.name().to_ascii_lowercase()),
        )
    }

    /// The whole matrix decoded, (rows, cols) f32.
    pub fn dequantize(&self, gpu: &Gpu) -> Result<CudaSlice<f32>, GpuError> {
        let n = self.rows * self.cols;
        let mut y = gpu
            .stream
            .alloc_zeros::<f32>(n)
            .map_err(|e| gpu.driver(e))?;
        let f = self.kernel(gpu, "dequantize")?;
        let n64 = n as u64;
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(&self.data).arg(&mut y).arg(&n64);
        // SAFETY: data holds rows * cols elements (checked at upload), y as many f32
        unsafe { l.launch(LaunchConfig::for_num_elems(n as u32)) }.map_err(|e| gpu.driver(e))?;
        Ok(y)
    }

    /// y (N, rows) = x (N, cols) W^T.
    pub fn matmul(
        &self,
        gpu: &Gpu,
        x: &CudaSlice<f32>,
        y: &mut CudaSlice<f32>,
        n: usize,
    ) -> Result<(), GpuError> {
        if x.len() < n * self.cols || y.len() < n * self.rows {
            return Err(GpuError::Shape(format!(
                "matmul: x has {} and y {} elements; {n} tokens of a ({}, {}) matrix need {} and {}",
                x.len(),
                y.len(),
                self.rows,
                self.cols,
                n * self.cols,
                n * self.rows
            )));
        }
        let f = self.kernel(gpu, "matmul")?;
        let (r, c) = (self.rows as i32, self.cols as i32);
        let mut l = gpu.stream.launch_builder(&f);
        l.arg(&self.data).arg(x).arg(y).arg(&r).arg(&c);
        let cfg = LaunchConfig {
            grid_dim: ((self.rows as u32).div_ceil(WARPS), n as u32, 1),
            block_dim: (32 * WARPS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sizes checked above and at upload
        unsafe { l.launch(cfg) }.map_err(|e| gpu.driver(e))?;
        Ok(())
    }
}
