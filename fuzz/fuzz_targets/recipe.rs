//! Recipe TOML (`toy train` / `toy finetune`): parsed and checked, or an error naming the key.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = toy::train::recipe::Recipe::parse(&text, "fuzz.toml", &[]);
});
