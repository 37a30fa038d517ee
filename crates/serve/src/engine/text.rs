//! The visible text of one sequence, built token by token: bytes wait until they complete a
//! UTF-8 character (byte-level BPE splits characters over tokens), and text that could still
//! turn into a stop string is held back, so a stop string never reaches the client, even
//! when it arrives over several tokens.

pub struct TextStream {
    stops: Vec<String>,
    longest_stop: usize,
    /// Bytes of an unfinished character.
    pending: Vec<u8>,
    /// All text so far (after a stop: up to the stop string).
    text: String,
    /// How much of `text` was handed out.
    emitted: usize,
}

impl TextStream {
    pub fn new(stops: Vec<String>) -> Self {
        let longest_stop = stops.iter().map(String::len).max().unwrap_or(0);
        Self {
            stops,
            longest_stop,
            pending: Vec::new(),
            text: String::new(),
            emitted: 0,
        }
    }

    /// Add one token's bytes; return the text that may be shown now, and whether a stop
    /// string was hit (the text then ends before it).
    pub fn push(&mut self, bytes: &[u8]) -> (String, bool) {
        self.pending.extend_from_slice(bytes);
        let mut rest: &[u8] = &self.pending;
        let mut valid = String::new();
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    valid.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (ok, after) = rest.split_at(e.valid_up_to());
                    valid.push_str(std::str::from_utf8(ok).unwrap_or_default());
                    match e.error_len() {
                        None => {
                            rest = after;
                            break;
                        }
                        Some(bad) => {
                            valid.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        self.add(&valid)
    }

    fn add(&mut self, piece: &str) -> (String, bool) {
        let from = self.emitted;
        self.text.push_str(piece);
        if self.stops.is_empty() {
            self.emitted = self.text.len();
            return (self.text[from..].to_string(), false);
        }
        // a stop string may begin inside text already shown only if it was held back, so
        // searching from `from - longest` finds every new occurrence
        let mut start = from.saturating_sub(self.longest_stop);
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.text[start..].find(s.as_str()).map(|i| i + start))
            .min();
        if let Some(end) = hit {
            self.text.truncate(end.max(from));
            let out = self.text[from..].to_string();
            self.emitted = self.text.len();
            return (out, true);
        }
        // hold back the longest tail that is a proper prefix of a stop string
        let tail = self.text.len() - from;
        let mut keep = 0;
        for s in &self.stops {
            for n in (1..s.len().min(tail + 1)).rev() {
                if s.is_char_boundary(n) && self.text.ends_with(&s[..n]) {
                    keep = keep.max(n);
                    break;
                }
            }
        }
        let upto = self.text.len() - keep;
        self.emitted = upto;
        (self.text[from..upto].to_string(), false)
    }

    /// Everything still held back (the sequence ended without a stop string).
    pub fn finish(&mut self) -> String {
        if !self.pending.is_empty() {
            let tail = String::from_utf8_lossy(&self.pending).into_owned();
            self.pending.clear();
            self.text.push_str(&tail);
        }
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }

    /// The text shown so far.
    pub fn shown(&self) -> &str {
        &self.text[..self.emitted]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut t = TextStream::new(stops.iter().map(|s| s.to_string()).collect());
        let mut shown = String::new();
        for p in pieces {
            let (s, hit) = t.push(p.as_bytes());
            shown += &s;
            if hit {
                return (shown, true);
            }
        }
        shown += &t.finish();
        (shown, false)
    }

    #[test]
    fn stop_string_across_tokens_is_never_shown() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
        assert_eq!(run(&["\n\n", "User:"], &["a\n", "\nb"]), ("a".into(), true));
        assert_eq!(run(&["xyz"], &["xy"]), ("xy".into(), false));
    }

    #[test]
    fn held_back_text_is_released_when_it_diverges() {
        assert_eq!(run(&["END"], &["a E", "x", "b"]), ("a Exb".into(), false));
        let mut t = TextStream::new(vec!["END".into()]);
        assert_eq!(t.push(b"a EN").0, "a ");
        assert_eq!(t.push(b"x").0, "ENx");
    }

    #[test]
    fn split_characters_wait_for_their_last_byte() {
        let crab = "🦀".as_bytes();
        let mut t = TextStream::new(Vec::new());
        assert_eq!(t.push(&crab[..2]).0, "");
        assert_eq!(t.push(&crab[2..]).0, "🦀");
        assert_eq!(t.push(&[0xff, b'a']).0, "\u{fffd}a");
        assert_eq!(t.push(&crab[..1]).0, "");
        assert_eq!(t.finish(), "\u{fffd}");
    }
}
