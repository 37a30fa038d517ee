//! `[train] precision = "f32" | "bf16"`: mixed-precision training (Micikevicius et al. 2018, in
//! bf16 as llm.c and PyTorch's autocast do it): f32 master weights, AdamW state, norms,
//! softmax, losses and the residual stream; the linear layers' matrix products on bf16
//! operands with f32 sums (`tinynn::kernels::bf16gemm`, AMX or AVX512-BF16). A run's scope sets
//! the products' precision and puts the old one back when the run ends.

use serde::{Deserialize, Serialize};
use tinynn::layers::matmul::{self, Precision as Products};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    Bf16,
}

/// The products' precision for as long as it lives.
pub struct Scope {
    old: Products,
    /// What the products compute in (bf16 falls back to f32 on a CPU without AVX512-BF16).
    pub effective: Precision,
}

impl Scope {
    pub fn enter(p: Precision) -> Self {
        let old = matmul::precision();
        let effective = match matmul::set_precision(match p {
            Precision::F32 => Products::F32,
            Precision::Bf16 => Products::Bf16,
        }) {
            Products::F32 => Precision::F32,
            Products::Bf16 => Precision::Bf16,
        };
        if effective != p {
            eprintln!("warning: this CPU has no AVX512-BF16; training in f32");
        }
        Self { old, effective }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        matmul::set_precision(self.old);
    }
}
