//! `toy template`: render a list of chat messages with the model's chat template.

use crate::common::ModelArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use toy::chat_template::{ChatMessage, ChatTemplate};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// JSON file holding `[{"role":..,"content":..}, ...]` (or `{"messages":[...]}`).
    #[arg(long)]
    messages: PathBuf,
    /// A Jinja template file to use instead of the model's.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// Do not append the assistant's turn opener.
    #[arg(long)]
    no_generation_prompt: bool,
}

pub fn read_messages(path: &PathBuf) -> Result<Vec<ChatMessage>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading '{}'", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("'{}' is not valid JSON", path.display()))?;
    let list = v.get("messages").cloned().unwrap_or(v);
    serde_json::from_value(list).with_context(|| {
        format!(
            "'{}': expected a list of {{\"role\": string, \"content\": string}}",
            path.display()
        )
    })
}

pub fn run(a: Args) -> Result<()> {
    let f = a.model.gguf()?;
    let msgs = read_messages(&a.messages)?;
    let source = match &a.chat_template {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading '{}'", p.display()))?)
        }
        None => None,
    };
    let t = ChatTemplate::from_gguf(&f, source.as_deref())?;
    print!("{}", t.render(&msgs, !a.no_generation_prompt)?);
    Ok(())
}
