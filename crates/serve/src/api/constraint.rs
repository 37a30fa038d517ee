//! What a request's output must match: OpenAI's `response_format` (`json_object`,
//! `json_schema`), llama.cpp's top-level `json_schema`, and `grammar` (llguidance's Lark
//! syntax) and `regex`; compiled once per request with the model's token table (a 400
//! naming the problem when it does not compile).

use super::body::{kind, Fields};
use crate::engine::SharedGuide;
use crate::error::ApiError;
use crate::models::LoadedModel;
use serde_json::{json, Value};
use toy::infer::constrain::Constraint;

/// The constraint the request asks for and the field that asked, or `None`.
pub fn requested(f: &Fields) -> Result<Option<(Constraint, &'static str)>, ApiError> {
    let mut found: Vec<(Constraint, &'static str)> = Vec::new();
    if let Some(c) = response_format(f)? {
        found.push((c, "response_format"));
    }
    if let Some(s) = f.get("json_schema") {
        if !s.is_object() && !s.is_boolean() {
            return Err(ApiError::invalid(
                "json_schema",
                format!(
                    "'json_schema' must be a JSON schema object, got {}",
                    kind(s)
                ),
            ));
        }
        found.push((Constraint::JsonSchema(s.clone()), "json_schema"));
    }
    // an empty grammar is none, as llama-server takes it (front ends send "grammar": "")
    if let Some(g) = f.str("grammar")?.filter(|g| !g.trim().is_empty()) {
        found.push((Constraint::Lark(g.to_string()), "grammar"));
    }
    if let Some(r) = f.str("regex")? {
        found.push((Constraint::Regex(r.to_string()), "regex"));
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|c| c.1).collect();
        return Err(ApiError::invalid(
            found[1].1,
            format!(
                "at most one of response_format (JSON), json_schema, grammar and regex may be given, got {}",
                names.join(" and ")
            ),
        ));
    }
    Ok(found.pop())
}

/// `response_format`: `text` (no constraint), `json_object` (any object, or llama.cpp's
/// `schema` beside it) or `json_schema` with `json_schema.schema`.
fn response_format(f: &Fields) -> Result<Option<Constraint>, ApiError> {
    let Some(rf) = f.object("response_format")? else {
        return Ok(None);
    };
    let ty = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            "response_format.type",
            "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
        )
    })?;
    match ty {
        "text" => Ok(None),
        "json_object" => {
            let schema = rf
                .get("schema")
                .cloned()
                .unwrap_or(json!({"type": "object"}));
            Ok(Some(Constraint::JsonSchema(schema)))
        }
        "json_schema" => {
            let js = rf
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "response_format.json_schema",
                        "'response_format.json_schema' must be an object with a 'schema'",
                    )
                })?;
            let mut schema = match js.get("schema") {
                None | Some(Value::Null) => json!({"type": "object"}),
                Some(s) if s.is_object() || s.is_boolean() => s.clone(),
                Some(s) => {
                    return Err(ApiError::invalid(
                        "response_format.json_schema.schema",
                        format!(
                        "'response_format.json_schema.schema' must be a JSON schema object, got {}",
                        kind(s)
                    ),
                    ))
                }
            };
            if js.get("strict").and_then(Value::as_bool) == Some(true) {
                toy::infer::constrain::strict_schema(&mut schema);
            }
            Ok(Some(Constraint::JsonSchema(schema)))
        }
        other => Err(ApiError::invalid(
            "response_format.type",
            format!(
                "'response_format.type' is '{other}'; expected text, json_object or json_schema"
            ),
        )),
    }
}

/// `c` compiled for `m`'s vocabulary; a 400 on `param` when it does not compile.
pub fn compile(m: &LoadedModel, c: &Constraint, param: &str) -> Result<SharedGuide, ApiError> {
    let grammars = m.grammars().map_err(ApiError::internal)?;
    let guide = grammars.compile(c).map_err(|e| {
        ApiError::invalid(param, format!("'{param}': {e}")).code("invalid_constraint")
    })?;
    Ok(SharedGuide::new(guide))
}
