//! The request fields chat and completions share: sampling (OpenAI's and llama.cpp's
//! extras), `n`, `stop`, `max_tokens`, `stream`, and the fields this server refuses.

use super::body::{kind, Fields};
use crate::engine::{GenParams, SharedGuide};
use crate::error::ApiError;
use crate::lora::Adapters;
use crate::models::LoadedModel;
use serde_json::Value;
use toy::infer::sampler::SamplerConfig;

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

/// `logit_bias`: {"token id": bias in -100..=100}.
fn logit_bias(f: &Fields, vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = f.object("logit_bias")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map {
        let id: u32 = k
            .trim()
            .parse()
            .ok()
            .filter(|&id: &u32| (id as usize) < vocab)
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("logit_bias key '{k}' is not a token id below {vocab}"),
                )
            })?;
        let b = v
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("logit_bias['{k}'] must be a number from -100 to 100, got {v}"),
                )
            })?;
        out.push((id, b as f32));
    }
    Ok(out)
}

/// Field `key` in lo..=hi, or `default` when absent.
fn or(f: &Fields, key: &str, lo: f32, hi: f32, default: f32) -> Result<f32, ApiError> {
    Ok(f.f32_in(key, lo, hi)?.unwrap_or(default))
}

pub fn sampler(f: &Fields, vocab: usize) -> Result<SamplerConfig, ApiError> {
    let d = SamplerConfig::default();
    let seed = match f.int_in("seed", i64::MIN, i64::MAX)? {
        Some(s) => s as u64,
        None => toy::infer::sampler::fresh_seed(),
    };
    Ok(SamplerConfig {
        temperature: f.f32_in("temperature", 0.0, 2.0)?.unwrap_or(d.temperature),
        top_p: f.f32_in("top_p", 0.0, 1.0)?.unwrap_or(d.top_p),
        top_k: f
            .int_in("top_k", 0, vocab as i64)?
            .unwrap_or(d.top_k as i64) as usize,
        min_p: f.f32_in("min_p", 0.0, 1.0)?.unwrap_or(d.min_p),
        repeat_penalty: f
            .f32_in("repeat_penalty", 0.0, 10.0)?
            .unwrap_or(d.repeat_penalty),
        presence_penalty: f
            .f32_in("presence_penalty", -2.0, 2.0)?
            .unwrap_or(d.presence_penalty),
        frequency_penalty: f
            .f32_in("frequency_penalty", -2.0, 2.0)?
            .unwrap_or(d.frequency_penalty),
        penalty_last_n: f
            .int_in("repeat_last_n", 0, 1 << 20)?
            .unwrap_or(d.penalty_last_n as i64) as usize,
        logit_bias: logit_bias(f, vocab)?,
        seed,
        // llama-server's names for the samplers beyond top-k/top-p/min-p
        top_n_sigma: or(f, "top_n_sigma", -1.0, 100.0, d.top_n_sigma)?,
        typical_p: or(f, "typical_p", 0.0, 1.0, d.typical_p)?,
        xtc_probability: or(f, "xtc_probability", 0.0, 1.0, d.xtc_probability)?,
        xtc_threshold: or(f, "xtc_threshold", 0.0, 1.0, d.xtc_threshold)?,
        dynatemp_range: or(f, "dynatemp_range", 0.0, 5.0, d.dynatemp_range)?,
        dynatemp_exponent: or(f, "dynatemp_exponent", 0.0, 10.0, d.dynatemp_exponent)?,
        mirostat: f.int_in("mirostat", 0, 2)?.map_or(d.mirostat, |m| m as u8),
        mirostat_tau: or(f, "mirostat_tau", 0.0, 100.0, d.mirostat_tau)?,
        mirostat_eta: or(f, "mirostat_eta", 0.0, 10.0, d.mirostat_eta)?,
    })
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
        sampler: sampler(f, m.model.cfg.vocab)?,
        logprobs,
        prompt_logprobs,
        lora: loras.for_request(f.get("lora"))?,
        guide,
    })
}
