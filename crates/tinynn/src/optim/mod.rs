//! Optimisation: AdamW with decoupled weight decay (Loshchilov & Hutter 2019), global-norm
//! gradient clipping (Pascanu et al. 2013), and the learning-rate schedule (linear warm-up,
//! cosine decay to a floor, as nanoGPT / llm.c). All work on the flat parameter and gradient
//! buffers a model keeps.

mod adamw;
mod clip;
mod schedule;

pub use adamw::{AdamW, AdamWConfig};
pub use clip::{clip_factor, clip_grad_norm, grad_norm};
pub use schedule::lr_at;

/// Elements per rayon task in the fused update and the norm: big enough that a task's work
/// dwarfs the fork/join, fixed so that results never depend on the thread count.
pub(crate) const CHUNK: usize = 1 << 15;
