//! Tool calls (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`), enforced by a
//! grammar rather than asked for in the prompt. Two output formats:
//! - **Hermes** (templates that render `tools` and `<tool_call>`, as Qwen2.5's): the tools go
//!   to the template; calls are `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
//! - **Generic** (templates that know no tools, as SmolLM2's; llama.cpp's generic handler):
//!   the tools are described in a system message and the reply is one JSON object,
//!   `{"tool_call": {...}}`, `{"tool_calls": [...]}` or, under `auto`, `{"response": "..."}`.
//!
//! `none` renders no tools and leaves the reply free; `auto` allows a call or an answer;
//! `required` and the named form allow only calls (of that tool).

use super::body::{kind, Fields};
use crate::error::ApiError;
use serde_json::{json, Value};
use toy::chat_template::{ChatMessage, ChatTemplate};
use toy::infer::constrain::Constraint;
use toy::tokenizer::Tokenizer;

#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Generic,
    Hermes,
}

#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    /// The whole `{"type": "function", "function": {...}}` entry, as the template gets it.
    pub spec: Value,
    pub parameters: Value,
}

#[derive(Clone, Debug)]
pub struct Tools {
    pub list: Vec<Tool>,
    pub choice: ToolChoice,
    pub parallel: bool,
    pub style: Style,
}

/// One parsed call: the function's name and its arguments as a JSON string.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub name: String,
    pub arguments: String,
}

fn bad(param: &str, msg: String) -> ApiError {
    ApiError::invalid(param, msg)
}

/// `tools`, `tool_choice` and `parallel_tool_calls`; `None` without tools (and without a
/// `tool_choice` other than `none`).
pub fn requested(f: &Fields) -> Result<Option<Tools>, ApiError> {
    let list = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t, &format!("tools[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(bad(
                "tools",
                format!("'tools' must be an array, got {}", kind(v)),
            ))
        }
    };
    let choice = match f.get("tool_choice") {
        None if list.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(
                    "tool_choice",
                    format!("'tool_choice' is '{other}'; expected none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad(
                        "tool_choice",
                        "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}".into(),
                    )
                })?;
            if !list.iter().any(|t| t.name == name) {
                return Err(bad(
                    "tool_choice",
                    format!("'tool_choice' names '{name}', which is not in 'tools'"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
        Some(v) => {
            return Err(bad(
                "tool_choice",
                format!("'tool_choice' must be a string or an object, got {}", kind(v)),
            ))
        }
    };
    if list.is_empty() && choice != ToolChoice::None {
        return Err(bad(
            "tool_choice",
            "'tool_choice' other than none needs 'tools'".into(),
        ));
    }
    // llama.cpp's default: one call unless several are asked for (a small model given
    // the choice tends to repeat calls until max_tokens)
    let parallel = f.bool("parallel_tool_calls")?.unwrap_or(false);
    if list.is_empty() {
        return Ok(None);
    }
    Ok(Some(Tools {
        list,
        choice,
        parallel,
        style: Style::Generic,
    }))
}

fn tool(t: &Value, at: &str) -> Result<Tool, ApiError> {
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad(at, format!("'{at}.type' must be \"function\"")));
    }
    let func = t
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| bad(at, format!("'{at}.function' must be an object")))?;
    let name = func
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            bad(
                at,
                format!("'{at}.function.name' must be a non-empty string"),
            )
        })?;
    // arguments hold only the parameters the tool lists (as OpenAI's strict function calling)
    let parameters = match func.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p) if p.is_object() => {
            let mut p = p.clone();
            toy::infer::constrain::strict_schema(&mut p);
            p
        }
        Some(p) => {
            return Err(bad(
                at,
                format!(
                    "'{at}.function.parameters' must be a JSON schema object, got {}",
                    kind(p)
                ),
            ))
        }
    };
    Ok(Tool {
        name: name.to_string(),
        spec: t.clone(),
        parameters,
    })
}

impl Tools {
    /// The format `template` calls for.
    pub fn with_style_of(mut self, template: &ChatTemplate) -> Self {
        self.style = if template.mentions("tools") && template.mentions("<tool_call>") {
            Style::Hermes
        } else {
            Style::Generic
        };
        self
    }

    /// Whether calls are allowed (and so parsed from the reply).
    pub fn active(&self) -> bool {
        self.choice != ToolChoice::None
    }

    /// The schema of one call to a tool `tool_choice` allows.
    fn call_schema(&self) -> Value {
        let allowed = self.list.iter().filter(|t| match &self.choice {
            ToolChoice::Named(n) => &t.name == n,
            _ => true,
        });
        let one = |t: &Tool| {
            json!({"type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"], "additionalProperties": false})
        };
        json!({"anyOf": allowed.map(one).collect::<Vec<_>>()})
    }

    /// What the reply must match; `None` under `none`.
    pub fn constraint(&self, tok: &Tokenizer) -> Option<Constraint> {
        if !self.active() {
            return None;
        }
        let call = self.call_schema();
        let answers = self.choice == ToolChoice::Auto;
        Some(match self.style {
            Style::Generic => {
                let single = json!({"type": "object", "properties": {"tool_call": call},
                    "required": ["tool_call"], "additionalProperties": false});
                let mut forms = vec![single];
                if self.parallel {
                    forms.push(json!({"type": "object",
                        "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
                        "required": ["tool_calls"], "additionalProperties": false}));
                }
                if answers {
                    forms.push(json!({"type": "object",
                        "properties": {"response": {"type": "string"}},
                        "required": ["response"], "additionalProperties": false}));
                }
                Constraint::JsonSchema(json!({"anyOf": forms}))
            }
            Style::Hermes => {
                // the markers as the special tokens they are, where the vocabulary has them
                let marker = |m: &str| {
                    let special = tok.token_id(m).is_some_and(|id| tok.is_special(id));
                    if special {
                        m.to_string()
                    } else {
                        serde_json::to_string(m).unwrap_or_default()
                    }
                };
                let (open, close) = (marker("<tool_call>"), marker("</tool_call>"));
                let calls = if self.parallel {
                    "call (\"\\n\" call)*"
                } else {
                    "call"
                };
                let start = if answers {
                    format!("start: calls | plain\ncalls: {calls}\nplain: /[^<][\\s\\S]*/\n")
                } else {
                    format!("start: {calls}\n")
                };
                Constraint::Lark(format!(
                    "{start}call: {open} \"\\n\" %json {call} \"\\n\" {close}\n"
                ))
            }
        })
    }

    /// The messages as the template gets them: generic style describes the tools in a
    /// system message and writes earlier calls and tool results as the JSON it uses.
    pub fn prepare(&self, msgs: Vec<ChatMessage>) -> Vec<ChatMessage> {
        match self.style {
            // templates take the arguments as objects (`tool_call.arguments | tojson`)
            Style::Hermes => msgs
                .into_iter()
                .map(|mut m| {
                    if let Some(Value::Array(calls)) = m.tool_calls.as_mut() {
                        for c in calls.iter_mut() {
                            if let Some(f) = c.get_mut("function") {
                                let parsed = f
                                    .get("arguments")
                                    .and_then(Value::as_str)
                                    .and_then(|s| serde_json::from_str::<Value>(s).ok());
                                if let Some(args) = parsed {
                                    f["arguments"] = args;
                                }
                            }
                        }
                    }
                    m
                })
                .collect(),
            Style::Generic => {
                let mut out: Vec<ChatMessage> = msgs.into_iter().map(generic_message).collect();
                if self.active() {
                    let sys = self.system_prompt();
                    match out.first_mut().filter(|m| m.role == "system") {
                        Some(first) => first.content = format!("{}\n\n{sys}", first.content),
                        None => out.insert(0, ChatMessage::new("system", sys)),
                    }
                }
                out
            }
        }
    }

    /// `tools` for a template that renders them (Hermes style, and not under `none`).
    pub fn for_template(&self) -> Option<Value> {
        (self.style == Style::Hermes && self.active())
            .then(|| Value::Array(self.list.iter().map(|t| t.spec.clone()).collect()))
    }

    fn system_prompt(&self) -> String {
        let specs: Vec<&Value> = self.list.iter().map(|t| &t.spec).collect();
        let list = serde_json::to_string_pretty(&specs).unwrap_or_default();
        let mut s = format!("You can call these tools:\n{list}\n\nReply with one JSON object: {{\"tool_call\": {{\"name\": \"<tool name>\", \"arguments\": {{...}}}}}} to call a tool");
        if self.parallel {
            s.push_str(", {\"tool_calls\": [...]} to call several");
        }
        if self.choice == ToolChoice::Auto {
            s.push_str(", or {\"response\": \"<your answer>\"} to answer directly");
        }
        s.push('.');
        s
    }

    /// The calls in a finished reply and the text beside them; `None` when the reply holds
    /// no call in this format (then it is plain content).
    pub fn parse(&self, text: &str) -> Option<(Option<String>, Vec<Call>)> {
        match self.style {
            Style::Generic => {
                let v: Value = serde_json::from_str(text).ok()?;
                if let Some(r) = v.get("response").and_then(Value::as_str) {
                    return Some((Some(r.to_string()), Vec::new()));
                }
                let calls: Vec<&Value> = match (v.get("tool_call"), v.get("tool_calls")) {
                    (Some(c), _) => vec![c],
                    (None, Some(Value::Array(a))) => a.iter().collect(),
                    _ => return None,
                };
                let calls = calls.into_iter().map(call).collect::<Option<Vec<_>>>()?;
                Some((None, calls))
            }
            Style::Hermes => {
                let mut calls = Vec::new();
                let mut rest = text;
                let mut content = String::new();
                while let Some(at) = rest.find("<tool_call>") {
                    content.push_str(&rest[..at]);
                    let after = &rest[at + "<tool_call>".len()..];
                    let end = after.find("</tool_call>")?;
                    calls.push(call(&serde_json::from_str(after[..end].trim()).ok()?)?);
                    rest = &after[end + "</tool_call>".len()..];
                }
                content.push_str(rest);
                if calls.is_empty() {
                    return None;
                }
                let content = content.trim();
                Some(((!content.is_empty()).then(|| content.to_string()), calls))
            }
        }
    }
}

fn call(v: &Value) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").cloned().unwrap_or(json!({}));
    let arguments = match args {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(Call { name, arguments })
}

/// An assistant's earlier calls and a tool's result as generic style writes them.
fn generic_message(mut m: ChatMessage) -> ChatMessage {
    if let Some(calls) = m.tool_calls.take() {
        let list: Vec<Value> = calls
            .as_array()
            .map(|a| a.iter().map(generic_call).collect())
            .unwrap_or_default();
        let v = match list.len() {
            1 => json!({"tool_call": list[0]}),
            _ => json!({"tool_calls": list}),
        };
        m.content = v.to_string();
    }
    if m.role == "tool" {
        let id = m.tool_call_id.take();
        let v = json!({"tool_response": {"tool_call_id": id, "content": m.content}});
        return ChatMessage::new("user", v.to_string());
    }
    m
}

/// `{"id", "type", "function": {"name", "arguments": "<json>"}}` -> `{"name", "arguments": {...}}`.
fn generic_call(c: &Value) -> Value {
    let f = c.get("function").unwrap_or(c);
    let args = match f.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(v) => v.clone(),
        None => json!({}),
    };
    json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args})
}

/// A call's id, unique per server run.
pub fn call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let t = crate::models::unix_now();
    format!("call_{t:x}{:06x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A chat reply read for calls: its text content and its calls with their ids.
pub struct Reply {
    pub content: Option<String>,
    pub calls: Vec<(String, Call)>,
}

/// Characters of `arguments` per streamed fragment.
const FRAGMENT: usize = 16;

impl Tools {
    /// The reply of a finished choice and its finish reason (`tool_calls` when it calls; a
    /// reply that holds no call, or was cut, is its text as content).
    pub fn reply(&self, text: &str, finish: &'static str) -> (Reply, &'static str) {
        match self.parse(text) {
            Some((content, calls)) if !calls.is_empty() => {
                let calls = calls.into_iter().map(|c| (call_id(), c)).collect();
                (Reply { content, calls }, "tool_calls")
            }
            Some((content, _)) => (
                Reply {
                    content,
                    calls: Vec::new(),
                },
                finish,
            ),
            None => (
                Reply {
                    content: Some(text.to_string()),
                    calls: Vec::new(),
                },
                finish,
            ),
        }
    }
}

impl Reply {
    /// `message` of a chat response: `content` null when there are calls and no text.
    pub fn message(&self) -> Value {
        let mut m = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            m["tool_calls"] = self
                .calls
                .iter()
                .map(|(id, c)| {
                    json!({"id": id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        m
    }

    /// The stream's deltas: the content, then each call opened with its id and name and
    /// its arguments in fragments, as OpenAI streams them.
    pub fn deltas(&self) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some(c) = self.content.as_ref().filter(|c| !c.is_empty()) {
            out.push(json!({"content": c}));
        }
        for (k, (id, c)) in self.calls.iter().enumerate() {
            out.push(
                json!({"tool_calls": [{"index": k, "id": id, "type": "function",
                "function": {"name": c.name, "arguments": ""}}]}),
            );
            let chars: Vec<char> = c.arguments.chars().collect();
            for frag in chars.chunks(FRAGMENT) {
                let frag: String = frag.iter().collect();
                out.push(json!({"tool_calls": [{"index": k, "function": {"arguments": frag}}]}));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Fields {
        Fields(v.as_object().unwrap().clone())
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}})
    }

    #[test]
    fn tool_choice_forms_and_their_errors() {
        let t = requested(&fields(json!({"tools": [weather()]})))
            .unwrap()
            .unwrap();
        assert_eq!((t.choice.clone(), t.parallel), (ToolChoice::Auto, false));
        // strict arguments: only the listed parameters
        assert_eq!(t.list[0].parameters["additionalProperties"], false);
        let named = json!({"tools": [weather()],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}});
        let t = requested(&fields(named)).unwrap().unwrap();
        assert_eq!(t.choice, ToolChoice::Named("get_weather".into()));
        for (body, param) in [
            (
                json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (
                json!({"tools": [weather()], "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tools": [{"type": "function"}]}), "tools[0]"),
            (
                json!({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}),
                "tools[0]",
            ),
            (json!({"tools": "get_weather"}), "tools"),
        ] {
            let e = requested(&fields(body.clone())).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
        assert!(requested(&fields(json!({"tool_choice": "none"})))
            .unwrap()
            .is_none());
    }

    fn tools(style: Style, choice: ToolChoice) -> Tools {
        let mut t = requested(&fields(json!({"tools": [weather()]})))
            .unwrap()
            .unwrap();
        t.style = style;
        t.choice = choice;
        t
    }

    #[test]
    fn replies_are_read_as_calls_or_content_in_both_styles() {
        let g = tools(Style::Generic, ToolChoice::Auto);
        let (r, finish) = g.reply(
            r#"{"tool_call": {"name": "get_weather", "arguments": {"city": "Rome"}}}"#,
            "stop",
        );
        assert_eq!(finish, "tool_calls");
        assert_eq!(r.calls[0].1.name, "get_weather");
        assert_eq!(r.calls[0].1.arguments, r#"{"city":"Rome"}"#);
        let m = r.message();
        assert!(
            m["content"].is_null()
                && m["tool_calls"][0]["id"]
                    .as_str()
                    .unwrap()
                    .starts_with("call_")
        );
        let (r, finish) = g.reply(r#"{"response": "Hello!"}"#, "stop");
        assert_eq!(
            (r.content.as_deref(), finish, r.calls.len()),
            (Some("Hello!"), "stop", 0)
        );
        // a reply cut short is its text
        let (r, finish) = g.reply(r#"{"tool_call": {"na"#, "length");
        assert_eq!(
            (r.content.as_deref(), finish),
            (Some(r#"{"tool_call": {"na"#), "length")
        );

        let h = tools(Style::Hermes, ToolChoice::Required);
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
        let (r, finish) = h.reply(text, "stop");
        assert_eq!(finish, "tool_calls");
        let args: Vec<&str> = r.calls.iter().map(|c| c.1.arguments.as_str()).collect();
        assert_eq!(args, [r#"{"city":"Oslo"}"#, r#"{"city":"Rome"}"#]);
        assert!(r.content.is_none());
        // streamed: the arguments come back whole when the fragments are joined
        let joined: String = r
            .deltas()
            .iter()
            .filter(|d| d["tool_calls"][0]["index"] == 1)
            .filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str())
            .collect();
        assert_eq!(joined, r#"{"city":"Rome"}"#);
    }

    #[test]
    fn generic_style_writes_the_history_as_the_json_it_asks_for() {
        let g = tools(Style::Generic, ToolChoice::Auto);
        let mut a = ChatMessage::new("assistant", "");
        a.tool_calls = Some(json!([{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]));
        let mut t = ChatMessage::new("tool", "sunny");
        t.tool_call_id = Some("c1".into());
        let out = g.prepare(vec![ChatMessage::new("user", "hi"), a, t]);
        assert_eq!(out[0].role, "system");
        assert!(out[0].content.contains("get_weather") && out[0].content.contains("\"response\""));
        let call: Value = serde_json::from_str(&out[2].content).unwrap();
        assert_eq!(call["tool_call"]["arguments"]["city"], "Rome");
        assert_eq!(out[3].role, "user");
        assert!(out[3].content.contains("tool_response") && out[3].content.contains("sunny"));
        // under none the tools are not described
        let n = tools(Style::Generic, ToolChoice::None);
        assert_eq!(n.prepare(vec![ChatMessage::new("user", "hi")]).len(), 1);
    }

    /// The Hermes grammar takes a well-formed call (and, under auto, plain text) token by
    /// token and refuses a call of a tool not allowed.
    #[test]
    fn hermes_grammars_accept_calls_and_refuse_other_tools() {
        use toy::infer::constrain::Grammars;
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let model = toy::model::Model::open(&path).expect("the model (scripts/fetch-model.sh)");
        let tok = Tokenizer::from_gguf(&model.file).unwrap();
        let grammars = Grammars::new(&tok, model.cfg.vocab).unwrap();
        let takes = |t: &Tools, text: &str| {
            let mut g = grammars
                .compile(&t.constraint(&tok).unwrap())
                .expect("compiles");
            for id in tok.encode(text, false).unwrap() {
                let mask = g.mask().unwrap();
                if !mask.allows(id) {
                    return false;
                }
                g.consume(id).unwrap();
            }
            g.is_accepting()
        };
        let call = |city: &str| {
            format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\"}}}}\n</tool_call>")
        };
        let mut req = tools(Style::Hermes, ToolChoice::Required);
        assert!(takes(&req, &call("Oslo")));
        assert!(!takes(&req, "Sure, it is sunny."));
        assert!(!takes(&req, &format!("{}\n{}", call("Oslo"), call("Rome"))));
        req.parallel = true;
        assert!(takes(&req, &format!("{}\n{}", call("Oslo"), call("Rome"))));
        let auto = tools(Style::Hermes, ToolChoice::Auto);
        assert!(takes(&auto, "Sure, it is sunny."));
        assert!(takes(&auto, &call("Oslo")));
        let other = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        assert!(!takes(&req, other));
    }
}
