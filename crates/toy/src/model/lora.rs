//! LoRA adapters run beside the base weights instead of merged into them (Hu et al. 2021,
//! arXiv 2106.09685), as llama-server does: after each adapted product `y = x Wᵀ` every row
//! adds `S · s · (x Aᵀ) Bᵀ` for each adapter its sequence asked for, with `s` the adapter's
//! alpha / r and `S` the request's scale. The product is tinynn's `Lora::forward`, the one
//! the trainer runs. Which adapters a row uses is per row, so sequences with different
//! adapters (or none) share one batched pass over the base weights; rows with no adapter
//! cost nothing. Every block matrix of every family can be adapted this way: the Llama
//! family's seven, GPT-2's fused attn_qkv, and Qwen3.5's Gated DeltaNet products.
//! Letters: T rows in the batch, K = n_in, N = n_out, r the rank.

use super::adapter::LoraAdapter;
use super::{Config, ModelError};
use crate::gguf::GgufFile;
use tinynn::layers::lora::Lora;

/// The block matrices an adapter may target, as GGUF names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Q,
    K,
    V,
    Output,
    Gate,
    Up,
    Down,
    /// GPT-2's fused q|k|v, or a GDN layer's q|k|v input to its convolution.
    Qkv,
    /// A GDN layer's output gate z, beta and alpha (decay) products, and its output.
    SsmGate,
    SsmBeta,
    SsmAlpha,
    SsmOut,
}

const N_TARGETS: usize = 12;

const TARGETS: [(&str, Target); N_TARGETS] = [
    ("attn_q", Target::Q),
    ("attn_k", Target::K),
    ("attn_v", Target::V),
    ("attn_output", Target::Output),
    ("ffn_gate", Target::Gate),
    ("ffn_up", Target::Up),
    ("ffn_down", Target::Down),
    ("attn_qkv", Target::Qkv),
    ("attn_gate", Target::SsmGate),
    ("ssm_beta", Target::SsmBeta),
    ("ssm_alpha", Target::SsmAlpha),
    ("ssm_out", Target::SsmOut),
];

impl Target {
    /// The target of part `name` (`attn_q`), if adapters may target it.
    pub fn of(name: &str) -> Option<Target> {
        TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
    }
}

/// `blk.{i}.{target}.weight` -> (i, target).
fn parse_target(name: &str) -> Option<(usize, Target)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (i, t) = rest.split_once('.')?;
    Some((i.parse().ok()?, Target::of(t)?))
}

/// One adapted matrix: A (r, K), B (N, r), `lora.scale` = the adapter's alpha / r.
struct Mat {
    lora: Lora,
    a: Vec<f32>,
    b: Vec<f32>,
}

/// An adapter laid out per layer and target for the forward pass.
pub struct LoadedLora {
    layers: Vec<[Option<Mat>; N_TARGETS]>,
}

/// Whether `adapter` can run unmerged on the model in `file`, without loading the model:
/// what [`super::Model::add_lora`] checks, for a server to refuse it at startup.
pub fn check(adapter: &LoraAdapter, file: &GgufFile) -> Result<(), ModelError> {
    LoadedLora::new(adapter, file, &Config::from_gguf(file)?).map(|_| ())
}

impl LoadedLora {
    /// `adapter` checked against the base `file` (architecture, names, shapes) and against
    /// what the unmerged path can apply.
    pub fn new(adapter: &LoraAdapter, file: &GgufFile, cfg: &Config) -> Result<Self, ModelError> {
        adapter.check_base(file).map_err(ModelError::Adapter)?;
        let mut layers: Vec<[Option<Mat>; N_TARGETS]> =
            (0..cfg.n_layer).map(|_| Default::default()).collect();
        for t in &adapter.tensors {
            let (i, target) = parse_target(&t.base)
                .filter(|&(i, _)| i < cfg.n_layer)
                .ok_or_else(|| ModelError::LoraTarget(t.base.clone()))?;
            let lora = Lora {
                n_in: t.n_in,
                n_out: t.n_out,
                rank: t.rank,
                scale: adapter.scale(t),
            };
            let (a, b) = (t.a.clone(), t.b.clone());
            layers[i][target as usize] = Some(Mat { lora, a, b });
        }
        Ok(Self { layers })
    }
}

/// Which adapters each row of one forward pass runs with: runs of consecutive rows that
/// share a list of (adapter index, scale). Rows past the last run use none.
pub struct RowLoras<'a> {
    loras: &'a [LoadedLora],
    runs: Vec<(usize, &'a [(usize, f32)])>,
    /// x A^T of the adapter being applied (rows x rank), reused by every call of the pass.
    u: std::cell::RefCell<Vec<f32>>,
}

impl<'a> RowLoras<'a> {
    /// No adapter on any row.
    pub fn none() -> Self {
        Self {
            loras: &[],
            runs: Vec::new(),
            u: Default::default(),
        }
    }

    /// Row i uses `per_row[i]`; consecutive rows with equal lists become one run (one
    /// product per adapter for all of them).
    pub fn new(
        loras: &'a [LoadedLora],
        per_row: impl IntoIterator<Item = (usize, &'a [(usize, f32)])>,
    ) -> Self {
        let mut runs: Vec<(usize, &[(usize, f32)])> = Vec::new();
        for (n, sel) in per_row {
            match runs.last_mut() {
                Some((m, last)) if *last == sel => *m += n,
                _ => runs.push((n, sel)),
            }
        }
        if runs
            .iter()
            .all(|(_, sel)| sel.iter().all(|&(_, s)| s == 0.0))
        {
            runs.clear();
        }
        Self {
            loras,
            runs,
            u: Default::default(),
        }
    }

    /// y (T, N) += each row's adapters on matrix `target` of layer `l`, from x (T, K).
    pub fn apply(&self, l: usize, target: Target, x: &[f32], y: &mut [f32]) {
        let mut r0 = 0;
        for &(n, sel) in &self.runs {
            for &(id, scale) in sel {
                let Some(m) = self.loras[id].layers[l][target as usize].as_ref() else {
                    continue;
                };
                if scale == 0.0 {
                    continue;
                }
                let lora = Lora {
                    scale: scale * m.lora.scale,
                    ..m.lora
                };
                let (k, ny) = (lora.n_in, lora.n_out);
                let mut u = self.u.borrow_mut();
                if u.len() < n * lora.rank {
                    u.resize(n * lora.rank, 0.0);
                }
                let x = &x[r0 * k..(r0 + n) * k];
                let y = &mut y[r0 * ny..(r0 + n) * ny];
                lora.forward(x, &m.a, &m.b, &mut u, y, ny, n);
            }
            r0 += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_target, Target};

    #[test]
    fn block_matrix_names_parse_and_others_do_not() {
        assert_eq!(parse_target("blk.3.attn_v.weight"), Some((3, Target::V)));
        assert_eq!(
            parse_target("blk.12.ffn_down.weight"),
            Some((12, Target::Down))
        );
        assert_eq!(parse_target("output.weight"), None);
        assert_eq!(
            parse_target("blk.0.attn_qkv.weight"),
            Some((0, Target::Qkv))
        );
        assert_eq!(parse_target("blk.0.ssm_conv1d.weight"), None);
        assert_eq!(parse_target("blk.x.attn_q.weight"), None);
    }
}
