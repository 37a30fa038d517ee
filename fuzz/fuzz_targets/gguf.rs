//! The GGUF reader (header, metadata of every value type, tensor table, tensor data) and then
//! loading a model from what it accepts: errors, never a panic or a huge allocation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = toy::gguf::GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    // every accepted tensor's bytes lie inside the file
    for t in &f.tensors {
        let _ = f.tensor_data(t);
    }
    let _ = toy::model::Model::from_gguf(Arc::new(f));
});
