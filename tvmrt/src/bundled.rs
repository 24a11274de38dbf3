//! The bundled model (the MLP fixture, compiled by TVM 0.16, with its recorded input and upstream's
//! output), embedded in the binary so an installed `tvmrt` runs without the source tree. `dlopen`
//! needs a file, so the first use writes it to a folder under the temporary directory, named for
//! the user and the content.

use std::path::PathBuf;
use tvm_runtime::{Error, Result};

const FILES: [(&str, &[u8]); 5] = [
    ("lib.so", include_bytes!("../../tests/fixtures/mlp_b1/lib.so")),
    ("graph.json", include_bytes!("../../tests/fixtures/mlp_b1/graph.json")),
    ("manifest.txt", include_bytes!("../../tests/fixtures/mlp_b1/manifest.txt")),
    ("in_0.bin", include_bytes!("../../tests/fixtures/mlp_b1/in_0.bin")),
    ("out_0.bin", include_bytes!("../../tests/fixtures/mlp_b1/out_0.bin")),
];

/// FNV-1a of every file: a new build with other content gets another folder.
fn content_hash() -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (name, bytes) in FILES {
        for &b in name.as_bytes().iter().chain(bytes) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The folder holding the bundled model, written on first use.
pub fn dir() -> Result<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("tvmrt-bundled-{uid}-{:016x}", content_hash()));
    if dir.join("lib.so").is_file() {
        return Ok(dir);
    }
    let io = |e: std::io::Error| Error::io(dir.display().to_string(), e);
    // Written aside and renamed into place, so a concurrent first use never sees half a folder.
    let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(io)?;
    for (name, bytes) in FILES {
        std::fs::write(tmp.join(name), bytes).map_err(io)?;
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another process won the race: its folder is as good as ours.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(dir)
}
