//! The HTTP routes. Handlers parse and check a request, then hand it to the engine; they
//! never run the model themselves.

pub mod body;
pub mod chat;
pub mod completions;
mod constraint;
pub mod embeddings;
mod format;
mod gen;
pub mod lora;
pub mod misc;
mod params;
pub mod runs;
mod sampling;
mod sse;
mod tools;

/// A request body through every check a chat request passes before the model sees it, for
/// the fuzz target (`fuzz/fuzz_targets/request.rs`): the body's JSON, `messages`, `tools`,
/// the constraint (compiled when `grammars` is given), sampling, `n`, `stop`, `max_tokens`,
/// `stream`. Returns whether it was accepted.
#[doc(hidden)]
pub fn check_request(
    body: &[u8],
    tok: &toy::tokenizer::Tokenizer,
    grammars: Option<&toy::infer::constrain::Grammars>,
) -> bool {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(body) else {
        return false;
    };
    let f = body::Fields(map);
    let run = || -> Result<(), crate::error::ApiError> {
        params::reject_unsupported(&f)?;
        chat::messages(&f)?;
        tools::requested(&f)?;
        if let (Some((c, _)), Some(g)) = (constraint::requested(&f)?, grammars) {
            g.compile(&c)
                .map_err(|e| crate::error::ApiError::invalid("constraint", e.to_string()))?;
        }
        sampling::sampler_for(&f, tok.vocab_size(), tok)?;
        params::n(&f)?;
        f.strings("stop", params::MAX_STOP)?;
        params::max_tokens(&f)?;
        params::stream(&f)?;
        Ok(())
    };
    run().is_ok()
}
