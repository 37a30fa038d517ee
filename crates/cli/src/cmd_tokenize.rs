//! `toy tokenize`: ids and pieces of a text.

use crate::common::ModelArgs;
use anyhow::Result;
use toy::tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Print `{"ids":[...],"pieces":[...]}`.
    #[arg(long)]
    json: bool,
    /// The text.
    text: String,
}

pub fn run(a: Args) -> Result<()> {
    let tok = Tokenizer::from_gguf(&*a.model.gguf()?)?;
    let ids = tok.encode(&a.text, true)?;
    let pieces: Vec<String> = ids.iter().map(|&i| tok.piece(i)).collect();
    if a.json {
        println!("{}", serde_json::json!({ "ids": ids, "pieces": pieces }));
    } else {
        for (i, p) in ids.iter().zip(&pieces) {
            println!("{i:>7} {p:?}");
        }
    }
    Ok(())
}
