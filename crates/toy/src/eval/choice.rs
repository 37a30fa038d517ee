//! Multiple-choice scoring by llama-perplexity's `--hellaswag` method (`hellaswag_score` in
//! tools/perplexity/perplexity.cpp of llama.cpp 0c1e570): each ending is tokenized together
//! with its context, as `context + " " + ending` with BOS, so the tokens at the seam are the
//! ones the model would see; the tokens every ending shares are skipped, and an ending scores
//! the mean log-probability of its remaining tokens (the normalised log-likelihood). An item
//! is right when the first best-scoring ending is the labelled one. The accuracy's standard
//! error is sqrt(p(1-p)/n).
//!
//! Input: JSON lines `{"context": "...", "endings": ["...", ...], "label": N}` (other fields
//! are ignored; blank lines are skipped).

use crate::model::{Logits, Model, ModelError, State};
use crate::tokenizer::Tokenizer;
use tinynn::kernels::act::log_sum_exp;

#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    #[error("line {line}: {why}")]
    Line { line: usize, why: String },
    #[error("line {line}: {source}")]
    Model { line: usize, source: ModelError },
    #[error("no items: expected JSON lines of {{\"context\", \"endings\": [...], \"label\"}}")]
    Empty,
}

/// One question: `label` indexes the right one of `endings`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct ChoiceItem {
    pub context: String,
    pub endings: Vec<String>,
    pub label: usize,
    /// 1-based line in the input.
    #[serde(skip)]
    pub line: usize,
}

/// Every item of a JSON-lines `text`; a bad line is an error naming it.
pub fn parse_items(text: &str) -> Result<Vec<ChoiceItem>, ChoiceError> {
    let mut items = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let bad = |why: String| ChoiceError::Line { line, why };
        let mut item: ChoiceItem = serde_json::from_str(l).map_err(|e| {
            bad(format!(
                "{e}: expected {{\"context\": str, \"endings\": [str, ...], \"label\": int}}"
            ))
        })?;
        item.line = line;
        if item.endings.len() < 2 {
            return Err(bad(format!(
                "{} endings, expected at least 2",
                item.endings.len()
            )));
        }
        if item.label >= item.endings.len() {
            let n = item.endings.len();
            return Err(bad(format!(
                "label {} out of range: expected 0 ..= {}",
                item.label,
                n - 1
            )));
        }
        if let Some(k) = item.endings.iter().position(|e| e.trim().is_empty()) {
            return Err(bad(format!("ending {k} is empty")));
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err(ChoiceError::Empty);
    }
    Ok(items)
}

/// An item as token sequences: `seqs[k]` is context + ending k; `prefix` tokens are shared
/// by all of them and not scored (at least 1, at most the shortest length - 1).
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceTokens {
    pub seqs: Vec<Vec<u32>>,
    pub prefix: usize,
    pub line: usize,
}

impl ChoiceTokens {
    /// From ready token sequences (one per ending, context included).
    pub fn new(seqs: Vec<Vec<u32>>, line: usize) -> Result<Self, ChoiceError> {
        let shortest = seqs.iter().map(Vec::len).min().unwrap_or(0);
        let mut prefix = 0;
        while prefix < shortest && seqs.iter().all(|s| s[prefix] == seqs[0][prefix]) {
            prefix += 1;
        }
        // an ending must keep one token to score, and the first scored token needs one before it
        let prefix = prefix.min(shortest.saturating_sub(1));
        if prefix == 0 {
            let why = "the endings share no leading token (an empty context without BOS): \
                       nothing to condition the first ending token on"
                .to_string();
            return Err(ChoiceError::Line { line, why });
        }
        Ok(Self { seqs, prefix, line })
    }

    /// llama.cpp's tokenization: `context + " " + ending`, with BOS when the model adds one.
    pub fn encode(tok: &Tokenizer, item: &ChoiceItem) -> Result<Self, ChoiceError> {
        let seqs = item
            .endings
            .iter()
            .map(|e| tok.encode(&format!("{} {e}", item.context), true))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ChoiceError::Line {
                line: item.line,
                why: e.to_string(),
            })?;
        Self::new(seqs, item.line)
    }
}

/// Each ending's mean log-probability of its tokens after the shared prefix.
pub fn score_endings(
    model: &Model,
    state: &mut State,
    t: &ChoiceTokens,
) -> Result<Vec<f64>, ChoiceError> {
    let v = model.cfg.vocab;
    let err = |source| ChoiceError::Model {
        line: t.line,
        source,
    };
    t.seqs
        .iter()
        .map(|seq| {
            if let Some(&id) = seq.iter().find(|&&id| id as usize >= v) {
                return Err(err(ModelError::BadToken { id, vocab: v }));
            }
            state.reset();
            // (T-1, V): row i predicts seq[i + 1]; the last token is never fed
            let logits = model
                .forward(state, &seq[..seq.len() - 1], Logits::All)
                .map_err(err)?;
            let lp: f64 = (t.prefix - 1..seq.len() - 1)
                .map(|i| {
                    let row = &logits[i * v..(i + 1) * v];
                    f64::from(row[seq[i + 1] as usize]) - log_sum_exp(row)
                })
                .sum();
            Ok(lp / (seq.len() - t.prefix) as f64)
        })
        .collect()
}

/// The first ending with the highest score (llama.cpp's pick).
pub fn pick(scores: &[f64]) -> usize {
    let mut best = 0;
    for (k, &s) in scores.iter().enumerate().skip(1) {
        if s > scores[best] {
            best = k;
        }
    }
    best
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ItemResult {
    pub line: usize,
    pub label: usize,
    pub pick: usize,
    pub scores: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ChoiceResult {
    pub items: usize,
    pub correct: usize,
    pub accuracy: f64,
    /// sqrt(p (1 - p) / n).
    pub stderr: f64,
    /// The accuracy of guessing: the mean of 1 / (number of endings).
    pub chance: f64,
    /// Mean normalised log-likelihood of the labelled endings (a loss: lower is better).
    pub gold_nll: f64,
    pub per_item: Vec<ItemResult>,
}

/// Accuracy, its standard error and chance over scored items.
pub fn summarize(per_item: Vec<ItemResult>) -> ChoiceResult {
    let n = per_item.len();
    let correct = per_item.iter().filter(|r| r.pick == r.label).count();
    let p = correct as f64 / n.max(1) as f64;
    let mean =
        |f: &dyn Fn(&ItemResult) -> f64| per_item.iter().map(f).sum::<f64>() / n.max(1) as f64;
    ChoiceResult {
        items: n,
        correct,
        accuracy: p,
        stderr: (p * (1.0 - p) / n.max(1) as f64).sqrt(),
        chance: mean(&|r| 1.0 / r.scores.len() as f64),
        gold_nll: mean(&|r| -r.scores[r.label]),
        per_item,
    }
}

/// Score every item; `progress(done, total, correct so far)` after each.
pub fn evaluate(
    model: &Model,
    tok: &Tokenizer,
    items: &[ChoiceItem],
    mut progress: impl FnMut(usize, usize, usize),
) -> Result<ChoiceResult, ChoiceError> {
    let toks = items
        .iter()
        .map(|it| ChoiceTokens::encode(tok, it))
        .collect::<Result<Vec<_>, _>>()?;
    let longest = toks
        .iter()
        .flat_map(|t| &t.seqs)
        .map(Vec::len)
        .max()
        .unwrap_or(1);
    let mut state = model.new_state(longest, longest);
    let mut per_item = Vec::with_capacity(items.len());
    let mut correct = 0;
    for (i, (item, t)) in items.iter().zip(&toks).enumerate() {
        let scores = score_endings(model, &mut state, t)?;
        let pick = pick(&scores);
        correct += usize::from(pick == item.label);
        per_item.push(ItemResult {
            line: item.line,
            label: item.label,
            pick,
            scores,
        });
        progress(i + 1, items.len(), correct);
    }
    Ok(summarize(per_item))
}
