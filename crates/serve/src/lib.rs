//! `toy serve`: an OpenAI-compatible HTTP server (axum on a small tokio runtime) in front of
//! one engine thread that batches every running sequence into shared forward passes
//! (continuous batching, as vLLM and llama.cpp's server do).
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings`,
//! `GET /v1/models`, `GET /v1/models/{id}`, `POST /tokenize`, `POST /detokenize`,
//! `GET /health`, `GET /metrics`, `GET /` (the page), `GET /api/runs`,
//! `GET /api/runs/{id}/events`.
//!
//! Engine (see `engine/`): handlers parse and check a request, tokenize it and send it over
//! a channel; one OS thread runs every forward pass inside a rayon pool of its own. Each
//! model has `--parallel` slots, each with its own KV cache and the tokens in it. Every
//! engine step admits waiting sequences into free slots (the slot sharing the longest
//! prefix with the prompt, whose cache is kept), copies prefixes other slots already hold,
//! prefills one chunk of one prompt, and decodes one token for every running sequence in
//! one `Model::forward_multi` pass. A client that goes away closes its event channel and
//! its slot is freed at the next step. Prefill chunks start at multiples of the chunk size
//! and reused prefixes end where a cold prefill would split (see `engine/group.rs`), so
//! greedy output is the same alone, batched, or after prefix reuse.
//!
//! Request policy:
//! - Errors always have OpenAI's shape `{"error": {"message", "type", "param", "code"}}`;
//!   a field of the wrong type or out of range is a 400 whose `param` names it.
//! - Fields that would change what the client gets and that this server cannot do (`tools`,
//!   `tool_choice`, `functions`, `function_call`, `parallel_tool_calls: true`, `audio`,
//!   `prediction`, `web_search_options`, `suffix`, `grammar`, `json_schema`,
//!   `response_format` other than `{"type": "text"}`, `modalities` other than text,
//!   `best_of` != `n`, `dimensions` != the model width, non-text content parts) are
//!   refused with a 400 naming them.
//! - Other unknown fields (`user`, `metadata`, `store`, `service_tier`, ...) change nothing
//!   about the output and are ignored, as OpenAI's own API ignores what it does not use.
//! - `null` counts as absent. `model` may be left out when one model is served, and then
//!   any name answers with it (its own name in the reply) unless `--exact-model`; with
//!   several, a name that is not served (nor an `--alias`) is a 404 `model_not_found`.
//! - Sampling defaults: llama.cpp's, one set for the CLI and the server
//!   (`toy::infer::sampler::DEFAULTS`: `temperature` 0.8, `top_k` 40, `top_p` 0.95,
//!   `min_p` 0.05, no penalties, `repeat_last_n` 64), with llama-server's fields for the
//!   rest (mirostat, typical_p, DRY, XTC, top_n_sigma, dynatemp, `samplers` order).
//!   `temperature` 0 is greedy. Without `seed` each request draws a
//!   fresh one; choice i of a request samples with `seed + i`.
//! - `max_tokens` (or `max_completion_tokens`) defaults to the rest of the context for
//!   chat and to 16 for completions; reaching the context ends with `finish_reason`
//!   `"length"`. A prompt that leaves no room for one token is a 400 with both counts.
//! - `lora: [{"id", "scale"}]` picks the `--lora` adapters for a request (those not named
//!   are off); without it the defaults of `POST /lora-adapters` apply. An unknown id is a
//!   400 naming it.
//! - Logprobs are those of the model's distribution (log-softmax of the raw logits),
//!   before temperature, penalties and truncation.

#[doc(hidden)]
pub mod api;
mod clock;
mod config;
pub mod engine;
mod error;
mod lora;
mod metrics;
mod models;
mod server;
mod telemetry;

pub use clock::Clock;
pub use config::{ServeConfig, SpecConfig};
pub use error::{ApiError, ServeError};
pub use server::{run, start, Server};

use api::body::Fields;
use std::sync::Arc;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    cfg: Arc<ServeConfig>,
    registry: Arc<models::Registry>,
    engine: engine::EngineHandle,
    metrics: Arc<metrics::Metrics>,
    telemetry: Arc<telemetry::Telemetry>,
}

impl AppState {
    /// The model a request names in `model` (loading it if needed).
    async fn model(&self, f: &Fields) -> Result<Arc<models::LoadedModel>, ApiError> {
        let id = f.str("model")?;
        let entry = self.registry.resolve(id)?;
        self.registry.get(entry).await
    }
}
