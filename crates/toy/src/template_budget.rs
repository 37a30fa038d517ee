//! A chat template's budget beyond minijinja's fuel. Fuel counts instructions, but one
//! instruction can be as long as its input: `{{ 3 * messages | sort }}` inside a loop over a
//! long chat sorts and prints the whole chat on every turn (found by fuzzing: 3 s for 300
//! messages), and `10**9 * messages` is a lazy list whose `| list` would never end. So a
//! render also has
//! - a deadline (250 ms: a real template renders a 600-message chat in a few), checked on
//!   every piece of output and at every filter that walks a sequence;
//! - an output limit (16 MiB);
//! - a length limit (1,000,000 items) on what those filters accept.
//!
//! The filters here replace minijinja's built-ins of the same names and call them.

use minijinja::value::{Kwargs, Rest, StringInput, Value};
use minijinja::{filters as builtin, Environment, Error, ErrorKind, State};
use std::borrow::Cow;
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

type Res = Result<Value, Error>;
type Seq = Result<Vec<Value>, Error>;

/// Registers the guarded filters in `env`, over minijinja's.
pub fn add_filters(env: &mut Environment<'static>) {
    env.add_filter("sort", |s: &State, v: Value, k: Kwargs| -> Res {
        check("sort", &v)?;
        builtin::sort(s, v, k)
    });
    env.add_filter("dictsort", |v: &Value, k: Kwargs| -> Res {
        check("dictsort", v)?;
        builtin::dictsort(v, k)
    });
    env.add_filter("unique", |s: &State, v: Value, k: Kwargs| -> Res {
        check("unique", &v)?;
        builtin::unique(s, v, k)
    });
    env.add_filter("groupby", |v: Value, a: Option<&str>, k: Kwargs| -> Res {
        check("groupby", &v)?;
        builtin::groupby(v, a, k)
    });
    env.add_filter("list", |s: &State, v: Value| -> Res {
        check("list", &v)?;
        builtin::list(s, v)
    });
    env.add_filter("reverse", |v: &Value| -> Res {
        check("reverse", v)?;
        builtin::reverse(v)
    });
    env.add_filter("items", |v: &Value| -> Res {
        check("items", v)?;
        builtin::items(v)
    });
    env.add_filter("sum", |s: &State, v: Value| -> Res {
        check("sum", &v)?;
        builtin::sum(s, v)
    });
    env.add_filter("min", |s: &State, v: Value| -> Res {
        check("min", &v)?;
        builtin::min(s, v)
    });
    env.add_filter("max", |s: &State, v: Value| -> Res {
        check("max", &v)?;
        builtin::max(s, v)
    });
    env.add_filter("last", |v: Value| -> Res {
        check("last", &v)?;
        builtin::last(v)
    });
    env.add_filter("string", |s: &State, v: &Value| -> Res {
        check("string", v)?;
        builtin::string(s, v)
    });
    env.add_filter(
        "join",
        |s: &State, v: &Value, j: Option<StringInput<'_>>| -> Res {
            check("join", v)?;
            builtin::join(s, v, j)
        },
    );
    env.add_filter(
        "batch",
        |s: &State, v: Value, n: usize, f: Option<Value>| -> Res {
            check("batch", &v)?;
            builtin::batch(s, v, n, f)
        },
    );
    env.add_filter(
        "slice",
        |s: &State, v: Value, n: usize, f: Option<Value>| -> Res {
            check("slice", &v)?;
            builtin::slice(s, v, n, f)
        },
    );
    env.add_filter("map", |s: &State, v: Value, a: Rest<Value>| -> Seq {
        check("map", &v)?;
        builtin::map(s, v, a)
    });
    env.add_filter(
        "select",
        |s: &State, v: Value, t: Option<Cow<'_, str>>, a: Rest<Value>| -> Seq {
            check("select", &v)?;
            builtin::select(s, v, t, a)
        },
    );
    env.add_filter(
        "reject",
        |s: &State, v: Value, t: Option<Cow<'_, str>>, a: Rest<Value>| -> Seq {
            check("reject", &v)?;
            builtin::reject(s, v, t, a)
        },
    );
    env.add_filter(
        "selectattr",
        |s: &State, v: Value, at: Cow<'_, str>, t: Option<Cow<'_, str>>, a: Rest<Value>| -> Seq {
            check("selectattr", &v)?;
            builtin::selectattr(s, v, at, t, a)
        },
    );
    env.add_filter(
        "rejectattr",
        |s: &State, v: Value, at: Cow<'_, str>, t: Option<Cow<'_, str>>, a: Rest<Value>| -> Seq {
            check("rejectattr", &v)?;
            builtin::rejectattr(s, v, at, t, a)
        },
    );
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
        assert!(e.contains("budget") || e.contains("MiB"), "{e}");
        assert!(secs < 0.6, "{secs} s");
        // and with no output at all
        let (r, secs) = render(
            "{% for m in messages %}{% set x = 3 * messages | sort %}{% endfor %}",
            600,
        );
        assert!(r.unwrap_err().contains("ms budget"));
        assert!(secs < 0.6, "{secs} s");
    }

    #[test]
    fn a_lazy_billion_item_list_is_refused_before_it_is_walked() {
        let (r, secs) = render("{{ (1000000000 * messages) | list | length }}", 2);
        let e = r.unwrap_err();
        assert!(e.contains("`list` got 2000000000 items"), "{e}");
        assert!(secs < 0.1, "{secs} s");
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
