//! A trained ViT read back from its GGUF (`vision::train::save`): the shape from the `vit.*`
//! keys, the class names, the normalisation, and every parameter by name, checked against
//! the shape; errors name the key or tensor that is missing or wrong.

use super::batch::BatchSpec;
use super::vit::{Pool, VitConfig};
use crate::gguf::GgufFile;
use std::path::Path;

pub struct VitCheckpoint {
    pub cfg: VitConfig,
    pub classes: Vec<String>,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub params: Vec<f32>,
}

impl VitCheckpoint {
    pub fn open(path: &Path) -> Result<Self, String> {
        let f = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if f.architecture() != Some("vit") {
            return Err(format!(
                "{}: general.architecture is {:?}, expected \"vit\" (a checkpoint of `toy train` with a [vit] recipe)",
                path.display(),
                f.architecture()
            ));
        }
        let key = |k: &str| {
            f.get_u64(&format!("vit.{k}"))
                .map(|v| v as usize)
                .ok_or_else(|| format!("{}: missing vit.{k}", path.display()))
        };
        let strings = |k: &str| -> Vec<String> {
            f.get(k)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let floats = |k: &str| -> Vec<f32> {
            f.get(k)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_f32()).collect())
                .unwrap_or_default()
        };
        let classes = strings("vit.classes");
        // absent in checkpoints from before pooling was a choice: the CLS row
        let pool = match f.get("vit.pooling").and_then(|v| v.as_str()) {
            None => Pool::Cls,
            Some(s) => Pool::parse(s).ok_or_else(|| {
                format!(
                    "{}: vit.pooling is {s:?}, expected \"cls\" or \"mean\"",
                    path.display()
                )
            })?,
        };
        let cfg = VitConfig {
            image: key("image_size")?,
            patch: key("patch_size")?,
            channels: key("channels")?,
            classes: classes.len(),
            width: key("embedding_length")?,
            depth: key("block_count")?,
            heads: key("attention.head_count")?,
            mlp: key("feed_forward_length")?,
            pool,
        };
        cfg.check()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut params = Vec::with_capacity(cfg.n_params());
        for (name, n) in cfg.layout() {
            let full = format!("vit.{name}");
            let t = f
                .tensor(&full)
                .ok_or_else(|| format!("{}: missing tensor {full}", path.display()))?;
            let data = f.tensor_data(t);
            if t.n_elements() != n as u64 || data.len() != 4 * n {
                return Err(format!(
                    "{}: tensor {full} holds {} values, the shape needs {n}",
                    path.display(),
                    t.n_elements()
                ));
            }
            params.extend(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        let (mean, std) = (floats("vit.norm_mean"), floats("vit.norm_std"));
        if mean.len() != cfg.channels || std.len() != cfg.channels {
            return Err(format!(
                "{}: vit.norm_mean / vit.norm_std need {} values",
                path.display(),
                cfg.channels
            ));
        }
        Ok(Self {
            cfg,
            classes,
            mean,
            std,
            params,
        })
    }

    /// How images are fed to this model (no augmentation).
    pub fn batch_spec(&self) -> BatchSpec {
        BatchSpec {
            size: self.cfg.image,
            channels: self.cfg.channels,
            mean: self.mean.clone(),
            std: self.std.clone(),
            crop_pad: 0,
            flip: false,
        }
    }
}
