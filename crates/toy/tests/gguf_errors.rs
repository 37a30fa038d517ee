//! Bad GGUF input (spec: ggml `docs/gguf.md`) gives errors that name the offset, what was
//! expected and what was seen.

use tinynn::quant::GgmlType;
use toy::gguf::{GgufError, GgufFile, GgufWriter, Value};

fn valid() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()));
    w.add_tensor("t", vec![2], GgmlType::F32, vec![0u8; 8])
        .unwrap();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    bytes
}

fn err(bytes: Vec<u8>) -> String {
    GgufFile::from_bytes(bytes).unwrap_err().to_string()
}

#[test]
fn gguf_bad_magic_names_what_was_seen() {
    let mut b = valid();
    b[..4].copy_from_slice(b"GGML");
    assert_eq!(err(b), "bad magic \"GGML\" at offset 0: expected \"GGUF\"");
}

#[test]
fn gguf_version_1_is_rejected() {
    let mut b = valid();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(err(b), "unsupported gguf version 1: expected 2 or 3");
}

#[test]
fn gguf_truncated_header_names_offset_and_field() {
    let b = valid();
    assert_eq!(
        err(b[..12].to_vec()),
        "truncated at offset 8: need 8 bytes for tensor count, file has 12"
    );
    assert_eq!(
        err(b[..2].to_vec()),
        "truncated at offset 0: need 4 bytes for magic, file has 2"
    );
    // The 8 data bytes sit at 128..136, followed by zero padding to 160.
    assert_eq!(b.len(), 160);
    assert_eq!(
        err(b[..132].to_vec()),
        "tensor 't': data [128, 136) past end of file (132 bytes)"
    );
}

#[test]
fn gguf_huge_counts_are_bounded_by_the_file() {
    let mut b = valid();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = err(b);
    assert!(
        e.starts_with("tensor count 18446744073709551615 at offset 24 cannot fit"),
        "{e}"
    );
}

#[test]
fn gguf_unknown_ggml_type_names_the_tensor() {
    let mut b = valid();
    // The tensor info ends with u32 type then u64 offset, just before the padding.
    let name = b
        .windows(9)
        .position(|w| w == b"\x01\0\0\0\0\0\0\0t")
        .unwrap()
        + 9;
    let ty_at = name + 4 + 8;
    b[ty_at..ty_at + 4].copy_from_slice(&99u32.to_le_bytes());
    assert_eq!(err(b), "tensor 't': unknown ggml type id 99");
}

#[test]
fn gguf_missing_file_names_the_path() {
    let e = GgufFile::open(std::path::Path::new("/nonexistent/x.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/x.gguf"), "{e}");
}
