//! Shared fixtures of the cross-crate tests.

use std::path::PathBuf;

/// The repository's `kernels/` directory (`CAIJIT_KERNELS_DIR` where test binaries run
/// away from the checkout they were built in, as on the GPU machine).
pub fn kernels_dir() -> PathBuf {
    std::env::var_os("CAIJIT_KERNELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kernels"))
}

/// Every `.cu` file under `kernels/`.
pub fn kernel_sources() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "cu") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&kernels_dir(), &mut out);
    out.sort();
    out
}

/// Whether a GPU test must fail instead of skipping (`CAIJIT_REQUIRE_GPU=1`).
pub fn require_gpu() -> bool {
    std::env::var("CAIJIT_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Skip (return `None` after printing why) or fail, as `CAIJIT_REQUIRE_GPU` says.
#[macro_export]
macro_rules! skip_unless {
    ($cond:expr, $why:expr) => {
        match $cond {
            Ok(v) => v,
            Err(e) => {
                if $crate::require_gpu() {
                    panic!("CAIJIT_REQUIRE_GPU=1 but {}: {}", $why, e);
                }
                eprintln!("SKIPPED: {}: {}", $why, e);
                return;
            }
        }
    };
}
