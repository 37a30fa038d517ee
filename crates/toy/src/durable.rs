//! Durable file replacement, the write-temp / fsync / rename recipe every checkpoint, model
//! and data file of toy goes through: after the rename, the folder itself is synced so the
//! new name survives a crash (POSIX `rename(2)` is atomic but only durable once its
//! directory is).

use std::path::Path;

/// The folder that holds `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Make a rename in `path`'s folder durable. A no-op off Unix, where folders cannot be
/// opened for this.
pub fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    if cfg!(unix) {
        std::fs::File::open(parent_dir(path))?.sync_all()?;
    }
    Ok(())
}
