//! `toy chat`: an interactive chat on stdin/stdout. The history is rendered with the model's
//! chat template every turn; the KV cache keeps the shared prefix, so each turn only
//! prefills what is new. `/reset` clears the history, `/quit` (or end of input) leaves.

use crate::common::{load_with_lora, LoraArgs, ModelArgs, SamplingArgs};
use anyhow::{Context, Result};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use toy::chat_template::{ChatMessage, ChatTemplate};
use toy::infer::generate::{generate, GenerateOptions};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// A system message to open the chat with.
    #[arg(long)]
    system: Option<String>,
    /// A Jinja template file to use instead of the model's.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// Most tokens per reply.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    n_predict: usize,
    #[arg(short = 'c', long, default_value_t = 4096)]
    ctx: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub fn run(a: Args) -> Result<()> {
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let source = match &a.chat_template {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading '{}'", p.display()))?)
        }
        None => None,
    };
    let template = ChatTemplate::from_gguf(&model.file, source.as_deref())?;
    let mut state = model.new_state(a.ctx, 512);
    let mut cached: Vec<u32> = Vec::new();
    let mut history: Vec<ChatMessage> = a
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.as_str()))
        .collect();
    let opts = GenerateOptions {
        max_tokens: a.n_predict,
        stop: Vec::new(),
        sampler: a.sampling.config(&tok),
    };
    eprintln!(
        "chatting with {} (seed {}; /reset clears, /quit or Ctrl-D leaves)",
        a.model.model.display(),
        opts.sampler.seed
    );
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                history.retain(|m| m.role == "system");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let ids = tok.encode(&template.render(&history, true)?, true)?;
        let keep = common_prefix(&cached, &ids).min(ids.len().saturating_sub(1));
        state.cache.truncate(keep);
        cached.truncate(keep);
        let g = match generate(&model, &mut state, &tok, &ids[keep..], &opts, |s| {
            let _ = write!(out, "{s}");
            let _ = out.flush();
        }) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("\nerror: {e}; the history is cleared");
                history.retain(|m| m.role == "system");
                state.reset();
                cached.clear();
                continue;
            }
        };
        writeln!(out)?;
        cached.extend_from_slice(&ids[keep..]);
        cached.extend_from_slice(&g.tokens);
        cached.truncate(state.pos());
        history.push(ChatMessage::new("assistant", g.text.trim()));
    }
    Ok(())
}
