//! Embeds the bundle `CAIJIT_EXAMPLE_BUNDLE` names (made by `scripts/rust-bundle-example.sh`
//! with `python -m caijit bundle build`): `main.rs` reads it with `include_bytes!` from the
//! path this script hands it. The bundle is built, not committed.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=CAIJIT_EXAMPLE_BUNDLE");
    let Some(path) = std::env::var_os("CAIJIT_EXAMPLE_BUNDLE").filter(|p| !p.is_empty()) else {
        eprintln!(
            "error: set CAIJIT_EXAMPLE_BUNDLE to the bundle to embed, e.g. one made by \
             `python -m caijit bundle build examples/rust-bundle/kernels/axpy.cu --instantiate 'axpy<float>' \
             --instantiate 'axpy<double>' --arch sm_90 -o axpy.caijit` (scripts/rust-bundle-example.sh does it all)"
        );
        std::process::exit(1);
    };
    let path = PathBuf::from(path);
    let path = match std::fs::canonicalize(&path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: CAIJIT_EXAMPLE_BUNDLE={}: {e}", path.display());
            std::process::exit(1);
        }
    };
    println!("cargo:rerun-if-changed={}", path.display());
    println!("cargo:rustc-env=CAIJIT_EXAMPLE_BUNDLE_PATH={}", path.display());
}
