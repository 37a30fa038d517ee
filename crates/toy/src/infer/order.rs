//! The sampler chain's order, as llama.cpp 0c1e570 names it (`common/sampling.cpp`:
//! `common_sampler_types_from_names` / `_from_chars`, and llama-server's `samplers` field:
//! an array of names or one string of letters). Logit bias always comes first, the draw last.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    Typical,
    TopP,
    MinP,
    Xtc,
    Temperature,
}

/// llama.cpp's default chain (`common_params_sampling::samplers`).
pub const DEFAULT_ORDER: [Stage; 9] = [
    Stage::Penalties,
    Stage::Dry,
    Stage::TopNSigma,
    Stage::TopK,
    Stage::Typical,
    Stage::TopP,
    Stage::MinP,
    Stage::Xtc,
    Stage::Temperature,
];

const NAMES: [(&str, char, Stage); 9] = [
    ("penalties", 'e', Stage::Penalties),
    ("dry", 'd', Stage::Dry),
    ("top_n_sigma", 's', Stage::TopNSigma),
    ("top_k", 'k', Stage::TopK),
    ("typ_p", 'y', Stage::Typical),
    ("top_p", 'p', Stage::TopP),
    ("min_p", 'm', Stage::MinP),
    ("xtc", 'x', Stage::Xtc),
    ("temperature", 't', Stage::Temperature),
];

impl Stage {
    /// The canonical name (llama.cpp's).
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|n| n.2 == self).map_or("", |n| n.0)
    }

    /// A name as llama.cpp takes it: canonical, kebab-case, without the underscore, or
    /// `nucleus`, `temp`, `typ`, `typical_p`; any case.
    pub fn from_name(name: &str) -> Option<Stage> {
        let n = name.to_ascii_lowercase();
        let alias = match n.as_str() {
            "nucleus" => Some(Stage::TopP),
            "temp" => Some(Stage::Temperature),
            "typ" | "typical_p" | "typical" => Some(Stage::Typical),
            _ => None,
        };
        alias.or_else(|| {
            NAMES
                .iter()
                .find(|(c, _, _)| n == *c || n == c.replace('_', "-") || n == c.replace('_', ""))
                .map(|x| x.2)
        })
    }

    pub fn from_char(c: char) -> Option<Stage> {
        NAMES.iter().find(|n| n.1 == c).map(|n| n.2)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `samplers` may name, for error messages.
pub fn known() -> String {
    let names: Vec<String> = NAMES.iter().map(|(n, c, _)| format!("{n} ({c})")).collect();
    names.join(", ")
}

/// An order from names (`["top_k", "min-p", "temp"]`); an unknown name is an error naming it
/// (llama.cpp only warns; toy says so, since a dropped stage changes the output).
pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Vec<Stage>, String> {
    names
        .iter()
        .map(|n| {
            let n = n.as_ref();
            Stage::from_name(n).ok_or_else(|| format!("unknown sampler {n:?}; known: {}", known()))
        })
        .collect()
}

/// An order from letters (`"kpmt"`, llama.cpp's `--sampling-seq`).
pub fn from_chars(s: &str) -> Result<Vec<Stage>, String> {
    s.chars()
        .map(|c| {
            Stage::from_char(c)
                .ok_or_else(|| format!("unknown sampler letter {c:?}; known: {}", known()))
        })
        .collect()
}

/// An order as the CLI takes it: names separated by `;` or `,` (llama.cpp's `--samplers`), or
/// one word of letters.
pub fn parse(s: &str) -> Result<Vec<Stage>, String> {
    if s.contains([';', ',']) || Stage::from_name(s).is_some() {
        let names: Vec<&str> = s.split([';', ',']).map(str::trim).collect();
        from_names(&names)
    } else {
        from_chars(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_aliases_and_letters() {
        assert_eq!(
            from_chars("ekt").unwrap(),
            [Stage::Penalties, Stage::TopK, Stage::Temperature]
        );
        let names = [
            "Top-K",
            "minp",
            "nucleus",
            "temp",
            "typ",
            "top_n_sigma",
            "DRY",
        ];
        let want = [
            Stage::TopK,
            Stage::MinP,
            Stage::TopP,
            Stage::Temperature,
            Stage::Typical,
            Stage::TopNSigma,
            Stage::Dry,
        ];
        assert_eq!(from_names(&names).unwrap(), want);
        assert_eq!(
            parse("top_k;temperature").unwrap(),
            [Stage::TopK, Stage::Temperature]
        );
        assert_eq!(parse("xt").unwrap(), [Stage::Xtc, Stage::Temperature]);
        assert_eq!(parse("min_p").unwrap(), [Stage::MinP]);
        assert!(from_names(&["infill"]).unwrap_err().contains("\"infill\""));
        assert!(from_chars("kq").unwrap_err().contains("'q'"));
        let all: String = DEFAULT_ORDER
            .iter()
            .map(|s| Stage::from_name(s.name()).unwrap().name())
            .collect();
        assert!(all.starts_with("penaltiesdry"));
    }
}
