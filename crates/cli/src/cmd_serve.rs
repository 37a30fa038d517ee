//! `toy serve`: the OpenAI-compatible server (crate `toy-serve`) on one or more models.

use crate::common::DEFAULT_MODEL;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::Duration;
use toy_serve::ServeConfig;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF model to serve (repeatable; the model id is the file stem). Default: the
    /// default model, unless --models-dir is given.
    #[arg(short = 'm', long = "model")]
    models: Vec<PathBuf>,
    /// Serve every *.gguf in this directory.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// LoRA adapter (llama.cpp's GGUF) run beside every served model, unmerged, with its
    /// default scale (1); repeatable, ids 0.. in order. Requests pick adapters and scales
    /// with "lora": [{"id": 0, "scale": 0.5}]; GET/POST /lora-adapters list them and set
    /// the defaults.
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = crate::common::parse_lora)]
    loras: Vec<(PathBuf, f32)>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 4567)]
    port: u16,
    /// Require 'Authorization: Bearer KEY' on the API routes.
    #[arg(long)]
    api_key: Option<String>,
    /// Origins browsers may call from (CORS): "*" any, "localhost" local pages only, "none",
    /// or a comma-separated list such as http://localhost:3000.
    #[arg(long, default_value = "*", value_name = "ORIGINS")]
    cors_origins: String,
    /// Any origin may call (the default; as --cors-origins '*').
    #[arg(long, conflicts_with = "cors_origins")]
    cors_allow_all: bool,
    /// Another name the first model answers to (repeatable).
    #[arg(long = "alias", value_name = "NAME")]
    aliases: Vec<String>,
    /// Refuse requests naming a model that is not served, even when one model is served (by
    /// default it answers them, under its own name).
    #[arg(long)]
    exact_model: bool,
    /// Sequences decoded together per model (KV slots).
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// Context positions per slot.
    #[arg(short = 'c', long, default_value_t = 2048)]
    ctx: usize,
    /// Unload a model after this long unused: 300s, 5m, 1h; 'never' keeps it.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    keep_alive: KeepAlive,
    /// Telemetry goes to RUNS_DIR/serve-<timestamp>/events.jsonl; the page lists RUNS_DIR.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
    /// Put prompt and output text in the telemetry.
    #[arg(long)]
    log_prompts: bool,
    /// Most sequences waiting for a slot; more requests get 429.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Prompt tokens prefilled per engine step (chunks start at multiples of it).
    #[arg(long, default_value_t = 64)]
    prefill_chunk: usize,
    #[command(flatten)]
    spec: crate::common::SpecArgs,
}

#[derive(Clone, Copy, Debug)]
struct KeepAlive(Option<Duration>);

fn parse_duration(s: &str) -> Result<KeepAlive, String> {
    let s = s.trim();
    if s == "never" || s == "-1" {
        return Ok(KeepAlive(None));
    }
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}': expected a duration such as 300s, 5m, 1h or 'never'"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (s, m, h)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("'{s}': must not be negative"));
    }
    Ok(KeepAlive(Some(Duration::from_secs_f64(secs))))
}

pub fn run(a: Args, threads: Option<usize>) -> Result<()> {
    let mut models = a.models;
    if models.is_empty() && a.models_dir.is_none() {
        models.push(PathBuf::from(DEFAULT_MODEL));
    }
    for m in &models {
        if !m.exists() {
            let hint = if m == &PathBuf::from(DEFAULT_MODEL) {
                " (run scripts/fetch-model.sh to fetch the default model)"
            } else {
                ""
            };
            bail!("model file '{}' not found{hint}", m.display());
        }
    }
    let cfg = ServeConfig {
        models,
        models_dir: a.models_dir,
        loras: a.loras,
        host: a.host,
        port: a.port,
        api_key: a.api_key,
        cors_origins: match a.cors_allow_all {
            true => "*".into(),
            false => a.cors_origins,
        },
        aliases: a.aliases,
        exact_model: a.exact_model,
        parallel: a.parallel,
        ctx: a.ctx,
        keep_alive: a.keep_alive.0,
        runs_dir: a.runs_dir,
        log_prompts: a.log_prompts,
        queue: a.queue,
        prefill_chunk: a.prefill_chunk,
        threads,
        spec: toy_serve::SpecConfig {
            draft: a.spec.draft,
            ngram: a.spec.spec.is_some(),
            max: a.spec.draft_max,
            p_min: a.spec.draft_p_min,
            as_stored: a.spec.draft_as_stored,
        },
        ..ServeConfig::default()
    };
    toy_serve::run(cfg)?;
    Ok(())
}
