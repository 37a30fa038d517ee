//! LoRA adapters served unmerged, as llama-server's `--lora FILE[:SCALE]`: ids 0.. in the
//! order given, each with a default scale that `POST /lora-adapters` changes; a request's
//! `"lora": [{"id": 0, "scale": 0.5}]` replaces the defaults for that request. As in
//! llama-server, a list (request or POST) sets the scale of the adapters it names and turns
//! the others off. Every served model runs every adapter, so each is checked against each
//! model at startup. The product is per sequence (`Model::forward_multi_lora`): requests
//! with different adapters still decode in one batch.

use crate::error::{ApiError, ServeError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use toy::finetune::adapter::LoraAdapter;
use toy::gguf::GgufFile;

/// Most adapters named in one list.
const MAX_LIST: usize = 64;

pub struct Adapter {
    pub path: PathBuf,
    pub adapter: Arc<LoraAdapter>,
}

/// The `--lora` adapters and their current default scales.
#[derive(Default)]
pub struct Adapters {
    pub list: Vec<Adapter>,
    scales: Mutex<Vec<f32>>,
}

impl Adapters {
    /// Read each `(file, default scale)` and check it fits every model of `models`.
    pub fn load(specs: &[(PathBuf, f32)], models: &[&Path]) -> Result<Self, ServeError> {
        let mut list = Vec::new();
        for (path, _) in specs {
            let err =
                |msg: String| ServeError::Lora(format!("lora adapter '{}': {msg}", path.display()));
            let adapter = LoraAdapter::read(path).map_err(|e| err(e.to_string()))?;
            for m in models {
                let f = GgufFile::open(m)
                    .map_err(|e| err(format!("opening model '{}': {e}", m.display())))?;
                toy::model::lora::check(&adapter, &f)
                    .map_err(|e| err(format!("does not fit model '{}': {e}", m.display())))?;
            }
            list.push(Adapter {
                path: path.clone(),
                adapter: Arc::new(adapter),
            });
        }
        Ok(Self {
            list,
            scales: Mutex::new(specs.iter().map(|(_, s)| *s).collect()),
        })
    }

    fn scales(&self) -> Vec<f32> {
        self.scales.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The defaults as the engine takes them: (id, scale) of the adapters that are on.
    pub fn defaults(&self) -> Vec<(usize, f32)> {
        picks(&self.scales())
    }

    /// The adapters of a request: its `lora` list, or the defaults without one.
    pub fn for_request(&self, v: Option<&Value>) -> Result<Vec<(usize, f32)>, ApiError> {
        match v {
            None | Some(Value::Null) => Ok(self.defaults()),
            Some(v) => Ok(picks(&self.parse(v, "lora")?)),
        }
    }

    /// `[{"id": 0, "scale": 0.5}, ...]` -> a scale for every adapter (0 where not named).
    pub fn parse(&self, v: &Value, param: &str) -> Result<Vec<f32>, ApiError> {
        let bad = |msg: String| ApiError::invalid(param, msg);
        let items = v
            .as_array()
            .filter(|a| a.len() <= MAX_LIST)
            .ok_or_else(|| {
                bad(format!(
                    "'{param}' must be a list of at most {MAX_LIST} {{\"id\": N, \"scale\": S}}"
                ))
            })?;
        let n = self.list.len();
        let mut scales = vec![0.0; n];
        for (i, it) in items.iter().enumerate() {
            let id = it
                .get("id")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("'{param}[{i}].id' must be a non-negative integer")))?;
            let scale = it
                .get("scale")
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite())
                .ok_or_else(|| bad(format!("'{param}[{i}].scale' must be a number")))?;
            if id >= n as u64 {
                return Err(bad(format!(
                    "lora adapter id {id} does not exist: the server has {n} (ids 0..{n}); see GET /lora-adapters"
                ))
                .code("lora_not_found"));
            }
            scales[id as usize] = scale as f32;
        }
        Ok(scales)
    }

    /// Set the default scales (`POST /lora-adapters`).
    pub fn set(&self, scales: Vec<f32>) {
        if let Ok(mut s) = self.scales.lock() {
            *s = scales;
        }
    }

    /// `GET /lora-adapters`: llama-server's `[{"id", "path", "scale"}]`.
    pub fn json(&self) -> Value {
        let scales = self.scales();
        let items: Vec<Value> = self
            .list
            .iter()
            .zip(scales)
            .enumerate()
            .map(|(id, (a, scale))| json!({"id": id, "path": a.path.display().to_string(), "scale": scale}))
            .collect();
        Value::Array(items)
    }
}

/// (id, scale) of the adapters with a nonzero scale: scale 0 runs the plain base, so such
/// a request shares cached prefixes with requests without adapters.
fn picks(scales: &[f32]) -> Vec<(usize, f32)> {
    scales
        .iter()
        .enumerate()
        .filter(|(_, &s)| s != 0.0)
        .map(|(i, &s)| (i, s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::picks;

    #[test]
    fn adapters_at_scale_zero_are_left_out() {
        assert_eq!(picks(&[0.0, 0.5, 0.0, -1.0]), [(1, 0.5), (3, -1.0)]);
    }
}
