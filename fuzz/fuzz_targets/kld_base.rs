//! The KL-divergence base reader (llama-perplexity's `--kl-divergence-base` format): header,
//! tokens, then every chunk of log-prob rows.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // in memory where the system has it: a write per input
    let dir = std::path::Path::new("/dev/shm");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("toy-fuzz-kld-{}.bin", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(mut r) = toy::eval::kld_base::BaseReader::open(&path) {
        let mut rows = Vec::new();
        while let Ok(true) = r.read_chunk(&mut rows) {}
    }
});
