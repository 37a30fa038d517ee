//! `eval::kld_base` (llama-perplexity's `--kl-divergence-base` file) and `eval::kld` on tiny
//! random models built in memory (`common/synthetic.rs`): the file round-trips, damaged files
//! are typed errors, a model against its own base has zero divergence, and the statistics
//! of a hand-made case match values worked out by hand. No real model is needed.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::path::PathBuf;
use synthetic::{model, Rng, LLAMA};
use tinynn::quant::GgmlType;
use toy::eval::kld::KldAccum;
use toy::eval::kld_base::KldBaseError;
use toy::eval::kld_base::{encode_row, row_len, BaseHeader, BaseReader, BaseRow, BaseWriter};
use toy::eval::kld_run::{kl_divergence, save_base, KldError};
use toy::eval::perplexity::{n_scored, perplexity};

/// A scratch folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let p = std::env::temp_dir().join(format!("toy-kld-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng(seed);
    (0..n)
        .map(|_| ((r.next() + 1.0) * 0.5 * vocab as f32) as u32 % vocab as u32)
        .collect()
}

/// A base of random rows: 3 chunks of 8 over an odd vocabulary (so rows are padded).
fn random_base(path: &std::path::Path) -> (BaseHeader, Vec<Vec<u16>>) {
    let header = BaseHeader {
        n_ctx: 8,
        n_vocab: 7,
        n_chunk: 3,
        tokens: tokens(24, 7, 5),
    };
    let mut r = Rng(9);
    let mut chunks = Vec::new();
    let mut w = BaseWriter::create(path, header.clone()).expect("create");
    for _ in 0..header.n_chunk {
        let mut rows = vec![0u16; header.chunk_len()];
        for out in rows.chunks_exact_mut(row_len(7)) {
            let logits: Vec<f32> = (0..7).map(|_| 4.0 * r.next()).collect();
            encode_row(&logits, 2, out);
        }
        w.write_chunk(&rows).expect("chunk");
        chunks.push(rows);
    }
    w.finish().expect("finish");
    (header, chunks)
}

#[test]
fn base_file_round_trips() {
    let dir = TempDir::new("round_trip");
    let path = dir.0.join("b.bin");
    let (header, chunks) = random_base(&path);
    // the layout of perplexity.cpp: 20 header bytes, i32 tokens, 2*((V+1)/2)+4 u16 per row
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 20 + 4 * 24 + 3 * n_scored(8) as u64 * 12 * 2);
    let mut r = BaseReader::open(&path).expect("open");
    assert_eq!(r.header, header);
    let mut rows = Vec::new();
    for want in &chunks {
        assert!(r.read_chunk(&mut rows).expect("read"));
        assert_eq!(&rows, want);
    }
    assert!(!r.read_chunk(&mut rows).expect("end"));
}

#[test]
fn encoded_row_decodes_to_log_softmax() {
    let logits = [1.0f32, -2.0, 0.5, 3.0, -30.0];
    let mut out = vec![0u16; row_len(5)];
    let nll = encode_row(&logits, 3, &mut out);
    let lse = logits.iter().map(|l| f64::from(*l).exp()).sum::<f64>().ln();
    let row = BaseRow::new(&out, 5);
    for (i, &l) in logits.iter().enumerate().take(4) {
        let want = f64::from(l) - lse;
        assert!((f64::from(row.log_prob(i)) - want).abs() < 2e-4, "{i}");
    }
    // below max - 16 the row keeps only the floor of its range
    assert!((f64::from(row.log_prob(4)) - (3.0 - 16.0 - lse)).abs() < 1e-4);
    assert!((nll - (lse - 3.0)).abs() < 1e-5);
}

#[test]
fn truncated_or_foreign_base_is_an_error() {
    let dir = TempDir::new("truncated");
    let path = dir.0.join("b.bin");
    random_base(&path);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.0.join("cut.bin");
    for keep in [bytes.len() - 1, 20 + 96 + 40, 30, 12] {
        std::fs::write(&cut, &bytes[..keep]).unwrap();
        let e = BaseReader::open(&cut)
            .err()
            .expect("truncated file must fail");
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                KldBaseError::Truncated { .. } | KldBaseError::BadHeader { .. }
            ),
            "{keep}: {msg}"
        );
        assert!(msg.contains("cut.bin"), "{msg}");
    }
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let msg = BaseReader::open(&cut).err().unwrap().to_string();
    assert!(
        msg.contains("truncated") && msg.contains("2 whole chunks"),
        "{msg}"
    );
    let mut longer = bytes.clone();
    longer.push(0);
    std::fs::write(&cut, &longer).unwrap();
    assert!(matches!(
        BaseReader::open(&cut),
        Err(KldBaseError::TrailingBytes { .. })
    ));
    std::fs::write(&cut, b"GGUF\x03\0\0\0 and more").unwrap();
    let e = BaseReader::open(&cut).err().unwrap();
    assert!(matches!(e, KldBaseError::NotABase { .. }), "{e}");
    let mut neg = bytes;
    neg[8..12].copy_from_slice(&(-8i32).to_le_bytes());
    std::fs::write(&cut, &neg).unwrap();
    let msg = BaseReader::open(&cut).err().unwrap().to_string();
    assert!(msg.contains("n_ctx is -8"), "{msg}");
}

#[test]
fn model_against_its_own_base_has_zero_divergence() {
    let dir = TempDir::new("self");
    let path = dir.0.join("self.bin");
    let m = model(&LLAMA, GgmlType::F32);
    let ids = tokens(16 * 12 + 5, LLAMA.vocab, 77);
    let ppl = save_base(&m, &ids, 16, None, None, &path, |_, _, _| {}).expect("save");
    let direct = perplexity(&m, &ids, 16, None, |_, _, _| {}).expect("ppl");
    assert_eq!(ppl.chunks, 12);
    assert!(
        (ppl.ppl - direct.ppl).abs() < 1e-4 * direct.ppl,
        "{} vs {}",
        ppl.ppl,
        direct.ppl
    );
    let mut base = BaseReader::open(&path).expect("open");
    let s = kl_divergence(&m, &mut base, None, None, |_, _, _| {}).expect("kld");
    assert_eq!((s.tokens, s.chunks, s.n_ctx), (12 * 7, 12, 16));
    // only the base's 16-bit rounding of the log-probs is left
    assert!(s.kld_mean.value.abs() < 1e-6, "{:?}", s.kld_mean);
    assert!(s.kld.max < 1e-4 && s.kld.min > -1e-4, "{:?}", s.kld);
    assert_eq!(s.same_top_p.value, 1.0);
    // the base floors log-probs below max - 16, which this random model gives some of its
    // random targets: PPL(base) can only come out lower
    assert!(
        (1.0..1.01).contains(&s.ppl_ratio.value),
        "{:?}",
        s.ppl_ratio
    );
    assert!((s.ppl_q.value - direct.ppl).abs() < 1e-4 * direct.ppl);
    assert!(s.delta_p_rms.value < 1e-4);
    // a differently rounded copy of the same model diverges, but not by much
    let q = model(&LLAMA, GgmlType::Q8_0);
    let mut base = BaseReader::open(&path).expect("open");
    let s = kl_divergence(&q, &mut base, Some(4), None, |_, _, _| {}).expect("kld");
    assert_eq!(s.chunks, 4);
    assert!(
        s.kld_mean.value > 1e-7 && s.kld_mean.value < 1e-2,
        "{:?}",
        s.kld_mean
    );
}

#[test]
fn base_of_another_vocabulary_is_an_error() {
    let dir = TempDir::new("vocab");
    let path = dir.0.join("v.bin");
    let header = BaseHeader {
        n_ctx: 8,
        n_vocab: LLAMA.vocab + 1,
        n_chunk: 1,
        tokens: vec![1; 8],
    };
    let mut w = BaseWriter::create(&path, header.clone()).unwrap();
    w.write_chunk(&vec![0; header.chunk_len()]).unwrap();
    w.finish().unwrap();
    let m = model(&LLAMA, GgmlType::F32);
    let mut base = BaseReader::open(&path).unwrap();
    let e = kl_divergence(&m, &mut base, None, None, |_, _, _| {})
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            KldError::Vocab {
                base: 51,
                model: 50,
                ..
            }
        ),
        "{e}"
    );
}

/// Two tokens, base p = (1/2, 1/2); Q = (3/4, 1/4) at one position and (1/4, 3/4) at the
/// next, the token being 0 both times: KL = ln 2 - (1/2) ln 3 = 0.143841 per position, Δp =
/// +1/4 then -1/4, the top token agrees on the first (ties go to the first id) and not the
/// second; PPL(Q) = 1/sqrt(3/16), PPL(base) = 2.
#[test]
fn statistics_of_a_hand_made_case() {
    let mut base = vec![0u16; row_len(2)];
    encode_row(&[0.0, 0.0], 0, &mut base);
    let mut acc = KldAccum::default();
    let (a, b) = (0.75f32.ln(), 0.25f32.ln());
    acc.add(&[a, b], BaseRow::new(&base, 2), 0);
    acc.add(&[b, a], BaseRow::new(&base, 2), 0);
    let s = acc.finish();
    let kl = 2f64.ln() - 0.5 * 3f64.ln();
    assert_eq!(s.tokens, 2);
    assert!((s.kld_mean.value - kl).abs() < 1e-6, "{:?}", s.kld_mean);
    assert!((s.kld.max - kl).abs() < 1e-6 && (s.kld.min - kl).abs() < 1e-6);
    assert!((s.delta_p.max - 0.25).abs() < 1e-6 && (s.delta_p.min + 0.25).abs() < 1e-6);
    assert!(s.delta_p.median.abs() < 1e-6 && s.delta_p_mean.value.abs() < 1e-6);
    assert!((s.delta_p_rms.value - 0.25).abs() < 1e-6);
    assert_eq!(s.same_top_p.value, 0.5);
    assert!(
        (s.ppl_q.value - 1.0 / (3.0f64 / 16.0).sqrt()).abs() < 1e-5,
        "{:?}",
        s.ppl_q
    );
    assert!((s.ppl_base.value - 2.0).abs() < 1e-5, "{:?}", s.ppl_base);
    // llama.cpp gives no uncertainty from 10 values or fewer
    assert_eq!(s.kld_mean.unc, 0.0);
}
