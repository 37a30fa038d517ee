//! `POST /v1/embeddings`: the mean of the model's final (normed) hidden states over the
//! input's tokens, L2-normalised; as JSON floats or, with `encoding_format: "base64"`, the
//! little-endian f32 bytes in base64 (what the `openai` client asks for by default).

use super::body::{kind, JsonBody};
use crate::engine::{EmbedJob, Job};
use crate::error::ApiError;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::oneshot;

const MAX_INPUTS: usize = 256;

pub async fn embeddings(
    State(state): State<AppState>,
    JsonBody(f): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let started = std::time::Instant::now();
    let base64 = match f.str("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("'encoding_format' is '{other}'; expected 'float' or 'base64'"),
            ))
        }
    };
    let model = state.model(&f).await?;
    let d = model.model.cfg.d_model;
    if let Some(dims) = f.int_in("dimensions", 1, i64::MAX)? {
        if dims as usize != d {
            return Err(ApiError::unsupported(
                "dimensions",
                &format!("embeddings have the model's width, {d}"),
            ));
        }
    }
    let encode = |s: &str| {
        model
            .tok
            .encode(s, true)
            .map_err(|e| ApiError::invalid("input", e.to_string()))
    };
    let ids_of = |a: &[Value], at: &str| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| {
                        ApiError::invalid("input", format!("'{at}' holds {v}, not a token id"))
                    })
            })
            .collect()
    };
    let inputs: Vec<Vec<u32>> = match f.get("input") {
        None => return Err(ApiError::invalid("input", "'input' is required")),
        Some(Value::String(s)) => vec![encode(s)?],
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid("input", "'input' must not be empty"))
        }
        Some(Value::Array(a)) if a[0].is_number() => vec![ids_of(a, "input")?],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => encode(s),
                Value::Array(ids) => ids_of(ids, &format!("input[{i}]")),
                v => Err(ApiError::invalid(
                    "input",
                    format!(
                        "'input[{i}]' must be a string or a list of token ids, got {}",
                        kind(v)
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::invalid(
                "input",
                format!("'input' must be a string or an array, got {}", kind(v)),
            ))
        }
    };
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            "input",
            format!(
                "{} inputs in one request; at most {MAX_INPUTS}",
                inputs.len()
            ),
        ));
    }
    let vocab = model.model.cfg.vocab;
    for (i, ids) in inputs.iter().enumerate() {
        if ids.is_empty() {
            return Err(ApiError::invalid("input", format!("input {i} is empty")));
        }
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::invalid(
                "input",
                format!("token id {bad} is out of range: the vocabulary has {vocab} tokens"),
            ));
        }
        if ids.len() > model.ctx {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "input {i} has {} tokens but the context holds {}",
                    ids.len(),
                    model.ctx
                ),
            )
            .code("context_length_exceeded"));
        }
    }
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let (tx, rx) = oneshot::channel();
    let job = EmbedJob {
        model: model.clone(),
        inputs,
        reply: tx,
    };
    state
        .engine
        .submit(Job::Embed(job))
        .map_err(|e| e.api_error(state.cfg.queue))?;
    let vectors = rx
        .await
        .map_err(|_| ApiError::internal("the engine dropped the request"))?
        .map_err(ApiError::internal)?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    state.telemetry.write(json!({
        "type": "request", "route": "/v1/embeddings", "model": model.id,
        "prompt_tokens": tokens, "completion_tokens": 0, "cached_tokens": 0,
        "ttft_ms": null, "total_ms": (ms * 100.0).round() / 100.0, "status": 200, "stream": false,
    }));
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model.id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
