//! Pre-tokenizer regexes by `tokenizer.ggml.pre` name, as llama.cpp's `llama-vocab.cpp`
//! (`llm_tokenizer_bpe`) lists them. Each expression splits the pieces left by the one
//! before it, keeping both matches and the text between them (HF `Split`, `Isolated`).

/// The gpt2 pattern, minus HF's trailing `|\s+` (unmatched text is kept as its own piece).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// llama3's pattern with `(?i:...)` spelt out, as llama.cpp adapted it.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Names accepted for `tokenizer.ggml.pre`, for the error message.
pub const KNOWN: &[&str] = &[
    "default",
    "gpt2",
    "gpt-2",
    "mpt",
    "olmo",
    "jais",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "llama3",
    "llama-bpe",
    "llama-v3",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "stablelm2",
    "deepseek-r1-qwen",
    "falcon",
];

/// The regexes for a pre-tokenizer name, or `None` if llama.cpp's name is not one we know.
pub fn regexes(name: &str) -> Option<Vec<&'static str>> {
    let exprs = match name {
        "default" => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        "gpt2" | "gpt-2" | "mpt" | "olmo" | "jais" => vec![GPT2],
        // Digits are split one by one before the gpt2 pattern runs.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" => {
            vec![r"\p{N}", GPT2]
        }
        "llama3" | "llama-bpe" | "llama-v3" | "dbrx" | "smaug-bpe" => vec![LLAMA3],
        "qwen2" | "stablelm2" | "deepseek-r1-qwen" => vec![QWEN2],
        "falcon" => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
        _ => return None,
    };
    Some(exprs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_has_regexes_that_compile() {
        for name in KNOWN {
            let exprs = regexes(name).unwrap_or_else(|| panic!("no regexes for {name}"));
            for e in exprs {
                assert!(fancy_regex_compiles(e), "{name}: {e}");
            }
        }
    }

    fn fancy_regex_compiles(expr: &str) -> bool {
        use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
        use tokenizers::SplitDelimiterBehavior;
        let pattern = SplitPattern::Regex(expr.to_string());
        Split::new(pattern, SplitDelimiterBehavior::Isolated, false).is_ok()
    }
}
