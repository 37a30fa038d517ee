//! toy's per-tensor type rules (`toy::quantize::mix`) against llama-quantize's: for four
//! models (SmolLM2-135M, Qwen2.5-Coder-0.5B, Gemma 3 270M, and the tiny Qwen3.5 hybrid the
//! serve tests write, for the `ssm_*` rules: their tensor names, shapes and hparams) and every file type toy writes, with and without an importance matrix and with
//! --pure, --leave-output-tensor and the type overrides, the type of every tensor equals what
//! `llama-quantize --dry-run` (llama.cpp 0c1e570) chose, recorded in
//! tests/fixtures/llama-quant-mix.json by scripts/quant-mix-reference.py.

use tinynn::quant::GgmlType;
use toy::quantize::mix::{plan, FileType, Hparams, MixOptions};

#[derive(serde::Deserialize)]
struct Fixture {
    models: Vec<Model>,
}

#[derive(serde::Deserialize)]
struct Model {
    name: String,
    arch: String,
    n_layer: usize,
    n_gqa: usize,
    n_expert: usize,
    tensors: Vec<(String, Vec<u64>, String)>,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    ftype: String,
    flags: Vec<String>,
    types: Vec<String>,
}

fn ty(name: &str) -> GgmlType {
    GgmlType::from_name(name).unwrap_or_else(|| panic!("type {name}"))
}

fn options(c: &Case) -> MixOptions {
    let mut o = MixOptions {
        ftype: FileType::parse(&c.ftype).unwrap(),
        output_type: None,
        token_embedding_type: None,
        leave_output: false,
        pure: false,
        has_imatrix: false,
    };
    let mut flags = c.flags.iter();
    while let Some(f) = flags.next() {
        match f.as_str() {
            "--imatrix" => o.has_imatrix = true,
            "--pure" => o.pure = true,
            "--leave-output-tensor" => o.leave_output = true,
            "--output-tensor-type" => o.output_type = flags.next().map(|t| ty(&t.to_uppercase())),
            "--token-embedding-type" => {
                o.token_embedding_type = flags.next().map(|t| ty(&t.to_uppercase()))
            }
            other => panic!("flag {other} not handled by the test"),
        }
    }
    o
}

#[test]
fn every_tensor_gets_llama_quantizes_type() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/llama-quant-mix.json"
    ))
    .unwrap();
    let f: Fixture = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for m in &f.models {
        let hp = Hparams {
            arch: m.arch.clone(),
            n_layer: m.n_layer,
            n_gqa: m.n_gqa,
            n_expert: m.n_expert,
        };
        let types: Vec<GgmlType> = m.tensors.iter().map(|t| ty(&t.2)).collect();
        let list: Vec<(&str, &[u64], GgmlType)> = m
            .tensors
            .iter()
            .zip(&types)
            .map(|(t, &ty)| (t.0.as_str(), t.1.as_slice(), ty))
            .collect();
        for c in &m.cases {
            let got = plan(&list, &hp, &options(c)).unwrap();
            for ((t, g), want) in m.tensors.iter().zip(&got).zip(&c.types) {
                assert_eq!(
                    g.to_string(),
                    *want,
                    "{} {} {:?}: tensor {}",
                    m.name,
                    c.ftype,
                    c.flags,
                    t.0
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20_000, "{checked}");
}

#[test]
fn q2_k_s_asks_for_an_importance_matrix_and_unknown_types_are_named() {
    let o = MixOptions {
        ftype: FileType::Q2_K_S,
        output_type: None,
        token_embedding_type: None,
        leave_output: false,
        pure: false,
        has_imatrix: false,
    };
    let hp = Hparams {
        arch: "llama".into(),
        n_layer: 1,
        n_gqa: 1,
        n_expert: 0,
    };
    let t = [("blk.0.ffn_up.weight", &[256u64, 256][..], GgmlType::F32)];
    let err = plan(&t, &hp, &o).unwrap_err().to_string();
    assert!(
        err.contains("needs an importance matrix") && err.contains("toy imatrix"),
        "{err}"
    );
    assert!(err.contains("blk.0.ffn_up.weight in Q2_K"), "{err}");
    let err = FileType::parse("IQ1_S").unwrap_err().to_string();
    assert!(
        err.contains("cannot write it yet") && err.contains("Q4_K_M"),
        "{err}"
    );
    let err = FileType::parse("Q7_K").unwrap_err().to_string();
    assert!(err.contains("unknown type 'Q7_K'"), "{err}");
    assert_eq!(FileType::parse("q4_k").unwrap(), FileType::Q4_K_M);
}
