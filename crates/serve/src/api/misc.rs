//! The small routes: the model list, `/tokenize` and `/detokenize` (llama-server's shapes,
//! plus an optional `model`), `/health`, `/metrics`, the page at `/`, and the JSON answers
//! for unknown paths (404) and wrong methods (405).

use super::body::{kind, JsonBody};
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub const INDEX_HTML: &str = include_str!("../../assets/index.html");

fn model_json(e: &crate::models::Entry) -> Value {
    json!({
        "id": e.id,
        "object": "model",
        "created": e.created,
        "owned_by": "toy",
        "loaded": e.is_loaded(),
    })
}

pub async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = state.registry.entries.iter().map(model_json).collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let e = state.registry.find(Some(&id))?;
    Ok(Json(model_json(e)))
}

pub async fn tokenize(
    State(state): State<AppState>,
    JsonBody(f): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let content = f
        .str("content")?
        .ok_or_else(|| ApiError::invalid("content", "'content' is required"))?;
    let add_special = f.bool("add_special")?.unwrap_or(false);
    let with_pieces = f.bool("with_pieces")?.unwrap_or(false);
    let model = state.model(&f).await?;
    let ids = model
        .tok
        .encode(content, add_special)
        .map_err(|e| ApiError::invalid("content", e.to_string()))?;
    let tokens: Vec<Value> = if with_pieces {
        ids.iter()
            .map(|&id| json!({"id": id, "piece": model.tok.piece(id)}))
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(Json(json!({ "tokens": tokens })))
}

pub async fn detokenize(
    State(state): State<AppState>,
    JsonBody(f): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let list = match f.get("tokens") {
        None => return Err(ApiError::invalid("tokens", "'tokens' is required")),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::invalid(
                "tokens",
                format!("'tokens' must be an array of token ids, got {}", kind(v)),
            ))
        }
    };
    let model = state.model(&f).await?;
    let vocab = model.model.cfg.vocab;
    let ids: Vec<u32> = list
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64()
                .filter(|&x| x < vocab as u64)
                .map(|x| x as u32)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "tokens",
                        format!("'tokens[{i}]' is {v}, not a token id below {vocab}"),
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Json(json!({"content": model.tok.decode(&ids)})))
}

pub async fn health(State(state): State<AppState>) -> Response {
    if state.registry.loading() {
        return ApiError::unavailable("loading model")
            .code("loading")
            .into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let models: Vec<(String, bool)> = state
        .registry
        .entries
        .iter()
        .map(|e| (e.id.clone(), e.is_loaded()))
        .collect();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(&models),
    )
        .into_response()
}

pub async fn index() -> Html<&'static str> {
    Html(INDEX_HTML)
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

pub async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{method} is not allowed on {}", uri.path()),
    )
    .code("method_not_allowed")
}
