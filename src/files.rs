//! Files written whole: readers, and processes that mapped the old file (a loaded library, mapped
//! params), see the old bytes or the new ones, never a file cut short or changed under them.

use crate::error::{Error, Result};
use std::path::Path;

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::write(&temp, bytes).and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(Error::io(path.display().to_string(), e));
    }
    Ok(())
}
