//! Putting a server together: the model registry, the engine thread, the routes with their
//! layers (request counting outermost, then CORS, then the API key check), and a listener on a small
//! tokio runtime (two threads: the model's threads get the cores).

use crate::api::{chat, completions, embeddings, lora, misc, runs};
use crate::config::ServeConfig;
use crate::engine::{self, EngineOptions};
use crate::error::{ApiError, ServeError};
use crate::metrics::{CountedByLog, Metrics};
use crate::models::Registry;
use crate::telemetry::Telemetry;
use crate::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::oneshot;

const GENERATING: &[&str] = &["/v1/chat/completions", "/v1/completions", "/v1/embeddings"];

/// Routes open without the API key: the page and the health check.
const PUBLIC: &[&str] = &["/", "/health"];

async fn count_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let resp = next.run(req).await;
    if resp.extensions().get::<CountedByLog>().is_some() {
        return resp;
    }
    let status = resp.status().as_u16();
    state.metrics.request(&route, status);
    // requests refused before they reach the engine still leave a telemetry line
    if (400..500).contains(&status) && GENERATING.contains(&route.as_str()) {
        state.telemetry.write(serde_json::json!({
            "type": "request", "route": route, "status": status,
        }));
    }
    resp
}

async fn check_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.cfg.api_key.as_deref() else {
        return next.run(req).await;
    };
    if PUBLIC.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(k) if k == key => next.run(req).await,
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid API key",
        )
        .code("invalid_api_key")
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing API key: send 'Authorization: Bearer <key>'",
        )
        .code("invalid_api_key")
        .into_response(),
    }
}

/// The `Access-Control-Allow-Origin` a request from `origin` gets under `allowed` (see
/// `ServeConfig::cors_origins`), if any.
fn cors_origin(allowed: &str, origin: &str) -> Option<String> {
    let local = |o: &str| {
        let host = o.split("://").nth(1).unwrap_or(o);
        let host = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        matches!(host, "localhost" | "127.0.0.1" | "[::1]")
    };
    match allowed.trim() {
        "none" | "" => None,
        "*" => Some(origin.to_string()),
        "localhost" => local(origin).then(|| origin.to_string()),
        list => list
            .split(',')
            .map(str::trim)
            .any(|o| o == origin)
            .then(|| origin.to_string()),
    }
}

/// CORS as llama-server answers it: a preflight (`OPTIONS`) is answered here, before the API
/// key check (browsers send no key with it), and every reply to an allowed origin carries
/// `Access-Control-Allow-Origin` (echoed), with credentials allowed.
async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    use axum::http::{HeaderValue, Method};
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .and_then(|o| cors_origin(&state.cfg.cors_origins, o));
    let preflight = req.method() == Method::OPTIONS;
    let asked = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    let mut resp = match preflight {
        true => StatusCode::NO_CONTENT.into_response(),
        false => next.run(req).await,
    };
    let Some(origin) = origin else {
        return resp;
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    if preflight {
        let methods = HeaderValue::from_static("GET, POST, DELETE, OPTIONS");
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, methods);
        // "*" does not cover Authorization: name the headers the browser asked for
        let headers = asked.unwrap_or(HeaderValue::from_static("*"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, headers);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
    }
    resp
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(misc::index))
        .route("/health", get(misc::health))
        .route("/metrics", get(misc::metrics))
        .route("/v1/models", get(misc::list_models))
        .route("/v1/models/{id}", get(misc::get_model))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/lora-adapters", get(lora::list).post(lora::set))
        .route("/api/runs", get(runs::list))
        .route("/api/runs/{id}/events", get(runs::events))
        .fallback(misc::not_found)
        .method_not_allowed_fallback(misc::method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), check_key))
        .layer(middleware::from_fn_with_state(state.clone(), cors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

/// A running server (from [`start`]); dropping it stops accepting connections.
pub struct Server {
    pub addr: SocketAddr,
    /// Where this run's telemetry goes.
    pub telemetry_dir: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

struct Prepared {
    state: AppState,
    listener: std::net::TcpListener,
    runtime: tokio::runtime::Runtime,
}

/// The draft model loaded, when speculative decoding is asked for.
#[allow(clippy::type_complexity)]
fn spec_options(
    cfg: &ServeConfig,
) -> Result<Option<(Option<Arc<toy::model::Model>>, usize, f32)>, ServeError> {
    let s = &cfg.spec;
    if s.draft.is_none() && !s.ngram {
        return Ok(None);
    }
    if s.max == 0 {
        return Err(ServeError::Config("--draft-max must be at least 1".into()));
    }
    let draft = match &s.draft {
        None => None,
        Some(p) => {
            let m = toy::model::Model::open_draft(p, s.as_stored);
            let m =
                m.map_err(|e| ServeError::Config(format!("draft model '{}': {e}", p.display())));
            Some(Arc::new(m?))
        }
    };
    Ok(Some((draft, s.max, s.p_min)))
}

fn prepare(cfg: ServeConfig) -> Result<Prepared, ServeError> {
    if cfg.parallel == 0 || cfg.queue == 0 || cfg.prefill_chunk == 0 {
        return Err(ServeError::Config(
            "--parallel, the queue and the prefill chunk must be at least 1".into(),
        ));
    }
    let registry = Arc::new(
        Registry::new(
            &cfg.models,
            cfg.models_dir.as_deref(),
            cfg.ctx,
            cfg.clock.clone(),
            &cfg.loras,
        )?
        .with_names(&cfg.aliases, cfg.exact_model),
    );
    let metrics = Arc::new(Metrics::default());
    let telemetry = Arc::new(Telemetry::open(
        &cfg.runs_dir,
        cfg.log_prompts,
        &registry.ids(),
    ));
    let engine = engine::spawn(
        EngineOptions {
            parallel: cfg.parallel,
            prefill_chunk: cfg.prefill_chunk,
            max_queue: cfg.queue,
            keep_alive: cfg.keep_alive,
            threads: cfg.threads,
            spec: spec_options(&cfg)?,
        },
        registry.clone(),
        metrics.clone(),
    )
    .map_err(|source| ServeError::Io {
        what: "starting the engine thread",
        source,
    })?;
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = std::net::TcpListener::bind(&addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| ServeError::Bind { addr, source })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http")
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io {
            what: "starting the HTTP runtime",
            source,
        })?;
    let state = AppState {
        cfg: Arc::new(cfg),
        registry,
        engine,
        metrics,
        telemetry,
    };
    Ok(Prepared {
        state,
        listener,
        runtime,
    })
}

async fn serve(
    p_state: AppState,
    listener: std::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    axum::serve(listener, router(p_state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Start a server on a thread of its own and return once it listens (port 0: a free one).
pub fn start(cfg: ServeConfig) -> Result<Server, ServeError> {
    let p = prepare(cfg)?;
    let addr = p.listener.local_addr().map_err(|source| ServeError::Io {
        what: "reading the listening address",
        source,
    })?;
    let telemetry_dir = p.state.telemetry.dir.clone();
    let (tx, rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("http-server".into())
        .spawn(move || {
            let Prepared {
                state,
                listener,
                runtime,
            } = p;
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(e) = runtime.block_on(serve(state, listener, shutdown)) {
                eprintln!("error: server stopped: {e}");
            }
        })
        .map_err(|source| ServeError::Io {
            what: "starting the server thread",
            source,
        })?;
    Ok(Server {
        addr,
        telemetry_dir,
        shutdown: Some(tx),
    })
}

/// Serve until Ctrl-C, printing the URL once listening.
pub fn run(cfg: ServeConfig) -> Result<(), ServeError> {
    let p = prepare(cfg)?;
    let addr = p.listener.local_addr().map_err(|source| ServeError::Io {
        what: "reading the listening address",
        source,
    })?;
    let models = p.state.registry.ids().join(", ");
    // `writeln!`, not `println!`: a server must keep serving when whoever started it stops
    // reading its output (println! panics on a closed pipe)
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "toy serve: http://{addr}/ (models: {models})");
    if let Some(dir) = &p.state.telemetry.dir {
        let _ = writeln!(out, "telemetry: {}", dir.join("events.jsonl").display());
    }
    let _ = out.flush();
    drop(out);
    let Prepared {
        state,
        listener,
        runtime,
    } = p;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    runtime
        .block_on(serve(state, listener, shutdown))
        .map_err(|source| ServeError::Io {
            what: "serving",
            source,
        })
}
