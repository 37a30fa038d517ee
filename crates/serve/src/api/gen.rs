//! Running a generation request for chat and completions alike: queue it on the engine
//! (429 when the queue is full), then either gather every choice into one JSON response or
//! stream it (see `sse.rs`). Each request leaves one telemetry line, also when the client
//! goes away mid-way.

use super::format::{chat_logprob, response_id, usage, Format, LegacyLogprobs};
use super::sse;
use super::tools::Tools;
use crate::engine::{Ended, Event, GenJob, GenParams, Job, SeqDone, TokenLogprob};
use crate::error::ApiError;
use crate::metrics::{CountedByLog, Metrics};
use crate::models::{unix_now, LoadedModel};
use crate::telemetry::Telemetry;
use crate::AppState;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

pub struct GenRequest {
    pub format: Format,
    pub model: Arc<LoadedModel>,
    pub prompts: Vec<Arc<Vec<u32>>>,
    /// Choices per prompt.
    pub n: usize,
    pub params: GenParams,
    pub stream: bool,
    pub include_usage: bool,
    /// Completions `echo`: the prompt's text, per prompt.
    pub echo: Option<Vec<String>>,
    /// The prompt text for the telemetry (`--log-prompts` only).
    pub logged_prompt: Option<Value>,
    pub started: Instant,
    /// Calls are parsed from chat replies (tools given, `tool_choice` not `none`).
    pub tools: Option<Arc<Tools>>,
}

/// One telemetry line per request, written when the request ends, and its count in
/// `toy_requests_total` with the status it ended with (a stream's status is only known at
/// its end, so the `count_requests` layer leaves these requests to their log). Dropped
/// unwritten, the client went away: the line gets status 499 and the counts of what the
/// engine did for it, once the engine has let go of the job (see `engine::Ended`).
pub struct RequestLog {
    tel: Arc<Telemetry>,
    metrics: Arc<Metrics>,
    route: String,
    line: Value,
    started: Instant,
    /// Choices per prompt.
    n: usize,
    /// The request's prompt tokens, each prompt once (also those of sequences that never
    /// left the queue).
    prompt_tokens: usize,
    ended: Arc<Ended>,
    written: bool,
}

/// Token counts and the earliest time to first token of `done` into `line`.
fn put_counts(line: &mut Value, done: &[&SeqDone], n: usize) {
    let u = usage(done, n);
    line["prompt_tokens"] = u["prompt_tokens"].clone();
    line["completion_tokens"] = u["completion_tokens"].clone();
    line["cached_tokens"] = u["prompt_tokens_details"]["cached_tokens"].clone();
    let ttft = done
        .iter()
        .filter_map(|d| d.ttft_ms)
        .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.min(t))));
    line["ttft_ms"] = json!(ttft.map(|t| (t * 100.0).round() / 100.0));
}

impl RequestLog {
    pub fn new(state: &AppState, route: &str, req: &GenRequest, ended: Arc<Ended>) -> Self {
        let line =
            json!({"type": "request", "route": route, "model": req.model.id, "stream": req.stream});
        Self {
            tel: state.telemetry.clone(),
            metrics: state.metrics.clone(),
            route: route.to_string(),
            line,
            started: req.started,
            n: req.n,
            prompt_tokens: req.prompts.iter().map(|p| p.len()).sum(),
            ended,
            written: false,
        }
    }

    pub fn set(&mut self, key: &str, v: Value) {
        self.line[key] = v;
    }

    pub fn done(&mut self, done: &[&SeqDone], n: usize, status: u16) {
        put_counts(&mut self.line, done, n);
        self.write(status);
    }

    pub fn write(&mut self, status: u16) {
        if self.written {
            return;
        }
        self.written = true;
        let ms = self.started.elapsed().as_secs_f64() * 1e3;
        self.line["total_ms"] = json!((ms * 100.0).round() / 100.0);
        self.line["status"] = json!(status);
        self.tel.write(self.line.take());
        self.metrics.request(&self.route, status);
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if self.written {
            return;
        }
        self.written = true;
        let mut line = self.line.take();
        let ms = self.started.elapsed().as_secs_f64() * 1e3;
        line["total_ms"] = json!((ms * 100.0).round() / 100.0);
        line["status"] = json!(499);
        let (tel, metrics) = (self.tel.clone(), self.metrics.clone());
        let (route, n, prompt_tokens) =
            (std::mem::take(&mut self.route), self.n, self.prompt_tokens);
        // runs when the engine has ended (or dropped) every sequence of the job: here, at
        // the end of this drop, if it already has
        self.ended.then(move |dones| {
            let done: Vec<&SeqDone> = dones.iter().collect();
            put_counts(&mut line, &done, n);
            line["prompt_tokens"] = json!(prompt_tokens);
            tel.write(line);
            metrics.request(&route, 499);
        });
    }
}

/// Everything one choice produced.
#[derive(Default)]
pub struct ChoiceOut {
    pub text: String,
    pub tokens: Vec<(u32, Option<TokenLogprob>)>,
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
    pub done: Option<SeqDone>,
    pub error: Option<String>,
}

impl ChoiceOut {
    /// Apply an event for this choice.
    pub fn apply(&mut self, ev: Event) {
        match ev {
            Event::Token {
                text, id, logprob, ..
            } => {
                self.text.push_str(&text);
                self.tokens.push((id, logprob));
            }
            Event::Text { text, .. } => self.text.push_str(&text),
            Event::PromptLogprobs { logprobs, .. } => self.prompt_logprobs = Some(logprobs),
            Event::Error { message, .. } => self.error = Some(message),
            Event::Done(d) => self.done = Some(d),
        }
    }
}

pub fn event_index(ev: &Event) -> usize {
    match ev {
        Event::Token { index, .. }
        | Event::Text { index, .. }
        | Event::PromptLogprobs { index, .. }
        | Event::Error { index, .. } => *index,
        Event::Done(d) => d.index,
    }
}

pub async fn run(state: &AppState, req: GenRequest, route: &str) -> Result<Response, ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let prompts: Vec<(usize, Arc<Vec<u32>>)> = req
        .prompts
        .iter()
        .enumerate()
        .flat_map(|(p, ids)| (0..req.n).map(move |j| (p * req.n + j, ids.clone())))
        .collect();
    let total = prompts.len();
    let ended = Arc::new(Ended::default());
    let job = GenJob {
        model: req.model.clone(),
        prompts,
        params: req.params.clone(),
        events: tx,
        ended: ended.clone(),
        metrics: state.metrics.clone(),
        enqueued: Instant::now(),
    };
    state
        .engine
        .submit(Job::Gen(Box::new(job)))
        .map_err(|e| e.api_error(state.cfg.queue))?;
    // from here on the request's log counts it, whatever the response
    let mut log = RequestLog::new(state, route, &req, ended);
    if let Some(p) = &req.logged_prompt {
        log.set("prompt", p.clone());
    }
    let mut resp = if req.stream {
        sse::response(req, rx, total, log)
    } else {
        collect(req, rx, total, log)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    };
    resp.extensions_mut().insert(CountedByLog);
    Ok(resp)
}

async fn collect(
    req: GenRequest,
    mut rx: mpsc::UnboundedReceiver<Event>,
    total: usize,
    mut log: RequestLog,
) -> Result<Response, ApiError> {
    let mut choices: Vec<ChoiceOut> = (0..total).map(|_| ChoiceOut::default()).collect();
    let mut finished = 0;
    while finished < total {
        let Some(ev) = rx.recv().await else {
            log.write(500);
            return Err(ApiError::internal("the engine stopped"));
        };
        finished += usize::from(matches!(ev, Event::Done(_)));
        let i = event_index(&ev);
        if let Some(c) = choices.get_mut(i) {
            c.apply(ev);
        }
    }
    if let Some(e) = choices.iter().find_map(|c| c.error.clone()) {
        log.write(500);
        return Err(ApiError::internal(e));
    }
    let done: Vec<&SeqDone> = choices.iter().filter_map(|c| c.done.as_ref()).collect();
    let usage = usage(&done, req.n);
    if log.tel.log_prompts {
        let texts: Vec<&str> = choices.iter().map(|c| c.text.as_str()).collect();
        log.set("output", json!(texts));
    }
    log.done(&done, req.n, 200);
    let m = &req.model;
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let finish = c.done.as_ref().map(|d| d.finish.api_name());
            match req.format {
                Format::Chat => {
                    let (message, finish) = match (&req.tools, finish) {
                        (Some(t), Some(f)) => {
                            let (reply, f) = t.reply(&c.text, f);
                            (reply.message(), Some(f))
                        }
                        _ => (json!({"role": "assistant", "content": c.text}), finish),
                    };
                    json!({
                        "index": i,
                        "message": message,
                        "logprobs": req.params.logprobs.map(|_| json!({
                            "content": c.tokens.iter().filter_map(|(_, lp)| lp.as_ref())
                                .map(|lp| chat_logprob(m, lp)).collect::<Vec<_>>(),
                        })),
                        "finish_reason": finish,
                    })
                }
                Format::Completion => {
                    let echo = req.echo.as_ref().map(|e| e[i / req.n].as_str());
                    let mut lp = LegacyLogprobs::new(0);
                    if req.params.logprobs.is_some() {
                        if let Some(prompt_lps) = &c.prompt_logprobs {
                            lp.push_prompt(m, &req.prompts[i / req.n], prompt_lps);
                        } else {
                            lp.offset = echo.map_or(0, |e| e.chars().count());
                        }
                        for (id, l) in &c.tokens {
                            lp.push(m, *id, l.as_ref());
                        }
                    }
                    json!({
                        "index": i,
                        "text": format!("{}{}", echo.unwrap_or(""), c.text),
                        "logprobs": req.params.logprobs.map(|_| lp.take()),
                        "finish_reason": finish,
                    })
                }
            }
        })
        .collect();
    let object = match req.format {
        Format::Chat => "chat.completion",
        Format::Completion => "text_completion",
    };
    Ok(Json(json!({
        "id": response_id(req.format),
        "object": object,
        "created": unix_now(),
        "model": m.id,
        "system_fingerprint": fingerprint(),
        "choices": out,
        "usage": usage,
    }))
    .into_response())
}

/// The `system_fingerprint` of every reply and streamed chunk: this build.
pub(crate) fn fingerprint() -> String {
    format!("toy-{}", env!("CARGO_PKG_VERSION"))
}
