//! Image shards: `<split>.img` holds a header (magic `TOYIMG1\0`, then H, W, C and N as u32
//! little-endian), N labels as u16 little-endian, then N x H x W x C u8 pixels; `meta.json`
//! names the classes and counts the images of each split. Written to a temporary name,
//! fsynced and renamed.

use super::{ImageError, ImageSet};
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 8] = b"TOYIMG1\0";
const HEADER: usize = 8 + 16;

/// The bytes of a shard of `s`.
pub fn encode(s: &ImageSet) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + 2 * s.len() + s.pixels.len());
    out.extend_from_slice(MAGIC);
    for v in [s.h, s.w, s.c, s.len()] {
        out.extend_from_slice(&(v as u32).to_le_bytes());
    }
    for &l in &s.labels {
        out.extend_from_slice(&l.to_le_bytes());
    }
    out.extend_from_slice(&s.pixels);
    out
}

/// A shard's images, with `classes` from its `meta.json`.
pub fn decode(path: &Path, b: &[u8], classes: Vec<String>) -> Result<ImageSet, ImageError> {
    let bad = |why: String| ImageError::BadShard {
        path: path.to_path_buf(),
        why,
    };
    if b.len() < HEADER || &b[..8] != MAGIC {
        return Err(bad(
            "no TOYIMG1 header (write shards with `toy data images`)".into(),
        ));
    }
    let u = |i: usize| u32::from_le_bytes(b[8 + 4 * i..12 + 4 * i].try_into().unwrap()) as usize;
    let (h, w, c, n) = (u(0), u(1), u(2), u(3));
    let need = HEADER + 2 * n + n * h * w * c;
    if b.len() != need {
        return Err(bad(format!(
            "{n} images of {h}x{w}x{c} need {need} bytes, the file holds {}",
            b.len()
        )));
    }
    let labels: Vec<u16> = b[HEADER..HEADER + 2 * n]
        .chunks_exact(2)
        .map(|x| u16::from_le_bytes([x[0], x[1]]))
        .collect();
    if let Some(&l) = labels.iter().find(|&&l| l as usize >= classes.len()) {
        return Err(bad(format!("label {l} but {} classes", classes.len())));
    }
    Ok(ImageSet {
        h,
        w,
        c,
        classes,
        pixels: b[HEADER + 2 * n..].to_vec(),
        labels,
    })
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    let io = |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    crate::durable::sync_parent_dir(path).map_err(io)
}

/// Write the named splits into `dir` with their `meta.json`.
pub fn write(
    dir: &Path,
    splits: &[(&str, &ImageSet)],
    source: &str,
) -> Result<serde_json::Value, ImageError> {
    std::fs::create_dir_all(dir).map_err(|source| ImageError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let first = splits
        .first()
        .map(|s| s.1)
        .ok_or_else(|| ImageError::Layout("no splits to write".into()))?;
    let mut meta = serde_json::json!({
        "format": "toy-images-1", "source": source,
        "h": first.h, "w": first.w, "c": first.c, "classes": first.classes,
    });
    for (name, s) in splits {
        write_atomic(&dir.join(format!("{name}.img")), &encode(s))?;
        meta["splits"][name] = serde_json::json!({"images": s.len(), "per_class": s.counts()});
    }
    let text = serde_json::to_string_pretty(&meta).unwrap_or_default();
    write_atomic(&dir.join("meta.json"), text.as_bytes())?;
    Ok(meta)
}

/// Read split `name` of the shards in `dir`.
pub fn read(dir: &Path, name: &str) -> Result<ImageSet, ImageError> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).map_err(|source| ImageError::Io {
        path: meta_path.clone(),
        source,
    })?;
    let meta: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ImageError::BadShard {
            path: meta_path.clone(),
            why: e.to_string(),
        })?;
    let classes = meta["classes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let path = dir.join(format!("{name}.img"));
    let bytes = std::fs::read(&path).map_err(|source| ImageError::Io {
        path: path.clone(),
        source,
    })?;
    decode(&path, &bytes, classes)
}
