//! Where a generation job's sequences report their end besides the event channel. The
//! channel closes when the client goes away, so the counts of what a cancelled request did
//! (prompt, cached and generated tokens, time to first token) reach its telemetry line
//! through this instead: the handler leaves a closure here, and it runs with every
//! sequence's `SeqDone` once the engine has let go of the job too (the last holder of the
//! `Arc` drops it).

use super::SeqDone;
use std::sync::Mutex;

type Then = Box<dyn FnOnce(Vec<SeqDone>) + Send>;

#[derive(Default)]
pub struct Ended {
    dones: Mutex<Vec<SeqDone>>,
    then: Mutex<Option<Then>>,
}

impl Ended {
    /// A sequence of the job has ended (called by the engine).
    pub fn push(&self, done: SeqDone) {
        if let Ok(mut d) = self.dones.lock() {
            d.push(done);
        }
    }

    /// Run `f` with every sequence's end once both the handler and the engine are done
    /// with the job. Sequences dropped from the queue before they started report nothing.
    pub fn then(&self, f: impl FnOnce(Vec<SeqDone>) + Send + 'static) {
        if let Ok(mut t) = self.then.lock() {
            *t = Some(Box::new(f));
        }
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        let f = self.then.get_mut().ok().and_then(Option::take);
        if let Some(f) = f {
            let dones = self.dones.get_mut().map(std::mem::take).unwrap_or_default();
            f(dones);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Ended, SeqDone};
    use crate::engine::FinishReason;
    use std::sync::{Arc, Mutex};

    #[test]
    fn the_closure_runs_once_both_sides_let_go_with_every_end() {
        let ended = Arc::new(Ended::default());
        let engine_side = ended.clone();
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        ended.then(move |d| *s.lock().unwrap() = Some(d));
        drop(ended);
        assert!(
            seen.lock().unwrap().is_none(),
            "the engine still holds the job"
        );
        engine_side.push(SeqDone {
            index: 0,
            finish: FinishReason::Cancelled,
            prompt_tokens: 5,
            completion_tokens: 3,
            cached_tokens: 2,
            ttft_ms: Some(1.5),
        });
        drop(engine_side);
        let got = seen.lock().unwrap().take().expect("ran");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].completion_tokens, 3);
    }
}
