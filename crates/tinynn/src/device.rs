//! Which device runs the work: the CPU (its SIMD features) or an NVIDIA GPU through CUDA
//! (`cuda` feature: the driver, NVRTC and cuBLAS are loaded at run time, so a binary built
//! with the feature runs, and says why there is no GPU, on machines without one).
//!
//! `--device cpu|cuda[:N]|auto` (or `TOY_DEVICE`) parses into a [`DeviceRequest`];
//! [`resolve`] turns it into a [`Device`] or an error naming what is missing.

use std::fmt;
use std::str::FromStr;

/// A device to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRequest {
    Cpu,
    /// `cuda` (the first GPU) or `cuda:N`.
    Cuda(usize),
    /// A GPU when there is one, else the CPU.
    Auto,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("unknown device '{0}': expected cpu, cuda, cuda:N or auto")]
    Unknown(String),
    #[error("asked for cuda:{asked}, but {why}")]
    NoGpu { asked: usize, why: NoGpu },
    #[error("asked for cuda:{asked}, but this machine has {count} GPU(s) (cuda:0..cuda:{last})", last = count.saturating_sub(1))]
    OutOfRange { asked: usize, count: usize },
}

/// Why no GPU can be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoGpu {
    #[error("this toy was built without CUDA (build with `--features cuda`)")]
    NotBuilt,
    #[error("no NVIDIA driver: libcuda.so was not found")]
    NoDriver,
    #[error("the NVIDIA driver reports no GPU")]
    NoDevice,
    #[error("the NVIDIA driver failed: {0}")]
    Driver(String),
}

impl FromStr for DeviceRequest {
    type Err = DeviceError;
    fn from_str(s: &str) -> Result<Self, DeviceError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            "auto" => Ok(Self::Auto),
            _ => t
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| DeviceError::Unknown(s.to_string())),
        }
    }
}

impl DeviceRequest {
    /// `flag` when given, else `TOY_DEVICE`, else the CPU.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<Self, DeviceError> {
        match flag
            .map(str::to_string)
            .or_else(|| std::env::var("TOY_DEVICE").ok())
        {
            Some(s) if !s.trim().is_empty() => s.parse(),
            _ => Ok(Self::Cpu),
        }
    }
}

/// One GPU as the driver describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: usize,
    pub name: String,
    pub memory_bytes: u64,
    /// (major, minor), e.g. (9, 0) for an H100/H200.
    pub compute_capability: (i32, i32),
}

/// The CPU: logical threads and the SIMD features the kernels choose from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    pub threads: usize,
    pub features: Vec<&'static str>,
}

/// What this CPU offers of the features toy's kernels use.
pub fn cpu() -> CpuInfo {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[allow(unused_mut)]
    let mut features = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($f) {
                    features.push($f);
                }
            )*};
        }
        probe!(
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vnni",
            "avx512bf16",
            "avxvnni"
        );
        // AMX's detection is not stable in std: the kernels' own check (cpuid and the
        // kernel's permission for tile data)
        if crate::kernels::bf16amx::available() {
            features.push("amx-bf16");
        }
    }
    CpuInfo { threads, features }
}

/// Every GPU the driver sees, or why there is none.
pub fn gpus() -> Result<Vec<GpuInfo>, NoGpu> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::list()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(NoGpu::NotBuilt)
    }
}

/// The device `req` names on this machine; for `auto`, also why it is the CPU when it is.
pub fn resolve(req: DeviceRequest) -> Result<(Device, Option<NoGpu>), DeviceError> {
    match req {
        DeviceRequest::Cpu => Ok((Device::Cpu, None)),
        DeviceRequest::Auto => match gpus() {
            Ok(g) if !g.is_empty() => Ok((Device::Cuda(0), None)),
            Ok(_) => Ok((Device::Cpu, Some(NoGpu::NoDevice))),
            Err(why) => Ok((Device::Cpu, Some(why))),
        },
        DeviceRequest::Cuda(asked) => {
            let g = gpus().map_err(|why| DeviceError::NoGpu { asked, why })?;
            match g.len() {
                0 => Err(DeviceError::NoGpu {
                    asked,
                    why: NoGpu::NoDevice,
                }),
                count if asked >= count => Err(DeviceError::OutOfRange { asked, count }),
                _ => Ok((Device::Cuda(asked), None)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_name_what_is_expected() {
        assert_eq!("cpu".parse(), Ok(DeviceRequest::Cpu));
        assert_eq!("CUDA".parse(), Ok(DeviceRequest::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceRequest::Cuda(3)));
        assert_eq!("auto".parse(), Ok(DeviceRequest::Auto));
        let err = "cuda:x".parse::<DeviceRequest>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown device 'cuda:x': expected cpu, cuda, cuda:N or auto"
        );
        assert!("metal".parse::<DeviceRequest>().is_err());
    }

    #[test]
    fn the_cpu_always_resolves_and_auto_says_why_it_fell_back() {
        assert_eq!(resolve(DeviceRequest::Cpu), Ok((Device::Cpu, None)));
        match (gpus(), resolve(DeviceRequest::Auto).unwrap()) {
            (Ok(g), (Device::Cuda(0), None)) => assert!(!g.is_empty()),
            (Err(why), (Device::Cpu, Some(w))) => assert_eq!(why, w),
            (g, r) => panic!("auto resolved to {r:?} with gpus() = {g:?}"),
        }
        // asking for a GPU where there is none is an error that says why
        if let Err(why) = gpus() {
            let err = resolve(DeviceRequest::Cuda(0)).unwrap_err();
            assert_eq!(err, DeviceError::NoGpu { asked: 0, why });
            assert!(err.to_string().starts_with("asked for cuda:0, but "));
        }
        let c = cpu();
        assert!(c.threads >= 1);
    }
}
