//! The engine: one loop on its own OS thread owns the models' slots and runs every forward
//! pass; handlers only send it jobs over a channel and read events back. Each turn of the
//! loop takes in new jobs, admits waiting sequences into free slots (longest cached prefix
//! first), then steps every model with running sequences (continuous batching: sequences
//! join and leave the batch between steps).

mod ended;
mod group;
pub mod logprob;
mod seq;
mod spec;
pub mod text;

pub use ended::Ended;
pub use logprob::TokenLogprob;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::models::{LoadedModel, Registry};
use axum::http::StatusCode;
use group::Group;
use seq::Seq;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use text::TextStream;
use tokio::sync::{mpsc, oneshot};
use toy::infer::constrain::Guide;
use toy::infer::sampler::{Sampler, SamplerConfig};
use toy::infer::speculative::check_draft_vocab;
use toy::model::Model;

/// How a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    Eog,
    /// A stop string (not included in the text).
    StopString,
    /// `max_tokens` or the context.
    Length,
    /// The client went away.
    Cancelled,
    /// The model failed.
    Error,
}

impl FinishReason {
    /// As the OpenAI API names it.
    pub fn api_name(self) -> &'static str {
        match self {
            FinishReason::Eog | FinishReason::StopString => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// The end of one sequence, with its counts.
#[derive(Clone, Debug)]
pub struct SeqDone {
    pub index: usize,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    /// From the request's arrival at the engine queue to its first sampled token.
    pub ttft_ms: Option<f64>,
}

/// What a handler hears back about a generation request.
#[derive(Debug)]
pub enum Event {
    /// A sampled token and the text it makes visible (possibly empty: held back).
    Token {
        index: usize,
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// Text released at the end without a token of its own.
    Text {
        index: usize,
        text: String,
    },
    /// Logprobs of the prompt's tokens after the first (echo with logprobs).
    PromptLogprobs {
        index: usize,
        logprobs: Vec<TokenLogprob>,
    },
    Error {
        index: usize,
        message: String,
    },
    Done(SeqDone),
}

#[derive(Clone, Debug)]
pub struct GenParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// The seed is the first choice's; choice i draws with seed + i.
    pub sampler: SamplerConfig,
    /// Top alternatives per token; `Some(0)` is the chosen token's logprob only.
    pub logprobs: Option<usize>,
    /// Logprobs of the prompt tokens too (disables prefix reuse: every position is computed).
    pub prompt_logprobs: bool,
    /// LoRA adapters as (id, scale), scale nonzero; empty for the plain model.
    pub lora: Vec<(usize, f32)>,
    /// What each choice's output must match (compiled once; every choice forks it).
    pub guide: Option<SharedGuide>,
}

/// A compiled constraint at its start, shared by a request's choices.
#[derive(Clone)]
pub struct SharedGuide(pub Arc<std::sync::Mutex<Guide>>);

impl SharedGuide {
    pub fn new(g: Guide) -> Self {
        Self(Arc::new(std::sync::Mutex::new(g)))
    }

    /// A matcher of its own for one sequence.
    pub fn fork(&self) -> Guide {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).fork()
    }
}

impl std::fmt::Debug for SharedGuide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedGuide")
    }
}

/// A generation request: one sequence per prompt and choice.
pub struct GenJob {
    pub model: Arc<LoadedModel>,
    /// (choice index, prompt) for each sequence.
    pub prompts: Vec<(usize, Arc<Vec<u32>>)>,
    pub params: GenParams,
    pub events: mpsc::UnboundedSender<Event>,
    /// Each sequence's end, also after the client went away and `events` closed.
    pub ended: Arc<Ended>,
    /// Where a sequence's counts go when it ends, before its `Done` event is sent, so a
    /// scrape after the response always includes them.
    pub metrics: Arc<Metrics>,
    pub enqueued: Instant,
}

/// Mean-pooled, L2-normalised final hidden states of each input.
pub struct EmbedJob {
    pub model: Arc<LoadedModel>,
    pub inputs: Vec<Vec<u32>>,
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

pub enum Job {
    Gen(Box<GenJob>),
    Embed(EmbedJob),
}

/// The handlers' end of the engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Job>,
    metrics: Arc<Metrics>,
    max_queue: usize,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Too many sequences wait for a slot (429).
    QueueFull,
    /// The engine thread is gone (503).
    Stopped,
}

impl SubmitError {
    pub fn api_error(&self, max_queue: usize) -> ApiError {
        match self {
            SubmitError::QueueFull => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "the server is busy: {max_queue} sequences are already waiting for a slot; retry later"
                ),
            )
            .code("queue_full")
            // a slot frees as soon as one running sequence ends: worth a retry within a second
            .retry_after(1),
            SubmitError::Stopped => ApiError::unavailable("the engine has stopped"),
        }
    }
}

impl EngineHandle {
    /// Queue a job; a generation job whose sequences would overfill the queue is refused.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        let n = match &job {
            Job::Gen(g) => g.prompts.len(),
            Job::Embed(_) => 0,
        };
        let q = &self.metrics.queue_depth;
        let mut cur = q.load(Ordering::SeqCst);
        loop {
            if n > 0 && cur + n > self.max_queue {
                return Err(SubmitError::QueueFull);
            }
            match q.compare_exchange(cur, cur + n, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.tx.send(job).map_err(|_| {
            q.fetch_sub(n, Ordering::SeqCst);
            SubmitError::Stopped
        })
    }
}

pub struct EngineOptions {
    pub parallel: usize,
    pub prefill_chunk: usize,
    pub max_queue: usize,
    pub keep_alive: Option<Duration>,
    pub threads: Option<usize>,
    /// Speculative decoding: the draft model (`None`: prompt lookup), most drafted tokens,
    /// the draft's p_min; `None` for off.
    pub spec: Option<(Option<Arc<Model>>, usize, f32)>,
}

/// Start the engine thread.
pub fn spawn(
    opts: EngineOptions,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
) -> std::io::Result<EngineHandle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = EngineHandle {
        tx,
        metrics: metrics.clone(),
        max_queue: opts.max_queue,
    };
    let mut pool = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("engine-{i}"));
    if let Some(t) = opts.threads {
        pool = pool.num_threads(t.max(1));
    }
    let pool = pool.build().map_err(std::io::Error::other)?;
    std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            // the loop runs on a worker of the pool, so each kernel starts here and only
            // wakes the others (as the CLI's commands do)
            pool.install(|| {
                Engine {
                    opts,
                    registry,
                    metrics,
                    groups: HashMap::new(),
                    waiting: VecDeque::new(),
                }
                .run(rx)
            })
        })?;
    Ok(handle)
}

struct Engine {
    opts: EngineOptions,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    groups: HashMap<String, Group>,
    /// Sequences waiting for a slot, oldest first.
    waiting: VecDeque<Seq>,
}

impl Engine {
    fn busy(&self) -> bool {
        !self.waiting.is_empty() || self.groups.values().any(|g| g.active() > 0)
    }

    fn run(mut self, rx: Receiver<Job>) {
        let mut last_sweep = Instant::now();
        loop {
            if !self.busy() {
                match rx.recv_timeout(Duration::from_secs(1)) {
                    Ok(job) => self.take(job),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.take(job);
            }
            self.drop_cancelled_waiting();
            self.admit();
            // each ended sequence has already counted itself (`Seq::finish`)
            let mut finished = Vec::new();
            let mut decoded = 0;
            for g in self.groups.values_mut() {
                finished.extend(g.drop_cancelled());
                if g.active() > 0 {
                    // a bug in a step fails that step's requests, not the server
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.step())) {
                        Ok((done, n)) => {
                            finished.extend(done);
                            decoded += n;
                        }
                        Err(_) => g.abort("internal error in the engine step", &mut finished),
                    }
                }
            }
            if decoded > 0 {
                self.metrics.record_decode(decoded);
            }
            let active: usize = self.groups.values().map(Group::active).sum();
            self.metrics.active_slots.store(active, Ordering::Relaxed);
            if last_sweep.elapsed() >= Duration::from_secs(1) {
                self.unload_idle();
                last_sweep = Instant::now();
            }
        }
    }

    fn take(&mut self, job: Job) {
        match job {
            Job::Embed(e) => {
                let chunk = self.opts.prefill_chunk;
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    embed(&e.model, &e.inputs, chunk)
                }))
                .unwrap_or_else(|_| Err("internal error computing embeddings".into()));
                let _ = e.reply.send(out);
            }
            Job::Gen(g) => {
                let job: Arc<GenJob> = Arc::from(g);
                for (index, prompt) in &job.prompts {
                    let mut cfg = job.params.sampler.clone();
                    cfg.seed = cfg.seed.wrapping_add(*index as u64);
                    let mut sampler = Sampler::new(cfg);
                    prompt.iter().for_each(|&t| sampler.accept(t));
                    self.waiting.push_back(Seq {
                        job: job.clone(),
                        index: *index,
                        prompt: prompt.clone(),
                        fed: 0,
                        cached: 0,
                        sampler,
                        text: TextStream::new(job.params.stop.clone()),
                        generated: 0,
                        next: None,
                        prompt_logprobs: Vec::new(),
                        admitted: Instant::now(),
                        first_token: None,
                        guide: job.params.guide.as_ref().map(SharedGuide::fork),
                        mask: None,
                        draft_sampler: None,
                    });
                }
            }
        }
    }

    fn drop_cancelled_waiting(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|s| !s.job.events.is_closed());
        let gone = before - self.waiting.len();
        if gone > 0 {
            self.metrics.queue_depth.fetch_sub(gone, Ordering::SeqCst);
        }
    }

    /// Move waiting sequences into free slots, in arrival order per model.
    fn admit(&mut self) {
        let mut still = VecDeque::new();
        while let Some(seq) = self.waiting.pop_front() {
            let model = seq.job.model.clone();
            let group = self.groups.entry(model.id.clone()).or_insert_with(|| {
                Group::new(
                    model.clone(),
                    self.opts.parallel,
                    self.opts.prefill_chunk,
                    spec_for(&self.opts, &model),
                )
            });
            if !Arc::ptr_eq(&group.model, &model) {
                // the model was reloaded: the old slots go once they are idle
                if group.active() > 0 {
                    still.push_back(seq);
                    continue;
                }
                let spec = spec_for(&self.opts, &model);
                *group = Group::new(
                    model.clone(),
                    self.opts.parallel,
                    self.opts.prefill_chunk,
                    spec,
                );
            }
            let blocked = still
                .iter()
                .any(|s: &Seq| Arc::ptr_eq(&s.job.model, &model));
            let slot = if blocked {
                None
            } else {
                group.best_slot(&seq.prompt, &seq.job.params.lora)
            };
            let Some((i, common)) = slot else {
                still.push_back(seq);
                continue;
            };
            let reuse = !seq.job.params.prompt_logprobs;
            group.admit(i, common, seq, reuse);
            self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
        }
        self.waiting = still;
    }

    /// Drop models unused for `--keep-alive` (no running or waiting sequence).
    fn unload_idle(&mut self) {
        let Some(idle) = self.opts.keep_alive else {
            return;
        };
        for e in &self.registry.entries {
            let running = self.groups.get(&e.id).is_some_and(|g| g.active() > 0);
            let waiting = self.waiting.iter().any(|s| s.job.model.id == e.id);
            if running || waiting {
                self.registry.touch(&e.id);
                continue;
            }
            if !e.is_loaded() || self.registry.unload_if_idle(&e.id, idle) {
                self.groups.remove(&e.id);
            }
        }
    }
}

/// Embeddings: mean of the final normed hidden states over the input, L2-normalised.
fn embed(m: &LoadedModel, inputs: &[Vec<u32>], chunk: usize) -> Result<Vec<Vec<f32>>, String> {
    let c = m.model.cfg.d_model;
    let longest = inputs.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let mut state = m.model.new_state(longest, chunk);
    let mut out = Vec::with_capacity(inputs.len());
    for ids in inputs {
        state.reset();
        let mut sum = vec![0f64; c];
        for part in ids.chunks(state.n_batch) {
            let h = m
                .model
                .hidden(&mut state, part)
                .map_err(|e| e.to_string())?;
            for row in h.chunks_exact(c) {
                sum.iter_mut().zip(row).for_each(|(s, &x)| *s += x as f64);
            }
        }
        let n = ids.len().max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
        let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
        out.push(mean.iter().map(|x| (x / norm) as f32).collect());
    }
    Ok(out)
}

/// The drafter for `model`'s slots: none when speculation is off, or when the draft
/// does not share the model's vocabulary (said once on stderr).
fn spec_for(opts: &EngineOptions, model: &LoadedModel) -> Option<spec::Spec> {
    let (draft, max, p_min) = opts.spec.clone()?;
    if let Some(d) = &draft {
        if let Err(e) = check_draft_vocab(&model.model.file, &d.file) {
            eprintln!("toy serve: no speculative decoding for '{}': {e}", model.id);
            return None;
        }
    }
    Some(spec::Spec { draft, max, p_min })
}
