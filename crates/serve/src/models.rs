//! The served models: ids from file stems, loaded on first use by a loader thread (requests
//! for it wait, `/health` says 503 meanwhile), dropped again when the engine finds one idle
//! past `--keep-alive`.

use crate::clock::Clock;
use crate::error::{ApiError, ServeError};
use crate::lora::Adapters;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use toy::chat_template::ChatTemplate;
use toy::infer::constrain::Grammars;
use toy::model::Model;
use toy::tokenizer::Tokenizer;

/// A model ready to run, with what the handlers need to turn requests into tokens.
pub struct LoadedModel {
    pub id: String,
    pub model: Model,
    pub tok: Tokenizer,
    /// `None` when the GGUF has no chat template (chat requests get a 400).
    pub template: Option<ChatTemplate>,
    /// Positions per sequence: the server's `--ctx`, at most the trained context.
    pub ctx: usize,
    /// The token table for constrained decoding, built on the first request that needs it.
    grammars: std::sync::OnceLock<Result<Arc<Grammars>, String>>,
}

impl LoadedModel {
    /// Open `path` with the server's adapters beside its weights (their ids are their indices).
    pub fn load(id: &str, path: &Path, ctx: usize, loras: &Adapters) -> Result<Self, String> {
        let mut model =
            Model::open(path).map_err(|e| format!("loading '{}': {e}", path.display()))?;
        for a in &loras.list {
            model.add_lora(&a.adapter).map_err(|e| {
                format!(
                    "lora adapter '{}' on '{}': {e}",
                    a.path.display(),
                    path.display()
                )
            })?;
        }
        let tok = Tokenizer::from_gguf(&model.file)
            .map_err(|e| format!("tokenizer of '{}': {e}", path.display()))?;
        let template = ChatTemplate::from_gguf(&model.file, None).ok();
        let ctx = ctx.min(model.cfg.ctx_train.max(1)).max(2);
        Ok(Self {
            id: id.to_string(),
            model,
            tok,
            template,
            ctx,
            grammars: Default::default(),
        })
    }

    /// The constraint compiler for this model's vocabulary.
    pub fn grammars(&self) -> Result<Arc<Grammars>, String> {
        self.grammars
            .get_or_init(|| {
                Grammars::new(&self.tok, self.model.cfg.vocab)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }
}

#[derive(Clone)]
pub enum LoadState {
    Unloaded,
    Loading,
    Loaded(Arc<LoadedModel>),
    Failed(String),
}

pub struct Entry {
    pub id: String,
    pub path: PathBuf,
    /// The file's modification time (unix seconds), as `created` in `/v1/models`.
    pub created: u64,
    state: watch::Sender<LoadState>,
    last_used: Mutex<Instant>,
    clock: Clock,
}

impl Entry {
    pub fn is_loaded(&self) -> bool {
        matches!(*self.state.borrow(), LoadState::Loaded(_))
    }

    fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = self.clock.now();
        }
    }
}

pub struct Registry {
    pub entries: Vec<Entry>,
    ctx: usize,
    /// Further names of the first model (`--alias`).
    aliases: Vec<String>,
    /// Requests must name a served model exactly (`--exact-model`).
    exact: bool,
    /// The `--lora` adapters every model is loaded with.
    pub loras: Arc<Adapters>,
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl Registry {
    /// The models of `-m` and of `--models-dir`, checked to exist, ids unique, and the
    /// adapters of `loras`, checked to fit every one of them.
    pub fn new(
        files: &[PathBuf],
        dir: Option<&Path>,
        ctx: usize,
        clock: Clock,
        loras: &[(PathBuf, f32)],
    ) -> Result<Self, ServeError> {
        let mut paths: Vec<PathBuf> = files.to_vec();
        if let Some(dir) = dir {
            let err = |source| ServeError::ModelsDir {
                dir: dir.display().to_string(),
                source,
            };
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(err)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                })
                .collect();
            found.sort();
            paths.extend(found);
        }
        if paths.is_empty() {
            return Err(ServeError::NoModels);
        }
        let mut entries: Vec<Entry> = Vec::new();
        for path in paths {
            let meta = std::fs::metadata(&path)
                .map_err(|_| ServeError::MissingModel(path.display().to_string()))?;
            let id = stem(&path);
            if entries.iter().any(|e| e.id == id) {
                return Err(ServeError::DuplicateId(id));
            }
            let created = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            entries.push(Entry {
                id,
                path,
                created,
                state: watch::Sender::new(LoadState::Unloaded),
                last_used: Mutex::new(clock.now()),
                clock: clock.clone(),
            });
        }
        let paths: Vec<&Path> = entries.iter().map(|e| e.path.as_path()).collect();
        let loras = Arc::new(Adapters::load(loras, &paths)?);
        Ok(Self {
            entries,
            ctx,
            loras,
            aliases: Vec::new(),
            exact: false,
        })
    }

    /// `aliases` name the first model too; with `exact`, a request naming no served model
    /// is refused even when one model is served.
    pub fn with_names(mut self, aliases: &[String], exact: bool) -> Self {
        self.aliases = aliases.to_vec();
        self.exact = exact;
        self
    }

    /// The entry a request for `id` runs on: the model of that id or alias; any other name
    /// when one model is served (as llama-server answers `gpt-3.5-turbo` with its model,
    /// under its own name), unless names must be exact.
    pub fn resolve(&self, id: Option<&str>) -> Result<&Entry, ApiError> {
        match self.find(id) {
            Err(_) if !self.exact && self.entries.len() == 1 => Ok(&self.entries[0]),
            r => r,
        }
    }

    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.id.clone()).collect()
    }

    /// The entry a request names; with one model served, `model` may be left out.
    pub fn find(&self, id: Option<&str>) -> Result<&Entry, ApiError> {
        match id {
            Some(id) if self.aliases.iter().any(|a| a == id) => Ok(&self.entries[0]),
            Some(id) => self
                .entries
                .iter()
                .find(|e| e.id == id)
                .ok_or_else(|| ApiError::model_not_found(id, &self.ids())),
            None if self.entries.len() == 1 => Ok(&self.entries[0]),
            None => Err(ApiError::invalid(
                "model",
                format!(
                    "'model' is required when several models are served: {}",
                    self.ids().join(", ")
                ),
            )),
        }
    }

    /// Whether some model is being loaded right now.
    pub fn loading(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(*e.state.borrow(), LoadState::Loading))
    }

    /// The loaded model, loading it first (on a thread of its own) if it is not.
    pub async fn get(&self, entry: &Entry) -> Result<Arc<LoadedModel>, ApiError> {
        entry.touch();
        let start = entry.state.send_if_modified(|s| {
            if matches!(s, LoadState::Unloaded | LoadState::Failed(_)) {
                *s = LoadState::Loading;
                true
            } else {
                false
            }
        });
        let mut rx = entry.state.subscribe();
        if start {
            let (tx, id, path, ctx, loras) = (
                entry.state.clone(),
                entry.id.clone(),
                entry.path.clone(),
                self.ctx,
                self.loras.clone(),
            );
            std::thread::Builder::new()
                .name(format!("load {id}"))
                .spawn(move || {
                    // a panic while loading must not leave the model 'loading' for ever
                    let loaded =
                        std::panic::catch_unwind(|| LoadedModel::load(&id, &path, ctx, &loras))
                            .unwrap_or_else(|_| {
                                Err(format!("loading '{}' panicked", path.display()))
                            });
                    let state = match loaded {
                        Ok(m) => LoadState::Loaded(Arc::new(m)),
                        Err(e) => LoadState::Failed(e),
                    };
                    tx.send_replace(state);
                })
                .map_err(|e| ApiError::internal(format!("cannot start a loader thread: {e}")))?;
        }
        let state = rx
            .wait_for(|s| !matches!(s, LoadState::Loading))
            .await
            .map_err(|_| ApiError::internal("model registry closed"))?
            .clone();
        match state {
            LoadState::Loaded(m) => Ok(m),
            LoadState::Failed(e) => Err(ApiError::internal(e).code("model_load_failed")),
            _ => Err(ApiError::internal(format!(
                "model '{}' was unloaded while loading",
                entry.id
            ))),
        }
    }

    /// Mark `id` unloaded if it has not been asked for within `idle`; true when it was.
    /// The memory goes when the last holder (engine, in-flight handler) drops its `Arc`.
    pub fn unload_if_idle(&self, id: &str, idle: Duration) -> bool {
        let Some(e) = self.entries.iter().find(|e| e.id == id) else {
            return false;
        };
        let now = e.clock.now();
        let idle_long = e
            .last_used
            .lock()
            .is_ok_and(|t| now.saturating_duration_since(*t) >= idle);
        idle_long
            && e.state.send_if_modified(|s| {
                if matches!(s, LoadState::Loaded(_)) {
                    *s = LoadState::Unloaded;
                    true
                } else {
                    false
                }
            })
    }

    /// Record use of `id` by the engine (a running sequence keeps its model).
    pub fn touch(&self, id: &str) {
        if let Some(e) = self.entries.iter().find(|e| e.id == id) {
            e.touch();
        }
    }
}

/// Seconds since the epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
