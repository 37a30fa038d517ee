//! One GPU opened for work: its context, the one stream every kernel runs on (one stream:
//! the order of work, and so the bits, never depends on timing), and the modules compiled
//! for its architecture, loaded once each.

use super::{arch_for, compile_cached, KernelError, Source};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("cuda:{index}: {source}")]
    Driver { index: usize, source: DriverError },
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("{0}")]
    Shape(String),
    #[error("kernel {name} has no function {function}")]
    NoFunction {
        name: &'static str,
        function: String,
    },
}

pub struct Gpu {
    pub index: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// `compute_XY` of this device.
    pub arch: String,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl Gpu {
    /// GPU `index`; check [`crate::device::gpus`] first (it says why there is none).
    pub fn open(index: usize) -> Result<Self, GpuError> {
        let driver = |source| GpuError::Driver { index, source };
        let ctx = CudaContext::new(index).map_err(driver)?;
        let arch = arch_for(ctx.compute_capability().map_err(driver)?);
        let stream = ctx.default_stream();
        Ok(Self {
            index,
            ctx,
            stream,
            arch,
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// A driver error of this device.
    pub fn driver(&self, source: DriverError) -> GpuError {
        GpuError::Driver {
            index: self.index,
            source,
        }
    }

    /// Function `name` of kernel source `src`, compiling and loading it on first use.
    pub fn function(&self, src: &Source, name: &str) -> Result<CudaFunction, GpuError> {
        let driver = |source| GpuError::Driver {
            index: self.index,
            source,
        };
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        let module = match modules.get(src.name) {
            Some(m) => m.clone(),
            None => {
                let ptx = compile_cached(src, &self.arch)?;
                let m = self.ctx.load_module(ptx).map_err(driver)?;
                modules.insert(src.name, m.clone());
                m
            }
        };
        module
            .load_function(name)
            .map_err(|_| GpuError::NoFunction {
                name: src.name,
                function: name.to_string(),
            })
    }
}
