//! What a server is started with: the models, where it listens, and the limits of the engine.

use crate::clock::Clock;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// GGUF files to serve (`-m`, repeatable); the model id is the file stem.
    pub models: Vec<PathBuf>,
    /// Serve every `*.gguf` in this directory too.
    pub models_dir: Option<PathBuf>,
    /// LoRA adapters (`--lora FILE[:SCALE]`, ids 0.. in order) with their default scales,
    /// run unmerged on every served model.
    pub loras: Vec<(PathBuf, f32)>,
    pub host: String,
    /// 0 picks a free port (tests).
    pub port: u16,
    /// When set, every API route wants `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Sequences decoded together per model (KV slots).
    pub parallel: usize,
    /// Positions per slot (capped at the model's trained context).
    pub ctx: usize,
    /// Unload a model after this long unused; `None` keeps models loaded.
    pub keep_alive: Option<Duration>,
    /// Where telemetry goes (`<runs_dir>/serve-<timestamp>/events.jsonl`) and what
    /// `/api/runs` lists.
    pub runs_dir: PathBuf,
    /// Write prompt and output text into the telemetry.
    pub log_prompts: bool,
    /// Most sequences waiting for a slot before new requests get 429.
    pub queue: usize,
    /// Prompt tokens prefilled per engine step (running streams wait for one chunk); chunks
    /// start at multiples of it.
    pub prefill_chunk: usize,
    /// Largest request body, bytes (413 above).
    pub body_limit: usize,
    /// Model threads (default: all cores).
    pub threads: Option<usize>,
    /// What the `--keep-alive` idle timer reads (tests use a manual clock they move).
    pub clock: Clock,
    /// Speculative decoding (`--draft`, `--spec ngram`).
    pub spec: SpecConfig,
    /// Origins a browser may call from (CORS, as llama-server's `--cors-origins`): "*" any
    /// origin (echoed back, with credentials), "localhost" only local pages, "none" no CORS
    /// headers, or a comma-separated list of origins.
    pub cors_origins: String,
    /// Further names the first model answers to (`--alias`, repeatable).
    pub aliases: Vec<String>,
    /// Refuse a request naming a model not served even when one model is served (by default
    /// that one answers it, as llama-server does, with its own name in the reply).
    pub exact_model: bool,
}

/// Speculative decoding settings: off when neither a draft nor prompt lookup is chosen.
#[derive(Clone, Debug)]
pub struct SpecConfig {
    pub draft: Option<PathBuf>,
    pub ngram: bool,
    /// Most drafted tokens per round.
    pub max: usize,
    /// The draft model stops where its top token's probability is under this.
    pub p_min: f32,
    /// The draft's matrices in the file's types, not Q4_0 (`Model::from_gguf_draft`).
    pub as_stored: bool,
}

impl Default for SpecConfig {
    fn default() -> Self {
        Self {
            draft: None,
            ngram: false,
            max: 8,
            p_min: 0.75,
            as_stored: false,
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            models: Vec::new(),
            models_dir: None,
            loras: Vec::new(),
            host: "127.0.0.1".into(),
            port: 4567,
            api_key: None,
            parallel: 8,
            ctx: 2048,
            keep_alive: Some(Duration::from_secs(300)),
            runs_dir: PathBuf::from("runs"),
            log_prompts: false,
            queue: 64,
            // 64 is where attention takes its faster f32 regime (about twice the prefill speed
            // of shorter chunks on long prompts); chunks start at multiples of it, see
            // engine/group.rs for why outputs then never depend on the cache's contents
            prefill_chunk: 64,
            body_limit: 4 << 20,
            threads: None,
            clock: Clock::real(),
            spec: SpecConfig::default(),
            cors_origins: "*".into(),
            aliases: Vec::new(),
            exact_model: false,
        }
    }
}
