//! Which type each tensor gets: llama.cpp's file types (`llama_ftype`, include/llama.h) and
//! the per-tensor rules of `llama_tensor_get_type` (src/llama-quant.cpp, llama.cpp 0c1e570).
//!
//! A file type names a default type and a mix: the output head (and a tied embedding) in
//! Q6_K or Q8_0, attention V and FFN down with more bits on some layers (`use_more_bits`:
//! the first and last eighth and every third layer between), and so on per type. Tensors are
//! visited in llama.cpp's order (by block number, then name), since the layer counters of the
//! rules advance in that order. A tensor whose rows are not whole blocks of its type falls
//! back as llama.cpp's `tensor_type_fallback` does. Left out: the rule for the 70B Llama, the
//! IQ1, TQ and MXFP4 file types, and the architecture-specific rules of models toy does not run.

use super::QuantizeError;
use crate::gguf::GgufFile;
use tinynn::quant::GgmlType;

pub use super::file_type::FileType;

/// What the rules read from the model: `llama_hparams` as far as they use it.
#[derive(Clone, Debug)]
pub struct Hparams {
    pub arch: String,
    pub n_layer: usize,
    /// Query heads per KV head (of the first layer), 0 when unknown.
    pub n_gqa: usize,
    pub n_expert: usize,
}

impl Hparams {
    pub fn from_gguf(f: &GgufFile) -> Self {
        let arch = f.architecture().unwrap_or("llama").to_string();
        // a per-layer array (hybrids) gives its first layer, as `n_gqa(0)` does
        let get = |k: &str| {
            let v = f.get(&format!("{arch}.{k}"))?;
            v.as_u64()
                .or_else(|| v.as_array()?.first()?.as_u64())
                .map(|x| x as usize)
        };
        let n_head = get("attention.head_count").unwrap_or(0);
        let n_head_kv = get("attention.head_count_kv").unwrap_or(n_head);
        Self {
            n_layer: get("block_count").unwrap_or(0),
            n_gqa: n_head.checked_div(n_head_kv).unwrap_or(0),
            n_expert: get("expert_count").unwrap_or(0),
            arch,
        }
    }
}

/// The choices of one run of `toy quantize` that decide tensor types.
#[derive(Clone, Debug)]
pub struct MixOptions {
    pub ftype: FileType,
    /// `--output-tensor-type`: the head's type (and a tied embedding's).
    pub output_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// `--leave-output-tensor`: `output.weight` as it is.
    pub leave_output: bool,
    /// `--pure`: the default type everywhere, no mix.
    pub pure: bool,
    pub has_imatrix: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    let has = |s: &str| name.contains(s);
    match name {
        "output.weight" => Output,
        "token_embd.weight" | "per_layer_token_embd.weight" => TokenEmbd,
        _ if has("attn_qkv.weight") => AttnQkv,
        _ if has("attn_kv_b.weight") => AttnKvB,
        _ if has("attn_v.weight") => AttnV,
        _ if has("attn_k.weight") => AttnK,
        _ if has("attn_q.weight") => AttnQ,
        _ if has("attn_output.weight") => AttnOutput,
        _ if has("ffn_up") => FfnUp,
        _ if has("ffn_gate") => FfnGate,
        _ if has("ffn_down") => FfnDown,
        _ => Other,
    }
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// ggml's count of dimensions: trailing ones do not count.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// `tensor_allows_quantization`: matrices named `*weight` but not norms, positional tables,
/// conv taps and the other small tensors llama.cpp keeps as they are.
pub fn allows_quantization(name: &str, dims: &[u64], leave_output: bool) -> bool {
    const KEEP: [&str; 12] = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "attn_rel_b.weight",
        "time_mix_",
        ".position_embd",
        ".patch_embd",
    ];
    n_dims(dims) >= 2
        && name.ends_with("weight")
        && !KEEP.iter().any(|k| name.contains(k))
        && !(leave_output && name == "output.weight")
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

fn is_quantized(t: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(t, F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64)
}

/// `tensor_type_fallback`: a type whose blocks do not divide the rows' `cols`.
pub fn fallback(t: GgmlType, cols: u64) -> GgmlType {
    use GgmlType::*;
    if cols.is_multiple_of(t.block_size() as u64) {
        return t;
    }
    let alt = match t {
        IQ4_XS | IQ3_S | IQ3_XXS | IQ2_S | IQ2_XS | IQ2_XXS | IQ1_S | IQ1_M => IQ4_NL,
        Q2_K | Q3_K => Q4_0,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        other => other,
    };
    if cols.is_multiple_of(alt.block_size() as u64) {
        alt
    } else {
        F16
    }
}

/// `blk.N.` -> N; -1 for tensors outside the blocks (llama.cpp's `weight_name_comparer`).
fn layer_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// Whether llama.cpp refuses to write `t` without an importance matrix
/// (`tensor_requires_imatrix`): the 1- and 2-bit lattice types, IQ3_XXS, and Q2_K in Q2_K_S.
fn requires_imatrix(t: GgmlType, ftype: FileType) -> bool {
    use GgmlType::*;
    matches!(t, IQ3_XXS | IQ2_XXS | IQ2_XS | IQ2_S | IQ1_M | IQ1_S)
        || (t == Q2_K && ftype == FileType::Q2_K_S)
}

/// The target type of every tensor `(name, dims, current type)`, in the order given.
pub fn plan(
    tensors: &[(&str, &[u64], GgmlType)],
    hp: &Hparams,
    o: &MixOptions,
) -> Result<Vec<GgmlType>, QuantizeError> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (na, nb) = (tensors[a].0, tensors[b].0);
        (layer_of(na), na).cmp(&(layer_of(nb), nb))
    });
    let mut rules = Rules {
        hp,
        o,
        tied: !tensors.iter().any(|t| t.0 == "output.weight"),
        n_attention_wv: tensors.iter().filter(|t| is_attn_v(category(t.0))).count(),
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
    };
    let mut out = vec![GgmlType::F32; tensors.len()];
    for i in order {
        let (name, dims, ty) = tensors[i];
        out[i] = rules.target(name, dims, ty);
        if out[i] != ty && !o.has_imatrix && requires_imatrix(out[i], o.ftype) {
            return Err(QuantizeError::NeedsImatrix(format!(
                "{} ({name} in {})",
                o.ftype.name(),
                out[i]
            )));
        }
    }
    Ok(out)
}

struct Rules<'a> {
    hp: &'a Hparams,
    o: &'a MixOptions,
    tied: bool,
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
    i_ffn_gate: usize,
    i_ffn_up: usize,
}

/// `use_more_bits`: the first and last eighth of the layers and every third one between.
fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl Rules<'_> {
    /// `llama_tensor_get_type`.
    fn target(&mut self, name: &str, dims: &[u64], ty: GgmlType) -> GgmlType {
        if !allows_quantization(name, dims, self.o.leave_output) {
            return ty;
        }
        let cat = category(name);
        match (cat, self.o.token_embedding_type, self.o.output_type) {
            (Category::TokenEmbd, Some(t), _) | (Category::Output, _, Some(t)) => return t,
            _ => {}
        }
        let default = self.o.ftype.default_type();
        if !is_quantized(default) {
            return default;
        }
        let t = if self.o.pure {
            default
        } else {
            self.mix(dims[0], cat, default)
        };
        fallback(t, dims[0])
    }

    /// `llama_tensor_get_type_impl` for the file types toy writes.
    fn mix(&mut self, cols: u64, cat: Category, default: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let (ft, hp) = (self.o.ftype, self.hp);
        if cat == Category::Output || (self.tied && cat == Category::TokenEmbd) {
            return match self.o.output_type {
                Some(o) => o,
                None if hp.arch == "falcon"
                    || !cols.is_multiple_of(default.block_size() as u64) =>
                {
                    G::Q8_0
                }
                None if matches!(
                    ft,
                    F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ2_S | F::IQ2_M
                ) =>
                {
                    G::Q5_K
                }
                None if default != G::Q8_0 => G::Q6_K,
                None => default,
            };
        }
        if cat == Category::TokenEmbd {
            return match ft {
                F::IQ2_XXS | F::IQ2_XS => G::Q2_K,
                F::IQ2_S | F::IQ2_M | F::IQ3_XXS => G::IQ3_S,
                _ => default,
            };
        }
        if matches!(ft, F::IQ2_XXS | F::IQ2_XS | F::IQ2_S | F::IQ2_M) {
            return self.mix_low_bits(cat, default);
        }
        match cat {
            c if is_attn_v(c) => self.attn_v(default),
            Category::AttnK | Category::AttnQ => match ft {
                _ if hp.n_expert == 8 && cat == Category::AttnK => G::Q8_0,
                F::IQ3_XS => G::IQ3_XXS,
                F::IQ3_XXS => G::IQ2_S,
                _ => default,
            },
            Category::FfnDown => self.ffn_down(default),
            Category::AttnOutput => self.attn_output(default),
            Category::FfnGate | Category::FfnUp => {
                let i = if cat == Category::FfnGate {
                    &mut self.i_ffn_gate
                } else {
                    &mut self.i_ffn_up
                };
                let (l, n) = (*i, hp.n_layer);
                *i += 1;
                match ft {
                    F::IQ3_XS if l >= n / 8 && l < 7 * n / 8 => G::IQ3_XXS,
                    _ => default,
                }
            }
            _ => default,
        }
    }

    /// The 2-bit file types' rules.
    fn mix_low_bits(&mut self, cat: Category, default: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let (hp, s_or_m) = (self.hp, matches!(self.o.ftype, F::IQ2_S | F::IQ2_M));
        if is_attn_v(cat) {
            self.i_attention_wv += 1;
            return match () {
                _ if hp.n_gqa >= 4 || hp.n_expert >= 4 => G::Q4_K,
                _ if s_or_m => G::IQ3_S,
                _ => G::Q2_K,
            };
        }
        match cat {
            Category::AttnK if hp.n_expert == 8 => G::Q4_K,
            Category::FfnDown => {
                let first = self.i_ffn_down < hp.n_layer / 8;
                self.i_ffn_down += 1;
                match () {
                    _ if first && s_or_m => G::IQ3_S,
                    _ if first => G::Q2_K,
                    _ => default,
                }
            }
            Category::AttnOutput if hp.n_expert == 8 => G::Q5_K,
            Category::AttnOutput if s_or_m => G::IQ3_S,
            _ => default,
        }
    }

    fn attn_v(&mut self, default: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let (hp, i) = (self.hp, self.i_attention_wv);
        let more = use_more_bits(i, self.n_attention_wv);
        self.i_attention_wv += 1;
        let gqa4 = hp.n_gqa >= 4;
        let t = match self.o.ftype {
            F::Q2_K if gqa4 => G::Q4_K,
            F::Q2_K => G::Q3_K,
            F::Q2_K_S if gqa4 => G::Q4_K,
            F::IQ3_XXS if gqa4 => G::Q4_K,
            F::IQ3_XXS if !self.o.has_imatrix => G::IQ3_S,
            F::IQ3_XXS => G::IQ3_XXS,
            F::IQ3_XS | F::IQ3_S if gqa4 => G::Q4_K,
            F::IQ3_M => G::Q4_K,
            F::Q3_K_M if i < 2 => G::Q5_K,
            F::Q3_K_M => G::Q4_K,
            F::Q3_K_L => G::Q5_K,
            F::IQ4_NL | F::IQ4_XS if gqa4 => G::Q5_K,
            F::Q4_K_M | F::Q5_K_M if more => G::Q6_K,
            F::Q4_K_S if i < 4 => G::Q5_K,
            _ => default,
        };
        if hp.n_expert == 8 {
            G::Q8_0
        } else {
            t
        }
    }

    fn ffn_down(&mut self, default: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let (hp, i, n) = (self.hp, self.i_ffn_down, self.hp.n_layer);
        self.i_ffn_down += 1;
        let (falcon, more, imatrix) =
            (hp.arch == "falcon", use_more_bits(i, n), self.o.has_imatrix);
        match self.o.ftype {
            F::Q2_K => G::Q3_K,
            F::Q2_K_S if i < n / 8 => G::Q4_K,
            F::IQ3_XXS if !imatrix && i < n / 8 => G::Q4_K,
            F::IQ3_XXS if !imatrix => G::Q3_K,
            F::Q3_K_M if i < n / 16 => G::Q5_K,
            F::Q3_K_M if !falcon || more => G::Q4_K,
            F::Q3_K_M => G::Q3_K,
            F::IQ3_M if i < n / 8 || (hp.n_expert == 8 && more) => G::Q4_K,
            F::Q3_K_L if falcon => G::Q4_K,
            F::Q3_K_L => G::Q5_K,
            F::Q4_K_M if falcon && i < n / 16 => G::Q6_K,
            F::Q4_K_M if falcon && more => G::Q5_K,
            F::Q4_K_M if falcon => G::Q4_K,
            F::Q4_K_M if more => G::Q6_K,
            F::IQ4_NL | F::IQ4_XS if i < n / 8 && !imatrix => G::Q5_K,
            F::Q5_K_M if more => G::Q6_K,
            F::Q4_K_S if !falcon && i < n / 8 => G::Q5_K,
            F::Q4_0 if imatrix && i < n / 8 => G::Q4_1,
            F::Q5_0 if imatrix && i < n / 8 => G::Q5_1,
            _ => default,
        }
    }

    fn attn_output(&self, default: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as G;
        let ft = self.o.ftype;
        if self.hp.arch == "falcon" {
            return if ft == F::Q3_K_L { G::Q4_K } else { default };
        }
        if self.hp.n_expert == 8 {
            return match ft {
                F::Q2_K
                | F::IQ3_XS
                | F::IQ3_XXS
                | F::Q3_K_S
                | F::Q3_K_M
                | F::IQ4_NL
                | F::Q4_K_S
                | F::Q4_K_M
                | F::IQ3_S
                | F::IQ3_M
                | F::IQ4_XS => G::Q5_K,
                _ => default,
            };
        }
        match ft {
            F::Q2_K => G::Q3_K,
            F::IQ3_XXS => G::IQ3_S,
            F::Q3_K_M | F::IQ3_M => G::Q4_K,
            F::Q3_K_L => G::Q5_K,
            _ => default,
        }
    }
}
