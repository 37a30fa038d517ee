//! `GET /lora-adapters` and `POST /lora-adapters`, llama-server's routes for the `--lora`
//! adapters: the list with each one's default scale, and new default scales for the
//! requests that do not name their own (see `crate::lora`).

use super::body::kind;
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// `[{"id": 0, "path": "...", "scale": 1.0}, ...]`.
pub async fn list(State(state): State<AppState>) -> Json<Value> {
    Json(state.registry.loras.json())
}

/// Body `[{"id": 0, "scale": 0.2}, ...]`: those scales; adapters not named go to 0.
pub async fn set(State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("request body is not valid JSON: {e}")).code("invalid_json")
    })?;
    if !v.is_array() {
        return Err(ApiError::bad_request(format!(
            "request body must be a list of {{\"id\": N, \"scale\": S}}, got {}",
            kind(&v)
        )));
    }
    let loras = &state.registry.loras;
    loras.set(loras.parse(&v, "lora")?);
    Ok(Json(json!({"success": true})))
}
