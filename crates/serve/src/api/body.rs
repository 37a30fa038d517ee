//! Reading request bodies: our own extractor instead of axum's `Json` (whose rejections are
//! plain text), so malformed JSON, a body over the size limit and a non-object body all
//! answer in the OpenAI error shape; and typed field readers whose errors name the field.

use crate::error::ApiError;
use crate::AppState;
use axum::body::to_bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use futures_util::StreamExt;
use serde_json::{Map, Value};

/// Bodies up to this many times the limit are read before the 413 goes out.
const DRAIN_FACTOR: u64 = 8;

/// A JSON object body.
pub struct JsonBody(pub Fields);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.cfg.body_limit;
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("request body is larger than the limit of {limit} bytes"),
            )
            .code("body_too_large")
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            // read (and drop) a body of moderate size first: a client still sending when
            // the answer comes sees a broken connection instead of the 413
            if declared.is_some_and(|n| n <= DRAIN_FACTOR * limit as u64) {
                let mut data = req.into_body().into_data_stream();
                while let Some(Ok(_)) = data.next().await {}
            }
            return Err(too_large());
        }
        let bytes = to_bytes(req.into_body(), limit).await.map_err(|e| {
            if e.to_string().contains("length limit") {
                too_large()
            } else {
                ApiError::bad_request(format!("reading the request body: {e}"))
            }
        })?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!("request body is not valid JSON: {e}"))
                .code("invalid_json")
        })?;
        match value {
            Value::Object(map) => Ok(JsonBody(Fields(map))),
            other => Err(ApiError::bad_request(format!(
                "request body must be a JSON object, got {}",
                kind(&other)
            ))
            .code("invalid_json")),
        }
    }
}

/// The JSON type of a value, for messages ("got a string").
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(param: &str, want: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        param,
        format!("'{param}' must be {want}, got {}", kind(got)),
    )
}

/// The fields of a request object. `null` counts as absent, as the OpenAI API treats it.
pub struct Fields(pub Map<String, Value>);

impl Fields {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong(key, "a string", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong(key, "a boolean", v)),
        }
    }

    /// A number within `lo..=hi`.
    pub fn f32_in(&self, key: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN) as f32;
                if !(lo..=hi).contains(&x) {
                    return Err(ApiError::invalid(
                        key,
                        format!("'{key}' must be between {lo} and {hi}, got {n}"),
                    ));
                }
                Ok(Some(x))
            }
            Some(v) => Err(wrong(key, "a number", v)),
        }
    }

    /// An integer within `lo..=hi`.
    pub fn int_in(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n
                    .as_i64()
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                    .ok_or_else(|| wrong(key, "an integer", &Value::Number(n.clone())))?;
                if !(lo..=hi).contains(&x) {
                    return Err(ApiError::invalid(
                        key,
                        format!("'{key}' must be an integer from {lo} to {hi}, got {n}"),
                    ));
                }
                Ok(Some(x))
            }
            Some(v) => Err(wrong(key, "an integer", v)),
        }
    }

    /// `stop`: a string or a list of strings.
    pub fn strings(&self, key: &str, max: usize) -> Result<Vec<String>, ApiError> {
        let list = match self.get(key) {
            None => return Ok(Vec::new()),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(wrong(&format!("{key}[{i}]"), "a string", v)),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(wrong(key, "a string or an array of strings", v)),
        };
        if list.len() > max {
            return Err(ApiError::invalid(
                key,
                format!(
                    "'{key}' has {} entries, at most {max} are allowed",
                    list.len()
                ),
            ));
        }
        Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
    }

    pub fn object(&self, key: &str) -> Result<Option<&Map<String, Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(wrong(key, "an object", v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Fields {
        Fields(v.as_object().unwrap().clone())
    }

    #[test]
    fn type_errors_name_the_field() {
        let f = fields(json!({"temperature": "hot", "n": 2.5, "stop": [1], "top_p": 3}));
        let e = f.f32_in("temperature", 0.0, 2.0).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        assert!(e.message.contains("got a string"), "{}", e.message);
        assert_eq!(f.int_in("n", 1, 8).unwrap_err().param.as_deref(), Some("n"));
        assert_eq!(
            f.strings("stop", 4).unwrap_err().param.as_deref(),
            Some("stop[0]")
        );
        assert!(f
            .f32_in("top_p", 0.0, 1.0)
            .unwrap_err()
            .message
            .contains("between"));
    }

    #[test]
    fn null_is_absent_and_stop_takes_a_string_or_a_list() {
        let f = fields(json!({"seed": null, "stop": "END", "list": ["a", "", "b"]}));
        assert_eq!(f.int_in("seed", 0, 9).unwrap(), None);
        assert_eq!(f.strings("stop", 4).unwrap(), vec!["END"]);
        assert_eq!(f.strings("list", 4).unwrap(), vec!["a", "b"]);
        assert!(f.strings("list", 2).is_err());
    }
}
