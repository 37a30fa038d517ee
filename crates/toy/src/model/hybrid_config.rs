//! The per-layer choice of a hybrid stack and the Gated DeltaNet shape, from llama.cpp's
//! `qwen35` keys (`src/models/qwen35.cpp`, `load_arch_hparams`): `{arch}.ssm.conv_kernel`,
//! `ssm.inner_size` (Hv * Dv), `ssm.state_size` (Dk), `ssm.time_step_rank` (Hv),
//! `ssm.group_count` (Hk); a layer is recurrent as `{arch}.attention.recurrent_layers` says
//! (one bool per layer), or else unless `(l + 1) % {arch}.full_attention_interval == 0`
//! (default interval 4: layers 3, 7, ... attend).

use super::ModelError;
use crate::gguf::GgufFile;
use serde::{Deserialize, Serialize};
use tinynn::layers::gdn::GdnShape;

/// What mixes the tokens in a layer: the one layer-kind enum of inference, training, recipes
/// (`"attn"`, `"gdn"`) and checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayerKind {
    /// Softmax attention over a KV cache.
    #[serde(rename = "attn")]
    Attention,
    /// A Gated DeltaNet layer with a fixed-size recurrent state.
    #[serde(rename = "gdn")]
    Gdn,
}

impl LayerKind {
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Attention => "attn",
            LayerKind::Gdn => "gdn",
        }
    }
}

fn key(f: &GgufFile, k: &str) -> Result<usize, ModelError> {
    let v = f
        .get_u64(k)
        .ok_or_else(|| ModelError::MissingKey(k.into()))?;
    if v == 0 || v > (1 << 20) {
        return Err(ModelError::BadKey {
            key: k.into(),
            why: format!("{v} is out of range 1..=1048576"),
        });
    }
    Ok(v as usize)
}

/// The GDN shape of a `{arch}` file, checked: value heads a multiple of key heads, the
/// inner size a multiple of the value heads.
pub fn gdn_shape(f: &GgufFile, arch: &str, eps: f32) -> Result<GdnShape, ModelError> {
    let k = |s: &str| format!("{arch}.ssm.{s}");
    let kernel = key(f, &k("conv_kernel"))?;
    let inner = key(f, &k("inner_size"))?;
    let dk = key(f, &k("state_size"))?;
    let hv = key(f, &k("time_step_rank"))?;
    let hk = key(f, &k("group_count"))?;
    if !hv.is_multiple_of(hk) {
        return Err(ModelError::BadKey {
            key: k("group_count"),
            why: format!("{hk} key heads do not divide time_step_rank = {hv} value heads"),
        });
    }
    if !inner.is_multiple_of(hv) {
        return Err(ModelError::BadKey {
            key: k("inner_size"),
            why: format!("{inner} is not a multiple of time_step_rank = {hv} value heads"),
        });
    }
    Ok(GdnShape::new(hk, hv, dk, inner / hv, kernel, eps))
}

/// Each of the `n_layer` layers' kind.
pub fn layer_kinds(f: &GgufFile, arch: &str, n_layer: usize) -> Result<Vec<LayerKind>, ModelError> {
    let rk = format!("{arch}.attention.recurrent_layers");
    if let Some(v) = f.get(&rk) {
        let a = v.as_array().ok_or_else(|| ModelError::BadKey {
            key: rk.clone(),
            why: "expected an array of one bool per layer".into(),
        })?;
        if a.len() < n_layer {
            return Err(ModelError::BadKey {
                key: rk,
                why: format!("{} entries for {n_layer} layers", a.len()),
            });
        }
        return a[..n_layer]
            .iter()
            .enumerate()
            .map(|(l, x)| {
                let r = x.as_bool().or_else(|| x.as_u64().map(|n| n != 0));
                match r {
                    Some(true) => Ok(LayerKind::Gdn),
                    Some(false) => Ok(LayerKind::Attention),
                    None => Err(ModelError::BadKey {
                        key: rk.clone(),
                        why: format!("entry {l} is not a bool"),
                    }),
                }
            })
            .collect();
    }
    let ik = format!("{arch}.full_attention_interval");
    let every = match f.get_u64(&ik) {
        Some(_) => key(f, &ik)?,
        None => 4,
    };
    Ok((0..n_layer)
        .map(|l| {
            if (l + 1).is_multiple_of(every) {
                LayerKind::Attention
            } else {
                LayerKind::Gdn
            }
        })
        .collect())
}
