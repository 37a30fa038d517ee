//! Errors of loading and running a model.

use crate::gguf::GgufError;
use tinynn::kernels::qmatmul::QMatError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported architecture '{arch}': expected one of {known}")]
    UnsupportedArch { arch: String, known: &'static str },
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    #[error("bad metadata '{key}': {why}")]
    BadKey { key: String, why: String },
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    #[error("tensor '{name}' has shape {got:?}, expected {expected:?}")]
    BadShape {
        name: String,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    #[error("tensor '{name}': {source}")]
    Weight { name: String, source: QMatError },
    #[error("tensor '{name}' cannot be held in another type: {why}")]
    Requantize { name: String, why: String },
    #[error("tensor '{name}' of type {ty} cannot be read as f32")]
    NotFloat {
        name: String,
        ty: tinynn::quant::GgmlType,
    },
    #[error("context full: {n} tokens at position {pos} do not fit in a context of {ctx} (use a larger --ctx)")]
    ContextOverflow { pos: usize, n: usize, ctx: usize },
    #[error("token id {id} is out of range: vocabulary has {vocab} tokens")]
    BadToken { id: u32, vocab: usize },
    #[error("nothing to evaluate: the token list is empty")]
    Empty,
    #[error("a batched step needs one token per cache and at most {n_batch} of them: got {tokens} tokens for {caches} caches")]
    BatchShape {
        tokens: usize,
        caches: usize,
        n_batch: usize,
    },
    #[error("lora adapter: {0}")]
    Adapter(super::adapter::AdapterError),
    #[error("lora adapter targets '{0}': only block matrices blk.N.{{attn_q,attn_k,attn_v,attn_qkv,attn_output,attn_gate,ssm_beta,ssm_alpha,ssm_out,ffn_gate,ffn_up,ffn_down}}.weight run unmerged (merge it with `toy merge` instead)")]
    LoraTarget(String),
    #[error("speculative decoding: {0}")]
    Speculative(String),
    /// A constrained decode's grammar or matcher failed (`infer::constrain` converts its
    /// errors into this, so the model code names nothing above it).
    #[error("{0}")]
    Constraint(String),
    #[error("lora adapter {id} does not exist: {n} loaded")]
    NoSuchLora { id: usize, n: usize },
}
