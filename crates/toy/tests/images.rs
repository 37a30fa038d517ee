//! The image data path on small files made here: IDX pairs (plain and gzipped, truncated, with
//! mismatched counts), image folders (grey and RGB, resized, a corrupt PNG skipped or fatal),
//! and the shards `toy data images` writes (round trip, seeded split, a cut shard).

use std::io::Write;
use std::path::{Path, PathBuf};
use toy::images::folder::{load, FolderOptions, OnBad};
use toy::images::{idx, shard, ImageError, ImageSet};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("toy-images-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        b.extend_from_slice(&d.to_be_bytes());
    }
    b.extend_from_slice(data);
    b
}

fn gz(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

#[test]
fn idx_pairs_load_plain_or_gzipped_and_bad_files_name_themselves() {
    let d = dir("idx");
    let pixels: Vec<u8> = (0..3 * 4 * 5).map(|i| i as u8).collect();
    std::fs::write(
        d.join("train-images-idx3-ubyte.gz"),
        gz(&idx_bytes(&[3, 4, 5], &pixels)),
    )
    .unwrap();
    std::fs::write(
        d.join("train-labels-idx1-ubyte"),
        idx_bytes(&[3], &[2, 0, 1]),
    )
    .unwrap();
    let (im, lb) = idx::find_pair(&d, "train").expect("the pair");
    let s = idx::load_pair(&im, &lb, vec![]).unwrap();
    assert_eq!((s.h, s.w, s.c, s.len()), (4, 5, 1, 3));
    assert_eq!(s.image(1), &pixels[20..40]);
    assert_eq!(s.labels, [2, 0, 1]);
    assert_eq!(s.classes, ["0", "1", "2"]);

    let cut = d.join("cut-idx3-ubyte");
    std::fs::write(&cut, &idx_bytes(&[3, 4, 5], &pixels)[..40]).unwrap();
    match idx::read(&cut) {
        Err(ImageError::Truncated {
            path,
            expected,
            got,
        }) => {
            assert_eq!((path, expected, got), (cut.clone(), 60, 24));
        }
        other => panic!("{:?}", other.map(|i| i.dims)),
    }
    let e = idx::read(&cut).err().unwrap().to_string();
    assert!(
        e.contains("cut-idx3-ubyte") && e.contains("truncated"),
        "{e}"
    );
    let wrong = d.join("few-labels");
    std::fs::write(&wrong, idx_bytes(&[2], &[0, 1])).unwrap();
    let e = idx::load_pair(&im, &wrong, vec![]).unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::CountMismatch {
                n_images: 3,
                n_labels: 2,
                ..
            }
        ),
        "{e}"
    );
    let text = d.join("notes.txt");
    std::fs::write(&text, b"hello world").unwrap();
    assert!(idx::read(&text)
        .unwrap_err()
        .to_string()
        .contains("not an IDX file"));
}

fn png(path: &Path, w: u32, h: u32, seed: u8) {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([seed, (x * 10) as u8, (y * 10) as u8])
    });
    img.save(path).unwrap();
}

#[test]
fn image_folders_give_classes_by_folder_and_report_bad_files() {
    let d = dir("folder");
    for (c, n) in [("cat", 2), ("dog", 3)] {
        std::fs::create_dir_all(d.join(c)).unwrap();
        for i in 0..n {
            png(&d.join(c).join(format!("{i}.png")), 6, 4, i as u8);
        }
    }
    std::fs::write(d.join("dog/broken.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    std::fs::write(d.join("dog/readme.txt"), b"ignored").unwrap();
    let o = FolderOptions {
        channels: 3,
        size: None,
        on_bad: OnBad::Skip,
    };
    let (s, skipped) = load(&d, &o).unwrap();
    assert_eq!(s.classes, ["cat", "dog"]);
    assert_eq!((s.h, s.w, s.c, s.len()), (4, 6, 3, 5));
    assert_eq!(s.labels, [0, 0, 1, 1, 1]);
    assert_eq!(s.image(1)[..3], [1, 0, 0]);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].0.ends_with("broken.png"));
    let e = load(
        &d,
        &FolderOptions {
            on_bad: OnBad::Error,
            ..o.clone()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, ImageError::BadImage { path, .. } if path.ends_with("broken.png")),
        "{e}"
    );
    // grey and resized; a size mismatch without --size is reported
    let (g, _) = load(
        &d,
        &FolderOptions {
            channels: 1,
            size: Some(8),
            on_bad: OnBad::Skip,
        },
    )
    .unwrap();
    assert_eq!((g.h, g.w, g.c), (8, 8, 1));
    assert_eq!(g.pixels.len(), 5 * 64);
    png(&d.join("cat/big.png"), 9, 9, 0);
    let e = load(
        &d,
        &FolderOptions {
            on_bad: OnBad::Error,
            ..o
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("big.png") && e.contains("9x9"), "{e}");
}

#[test]
fn shards_round_trip_and_a_cut_shard_is_an_error() {
    let s = ImageSet {
        h: 2,
        w: 2,
        c: 1,
        classes: vec!["a".into(), "b".into()],
        pixels: (0..40).collect(),
        labels: (0..10).map(|i| (i % 2) as u16).collect(),
    };
    let (train, val) = s.split(0.2, 7);
    assert_eq!((train.len(), val.len()), (8, 2));
    assert_eq!(s.split(0.2, 7), (train.clone(), val.clone()), "seeded");
    let d = dir("shard");
    let meta = shard::write(&d, &[("train", &train), ("val", &val)], "test").unwrap();
    assert_eq!(meta["splits"]["train"]["images"], 8);
    assert_eq!(shard::read(&d, "train").unwrap(), train);
    assert_eq!(shard::read(&d, "val").unwrap(), val);
    let bytes = std::fs::read(d.join("train.img")).unwrap();
    std::fs::write(d.join("train.img"), &bytes[..bytes.len() - 3]).unwrap();
    let e = shard::read(&d, "train").unwrap_err().to_string();
    assert!(e.contains("train.img") && e.contains("bytes"), "{e}");
}
