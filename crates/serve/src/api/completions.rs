//! `POST /v1/completions`: the legacy text completion. `prompt` is a string, a list of
//! strings, a list of token ids, or a list of such lists (one result per prompt and choice,
//! index = prompt * n + choice); `echo` puts the prompt before the text; `logprobs: N` gives
//! the legacy logprobs (with `echo`, the prompt's tokens too, the first without a logprob).

use super::body::{kind, Fields, JsonBody};
use super::format::Format;
use super::gen::{self, GenRequest};
use super::{constraint, params};
use crate::error::ApiError;
use crate::models::LoadedModel;
use crate::AppState;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// OpenAI's default for completions.
const DEFAULT_MAX_TOKENS: usize = 16;
/// Most prompts in one request.
const MAX_PROMPTS: usize = 64;

fn token_ids(a: &[Value], at: &str) -> Result<Vec<u32>, ApiError> {
    a.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| {
                    ApiError::invalid("prompt", format!("'{at}[{i}]' must be a token id, got {v}"))
                })
        })
        .collect()
}

/// The prompts as token ids, with their text (for `echo`).
pub fn prompts(f: &Fields, m: &LoadedModel) -> Result<Vec<(Vec<u32>, String)>, ApiError> {
    let encode = |s: &str| {
        m.tok
            .encode(s, true)
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))
    };
    let out = match f.get("prompt") {
        None => return Err(ApiError::invalid("prompt", "'prompt' is required")),
        Some(Value::String(s)) => vec![(encode(s)?, s.clone())],
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid("prompt", "'prompt' must not be empty"))
        }
        Some(Value::Array(a)) => match &a[0] {
            Value::Number(_) => {
                let ids = token_ids(a, "prompt")?;
                vec![(ids.clone(), m.tok.decode(&ids))]
            }
            Value::String(_) | Value::Array(_) => {
                if a.len() > MAX_PROMPTS {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!("{} prompts in one request; at most {MAX_PROMPTS}", a.len()),
                    ));
                }
                let mut out = Vec::with_capacity(a.len());
                for (i, p) in a.iter().enumerate() {
                    out.push(match p {
                        Value::String(s) => (encode(s)?, s.clone()),
                        Value::Array(ids) => {
                            let ids = token_ids(ids, &format!("prompt[{i}]"))?;
                            let text = m.tok.decode(&ids);
                            (ids, text)
                        }
                        v => {
                            return Err(ApiError::invalid(
                                "prompt",
                                format!(
                                    "'prompt[{i}]' must be a string or a list of token ids, got {}",
                                    kind(v)
                                ),
                            ))
                        }
                    });
                }
                out
            }
            v => {
                return Err(ApiError::invalid(
                    "prompt",
                    format!(
                        "'prompt[0]' must be a string, a token id or a list of token ids, got {}",
                        kind(v)
                    ),
                ))
            }
        },
        Some(v) => {
            return Err(ApiError::invalid(
                "prompt",
                format!("'prompt' must be a string or an array, got {}", kind(v)),
            ))
        }
    };
    for (ids, _) in &out {
        params::check_prompt(m, ids, "prompt")?;
    }
    Ok(out)
}

pub async fn completions(
    State(state): State<AppState>,
    JsonBody(f): JsonBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    params::reject_unsupported(&f)?;
    let (stream, include_usage) = params::stream(&f)?;
    let n = params::n(&f)?;
    if let Some(b) = f.int_in("best_of", 1, params::MAX_N)? {
        if b as usize != n {
            return Err(ApiError::unsupported("best_of", "only best_of = n"));
        }
    }
    let echo = f.bool("echo")?.unwrap_or(false);
    let logprobs = f
        .int_in("logprobs", 0, super::chat::MAX_TOP_LOGPROBS)?
        .map(|x| x as usize);
    let constraint = constraint::requested(&f)?;
    let model = state.model(&f).await?;
    let ps = prompts(&f, &model)?;
    let guide = constraint
        .map(|(c, param)| constraint::compile(&model, &c, param))
        .transpose()?;
    let gp = params::gen_params(
        &f,
        &model,
        &state.registry.loras,
        Some(DEFAULT_MAX_TOKENS),
        logprobs,
        echo && logprobs.is_some(),
        guide,
    )?;
    let logged = state.telemetry.log_prompts.then(|| f.0["prompt"].clone());
    let (ids, texts): (Vec<_>, Vec<_>) = ps.into_iter().unzip();
    let req = GenRequest {
        format: Format::Completion,
        model: model.clone(),
        prompts: ids.into_iter().map(Arc::new).collect(),
        n,
        params: gp,
        stream,
        include_usage,
        echo: echo.then_some(texts),
        logged_prompt: logged,
        started,
        tools: None,
    };
    gen::run(&state, req, "/v1/completions").await
}
