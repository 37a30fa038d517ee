//! Hyperparameters of a model, read from the standard GGUF keys (`{arch}.block_count`,
//! `{arch}.embedding_length`, ... as llama.cpp's `llama-arch.cpp` names them).

use super::hybrid_config::{gdn_shape, layer_kinds, LayerKind};
use super::kv_cache::CacheKind;
use super::tensors::{block_tensors, products, BlockShape, BlockTable, Part, Tensor};
use super::ModelError;
use crate::gguf::GgufFile;
use tinynn::layers::gdn::GdnShape;

/// The families this build runs and trains: one enum for inference, training, recipes and
/// checkpoints (serialized by its GGUF name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama, SmolLM2: RMSNorm, RoPE (normal), GQA, SwiGLU.
    Llama,
    /// Qwen2: Llama with q/k/v bias and neox RoPE.
    Qwen2,
    /// Qwen3: Llama with q/k RMSNorm and neox RoPE.
    Qwen3,
    /// GPT-2: LayerNorm, learned positions, fused qkv with bias, GELU.
    Gpt2,
    /// Qwen3.5: Gated DeltaNet layers beside gated attention layers (3:1), q/k RMSNorm,
    /// partial neox RoPE, `post_attention_norm` before the MLP.
    Qwen35,
    /// Gemma 3: embeddings scaled by sqrt(C), RMSNorm before and after attention and the MLP,
    /// q/k RMSNorm, neox RoPE, GELU-gated MLP, sliding-window attention on 5 layers of 6.
    Gemma3,
}

pub const KNOWN_ARCHS: &str = "llama, qwen2, qwen3, qwen35, gemma3, gpt2";

impl Arch {
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gpt2" => Arch::Gpt2,
            "qwen35" => Arch::Qwen35,
            "gemma3" => Arch::Gemma3,
            _ => {
                return Err(ModelError::UnsupportedArch {
                    arch: name.into(),
                    known: KNOWN_ARCHS,
                })
            }
        })
    }

    /// Whether RoPE turns halves (x[i], x[i + R/2]) rather than adjacent pairs.
    pub fn rope_neox(self) -> bool {
        matches!(
            self,
            Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen35 | Arch::Gemma3
        )
    }

    /// Whether attention's q, k and v products carry biases (Qwen2; GPT-2's fused qkv has
    /// its own, with every other product's).
    pub fn qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    /// Whether each query and key head is RMS-normalised before RoPE (Qwen3, Qwen3.5, Gemma 3).
    pub fn qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Qwen35 | Arch::Gemma3)
    }

    /// LayerNorm with biases, learned positions, GELU (GPT-2); else RMSNorm, RoPE, SwiGLU.
    pub fn is_gpt2(self) -> bool {
        self == Arch::Gpt2
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gpt2 => "gpt2",
            Arch::Qwen35 => "qwen35",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// Shapes and constants of a model: the one config of each family, filled from a GGUF's
/// keys here or from a recipe's `[model]` (`train::ModelConfig`, which wraps it), and read
/// by inference and training alike.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub n_layer: usize,
    /// Model width C.
    pub d_model: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    /// Head size D.
    pub head_dim: usize,
    /// Hidden width of the MLP.
    pub d_ff: usize,
    pub vocab: usize,
    /// Context length the model was trained for.
    pub ctx_train: usize,
    pub norm_eps: f32,
    pub rope_base: f32,
    /// Dims of each head that RoPE turns.
    pub rope_dim: usize,
    pub rope_neox: bool,
    /// What each layer is: all attention but for hybrids.
    pub kinds: Vec<LayerKind>,
    /// The shape of the GDN layers, for hybrids.
    pub gdn: Option<GdnShape>,
    /// The head is the token embedding (the file has no `output.weight`).
    pub tied: bool,
    /// llama3 RoPE scaling: a divisor per rotated pair (`rope_freqs.weight`).
    pub rope_freqs: Option<Vec<f32>>,
    /// Token embeddings are scaled by this as they enter (Gemma: sqrt(C)).
    pub embd_scale: Option<f32>,
    /// Sliding-window attention (Gemma 3), where the model has it.
    pub swa: Option<Swa>,
}

/// Sliding-window attention: which layers attend to the last `window` positions only, and
/// the RoPE base those layers turn by (the others use `rope_base`), as llama.cpp's
/// `LLAMA_SWA_TYPE_STANDARD`: query p sees key p0 when p - p0 < window.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Swa {
    pub window: usize,
    pub layers: Vec<bool>,
    pub rope_base: f32,
}

/// Gemma 3's sliding window from `{arch}.attention.sliding_window`: every layer but each
/// `sliding_window_pattern`-th (6 by default) is local.
fn swa(f: &GgufFile, name: &str, n_layer: usize) -> Option<Swa> {
    let k = |s: &str| format!("{name}.{s}");
    let window = f
        .get_u64(&k("attention.sliding_window"))
        .filter(|&w| w > 0)? as usize;
    let layers = match f.get(&k("attention.sliding_window_pattern")) {
        Some(v) if v.as_array().is_some() => {
            let a = v.as_array().unwrap_or_default();
            (0..n_layer)
                .map(|l| a.get(l).and_then(|x| x.as_bool()).unwrap_or(false))
                .collect()
        }
        v => {
            let n = v.and_then(|v| v.as_u64()).unwrap_or(6) as usize;
            (0..n_layer).map(|l| n == 0 || l % n < n - 1).collect()
        }
    };
    let rope_base = f.get_f32(&k("rope.freq_base_swa")).unwrap_or(10000.0);
    Some(Swa {
        window,
        layers,
        rope_base,
    })
}

/// `rope_freqs.weight` (R / 2) as f32, where the file has it.
fn rope_freqs(f: &GgufFile, rope_dim: usize) -> Result<Option<Vec<f32>>, ModelError> {
    let name = "rope_freqs.weight";
    let Some(t) = f.tensor(name) else {
        return Ok(None);
    };
    let len = rope_dim / 2;
    let n: u64 = t.dims.iter().product();
    if n != len as u64 {
        return Err(ModelError::BadShape {
            name: name.into(),
            expected: vec![len as u64],
            got: t.dims.clone(),
        });
    }
    let q = tinynn::kernels::QMat::new(t.ty, 1, len, f.tensor_data(t)).map_err(|e| {
        ModelError::BadKey {
            key: name.into(),
            why: e.to_string(),
        }
    })?;
    let mut out = vec![0f32; len];
    q.dequantize_row(0, &mut out);
    Ok(Some(out))
}

fn req(f: &GgufFile, key: &str) -> Result<usize, ModelError> {
    let v = f
        .get_u64(key)
        .ok_or_else(|| ModelError::MissingKey(key.into()))?;
    if v == 0 || v > (1 << 24) {
        return Err(ModelError::BadKey {
            key: key.into(),
            why: format!("{v} is out of range 1..=16777216"),
        });
    }
    Ok(v as usize)
}

impl Config {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, ModelError> {
        let name = f
            .architecture()
            .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?;
        let arch = Arch::from_name(name)?;
        let k = |s: &str| format!("{name}.{s}");
        let d_model = req(f, &k("embedding_length"))?;
        let n_head = req(f, &k("attention.head_count"))?;
        let n_kv_head = match f.get_u64(&k("attention.head_count_kv")) {
            Some(_) => req(f, &k("attention.head_count_kv"))?,
            None => n_head,
        };
        if n_head % n_kv_head != 0 {
            return Err(ModelError::BadKey {
                key: k("attention.head_count_kv"),
                why: format!("{n_kv_head} does not divide head_count {n_head}"),
            });
        }
        let head_dim = match f.get_u64(&k("attention.key_length")) {
            Some(_) => req(f, &k("attention.key_length"))?,
            None if d_model % n_head == 0 => d_model / n_head,
            None => {
                return Err(ModelError::BadKey {
                    key: k("attention.head_count"),
                    why: format!("{n_head} heads do not divide width {d_model}"),
                })
            }
        };
        let vocab = match f.get_u64(&k("vocab_size")) {
            Some(_) => req(f, &k("vocab_size"))?,
            None => f
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map(|a| a.len())
                .ok_or_else(|| ModelError::MissingKey(k("vocab_size")))?,
        };
        let eps_key = if arch == Arch::Gpt2 {
            "attention.layer_norm_epsilon"
        } else {
            "attention.layer_norm_rms_epsilon"
        };
        let rope_dim = f
            .get_u64(&k("rope.dimension_count"))
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        if rope_dim > head_dim || !rope_dim.is_multiple_of(2) {
            return Err(ModelError::BadKey {
                key: k("rope.dimension_count"),
                why: format!("{rope_dim} must be even and at most the head size {head_dim}"),
            });
        }
        // Qwen3.5 may carry multi-token-prediction blocks after the trunk; they are not run
        let n_layer = req(f, &k("block_count"))?
            .saturating_sub(f.get_u64(&k("nextn_predict_layers")).unwrap_or(0) as usize);
        if n_layer == 0 {
            return Err(ModelError::BadKey {
                key: k("nextn_predict_layers"),
                why: "leaves no trunk layers".into(),
            });
        }
        let norm_eps = f.get_f32(&k(eps_key)).unwrap_or(1e-5);
        let (kinds, gdn) = if arch == Arch::Qwen35 {
            (
                layer_kinds(f, name, n_layer)?,
                Some(gdn_shape(f, name, norm_eps)?),
            )
        } else {
            (vec![LayerKind::Attention; n_layer], None)
        };
        Ok(Config {
            arch,
            n_layer,
            d_model,
            n_head,
            n_kv_head,
            head_dim,
            d_ff: req(f, &k("feed_forward_length"))?,
            vocab,
            ctx_train: req(f, &k("context_length"))?,
            norm_eps,
            rope_base: f.get_f32(&k("rope.freq_base")).unwrap_or(10000.0),
            rope_dim,
            // Qwen3.5's interleaved M-RoPE turns every section by the same text position:
            // neox rotation over the first rope_dim dims
            rope_neox: arch.rope_neox(),
            kinds,
            gdn,
            tied: f.tensor("output.weight").is_none(),
            rope_freqs: rope_freqs(f, rope_dim)?,
            embd_scale: (arch == Arch::Gemma3).then(|| (d_model as f32).sqrt()),
            swa: (arch == Arch::Gemma3)
                .then(|| swa(f, name, n_layer))
                .flatten(),
        })
    }

    /// Width of the concatenated query heads, H * D.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the concatenated key (or value) heads, Hkv * D.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    /// Per layer, the GDN shape of a recurrent layer or `None` for attention (what a
    /// sequence's cache holds).
    pub fn cache_layers(&self) -> Vec<CacheKind> {
        let window = |l: usize| self.swa.as_ref().filter(|w| w.layers[l]).map(|w| w.window);
        self.kinds
            .iter()
            .enumerate()
            .map(|(l, k)| match (k, self.gdn, window(l)) {
                (LayerKind::Gdn, Some(g), _) => CacheKind::Recurrent(g),
                (_, _, Some(w)) => CacheKind::Window(w),
                _ => CacheKind::Attention,
            })
            .collect()
    }

    /// The shape the block table reads (`model::tensors`).
    pub fn block_shape(&self) -> BlockShape {
        BlockShape {
            c: self.d_model,
            f: self.d_ff,
            h: self.n_head,
            hkv: self.n_kv_head,
            d: self.head_dim,
            gdn: self.gdn,
        }
    }

    /// Block `l`'s tensors as its family's table lists them (`model::tensors`).
    pub fn block_table(&self, l: usize) -> BlockTable {
        BlockTable::new(self.arch, self.kinds[l], &self.block_shape(), l)
    }

    /// Block `l`'s tensors, in the order the block runs them (`tensors::block_tensors`).
    pub fn block_tensors(&self, l: usize) -> Vec<Tensor> {
        block_tensors(self.arch, self.kinds[l], &self.block_shape())
    }

    /// Block `l`'s products, each its parts (`tensors::products`).
    pub fn products(&self, l: usize) -> Vec<Vec<Part>> {
        products(self.arch, self.kinds[l], &self.block_shape())
    }

    /// Whether any layer is recurrent.
    pub fn is_hybrid(&self) -> bool {
        self.kinds.contains(&LayerKind::Gdn)
    }
}
