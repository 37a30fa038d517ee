//! Image folders as torchvision's `ImageFolder` reads them: one subfolder per class (sorted
//! names are the classes, in label order), PNG, JPEG, BMP or GIF files inside (decoded with
//! the `image` crate), converted to grey or RGB and, when a size is given, resized to it.

use super::{ImageError, ImageSet};
use std::path::{Path, PathBuf};

/// What to do with a file that does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnBad {
    /// Leave it out and report it.
    Skip,
    /// Stop with its path.
    Error,
}

#[derive(Clone, Debug)]
pub struct FolderOptions {
    /// 1 (grey) or 3 (RGB).
    pub channels: usize,
    /// Resize every image to (size, size); `None`: all must share the first one's size.
    pub size: Option<usize>,
    pub on_bad: OnBad,
}

const EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "bmp", "gif"];

fn io(path: &Path) -> impl Fn(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io(dir)))
        .collect::<Result<_, _>>()?;
    v.sort();
    Ok(v)
}

/// Read `root`; returns the images and the files skipped with why.
pub fn load(
    root: &Path,
    o: &FolderOptions,
) -> Result<(ImageSet, Vec<(PathBuf, String)>), ImageError> {
    if o.channels != 1 && o.channels != 3 {
        return Err(ImageError::Layout(format!(
            "channels must be 1 or 3, got {}",
            o.channels
        )));
    }
    let classes: Vec<PathBuf> = sorted_entries(root)?
        .into_iter()
        .filter(|p| p.is_dir())
        .collect();
    if classes.is_empty() {
        return Err(ImageError::Layout(format!(
            "{}: no class folders (expected one subfolder of images per class)",
            root.display()
        )));
    }
    let mut set = ImageSet {
        c: o.channels,
        h: o.size.unwrap_or(0),
        w: o.size.unwrap_or(0),
        classes: classes
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect(),
        ..Default::default()
    };
    let mut skipped = Vec::new();
    for (label, dir) in classes.iter().enumerate() {
        for path in sorted_entries(dir)? {
            let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
            if !ext.is_some_and(|e| EXTENSIONS.contains(&e.as_str())) {
                continue;
            }
            match decode(&path, &mut set, o) {
                Ok(()) => set.labels.push(label as u16),
                Err(why) if o.on_bad == OnBad::Skip => skipped.push((path, why)),
                Err(why) => return Err(ImageError::BadImage { path, why }),
            }
        }
    }
    if set.is_empty() {
        return Err(ImageError::Layout(format!(
            "{}: no readable images",
            root.display()
        )));
    }
    Ok((set, skipped))
}

/// Decode one file into `set`'s pixels (sizing `set` from the first image when unsized).
fn decode(path: &Path, set: &mut ImageSet, o: &FolderOptions) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    decode_bytes(&bytes, set, o)
}

/// The most pixels one image may have (64 megapixels) and the most bytes its decoder may
/// take: an image file cannot make toy allocate more than these, whatever its header says.
const MAX_SIDE: u32 = 1 << 14;
const MAX_ALLOC: u64 = 1 << 28;

/// [`decode`] on a file's bytes (PNG, JPEG, BMP or GIF, told by its content).
pub fn decode_bytes(bytes: &[u8], set: &mut ImageSet, o: &FolderOptions) -> Result<(), String> {
    let mut limits = image::io::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_ALLOC);
    let mut reader = image::io::Reader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    reader.limits(limits);
    let img = reader.decode().map_err(|e| e.to_string())?;
    let img = match o.size {
        Some(s) => img.resize_exact(s as u32, s as u32, image::imageops::FilterType::Triangle),
        None => img,
    };
    let (w, h) = (img.width() as usize, img.height() as usize);
    if set.h == 0 {
        (set.h, set.w) = (h, w);
    }
    if (h, w) != (set.h, set.w) {
        return Err(format!(
            "{w}x{h} pixels, but the first image is {}x{} (give a size to resize all)",
            set.w, set.h
        ));
    }
    if o.channels == 1 {
        set.pixels.extend_from_slice(img.to_luma8().as_raw());
    } else {
        set.pixels.extend_from_slice(img.to_rgb8().as_raw());
    }
    Ok(())
}
