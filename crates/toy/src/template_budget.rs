//! A chat template's budget beyond minijinja's fuel. Since minijinja 3 fuel pays for
//! instructions, output bytes and every item a built-in filter or operator visits, so
//! `{{ 3 * messages | sort }}` inside a loop over a long chat (found by fuzzing: 3 s for 300
//! messages on minijinja 2) and `7000016137029551615 * (x | sort)` (a lazy repeat of an empty
//! list that minijinja 2 walked for ever) now end on fuel. As a backstop, and for toy's own
//! filters, a render also has
//! - a deadline (250 ms: a real template renders a 600-message chat in a few), checked on
//!   every piece of output and in toy's filters;
//! - an output limit (16 MiB);
//! - a length limit (1,000,000 items) on what toy's filters accept.

use minijinja::value::Value;
use minijinja::{Error, ErrorKind};
use std::cell::Cell;
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_millis(250);
pub const MAX_OUTPUT: usize = 16 << 20;
pub const MAX_ITEMS: usize = 1_000_000;

thread_local! {
    /// The running render's deadline on this thread (renders do not nest).
    static UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` (one render) under the deadline.
pub fn with_deadline<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Instant>);
    impl Drop for Reset {
        fn drop(&mut self) {
            UNTIL.with(|u| u.set(self.0));
        }
    }
    let _reset = Reset(UNTIL.with(|u| u.replace(Some(Instant::now() + DEADLINE))));
    f()
}

fn over_time() -> bool {
    UNTIL.with(|u| u.get()).is_some_and(|t| Instant::now() > t)
}

fn budget_error(what: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, what)
}

/// Before a filter walks `v`: the deadline, and its length when it has one.
pub fn check(filter: &str, v: &Value) -> Result<(), Error> {
    if over_time() {
        return Err(budget_error(format!(
            "the template ran over its {} ms budget (at `{filter}`)",
            DEADLINE.as_millis()
        )));
    }
    match v.len() {
        Some(n) if n > MAX_ITEMS => Err(budget_error(format!(
            "`{filter}` got {n} items, more than a chat template may walk ({MAX_ITEMS})"
        ))),
        _ => Ok(()),
    }
}

/// The render's output: a string that stops at the deadline and at [`MAX_OUTPUT`].
#[derive(Default)]
pub struct Output {
    pub text: Vec<u8>,
    /// Why it stopped, when it did.
    pub stopped: Option<String>,
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let why = if self.text.len() + buf.len() > MAX_OUTPUT {
            Some(format!(
                "the template wrote more than {} MiB",
                MAX_OUTPUT >> 20
            ))
        } else if over_time() {
            Some(format!(
                "the template ran over its {} ms budget",
                DEADLINE.as_millis()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            self.stopped = Some(why.clone());
            return Err(std::io::Error::other(why));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::chat_template::{ChatMessage, ChatTemplate};
    use std::time::Instant;

    fn render(src: &str, n: usize) -> (Result<String, String>, f64) {
        let msgs: Vec<ChatMessage> = (0..n)
            .map(|i| ChatMessage::new(["user", "assistant"][i % 2], format!("message {i}")))
            .collect();
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let t0 = Instant::now();
        let r = t.render(&msgs, true).map_err(|e| e.to_string());
        (r, t0.elapsed().as_secs_f64())
    }

    #[test]
    fn whole_chat_filters_inside_a_loop_stop_at_the_deadline() {
        // the fuzzer's find: the whole chat sorted and printed on every turn
        let (r, secs) = render(
            "{% for m in messages %}{{ 3 * messages | sort }}{% endfor %}",
            600,
        );
        let e = r.unwrap_err();
        assert!(e.contains("fuel") || e.contains("budget"), "{e}");
        assert!(secs < 0.6, "{secs} s");
        // and with no output at all
        let (r, secs) = render(
            "{% for m in messages %}{% set x = 3 * messages | sort %}{% endfor %}",
            600,
        );
        let e = r.unwrap_err();
        assert!(e.contains("fuel") || e.contains("budget"), "{e}");
        assert!(secs < 0.6, "{secs} s");
    }

    #[test]
    fn a_lazy_billion_item_list_is_refused_before_it_is_walked() {
        let (r, secs) = render("{{ (1000000000 * messages) | list | length }}", 2);
        let e = r.unwrap_err();
        assert!(e.contains("too large"), "{e}");
        assert!(secs < 0.1, "{secs} s");
        // the fuzzer's second find: an empty list repeated 7e18 times, no item, no output
        let (r, secs) = render("{{ 7000016137029551615 * ([] | sort) }}|", 2);
        assert_eq!(r.unwrap(), "[]|");
        assert!(secs < 0.1, "{secs} s");
        let (r, secs) = render(
            "{{ (7000016137029551615 * ([] | sort)) | list | length }}",
            2,
        );
        assert_eq!(r.unwrap(), "0");
        assert!(secs < 0.1, "{secs} s");
    }

    #[test]
    fn toys_tojson_refuses_a_huge_list() {
        let (r, _) = render("{{ range(2000000) | list | tojson }}", 1);
        assert!(r.is_err());
    }

    #[test]
    fn real_templates_keep_their_filters() {
        let src = "{% for m in messages | selectattr('role', 'equalto', 'user') %}{{ m.content }};{% endfor %}{{ messages | map(attribute='role') | unique | sort | join(',') }}|{{ [3, 1, 2] | sort | reverse | list | string }}|{{ {'b': 1, 'a': 2} | dictsort | first | join('=') }}";
        let (r, _) = render(src, 4);
        assert_eq!(
            r.unwrap(),
            "message 0;message 2;assistant,user|[3, 2, 1]|a=2"
        );
    }
}
