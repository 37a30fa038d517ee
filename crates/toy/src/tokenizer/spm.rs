//! SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`: Llama 2, Mistral, Gemma) as
//! llama.cpp tokenizes them (`llm_tokenizer_spm` in `llama-vocab.cpp`): the text split at
//! special tokens (longest first, `tokenizer_st_partition`), each piece of plain text prefixed
//! with a space where `add_space_prefix` asks (after the start or a special token), spaces
//! written `▁`, then characters merged pairwise, the highest-scoring pair first (the leftmost
//! of equal scores), and what stays outside the vocabulary as byte tokens (`<0x0A>`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// A piece of the text between special tokens, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frag {
    Raw(usize, usize),
    Token(u32),
}

/// The vocabulary and scores that tokenizing needs.
#[derive(Clone, Debug)]
pub(super) struct Spm {
    /// Token text -> id (the last of equal texts, as llama.cpp's map).
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    /// `<0xXX>` per byte.
    bytes: Vec<Option<u32>>,
    unk: Option<u32>,
    /// Special tokens (CONTROL, USER_DEFINED, UNKNOWN) as (text, id), longest first.
    specials: Vec<(String, u32)>,
    add_space_prefix: bool,
}

/// A symbol of the text being merged: bytes `start..start + n`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    n: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A pair of neighbouring symbols whose text is a token, by its score.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Highest score first; of equal scores the leftmost.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

impl Spm {
    /// `special(i)`: whether token `i` is CONTROL, USER_DEFINED or UNKNOWN.
    pub fn new(
        tokens: &[String],
        scores: &[f32],
        unk: Option<u32>,
        special: impl Fn(usize) -> bool,
        add_space_prefix: bool,
    ) -> Self {
        let mut ids = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            ids.insert(t.clone(), i as u32);
        }
        let bytes = (0..256)
            .map(|b| ids.get(&format!("<0x{b:02X}>")).copied())
            .collect();
        let mut specials: Vec<(String, u32)> = (0..tokens.len())
            .filter(|&i| special(i) && !tokens[i].is_empty())
            .map(|i| (tokens[i].clone(), i as u32))
            .collect();
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        let mut scores = scores.to_vec();
        scores.resize(tokens.len(), 0.0);
        Self {
            ids,
            scores,
            bytes,
            unk,
            specials,
            add_space_prefix,
        }
    }

    /// The id of a token's vocabulary text (`▁the`).
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Token ids of `text`, special tokens written in it included.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut prev_special = true;
        for frag in self.partition(text) {
            match frag {
                Frag::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Frag::Raw(a, b) => {
                    let mut piece = String::with_capacity(b - a + 4);
                    if self.add_space_prefix && prev_special {
                        piece.push(' ');
                    }
                    piece.push_str(&text[a..b]);
                    self.merge(&piece.replace(' ', "\u{2581}"), out);
                    prev_special = false;
                }
            }
        }
    }

    /// `text` split at its special tokens, each special in turn (longest first) splitting the
    /// plain pieces left by the longer ones at every occurrence.
    fn partition(&self, text: &str) -> Vec<Frag> {
        let mut frags = vec![Frag::Raw(0, text.len())];
        if text.is_empty() {
            return Vec::new();
        }
        for (s, id) in &self.specials {
            if !text.contains(s.as_str()) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Frag::Raw(mut a, b) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(m) = text[a..b].find(s.as_str()) {
                    if m > 0 {
                        next.push(Frag::Raw(a, a + m));
                    }
                    next.push(Frag::Token(*id));
                    a += m + s.len();
                }
                if a < b {
                    next.push(Frag::Raw(a, b));
                }
            }
            frags = next;
        }
        frags
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` of escaped text.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
        for (start, ch) in text.char_indices() {
            let i = syms.len();
            let end = start + ch.len_utf8();
            syms.push(Sym {
                start,
                n: ch.len_utf8(),
                prev: i.checked_sub(1),
                next: (end < text.len()).then_some(i + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        let mut rev: HashMap<&str, (usize, usize)> = HashMap::new();
        let mut bigram =
            |l: Option<usize>, r: Option<usize>, syms: &[Sym], queue: &mut BinaryHeap<Bigram>| {
                let (Some(l), Some(r)) = (l, r) else { return };
                let (a, size) = (syms[l].start, syms[l].n + syms[r].n);
                let piece = &text[a..a + size];
                let Some(&id) = self.ids.get(piece) else {
                    return;
                };
                queue.push(Bigram {
                    left: l,
                    right: r,
                    score: self.scores[id as usize],
                    size,
                });
                rev.insert(piece, (l, r));
            };
        for i in 1..syms.len() {
            bigram(Some(i - 1), Some(i), &syms, &mut queue);
        }
        while let Some(bg) = queue.pop() {
            let (l, r) = (syms[bg.left], syms[bg.right]);
            // one of them merged since: skip
            if l.n == 0 || r.n == 0 || l.n + r.n != bg.size {
                continue;
            }
            syms[bg.left].n += r.n;
            syms[bg.right].n = 0;
            syms[bg.left].next = r.next;
            if let Some(nx) = r.next {
                syms[nx].prev = Some(bg.left);
            }
            bigram(syms[bg.left].prev, Some(bg.left), &syms, &mut queue);
            bigram(Some(bg.left), syms[bg.left].next, &syms, &mut queue);
        }
        let mut i = (!syms.is_empty()).then_some(0);
        while let Some(k) = i {
            self.resegment(text, &syms, &rev, k, out, 0);
            i = syms[k].next;
        }
    }

    /// A merged symbol as its token, or (never with a sound vocabulary) as the pair it was
    /// merged from, or as byte tokens.
    fn resegment(
        &self,
        text: &str,
        syms: &[Sym],
        rev: &HashMap<&str, (usize, usize)>,
        k: usize,
        out: &mut Vec<u32>,
        depth: usize,
    ) {
        let s = syms[k];
        let piece = &text[s.start..s.start + s.n];
        if let Some(&id) = self.ids.get(piece) {
            out.push(id);
            return;
        }
        if let Some(&(l, r)) = rev.get(piece).filter(|_| depth < 64) {
            self.resegment(text, syms, rev, l, out, depth + 1);
            self.resegment(text, syms, rev, r, out, depth + 1);
            return;
        }
        for &b in piece.as_bytes() {
            let single = (b < 0x80)
                .then(|| self.ids.get(&(b as char).to_string()))
                .flatten();
            if let Some(id) = self.bytes[b as usize].or(single.copied()).or(self.unk) {
                out.push(id);
            }
        }
    }
}
