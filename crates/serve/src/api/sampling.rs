//! The sampling fields of chat and completions: OpenAI's (`temperature`, `top_p`, penalties,
//! `logit_bias`, `seed`) and llama-server's (tools/server/server-schema.cpp of llama.cpp
//! 0c1e570: `top_k`, `min_p`, `repeat_penalty`, `repeat_last_n`, `top_n_sigma`, `typical_p`,
//! XTC, dynamic temperature, mirostat, DRY, `samplers`), in the forms front ends send them
//! (SillyTavern's `dry_sequence_breakers` as a JSON string, `logit_bias` as pairs, seed -1).
//! A wrong type or range is a 400 naming the field; absent fields take `DEFAULTS`.

use super::body::{kind, Fields};
use crate::error::ApiError;
use crate::models::LoadedModel;
use serde_json::Value;
use toy::infer::order::{self, Stage};
use toy::infer::sampler::SamplerConfig;
use toy::tokenizer::Tokenizer;

/// The request's sampler settings, DRY's breakers matched against the model's vocabulary.
pub fn sampler(f: &Fields, m: &LoadedModel) -> Result<SamplerConfig, ApiError> {
    sampler_for(f, m.model.cfg.vocab, &m.tok)
}

/// [`sampler`] for logits of `vocab` entries and the tokenizer `tok`.
pub fn sampler_for(f: &Fields, vocab: usize, tok: &Tokenizer) -> Result<SamplerConfig, ApiError> {
    let d = SamplerConfig::default();
    let seed = match f.int_in("seed", i64::MIN, i64::MAX)? {
        // -1 is llama-server's "random"
        Some(-1) | None => toy::infer::sampler::fresh_seed(),
        Some(s) => s as u64,
    };
    let cfg = SamplerConfig {
        temperature: f.f32_in("temperature", 0.0, 2.0)?.unwrap_or(d.temperature),
        top_p: or(f, "top_p", 0.0, 1.0, d.top_p)?,
        top_k: f
            .int_in("top_k", 0, vocab as i64)?
            .unwrap_or(d.top_k as i64) as usize,
        min_p: or(f, "min_p", 0.0, 1.0, d.min_p)?,
        repeat_penalty: or(f, "repeat_penalty", 0.0, 10.0, d.repeat_penalty)?,
        presence_penalty: or(f, "presence_penalty", -2.0, 2.0, d.presence_penalty)?,
        frequency_penalty: or(f, "frequency_penalty", -2.0, 2.0, d.frequency_penalty)?,
        penalty_last_n: f
            .int_in("repeat_last_n", 0, 1 << 20)?
            .unwrap_or(d.penalty_last_n as i64) as usize,
        logit_bias: logit_bias(f, vocab, tok)?,
        seed,
        top_n_sigma: or(f, "top_n_sigma", -1.0, 100.0, d.top_n_sigma)?,
        typical_p: or(f, "typical_p", 0.0, 1.0, d.typical_p)?,
        xtc_probability: or(f, "xtc_probability", 0.0, 1.0, d.xtc_probability)?,
        xtc_threshold: or(f, "xtc_threshold", 0.0, 1.0, d.xtc_threshold)?,
        dynatemp_range: or(f, "dynatemp_range", 0.0, 5.0, d.dynatemp_range)?,
        dynatemp_exponent: or(f, "dynatemp_exponent", 0.0, 10.0, d.dynatemp_exponent)?,
        mirostat: f.int_in("mirostat", 0, 2)?.map_or(d.mirostat, |m| m as u8),
        mirostat_tau: or(f, "mirostat_tau", 0.0, 100.0, d.mirostat_tau)?,
        mirostat_eta: or(f, "mirostat_eta", 0.0, 10.0, d.mirostat_eta)?,
        dry_multiplier: or(f, "dry_multiplier", 0.0, 100.0, d.dry_multiplier)?,
        // llama-server puts its default in place of a base under 1
        dry_base: Some(or(f, "dry_base", 0.0, 100.0, d.dry_base)?)
            .filter(|b| *b >= 1.0)
            .unwrap_or(d.dry_base),
        dry_allowed_length: f
            .int_in("dry_allowed_length", 0, i32::MAX as i64)?
            .map_or(d.dry_allowed_length, |n| n as usize),
        dry_penalty_last_n: f
            .int_in("dry_penalty_last_n", -1, i32::MAX as i64)?
            .map_or(d.dry_penalty_last_n, |n| n as i32),
        dry_sequence_breakers: breakers(f)?,
        samplers: samplers(f)?,
        dry_breakers: None,
    };
    Ok(cfg.with_vocab(tok))
}

/// Field `key` in lo..=hi, or `default` when absent.
fn or(f: &Fields, key: &str, lo: f32, hi: f32, default: f32) -> Result<f32, ApiError> {
    Ok(f.f32_in(key, lo, hi)?.unwrap_or(default))
}

/// `logit_bias`: OpenAI's {"token id": bias in -100..=100}, or llama-server's pairs
/// `[[token id or text, bias or false], ...]` (text: every token of it; false bans).
fn logit_bias(f: &Fields, vocab: usize, tok: &Tokenizer) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |msg: String| ApiError::invalid("logit_bias", msg);
    let bias = |v: &Value, at: &str| match v {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        _ => v
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .map(|b| b as f32)
            .ok_or_else(|| {
                bad(format!(
                    "{at} must be a number from -100 to 100 or false, got {v}"
                ))
            }),
    };
    let id = |k: &str| {
        k.trim()
            .parse::<u32>()
            .ok()
            .filter(|&id| (id as usize) < vocab)
            .ok_or_else(|| {
                bad(format!(
                    "logit_bias key '{k}' is not a token id below {vocab}"
                ))
            })
    };
    let mut out = Vec::new();
    match f.get("logit_bias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                out.push((id(k)?, bias(v, &format!("logit_bias['{k}']"))?));
            }
        }
        Some(Value::Array(pairs)) => {
            for (i, p) in pairs.iter().enumerate() {
                let at = format!("logit_bias[{i}]");
                let pair = p.as_array().filter(|a| a.len() == 2).ok_or_else(|| {
                    bad(format!("{at} must be a [token, bias] pair, got {}", kind(p)))
                })?;
                let b = bias(&pair[1], &at)?;
                match &pair[0] {
                    Value::String(text) => {
                        let ids = tok.encode(text, false).map_err(|e| bad(format!("{at}: {e}")))?;
                        out.extend(ids.into_iter().map(|t| (t, b)));
                    }
                    v => out.push((id(&v.to_string())?, b)),
                }
            }
        }
        Some(v) => {
            return Err(bad(format!(
                "'logit_bias' must be an object of token ids or an array of [token, bias] pairs, got {}",
                kind(v)
            )))
        }
    }
    Ok(out)
}

/// `dry_sequence_breakers`: a non-empty array of strings (llama-server's rule), or that array
/// written as a JSON string (SillyTavern sends it so); absent: the default four.
fn breakers(f: &Fields) -> Result<Vec<String>, ApiError> {
    let Some(v) = f.get("dry_sequence_breakers") else {
        return Ok(Vec::new());
    };
    let parsed: Option<Value> = match v {
        Value::String(s) => serde_json::from_str(s).ok(),
        v => Some(v.clone()),
    };
    let list = parsed
        .as_ref()
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty());
    let strings: Option<Vec<String>> =
        list.and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
    strings.ok_or_else(|| {
        ApiError::invalid(
            "dry_sequence_breakers",
            format!(
                "'dry_sequence_breakers' must be a non-empty array of strings, got {}",
                kind(v)
            ),
        )
    })
}

/// Samplers llama.cpp once had and dropped, which front ends still list in `samplers`
/// (SillyTavern: `tfs_z`): skipped, as llama-server skips them.
const RETIRED: [&str; 4] = ["tfs_z", "tfs", "top_a", "infill"];

/// `samplers`: the chain's order, an array of names or one string of letters.
fn samplers(f: &Fields) -> Result<Vec<Stage>, ApiError> {
    let bad = |e: String| ApiError::invalid("samplers", format!("'samplers': {e}"));
    match f.get("samplers") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => order::from_chars(s).map_err(bad),
        Some(Value::Array(a)) => {
            let names: Option<Vec<&str>> = a.iter().map(Value::as_str).collect();
            let names = names.ok_or_else(|| bad("expected an array of sampler names".into()))?;
            let kept: Vec<&str> = names
                .into_iter()
                .filter(|n| !RETIRED.contains(&n.to_ascii_lowercase().as_str()))
                .collect();
            order::from_names(&kept).map_err(bad)
        }
        Some(v) => Err(bad(format!(
            "expected an array of names or a string of letters, got {}",
            kind(v)
        ))),
    }
}
