//! The request fields chat and completions share: sampling (OpenAI's and llama.cpp's
//! extras), `n`, `stop`, `max_tokens`, `stream`, and the fields this server refuses.

use super::body::{kind, Fields};
use crate::engine::{GenParams, SharedGuide};
use crate::error::ApiError;
use crate::lora::Adapters;
use crate::models::LoadedModel;
use serde_json::Value;

/// Most choices per request.
pub const MAX_N: i64 = 16;
/// Most stop strings.
pub const MAX_STOP: usize = 16;

/// Fields that change what a model must produce and that this server cannot honour: they
/// get a 400 naming them rather than being silently ignored.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("functions", "no function calling"),
    ("function_call", "no function calling"),
    ("audio", "text only"),
    ("prediction", "no predicted outputs"),
    ("web_search_options", "no web search"),
    ("suffix", "no fill-in-the-middle"),
];

pub fn reject_unsupported(f: &Fields) -> Result<(), ApiError> {
    for (key, why) in UNSUPPORTED {
        if f.has(key) {
            return Err(ApiError::unsupported(key, why));
        }
    }
    if let Some(m) = f.get("modalities") {
        let text_only = m
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.as_str() == Some("text")));
        if !text_only {
            return Err(ApiError::unsupported("modalities", "text only"));
        }
    }
    Ok(())
}

/// `max_completion_tokens` (the newer name) or `max_tokens`; `None` when neither is given.
pub fn max_tokens(f: &Fields) -> Result<Option<usize>, ApiError> {
    let new = f.int_in("max_completion_tokens", 0, i32::MAX as i64)?;
    let old = f.int_in("max_tokens", 0, i32::MAX as i64)?;
    Ok(new.or(old).map(|n| n as usize))
}

/// `stream` and `stream_options.include_usage`.
pub fn stream(f: &Fields) -> Result<(bool, bool), ApiError> {
    let stream = f.bool("stream")?.unwrap_or(false);
    let Some(opts) = f.object("stream_options")? else {
        return Ok((stream, false));
    };
    if !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "'stream_options' is only allowed when 'stream' is true",
        ));
    }
    let usage = match opts.get("include_usage") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options.include_usage",
                format!(
                    "'stream_options.include_usage' must be a boolean, got {}",
                    kind(v)
                ),
            ))
        }
    };
    Ok((stream, usage))
}

pub fn n(f: &Fields) -> Result<usize, ApiError> {
    Ok(f.int_in("n", 1, MAX_N)?.unwrap_or(1) as usize)
}

/// The checks every prompt passes before it is queued: not empty, ids in the vocabulary,
/// and room in the context for it and at least one generated token.
pub fn check_prompt(m: &LoadedModel, ids: &[u32], param: &str) -> Result<(), ApiError> {
    if ids.is_empty() {
        return Err(ApiError::invalid(param, format!("'{param}' is empty")));
    }
    let vocab = m.model.cfg.vocab;
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid(
            param,
            format!("token id {bad} is out of range: the vocabulary has {vocab} tokens"),
        ));
    }
    if ids.len() >= m.ctx {
        return Err(ApiError::invalid(
            param,
            format!(
                "the prompt has {} tokens but the context holds {} (and the reply needs at least one)",
                ids.len(),
                m.ctx
            ),
        )
        .code("context_length_exceeded"));
    }
    Ok(())
}

/// Everything the engine needs besides the prompts; `loras` resolves the `lora` field.
pub fn gen_params(
    f: &Fields,
    m: &LoadedModel,
    loras: &Adapters,
    default_max: Option<usize>,
    logprobs: Option<usize>,
    prompt_logprobs: bool,
    guide: Option<SharedGuide>,
) -> Result<GenParams, ApiError> {
    Ok(GenParams {
        max_tokens: max_tokens(f)?.or(default_max).unwrap_or(usize::MAX),
        stop: f.strings("stop", MAX_STOP)?,
        sampler: super::sampling::sampler(f, m)?,
        logprobs,
        prompt_logprobs,
        lora: loras.for_request(f.get("lora"))?,
        guide,
    })
}
