//! What several commands share: finding and loading the model, and sampling flags.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toy::finetune::adapter::LoraAdapter;
use toy::finetune::merge::merged_gguf;
use toy::gguf::GgufFile;
use toy::infer::order::Stage;
use toy::infer::sampler::SamplerConfig;
use toy::infer::sampler::DEFAULTS;
use toy::model::Model;
use toy::tokenizer::Tokenizer;

/// `--device cpu|cuda[:N]|auto` (else `TOY_DEVICE`, else the CPU) on the commands that will
/// run on a GPU (issue 39: train, finetune, bench, eval ppl). Their work has only a CPU path so
/// far: `auto` says it takes the CPU and why; `cuda` is refused in one line naming what is
/// missing (no GPU and why, or the GPU path itself).
#[derive(Args, Clone, Debug, Default)]
pub struct DeviceArgs {
    /// Where the work runs: cpu, cuda, cuda:N or auto (a GPU when there is one); default
    /// TOY_DEVICE, else cpu. Only the CPU runs these commands so far (docs/gpu.md).
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
}

impl DeviceArgs {
    /// Check the request for `what` (a command), which runs on the CPU only so far.
    pub fn cpu_only(&self, what: &str) -> Result<()> {
        use tinynn::device::{resolve, Device, DeviceRequest};
        let req = DeviceRequest::from_flag_or_env(self.device.as_deref())?;
        match (req, resolve(req)?) {
            (DeviceRequest::Auto, (Device::Cpu, why)) => {
                let why = why.map_or("no GPU".to_string(), |w| w.to_string());
                eprintln!("device: cpu (auto: {why})");
            }
            (DeviceRequest::Auto, (Device::Cuda(n), _)) => {
                eprintln!("device: cpu (auto: {what} has no GPU path yet, cuda:{n} stays idle; docs/gpu.md)")
            }
            (_, (Device::Cuda(n), _)) => bail!(
                "{what} on cuda:{n} is not built yet: the GPU has its kernels but not this command (docs/gpu.md); run it with --device cpu"
            ),
            (_, (Device::Cpu, _)) => {}
        }
        Ok(())
    }
}

/// Where `scripts/fetch-model.sh` puts the default model.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// GGUF model file.
    #[arg(short = 'm', long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
}

impl ModelArgs {
    pub fn gguf(&self) -> Result<Arc<GgufFile>> {
        open_gguf(&self.model)
    }
}

pub fn open_gguf(path: &Path) -> Result<Arc<GgufFile>> {
    if !path.exists() {
        let hint = if path == Path::new(DEFAULT_MODEL) {
            " (run scripts/fetch-model.sh to fetch the default model)"
        } else {
            ""
        };
        bail!("model file '{}' not found{hint}", path.display());
    }
    let f = GgufFile::open(path).with_context(|| format!("reading '{}'", path.display()))?;
    Ok(Arc::new(f))
}

/// The model and its tokenizer.
pub fn load(args: &ModelArgs) -> Result<(Model, Tokenizer)> {
    load_with_lora(args, &LoraArgs::default())
}

/// `--lora FILE[:SCALE]`, repeatable: adapters merged into the model as it loads.
#[derive(Args, Clone, Debug, Default)]
pub struct LoraArgs {
    /// LoRA adapter (llama.cpp's GGUF) to apply, with an optional scale (default 1);
    /// repeatable. The adapted matrices are merged in f32 at load.
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    pub lora: Vec<(PathBuf, f32)>,
}

/// "FILE" or "FILE:SCALE" (a suffix that is not a number is part of the file name).
pub fn parse_lora(s: &str) -> Result<(PathBuf, f32), String> {
    if let Some((file, scale)) = s.rsplit_once(':') {
        if let Ok(v) = scale.trim().parse::<f32>() {
            if file.is_empty() || !v.is_finite() {
                return Err(format!("'{s}': expected FILE[:SCALE] with a finite scale"));
            }
            return Ok((PathBuf::from(file), v));
        }
    }
    Ok((PathBuf::from(s), 1.0))
}

/// The model with `lora`'s adapters merged in, and its tokenizer.
pub fn load_with_lora(args: &ModelArgs, lora: &LoraArgs) -> Result<(Model, Tokenizer)> {
    let mut f = args.gguf()?;
    let tok = Tokenizer::from_gguf(&f)
        .with_context(|| format!("tokenizer of '{}'", args.model.display()))?;
    // the tokenizer's temporary tables go back before the weights are read (and repacked)
    release_freed_memory();
    if !lora.lora.is_empty() {
        let adapters = lora
            .lora
            .iter()
            .map(|(p, s)| {
                let a = LoraAdapter::read(p)
                    .with_context(|| format!("reading adapter '{}'", p.display()))?;
                a.check_base(&f).with_context(|| {
                    let (p, m) = (p.display(), args.model.display());
                    format!("adapter '{p}' does not fit model '{m}'")
                })?;
                Ok((a, *s))
            })
            .collect::<Result<Vec<_>>>()?;
        // the base stays as stored and the adapters run beside it (as llama.cpp does); an
        // adapter on a tensor outside the blocks (the head) is merged into an f32 copy instead
        let mut model = Model::from_gguf(f.clone())
            .with_context(|| format!("loading '{}'", args.model.display()))?;
        let unmerged: Result<Vec<(usize, f32)>, _> = adapters
            .iter()
            .map(|(a, s)| model.add_lora(a).map(|i| (i, *s)))
            .collect();
        if let Ok(picks) = unmerged {
            model.set_default_loras(picks)?;
            release_freed_memory();
            return Ok((model, tok));
        }
        drop(model);
        let refs: Vec<(&LoraAdapter, f32)> = adapters.iter().map(|(a, s)| (a, *s)).collect();
        let merged = merged_gguf(&f, &refs)
            .with_context(|| format!("applying --lora to '{}'", args.model.display()))?;
        f = Arc::new(merged);
    }
    let model =
        Model::from_gguf(f).with_context(|| format!("loading '{}'", args.model.display()))?;
    release_freed_memory();
    Ok((model, tok))
}

/// Hand the heap pages freed while loading back to the OS, so they do not add to the peak
/// resident size.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Speculative decoding flags, named as llama.cpp's (`toy generate`, `toy serve`).
#[derive(Args, Clone, Debug)]
pub struct SpecArgs {
    /// Speculative decoding with this draft model (the target's vocabulary).
    #[arg(long, conflicts_with = "spec")]
    pub draft: Option<std::path::PathBuf>,
    /// Speculative decoding without a draft model: `ngram` (prompt lookup).
    #[arg(long, value_parser = ["ngram"])]
    pub spec: Option<String>,
    /// Most tokens drafted per round.
    #[arg(long, default_value_t = 8)]
    pub draft_max: usize,
    /// The draft model stops drafting after a token where its top token's probability was
    /// under this (that token is still proposed: unlike llama.cpp, which drops it).
    #[arg(long, default_value_t = 0.75)]
    pub draft_p_min: f32,
    /// `toy generate`: how many tokens a round drafts. `auto`: the length (0 to --draft-max)
    /// that the costs and acceptance measured so far make fastest (`infer::spec_tune`);
    /// `max`: up to --draft-max every round. Default: auto for `--spec ngram`, max for a draft
    /// model (whose catch-up after plain steps the tuner cannot win back on a 2-core CPU).
    /// `toy serve` drafts up to --draft-max.
    #[arg(long, value_parser = ["auto", "max"])]
    pub draft_len: Option<String>,
    /// Run the draft with its matrices in the file's types and the target's arithmetic. By
    /// default a draft holds those in 5 to 8 bits or floats in Q4_0 and rounds activations as
    /// ggml does: fewer bytes and less work a drafted token, which moves how many drafted
    /// tokens are kept, never the output.
    #[arg(long, requires = "draft")]
    pub draft_as_stored: bool,
}

impl SpecArgs {
    /// Whether `toy generate` tunes the draft length (see `draft_len`).
    pub fn tune(&self) -> bool {
        match self.draft_len.as_deref() {
            Some(v) => v == "auto",
            None => self.draft.is_none(),
        }
    }
}

/// Sampling flags, named as llama.cpp's, with its defaults (`toy::infer::sampler::DEFAULTS`,
/// which the server's request fields fall back to as well).
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy.
    #[arg(long = "temp", default_value_t = DEFAULTS.temperature)]
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = DEFAULTS.top_k)]
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p; 1 keeps all.
    #[arg(long, default_value_t = DEFAULTS.top_p)]
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely; 0 keeps all.
    #[arg(long, default_value_t = DEFAULTS.min_p)]
    pub min_p: f32,
    /// Divide (multiply, when negative) the logits of recent tokens by this; 1 is off.
    #[arg(long, default_value_t = DEFAULTS.repeat_penalty)]
    pub repeat_penalty: f32,
    /// Subtract this from the logits of tokens seen recently; 0 is off.
    #[arg(long, default_value_t = DEFAULTS.presence_penalty)]
    pub presence_penalty: f32,
    /// Subtract this times each recent token's count from its logit; 0 is off.
    #[arg(long, default_value_t = DEFAULTS.frequency_penalty)]
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long, default_value_t = DEFAULTS.penalty_last_n)]
    pub repeat_last_n: usize,
    /// Top-n-sigma: keep logits within N standard deviations of the top; -1 is off.
    #[arg(long, default_value_t = DEFAULTS.top_n_sigma, allow_negative_numbers = true)]
    pub top_nsigma: f32,
    /// Locally typical sampling's mass; 1 is off.
    #[arg(long, default_value_t = DEFAULTS.typical_p)]
    pub typical: f32,
    /// XTC: how often the top choices are excluded; 0 is off.
    #[arg(long, default_value_t = DEFAULTS.xtc_probability)]
    pub xtc_probability: f32,
    /// XTC: the probability a token needs to be excluded.
    #[arg(long, default_value_t = DEFAULTS.xtc_threshold)]
    pub xtc_threshold: f32,
    /// Dynamic temperature: the temperature moves within --temp ± this with the entropy.
    #[arg(long, default_value_t = DEFAULTS.dynatemp_range)]
    pub dynatemp_range: f32,
    /// Dynamic temperature's exponent.
    #[arg(long, default_value_t = DEFAULTS.dynatemp_exponent)]
    pub dynatemp_exp: f32,
    /// Mirostat: 0 off, 1 or 2 (replaces top-k, top-p, min-p, typical and XTC).
    #[arg(long, default_value_t = DEFAULTS.mirostat, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub mirostat: u8,
    /// Mirostat's target surprise (tau, bits).
    #[arg(long, default_value_t = DEFAULTS.mirostat_tau)]
    pub mirostat_ent: f32,
    /// Mirostat's learning rate (eta).
    #[arg(long, default_value_t = DEFAULTS.mirostat_eta)]
    pub mirostat_lr: f32,
    /// DRY: the penalty multiplier for tokens that would extend a repeat; 0 is off.
    #[arg(long, default_value_t = DEFAULTS.dry_multiplier)]
    pub dry_multiplier: f32,
    /// DRY: the penalty grows as base^(repeat length - allowed length).
    #[arg(long, default_value_t = DEFAULTS.dry_base)]
    pub dry_base: f32,
    /// DRY: repeats longer than this are penalised.
    #[arg(long, default_value_t = DEFAULTS.dry_allowed_length)]
    pub dry_allowed_length: usize,
    /// DRY: how many recent tokens it scans; -1 all, 0 off.
    #[arg(long, default_value_t = DEFAULTS.dry_penalty_last_n, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i32,
    /// DRY: a string that breaks repeats (repeatable) [default: "\n" ":" "\"" "*"].
    #[arg(long = "dry-sequence-breaker")]
    pub dry_sequence_breaker: Vec<String>,
    /// The samplers' order, as llama.cpp's --samplers / --sampling-seq: names separated by ';'
    /// (top_k;top_p;min_p;temperature) or letters (kpmt) [default:
    /// penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature].
    #[arg(long, alias = "sampling-seq", value_parser = parse_order)]
    pub samplers: Option<Order>,
    /// Logit bias as TOKEN_ID=BIAS (repeatable; BIAS may be -inf).
    #[arg(long = "logit-bias", value_parser = parse_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Sampling seed; without it every run draws a fresh one (printed, and in `--json`),
    /// so `--seed N` repeats a run.
    #[arg(long)]
    pub seed: Option<u64>,
}

/// A sampler order (`--samplers`).
#[derive(Clone, Debug)]
pub struct Order(pub Vec<Stage>);

fn parse_order(s: &str) -> Result<Order, String> {
    toy::infer::order::parse(s).map(Order)
}

fn parse_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, b) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected TOKEN_ID=BIAS"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("'{id}': expected a token id"))?;
    let b = b
        .trim()
        .parse()
        .map_err(|_| format!("'{b}': expected a number or -inf"))?;
    Ok((id, b))
}

impl SamplingArgs {
    /// The sampler's settings, with the given seed or a fresh one (`config().seed` says which),
    /// DRY's breakers matched against `tok`.
    pub fn config(&self, tok: &Tokenizer) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            logit_bias: self.logit_bias.clone(),
            seed: self.seed.unwrap_or_else(toy::infer::sampler::fresh_seed),
            top_n_sigma: self.top_nsigma,
            typical_p: self.typical,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            dry_sequence_breakers: self.dry_sequence_breaker.clone(),
            samplers: self.samplers.clone().map_or(Vec::new(), |o| o.0),
            dry_breakers: None,
        }
        .with_vocab(tok)
    }
}

/// Parse "1,2,3" into ids.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim().parse::<u32>().with_context(|| {
                format!("'{x}' is not a token id (expected comma-separated integers)")
            })
        })
        .collect()
}
