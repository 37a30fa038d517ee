//! Importance matrices as `toy quantize --imatrix` reads them: llama-imatrix's GGUF format
//! (`.in_sum2` / `.counts` pairs) and the legacy binary one. Beyond not failing: every entry
//! it accepts is finite.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = toy::quantize::imatrix::Imatrix::from_bytes(data.to_vec()) {
        assert!(m.entries.values().all(|v| v.iter().all(|x| x.is_finite())));
    }
});
