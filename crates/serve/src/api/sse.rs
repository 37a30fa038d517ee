//! Streaming responses as OpenAI sends them (server-sent events): every chunk carries the
//! same `id` and `created`; chat opens each choice with a `role` delta; text arrives as it
//! is final (UTF-8 complete, clear of stop strings); each choice ends with a chunk holding
//! its `finish_reason`; with `stream_options.include_usage`, one more chunk with empty
//! `choices` and the usage (every other chunk then has `"usage": null`); then
//! `data: [DONE]`. A client that disconnects drops this stream, which closes the event
//! channel, which frees its slots in the engine.

use super::format::{chat_logprob, response_id, usage, Format, LegacyLogprobs};
use super::gen::{event_index, GenRequest, RequestLog};
use crate::engine::{Event, SeqDone};
use crate::models::unix_now;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use tokio::sync::mpsc::UnboundedReceiver;

struct Streamer {
    req: GenRequest,
    id: String,
    created: u64,
    done: Vec<Option<SeqDone>>,
    finished: usize,
    /// Legacy logprobs offsets, per choice.
    offsets: Vec<usize>,
    outputs: Vec<String>,
    log: RequestLog,
}

impl Streamer {
    fn chunk(&self, choice: Value) -> Value {
        let object = match self.req.format {
            Format::Chat => "chat.completion.chunk",
            Format::Completion => "text_completion",
        };
        let mut c = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.req.model.id,
            "system_fingerprint": super::gen::fingerprint(),
            "choices": [choice],
        });
        if self.req.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    fn choice(&self, index: usize, text: &str, logprobs: Value, finish: Option<&str>) -> Value {
        match self.req.format {
            Format::Chat => {
                let delta = if finish.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Format::Completion => {
                json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
            }
        }
    }

    /// The chunks sent before any token: chat roles, completions echo.
    fn start(&mut self) -> Vec<Value> {
        let total = self.done.len();
        let mut out = Vec::new();
        for i in 0..total {
            match self.req.format {
                Format::Chat => out.push(self.chunk(json!({
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": null,
                    "finish_reason": null,
                }))),
                Format::Completion => {
                    // with prompt logprobs, the echo goes out with them
                    if self.req.params.prompt_logprobs {
                        continue;
                    }
                    if let Some(echo) = &self.req.echo {
                        let text = echo[i / self.req.n].clone();
                        self.offsets[i] = text.chars().count();
                        out.push(self.chunk(self.choice(i, &text, Value::Null, None)));
                    }
                }
            }
        }
        out
    }

    fn event(&mut self, ev: Event) -> Vec<Value> {
        let i = event_index(&ev);
        if i >= self.done.len() {
            return Vec::new();
        }
        let m = self.req.model.clone();
        let want_lp = self.req.params.logprobs.is_some();
        match ev {
            Event::Token {
                id, text, logprob, ..
            } => {
                // a reply that may call tools is read whole, then sent as calls or content
                if self.req.tools.is_some() {
                    self.outputs[i].push_str(&text);
                    return Vec::new();
                }
                if text.is_empty() && !want_lp {
                    return Vec::new();
                }
                self.outputs[i].push_str(&text);
                let lp = match (self.req.format, want_lp) {
                    (_, false) => Value::Null,
                    (Format::Chat, true) => json!({
                        "content": logprob.iter().map(|l| chat_logprob(&m, l)).collect::<Vec<_>>()
                    }),
                    (Format::Completion, true) => {
                        let mut l = LegacyLogprobs::new(self.offsets[i]);
                        l.push(&m, id, logprob.as_ref());
                        self.offsets[i] = l.offset;
                        l.take()
                    }
                };
                vec![self.chunk(self.choice(i, &text, lp, None))]
            }
            Event::Text { text, .. } => {
                self.outputs[i].push_str(&text);
                if self.req.tools.is_some() {
                    return Vec::new();
                }
                vec![self.chunk(self.choice(i, &text, Value::Null, None))]
            }
            Event::PromptLogprobs { logprobs, .. } => {
                let prompt = self.req.prompts[i / self.req.n].clone();
                let mut l = LegacyLogprobs::new(0);
                l.push_prompt(&m, &prompt, &logprobs);
                self.offsets[i] = l.offset;
                let echo = self
                    .req
                    .echo
                    .as_ref()
                    .map_or(String::new(), |e| e[i / self.req.n].clone());
                vec![self.chunk(self.choice(i, &echo, l.take(), None))]
            }
            Event::Error { message, .. } => {
                vec![
                    json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
                ]
            }
            Event::Done(d) => {
                let mut finish = d.finish.api_name();
                self.done[i] = Some(d);
                self.finished += 1;
                let mut out = Vec::new();
                if let Some(t) = self.req.tools.clone() {
                    let (reply, f) = t.reply(&self.outputs[i], finish);
                    finish = f;
                    for delta in reply.deltas() {
                        out.push(self.chunk(json!({"index": i, "delta": delta,
                            "logprobs": null, "finish_reason": null})));
                    }
                }
                out.push(self.chunk(self.choice(i, "", Value::Null, Some(finish))));
                out
            }
        }
    }

    fn all_done(&self) -> bool {
        self.finished == self.done.len()
    }

    /// The usage chunk (when asked for); writes the telemetry line.
    fn end(&mut self) -> Vec<Value> {
        let done: Vec<&SeqDone> = self.done.iter().flatten().collect();
        let u = usage(&done, self.req.n);
        if self.log_prompts() {
            self.log.set("output", json!(self.outputs));
        }
        self.log.done(&done, self.req.n, 200);
        if !self.req.include_usage {
            return Vec::new();
        }
        let mut c = self.chunk(Value::Null);
        c["choices"] = json!([]);
        c["usage"] = u;
        vec![c]
    }

    fn log_prompts(&self) -> bool {
        self.req.logged_prompt.is_some()
    }
}

fn frame(chunks: &[Value]) -> Bytes {
    let mut s = String::new();
    for c in chunks {
        s.push_str("data: ");
        s.push_str(&c.to_string());
        s.push_str("\n\n");
    }
    Bytes::from(s)
}

pub fn response(
    req: GenRequest,
    rx: UnboundedReceiver<Event>,
    total: usize,
    log: RequestLog,
) -> Response {
    let mut st = Streamer {
        id: response_id(req.format),
        created: unix_now(),
        done: vec![None; total],
        finished: 0,
        offsets: vec![0; total],
        outputs: vec![String::new(); total],
        req,
        log,
    };
    let first = frame(&st.start());
    let rest = stream::unfold(Some((st, rx)), |state| async move {
        let (mut st, mut rx) = state?;
        loop {
            if st.all_done() {
                let mut out = frame(&st.end()).to_vec();
                out.extend_from_slice(b"data: [DONE]\n\n");
                return Some((Bytes::from(out), None));
            }
            match rx.recv().await {
                Some(ev) => {
                    let chunks = st.event(ev);
                    if !chunks.is_empty() {
                        return Some((frame(&chunks), Some((st, rx))));
                    }
                }
                None => {
                    st.log.write(500);
                    let err = json!({"error": {"message": "the engine stopped", "type": "server_error", "param": null, "code": null}});
                    let mut out = frame(&[err]).to_vec();
                    out.extend_from_slice(b"data: [DONE]\n\n");
                    return Some((Bytes::from(out), None));
                }
            }
        }
    });
    let body = stream::once(async move { first })
        .chain(rest)
        .map(Ok::<Bytes, Infallible>);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
