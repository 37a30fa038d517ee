//! Deterministic fuzzing of the GGUF reader (spec: ggml `docs/gguf.md`): every truncation of
//! a small valid file must fail, and thousands of corrupted copies must give `Ok` or `Err`,
//! never a panic or an absurd allocation (a giant allocation would abort this process).

use std::panic::{catch_unwind, AssertUnwindSafe};

use tinynn::quant::GgmlType;
use toy::gguf::{GgufFile, GgufWriter, Value, ValueType};

/// A small file with every kind of metadata and three tensor types. The last tensor's data
/// is a multiple of the 32-byte alignment, so the file has no trailing padding and every
/// proper prefix cuts into something the reader needs.
fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()));
    w.add_metadata("llama.block_count", Value::U32(2));
    w.add_metadata("llama.rope.freq_base", Value::F32(10000.0));
    w.add_metadata("x.i64", Value::I64(-3));
    w.add_metadata("x.f64", Value::F64(0.25));
    w.add_metadata("x.bool", Value::Bool(true));
    w.add_metadata("x.u8", Value::U8(7));
    let words = ["a", "bc", "def"].map(|s| Value::String(s.into())).to_vec();
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, words),
    );
    let nested = vec![
        Value::Array(ValueType::I16, vec![Value::I16(-1), Value::I16(2)]),
        Value::Array(ValueType::String, vec![Value::String("z".into())]),
    ];
    w.add_metadata("x.nested", Value::Array(ValueType::Array, nested));
    let q8: Vec<u8> = (0..34 * 2).map(|i| i as u8).collect();
    let q41: Vec<u8> = (0..20 * 2).map(|i| (i * 7) as u8).collect();
    let f32s: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("blk.0.q8", vec![32, 2], GgmlType::Q8_0, q8)
        .unwrap();
    w.add_tensor("blk.0.q4_1", vec![64], GgmlType::Q4_1, q41)
        .unwrap();
    w.add_tensor("output_norm.weight", vec![16], GgmlType::F32, f32s)
        .unwrap();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    bytes
}

/// Parses `bytes` and, if that succeeds, touches every tensor's data and re-serializes.
fn exercise(bytes: Vec<u8>) -> bool {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => {
            for t in &f.tensors {
                assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes());
            }
            let mut out = Vec::new();
            let _ = GgufWriter::from_file(&f).write_to(&mut out);
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn gguf_sample_is_valid() {
    let f = GgufFile::from_bytes(sample()).unwrap();
    assert_eq!(f.tensors.len(), 3);
    assert_eq!(f.metadata.len(), 9);
    let last = f.tensors.last().unwrap();
    assert_eq!(
        f.data_offset + last.offset + last.n_bytes(),
        f.bytes().len() as u64
    );
}

#[test]
fn gguf_every_truncation_fails() {
    let bytes = sample();
    for len in 0..bytes.len() {
        let cut = bytes[..len].to_vec();
        let r = catch_unwind(|| GgufFile::from_bytes(cut).is_ok());
        assert_eq!(
            r.ok(),
            Some(false),
            "truncation to {len} bytes did not fail cleanly"
        );
    }
    assert!(GgufFile::from_bytes(bytes).is_ok());
}

const HOSTILE: [u64; 8] = [
    0xFFFF_FFFF_FFFF_FFFF,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    0xFFFF_FFFF,
    0x1_0000_0000,
    0x4000_0000,
    9,
    0,
];

/// One corruption of `bytes`, chosen by `rng`: bit flips, random bytes, or a hostile u64 /
/// u32 written at any offset (hitting length, count, dims, type and offset fields).
fn corrupt(bytes: &[u8], rng: &mut XorShift) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let n = b.len();
    match rng.below(4) {
        0 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(n);
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(n);
                b[i] = rng.next() as u8;
            }
        }
        2 => {
            let v = HOSTILE[rng.below(HOSTILE.len())];
            let i = rng.below(n - 8);
            b[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => {
            let v = HOSTILE[rng.below(HOSTILE.len())] as u32;
            let i = rng.below(n - 4);
            b[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    if rng.below(8) == 0 {
        b.truncate(rng.below(n));
    }
    b
}

#[test]
fn gguf_corrupted_copies_never_panic() {
    let bytes = sample();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut err) = (0, 0);
    for case in 0..50_000 {
        let b = corrupt(&bytes, &mut rng);
        match catch_unwind(AssertUnwindSafe(|| exercise(b))) {
            Ok(true) => ok += 1,
            Ok(false) => err += 1,
            Err(_) => panic!("case {case} panicked"),
        }
    }
    // Both outcomes must occur, or the corruptions are not reaching the interesting fields.
    assert!(ok > 100 && err > 100, "ok {ok}, err {err}");
}

#[test]
fn gguf_hostile_value_at_every_offset() {
    let bytes = sample();
    for (case, at) in (0..bytes.len() - 8).enumerate() {
        for v in HOSTILE {
            let mut b = bytes.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            let r = catch_unwind(AssertUnwindSafe(|| exercise(b)));
            assert!(r.is_ok(), "case {case}: {v:#x} at offset {at} panicked");
        }
    }
}
