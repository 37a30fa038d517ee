//! The image decoders (PNG, JPEG, BMP, GIF by content) as `toy data images` reads a folder,
//! within their size limits, and the IDX reader (MNIST's format).
#![no_main]
use libfuzzer_sys::fuzz_target;
use toy::images::folder::{decode_bytes, FolderOptions, OnBad};
use toy::images::ImageSet;

fuzz_target!(|data: &[u8]| {
    let o = FolderOptions {
        channels: 1 + 2 * (data.first().copied().unwrap_or(0) as usize & 1),
        size: Some(28),
        on_bad: OnBad::Skip,
    };
    let mut set = ImageSet::default();
    if decode_bytes(data, &mut set, &o).is_ok() {
        assert_eq!(set.pixels.len(), 28 * 28 * o.channels);
    }
    let _ = toy::images::idx::parse(std::path::Path::new("fuzz.idx"), data);
});
