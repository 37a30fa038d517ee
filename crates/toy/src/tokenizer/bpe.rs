//! The byte-level BPE of a `gpt2` vocabulary on the `tokenizers` crate: the pre-tokenizer
//! regexes llama.cpp picks by `tokenizer.ggml.pre`, the merges, and the special tokens.

use super::{backend, pre, TokenizerError, TokenizerSpec};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// The BPE of `spec`; `is_special(i)`: token `i` is CONTROL or USER_DEFINED.
pub(super) fn build(
    spec: &TokenizerSpec,
    is_special: impl Fn(usize) -> bool,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let pre_name = spec.pre.as_deref().unwrap_or("default");
    let exprs = pre::regexes(pre_name).ok_or_else(|| TokenizerError::UnknownPre {
        name: pre_name.to_string(),
    })?;
    let vocab: Vocab = spec
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    // A merge whose parts are not tokens cannot fire in llama.cpp either; the `tokenizers`
    // BPE builder would reject it, so it is dropped here.
    let merges = spec
        .merges
        .iter()
        .filter_map(|m| {
            let split = m.char_indices().skip(1).find(|&(_, c)| c == ' ')?.0;
            let (l, r) = (&m[..split], &m[split + 1..]);
            let ok = vocab.contains_key(l) && vocab.contains_key(r);
            ok.then(|| (l.to_string(), r.to_string()))
        })
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(backend)?;

    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(exprs.len() + 1);
    for e in exprs {
        let pattern = SplitPattern::Regex(e.to_string());
        let split =
            Split::new(pattern, SplitDelimiterBehavior::Isolated, false).map_err(backend)?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, false, false).into());

    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner.with_pre_tokenizer(Some(Sequence::new(steps)));
    inner.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    let special: Vec<AddedToken> = (0..spec.tokens.len())
        .filter(|&i| is_special(i) && !spec.tokens[i].is_empty())
        .map(|i| AddedToken::from(spec.tokens[i].clone(), true))
        .collect();
    inner.add_special_tokens(&special);
    Ok(inner)
}
