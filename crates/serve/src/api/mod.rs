//! The HTTP routes. Handlers parse and check a request, then hand it to the engine; they
//! never run the model themselves.

pub mod body;
pub mod chat;
pub mod completions;
mod constraint;
pub mod embeddings;
mod format;
mod gen;
pub mod lora;
pub mod misc;
mod params;
pub mod runs;
mod sampling;
mod sse;
mod tools;
