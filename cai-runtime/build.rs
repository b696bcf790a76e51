//! Embeds the device headers (`kernels/include/caijit/*.cuh`) and the kernel library
//! (`kernels/ops/*.cu`) by listing the folders, so adding a header or an op's `.cu` file
//! needs no list kept by hand. Writes `$OUT_DIR/kernels.rs` (see `compile/headers.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `(file stem or include name, absolute path)` of the files in `dir` ending in `ext`, by name.
fn listing(dir: &Path, ext: &str, prefix: &str) -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .map(|p| {
            let name = if prefix.is_empty() {
                p.file_stem().expect("a file name").to_string_lossy().into_owned()
            } else {
                format!("{prefix}{}", p.file_name().expect("a file name").to_string_lossy())
            };
            (name, p.canonicalize().expect("an existing file"))
        })
        .collect();
    files.sort();
    files
}

fn table(out: &mut String, doc: &str, name: &str, files: &[(String, PathBuf)]) {
    writeln!(out, "{doc}\npub const {name}: &[(&str, &str)] = &[").unwrap();
    for (n, path) in files {
        writeln!(out, "    ({n:?}, include_str!({:?})),", path.display().to_string()).unwrap();
    }
    writeln!(out, "];").unwrap();
}

fn main() {
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
    println!("cargo:rerun-if-changed={}", kernels.display());
    let mut out = String::new();
    let headers = listing(&kernels.join("include/caijit"), "cuh", "caijit/");
    table(&mut out, "/// `(include name, contents)` of every embedded header.", "HEADERS", &headers);
    let ops = listing(&kernels.join("ops"), "cu", "");
    table(&mut out, "/// `(name, source)` of every file of the kernel library.", "OPS", &ops);
    let path = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("kernels.rs");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
