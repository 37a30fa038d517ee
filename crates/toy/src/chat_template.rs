//! Chat templates: the Jinja source in GGUF `tokenizer.chat_template`, rendered with
//! `minijinja` the way Hugging Face `transformers` renders them (`apply_chat_template`):
//! `trim_blocks` and `lstrip_blocks` on, trailing newlines kept, Python string methods
//! (`.strip()`, `.startswith()`, ...) through `minijinja_contrib::pycompat`, a
//! `raise_exception` function, and `tojson` printing as Python's `json.dumps` does.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};

const NAME: &str = "chat_template";

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant's calls, as OpenAI writes them (`[{id, type, function: {name, arguments}}]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A tool result's call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("model has no chat template (tokenizer.chat_template); pass one with --chat-template")]
    Missing,
    #[error("chat template does not parse: {0}")]
    Syntax(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// minijinja's message with its detail (e.g. the `raise_exception` text) and location.
fn describe(e: &Error) -> String {
    let mut msg = e.to_string();
    if let Some(detail) = e.detail() {
        if !msg.contains(detail) {
            msg = format!("{msg}: {detail}");
        }
    }
    msg
}

pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
}

/// Instructions one render may run (well under a second even when every one is a filter such
/// as `sort`, one instruction however long its input): a long chat under a real template takes a
/// small part of it; a template that would hang stops with an error.
const FUEL: u64 = 500_000;

impl ChatTemplate {
    /// Compiles `source`; a syntax error is reported here rather than at render time.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        env.set_syntax(syntax);
        // a template from a downloaded file runs on a budget: one that loops for ever (or
        // for a billion steps) stops with an error instead of hanging the server
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The template from `source` if there is one (an override, or the model's), else
    /// [`TemplateError::Missing`].
    pub fn from_source(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        Self::new(source.ok_or(TemplateError::Missing)?, bos_token, eos_token)
    }

    /// The model's `tokenizer.chat_template` (or `override_source`), with the bos/eos token
    /// texts taken from the vocabulary.
    pub fn from_gguf(
        f: &crate::gguf::GgufFile,
        override_source: Option<&str>,
    ) -> Result<Self, TemplateError> {
        let source = override_source
            .or_else(|| f.get_str("tokenizer.chat_template"))
            .or_else(|| builtin(f.architecture()?));
        let token_text = |key: &str| -> String {
            let tokens = f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array());
            let id = f.get_u64(key).and_then(|id| usize::try_from(id).ok());
            match (tokens, id) {
                (Some(tokens), Some(id)) => tokens.get(id).and_then(|t| t.as_str()).unwrap_or(""),
                _ => "",
            }
            .to_string()
        };
        let bos = token_text("tokenizer.ggml.bos_token_id");
        let eos = token_text("tokenizer.ggml.eos_token_id");
        Self::from_source(source, &bos, &eos)
    }

    /// The prompt text for `messages`; with `add_generation_prompt` it ends where the
    /// assistant's reply should begin.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// `render` with the request's `tools` (OpenAI's list) for templates that show them.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        let ctx = context! {
            messages => Value::from(Serde(messages)),
            tools => tools.map(|t| Value::from(Serde(t))),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        let mut out = crate::template_budget::Output::default();
        let r = crate::template_budget::with_deadline(|| tmpl.render_captured_to(ctx, &mut out));
        match (r, out.stopped) {
            (Ok(_), _) => String::from_utf8(out.text)
                .map_err(|_| TemplateError::Render("the template wrote invalid UTF-8".into())),
            (Err(_), Some(why)) => Err(TemplateError::Render(why)),
            (Err(e), None) => Err(TemplateError::Render(describe(&e))),
        }
    }
}

impl ChatTemplate {
    /// Whether the template's source contains `text` (`"tools"`, `"<tool_call>"`).
    pub fn mentions(&self, text: &str) -> bool {
        self.source.contains(text)
    }
}

/// HF templates call `raise_exception('...')` to reject a conversation they cannot format.
fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=indent)`,
/// so `{"a": 1, "b": [1, 2]}` with Python's separators (minijinja's own `tojson` is compact
/// and HTML-escapes). Keys come in minijinja's map order, which is sorted.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    crate::template_budget::check("tojson", value)?;
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, indent, 0)?;
    Ok(Value::from(out))
}

fn write_json(
    out: &mut String,
    v: &Value,
    indent: Option<usize>,
    depth: usize,
) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&v.to_string()),
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            out.push_str(&serde_json::to_string(s).map_err(json_error)?);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i > 0 { item_sep } else { "" });
                newline(out, depth + 1);
                write_json(out, item, indent, depth + 1)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                out.push_str(if i > 0 { item_sep } else { "" });
                newline(out, depth + 1);
                let key_text = key.as_str().map_or_else(|| key.to_string(), str::to_string);
                out.push_str(&serde_json::to_string(&key_text).map_err(json_error)?);
                out.push_str(": ");
                write_json(out, &v.get_item(key)?, indent, depth + 1)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        _ => {
            let s = v.to_string();
            out.push_str(&serde_json::to_string(&s).map_err(json_error)?);
        }
    }
    Ok(())
}

fn json_error(e: serde_json::Error) -> Error {
    Error::new(ErrorKind::BadSerialization, e.to_string())
}

/// Gemma's turns (`<start_of_turn>user` / `model`, a system message joined to the first user
/// turn), as llama.cpp's built-in `gemma` template writes them, for Gemma files that carry no
/// `tokenizer.chat_template`; the BOS comes from tokenization, not the text.
const GEMMA: &str = "{%- if messages[0]['role'] == 'system' -%}{%- set first = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for m in loop_messages -%}{%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}{{ '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + (m['content'] | trim) + '<end_of_turn>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}";

/// A template for architectures whose files may carry none.
fn builtin(arch: &str) -> Option<&'static str> {
    arch.starts_with("gemma").then_some(GEMMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, messages: &[ChatMessage]) -> Result<String, TemplateError> {
        ChatTemplate::new(src, "<s>", "</s>")?.render(messages, true)
    }

    #[test]
    fn a_template_that_would_run_for_ever_stops_on_its_budget() {
        let t0 = std::time::Instant::now();
        let spin = "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}{% endfor %}{% endfor %}{% endfor %}";
        let e = render(spin, &[ChatMessage::new("user", "hi")]).unwrap_err();
        assert!(e.to_string().contains("fuel"), "{e}");
        assert!(t0.elapsed().as_secs() < 5);
        // a long chat under a real template stays well inside it
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
        let long: Vec<ChatMessage> = (0..5000)
            .map(|i| ChatMessage::new("user", format!("m{i}")))
            .collect();
        assert!(render(chatml, &long).unwrap().contains("m4999"));
    }

    #[test]
    fn python_string_methods_work() {
        let src = "{{ messages[0].content.strip().upper() }}{% if messages[0].content.startswith(' hi') %}!{% endif %}";
        assert_eq!(
            render(src, &[ChatMessage::new("user", " hi \n")]).unwrap(),
            "HI!"
        );
    }

    #[test]
    fn blocks_are_trimmed_and_trailing_newline_kept() {
        let src =
            "{% for m in messages %}\n  {% if true %}\n{{ m.role }}\n  {% endif %}\n{% endfor %}\n";
        let out = render(src, &[ChatMessage::new("user", "x")]).unwrap();
        assert_eq!(out, "user\n");
    }

    #[test]
    fn raise_exception_is_a_render_error_with_its_message() {
        let src = "{{ raise_exception('roles must alternate') }}";
        let err = render(src, &[]).expect_err("must fail");
        assert!(matches!(err, TemplateError::Render(_)));
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }

    #[test]
    fn tojson_prints_like_python_json_dumps() {
        let src = "{{ {'a': [true, none, 'x\"y'], 'b': 1} | tojson }}|{{ [1] | tojson(indent=2) }}";
        let want = "{\"a\": [true, null, \"x\\\"y\"], \"b\": 1}|[\n  1\n]";
        assert_eq!(render(src, &[]).unwrap(), want);
    }

    #[test]
    fn bos_and_eos_tokens_are_in_scope() {
        assert_eq!(
            render("{{ bos_token }}{{ eos_token }}", &[]).unwrap(),
            "<s></s>"
        );
    }

    #[test]
    fn missing_source_is_missing() {
        let err = ChatTemplate::from_source(None, "", "")
            .err()
            .expect("must fail");
        assert!(matches!(err, TemplateError::Missing));
        assert!(err.to_string().contains("--chat-template"));
    }
}
