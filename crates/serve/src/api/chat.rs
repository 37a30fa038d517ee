//! `POST /v1/chat/completions`: messages rendered with the model's chat template
//! (`add_generation_prompt`), then generated like a completion.

use super::body::{kind, Fields, JsonBody};
use super::format::Format;
use super::gen::{self, GenRequest};
use super::tools::{self, Tools};
use super::{constraint, params};
use crate::error::ApiError;
use crate::AppState;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use toy::chat_template::ChatMessage;

/// Most top alternatives per token.
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// The text of a message's `content`: a string, or text parts.
fn content_text(v: Option<&Value>, at: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                let here = format!("{at}.content[{j}]");
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push_str(t),
                    (Some("text"), _) => {
                        return Err(ApiError::invalid(
                            &here,
                            format!("'{here}.text' must be a string"),
                        ))
                    }
                    (Some(other), _) => {
                        return Err(ApiError::unsupported(
                            &here,
                            &format!("only text parts, not '{other}'"),
                        ))
                    }
                    (None, _) => {
                        return Err(ApiError::invalid(&here, format!("'{here}' needs a 'type'")))
                    }
                }
            }
            Ok(out)
        }
        Some(v) => Err(ApiError::invalid(
            &format!("{at}.content"),
            format!(
                "'{at}.content' must be a string or an array of parts, got {}",
                kind(v)
            ),
        )),
    }
}

pub fn messages(f: &Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match f.get("messages") {
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::invalid(
                "messages",
                format!("'messages' must be an array, got {}", kind(v)),
            ))
        }
    };
    if list.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "'messages' must not be empty",
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(obj) = m.as_object() else {
            return Err(ApiError::invalid(
                &at,
                format!("'{at}' must be an object, got {}", kind(m)),
            ));
        };
        let role = match obj.get("role") {
            Some(Value::String(r)) => r.as_str(),
            Some(v) => {
                return Err(ApiError::invalid(
                    &format!("{at}.role"),
                    format!("'{at}.role' must be a string, got {}", kind(v)),
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    &format!("{at}.role"),
                    format!("'{at}.role' is required"),
                ))
            }
        };
        let role = match role {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" => "tool",
            "function" => {
                return Err(ApiError::unsupported(
                    &format!("{at}.role"),
                    "the deprecated 'function' role; use 'tool'",
                ))
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}.role"),
                    format!(
                    "'{at}.role' is '{other}'; expected system, developer, user, assistant or tool"
                ),
                ))
            }
        };
        let mut msg = ChatMessage::new(role, content_text(obj.get("content"), &at)?);
        match obj.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) if role == "assistant" => {
                msg.tool_calls = Some(Value::Array(calls.clone()))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    &format!("{at}.tool_calls"),
                    format!("'{at}.tool_calls' must be an array, on an assistant message"),
                ))
            }
        }
        if role == "tool" {
            msg.tool_call_id = obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        out.push(msg);
    }
    Ok(out)
}

pub async fn completions(
    State(state): State<AppState>,
    JsonBody(f): JsonBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    params::reject_unsupported(&f)?;
    let msgs = messages(&f)?;
    let constraint = constraint::requested(&f)?;
    let tools = tools::requested(&f)?;
    if let (Some((_, param)), Some(t)) = (&constraint, &tools) {
        if t.active() {
            return Err(ApiError::invalid(
                param,
                format!("'{param}' and tool calls cannot be combined: tool calls have a grammar of their own"),
            ));
        }
    }
    let (stream, include_usage) = params::stream(&f)?;
    let n = params::n(&f)?;
    let logprobs = f.bool("logprobs")?.unwrap_or(false);
    let top = f.int_in("top_logprobs", 0, MAX_TOP_LOGPROBS)?;
    if top.is_some() && !logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        ));
    }
    let model = state.model(&f).await?;
    let template = model.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "model",
            format!(
                "model '{}' has no chat template; use /v1/completions",
                model.id
            ),
        )
    })?;
    let tools = tools.map(|t| t.with_style_of(template));
    let msgs = match &tools {
        Some(t) => t.prepare(msgs),
        None => msgs,
    };
    let listed = tools.as_ref().and_then(|t| t.for_template());
    let text = template
        .render_with_tools(&msgs, listed.as_ref(), true)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let ids = model
        .tok
        .encode(&text, true)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    params::check_prompt(&model, &ids, "messages")?;
    let lp = logprobs.then_some(top.unwrap_or(0) as usize);
    let constraint = match tools.as_ref().and_then(|t| t.constraint(&model.tok)) {
        Some(c) => Some((c, "tools")),
        None => constraint,
    };
    let guide = constraint
        .map(|(c, param)| constraint::compile(&model, &c, param))
        .transpose()?;
    let gp = params::gen_params(&f, &model, &state.registry.loras, None, lp, false, guide)?;
    let req = GenRequest {
        format: Format::Chat,
        model: model.clone(),
        prompts: vec![Arc::new(ids)],
        n,
        params: gp,
        stream,
        include_usage,
        echo: None,
        logged_prompt: state.telemetry.log_prompts.then(|| f.0["messages"].clone()),
        started,
        tools: tools.filter(Tools::active).map(Arc::new),
    };
    gen::run(&state, req, "/v1/chat/completions").await
}
