//! Unit tests for the GGUF reader and writer (spec: ggml `docs/gguf.md`): value round trips,
//! nested arrays, alignment and the writer's own checks.

use tinynn::quant::GgmlType;

use super::*;

fn round_trip(w: &GgufWriter) -> GgufFile {
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("write");
    GgufFile::from_bytes(bytes).expect("read back")
}

fn all_scalars() -> Vec<(&'static str, Value)> {
    vec![
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(-1.5e-7)),
        ("bool.t", Value::Bool(true)),
        ("bool.f", Value::Bool(false)),
        ("string", Value::String("héllo ✓".into())),
        ("string.empty", Value::String(String::new())),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(std::f64::consts::PI)),
    ]
}

#[test]
fn every_value_type_round_trips() {
    let mut w = GgufWriter::new();
    for (k, v) in all_scalars() {
        w.add_metadata(k, v.clone());
        let arr = Value::Array(v.value_type(), vec![v.clone(), v]);
        w.add_metadata(format!("{k}.array"), arr);
    }
    w.add_metadata("empty.array", Value::Array(ValueType::F64, vec![]));
    let f = round_trip(&w);
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.len(), 2 * all_scalars().len() + 1);
    for (k, v) in all_scalars() {
        assert_eq!(f.get(k), Some(&v), "{k}");
        assert_eq!(
            f.get(&format!("{k}.array")).unwrap().as_array().unwrap()[1],
            v
        );
    }
    assert_eq!(
        f.get("empty.array"),
        Some(&Value::Array(ValueType::F64, vec![]))
    );
    let keys: Vec<_> = f.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(&keys[..3], ["u8", "u8.array", "i8"]);
}

#[test]
fn nested_arrays_round_trip_up_to_the_depth_limit() {
    let inner = Value::Array(
        ValueType::Array,
        vec![
            Value::Array(ValueType::U8, vec![Value::U8(1), Value::U8(2)]),
            Value::Array(ValueType::String, vec![Value::String("a".into())]),
            Value::Array(ValueType::Array, vec![]),
        ],
    );
    let mut deep = Value::Array(ValueType::I32, vec![Value::I32(7)]);
    for _ in 1..MAX_ARRAY_DEPTH {
        deep = Value::Array(ValueType::Array, vec![deep]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("nested", inner.clone());
    w.add_metadata("deep", deep.clone());
    let f = round_trip(&w);
    assert_eq!(f.get("nested"), Some(&inner));
    assert_eq!(f.get("deep"), Some(&deep));

    let too_deep = Value::Array(ValueType::Array, vec![deep]);
    w.add_metadata("deep", too_deep);
    let err = w.write_to(&mut Vec::new()).unwrap_err().to_string();
    assert!(err.contains("nested deeper than 8"), "{err}");
}

#[test]
fn writer_rejects_mixed_arrays() {
    let mut w = GgufWriter::new();
    w.add_metadata("x", Value::Array(ValueType::U8, vec![Value::I8(1)]));
    let err = w.write_to(&mut Vec::new()).unwrap_err().to_string();
    assert!(err.contains("array of U8 holds a I8"), "{err}");
}

#[test]
fn add_metadata_replaces_in_place() {
    let mut w = GgufWriter::new();
    w.add_metadata("a", Value::U32(1));
    w.add_metadata("b", Value::U32(2));
    w.add_metadata("a", Value::String("one".into()));
    let f = round_trip(&w);
    assert_eq!(f.metadata[0], ("a".into(), Value::String("one".into())));
    assert_eq!(f.get_u64("b"), Some(2));
}

fn with_tensors(alignment: Option<u32>) -> GgufWriter<'static> {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.set_alignment(a);
    }
    w.add_metadata("general.architecture", Value::String("test".into()));
    w.add_tensor("a", vec![3], GgmlType::F32, vec![1u8; 12])
        .unwrap();
    w.add_tensor("b", vec![32, 2], GgmlType::Q8_0, vec![2u8; 68])
        .unwrap();
    w.add_tensor("c", vec![32], GgmlType::Q4_1, vec![3u8; 20])
        .unwrap();
    w
}

#[test]
fn tensors_are_aligned_and_padded_with_zeros() {
    for (alignment, expect) in [(None, 32), (Some(1), 1), (Some(64), 64), (Some(4096), 4096)] {
        let f = round_trip(&with_tensors(alignment));
        assert_eq!(f.alignment, expect);
        assert_eq!(f.data_offset % expect, 0);
        assert_eq!(f.architecture(), Some("test"));
        let mut next = 0;
        for (t, fill) in f.tensors.iter().zip(1u8..) {
            assert_eq!(t.offset, next, "{}", t.name);
            let data = f.tensor_data(t);
            assert_eq!(data.len() as u64, t.n_bytes());
            assert!(data.iter().all(|&b| b == fill));
            next = (t.offset + t.n_bytes()).div_ceil(expect) * expect;
            let start = (f.data_offset + t.offset + t.n_bytes()) as usize;
            let end = (f.data_offset + next) as usize;
            assert!(f.bytes()[start..end].iter().all(|&b| b == 0));
        }
        assert_eq!(f.bytes().len() as u64, f.data_offset + next);
        assert_eq!(f.tensor("b").unwrap().dims, vec![32, 2]);
        assert_eq!(f.tensor("b").unwrap().n_elements(), 64);
    }
}

#[test]
fn bad_alignment_is_rejected_by_writer_and_reader() {
    for bad in [Value::U32(0), Value::U32(48), Value::U64(32)] {
        let mut w = with_tensors(None);
        w.add_metadata("general.alignment", bad.clone());
        let err = w.write_to(&mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("general.alignment"), "{err}");
    }
    // Patch a valid file's alignment value to 48 so only the reader sees it.
    let mut bytes = Vec::new();
    with_tensors(Some(64)).write_to(&mut bytes).unwrap();
    let key = b"general.alignment";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    bytes[at..at + 4].copy_from_slice(&48u32.to_le_bytes());
    let err = GgufFile::from_bytes(bytes).unwrap_err().to_string();
    assert!(err.contains("nonzero power of two"), "{err}");
}

#[test]
fn writer_checks_tensors() {
    let mut w = with_tensors(None);
    let dup = w.add_tensor("a", vec![1], GgmlType::F32, vec![0u8; 4]);
    assert!(dup.unwrap_err().to_string().contains("duplicate"));
    let short = w.add_tensor("d", vec![4], GgmlType::F32, vec![0u8; 15]);
    assert!(short
        .unwrap_err()
        .to_string()
        .contains("15 data bytes: expected 16"));
    let ragged = w.add_tensor("e", vec![16], GgmlType::Q8_0, vec![0u8; 17]);
    assert!(ragged.unwrap_err().to_string().contains("block size 32"));
    let five = w.add_tensor("f", vec![1; 5], GgmlType::F32, vec![0u8; 4]);
    assert!(five.unwrap_err().to_string().contains("5 dims"));
    let huge = w.add_tensor("g", vec![u64::MAX, 2], GgmlType::F32, vec![]);
    assert!(huge.unwrap_err().to_string().contains("overflows"));
    w.set_version(1);
    let err = w.write_to(&mut Vec::new()).unwrap_err().to_string();
    assert_eq!(err, "unsupported gguf version 1: expected 2 or 3");
    w.set_version(2);
    assert_eq!(round_trip(&w).version, 2);
}

#[test]
fn accessors_convert_leniently() {
    assert_eq!(Value::I32(5).as_u64(), Some(5));
    assert_eq!(Value::I32(-5).as_u64(), None);
    assert_eq!(Value::U64(u64::MAX).as_i64(), None);
    assert_eq!(Value::U16(7).as_f32(), Some(7.0));
    assert_eq!(Value::F64(0.5).as_f32(), Some(0.5));
    assert_eq!(Value::F32(0.5).as_u64(), None);
    assert_eq!(Value::Bool(true).as_bool(), Some(true));
    assert_eq!(Value::String("x".into()).as_str(), Some("x"));
    assert_eq!(Value::U8(1).as_str(), None);
}

#[test]
fn write_file_is_atomic_and_readable() {
    let dir = std::env::temp_dir().join(format!("toy-gguf-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    with_tensors(None).write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors.len(), 3);
    let leftovers = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(leftovers, 1, "temp file left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}
