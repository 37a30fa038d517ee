//! The LoRA adapter loader on any GGUF the reader accepts, and its check against a base.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = toy::gguf::GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    if let Ok(a) = toy::model::adapter::LoraAdapter::from_gguf(&f) {
        let _ = a.check_base(common::smollm2());
    }
});
