//! Errors as the OpenAI API spells them: `{"error": {"message", "type", "param", "code"}}`
//! with the HTTP status that goes with each kind, and the typed errors of starting a server.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client. Every handler returns these, so every failure has the
/// same JSON shape whatever went wrong.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before trying again (`Retry-After`, sent with 429s).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 about one field of the request body.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::bad_request(message).param(param)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 for a field this server does not implement, named so the client knows what to drop.
    pub fn unsupported(param: &str, what: &str) -> Self {
        Self::invalid(
            param,
            format!("'{param}' is not supported by this server ({what})"),
        )
        .code("unsupported_parameter")
    }

    pub fn model_not_found(id: &str, known: &[String]) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "the model '{id}' does not exist; served models: {}",
                known.join(", ")
            ),
        )
        .param("model")
        .code("model_not_found")
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message).code("not_found")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            message,
        )
    }

    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("no models to serve: pass -m MODEL.gguf or --models-dir DIR")]
    NoModels,
    #[error("model file '{0}' not found")]
    MissingModel(String),
    #[error("reading models directory '{dir}': {source}")]
    ModelsDir { dir: String, source: std::io::Error },
    #[error("two models have the id '{0}' (the file stem); rename one")]
    DuplicateId(String),
    #[error("{0}")]
    Config(String),
    /// A `--lora` file that cannot be read or does not fit a served model (names both).
    #[error("{0}")]
    Lora(String),
    #[error("runs directory '{dir}': {source}")]
    RunsDir { dir: String, source: std::io::Error },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}
